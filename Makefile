# The release version: stamped into the manager (--version), the image label, the
# image tag and the installer. `make build-installer VERSION=0.2.0` makes a release file.
VERSION ?= dev
# The commit stamped beside it (the Docker build context has no .git).
COMMIT ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
# The manager image: built by image (or docker-build), pushed by image-push (or
# docker-push), deployed by deploy and build-installer. IMAGE_REPO is where it is
# pushed, registry host first (registry.example.com/team/guardedjob-manager); the
# default names no registry and suits only a cluster whose nodes have the image
# loaded by hand: make release refuses it (docs/image.md).
IMAGE_REPO ?= guardedjob-manager
IMG ?= $(IMAGE_REPO):$(VERSION)
# Every timestamp in the image and the release archives: the commit's time, so that
# building the same commit again gives the same files and the same image digest.
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)

# One set of build flags for every build and test of the operator: static (no cgo)
# and -trimpath, as the image is built. Each package is then compiled once per run
# and shared by vet, the tests, the binaries and the Docker build check (a build
# with other flags compiles every dependency again). The race detector needs cgo:
# its targets set CGO_ENABLED=1 and compile apart.
CGO_ENABLED ?= 0
export CGO_ENABLED
override GOFLAGS := $(strip $(filter-out -trimpath,$(GOFLAGS)) -trimpath)
export GOFLAGS

# Tools are pinned and installed from the Go module proxy into a cache outside the
# checkout, keyed by version, so that CI runs on the same machine reuse them.
TOOLS_CACHE ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/guardedjob/bin
# helm and controller-gen are built from the control plane's wrapper module
# (hack/tools/k8s), which pins their versions: one dependency graph with kubectl and
# kube-apiserver, aligned with the operator's go.mod, so that every Kubernetes package
# they share is compiled once per run. Their versions are read from it, once (change
# them there: go get -tool in hack/tools/k8s).
wrapper_version = $(shell GOWORK=off go list -C hack/tools/k8s -m -f '{{.Version}}' $(1))
HELM_VERSION = $(eval HELM_VERSION := $$(call wrapper_version,helm.sh/helm/v3))$(HELM_VERSION)
HELM ?= $(TOOLS_CACHE)/helm-$(HELM_VERSION)
CONTROLLER_TOOLS_VERSION = $(eval CONTROLLER_TOOLS_VERSION := $$(call wrapper_version,sigs.k8s.io/controller-tools))$(CONTROLLER_TOOLS_VERSION)
CONTROLLER_GEN ?= $(TOOLS_CACHE)/controller-gen-$(CONTROLLER_TOOLS_VERSION)
GOLANGCI_LINT_VERSION ?= v2.15.0
GOLANGCI_LINT ?= $(TOOLS_CACHE)/golangci-lint-$(GOLANGCI_LINT_VERSION)

# The project's own binaries, built once per run (make binaries) and used by the
# tests, the demo and the benchmarks.
LOCALBIN ?= $(shell pwd)/bin

# The control plane and kubectl, built from Go modules at the versions the wrapper
# modules in hack/tools pin (hack/build-control-plane.sh), cached outside the
# checkout. Every test, the demo and the deployment targets use this kubectl, never
# one from the machine; set KUBECTL to use another for deploy, install and undeploy.
K8S_BIN = $(eval K8S_BIN := $$(shell hack/build-control-plane.sh --dir))$(K8S_BIN)
KUBECTL ?= $(K8S_BIN)/kubectl

# Test flags; set TESTARGS for a focused run (one plain go test), e.g.
# make test TESTARGS='-run TestKeeper ./internal/lockclient/'.
TESTARGS ?=
# The packages that run goroutines of their own: the lease client's keeper, which
# make test runs under the race detector (once, instead of once without it and once
# with), and the reconcilers and the stop controller, which make test-race-core adds
# (their race build compiles every Kubernetes package again, minutes on a fresh CI
# machine). Mass stories (hundreds of runs at once) skip themselves in -short mode,
# too slow under the race detector, and run in a plain build after them: every test
# of these packages that checks testing.Short() (MASS_STORIES, found in the test
# files, not listed by hand).
RACE_PACKAGES = ./internal/lockclient/
RACE_CORE = ./internal/lockclient/ ./controllers/
RACE_TEST = $(TEST_ENV) CGO_ENABLED=1 go test $(GOTESTFLAGS) -race -short $(RACE_PACKAGES)
MASS_STORIES = $(shell awk '/^func Test/ { name = $$2; sub(/[^A-Za-z0-9_].*/, "", name) } /testing\.Short\(\)/ { print name }' $(addsuffix *_test.go,$(RACE_PACKAGES)) | paste -sd'|')
# The packages make test starts first: go test runs packages in the order given (go
# list names each once, where first named), TEST_P at a time, and these take longest
# (the controllers' stories alone take about as long as every other package together).
# Most stories wait on their control plane and redis-server: two packages at a time
# keep one core busy, so make test runs three, and the lease client's race run beside
# them.
TEST_FIRST = ./controllers/ ./cmd/manager/ ./cmd/guard/
TEST_P ?= 3
# -vet=off: make vet runs every analyzer on every package, tests included, once.
# -ldflags: test binaries without symbol tables and DWARF link in two thirds of the
# time (panics keep their stack traces).
GOTESTFLAGS ?= -count=1 -vet=off -timeout 25m -ldflags='-s -w'
# What the tests find in their environment: the control plane and kubectl, helm,
# and the project's binaries (internal/testutil/bins). PATH starts with the
# control plane directory so that the scripts the tests run use its kubectl.
TEST_ENV = PATH="$(K8S_BIN):$$PATH" KUBEBUILDER_ASSETS="$(K8S_BIN)" KUBECTL="$(KUBECTL)" HELM="$(HELM)" \
	GUARDEDJOB_MANAGER_BIN="$(LOCALBIN)/manager" GUARDEDJOB_PLUGIN_BIN="$(LOCALBIN)/kubectl-guardedjob" GUARDEDJOB_GUARD_BIN="$(LOCALBIN)/guard"
# envtest gives kube-apiserver 20 s to start by default; a busy 2-core machine can need more.
export KUBEBUILDER_CONTROLPLANE_START_TIMEOUT ?= 90s

# The GitOps health rules (Argo CD Lua, Flux CEL) and the Prometheus alerts are tested in
# modules of their own, so that the Lua, CEL and Prometheus dependencies stay out of the
# manager's go.mod.
OPS_TEST_MODULES ?= config/healthtest config/prometheus/rulestest
# Modules of their own besides the operator's, linted and tidied with it. bench holds
# the peer lock libraries the lease client is compared with; hack/ociimage the image
# builder (go-containerregistry).
SIDE_MODULES ?= $(OPS_TEST_MODULES) bench hack/ociimage

SHELL = /usr/bin/env bash -o pipefail
.SHELLFLAGS = -ec

.PHONY: all
all: build

##@ General

.PHONY: help
help: ## Display this help.
	@awk 'BEGIN {FS = ":.*##"; printf "\nUsage:\n  make \033[36m<target>\033[0m\n"} /^[a-zA-Z_0-9-]+:.*?##/ { printf "  \033[36m%-15s\033[0m %s\n", $$1, $$2 } /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) } ' $(MAKEFILE_LIST)

##@ Development

.PHONY: manifests
manifests: controller-gen ## Generate the CRD and the ClusterRole from kubebuilder markers.
	$(CONTROLLER_GEN) rbac:roleName=guardedjob-manager-role crd:generateEmbeddedObjectMeta=true webhook paths="./..." output:crd:artifacts:config=config/crd/bases
	# The Job API's field docs inside spec.jobTemplate go (kubectl explain job has them), so the
	# CRD fits a client-side kubectl apply; its schema and every other description stay.
	go run ./hack/crdtrim config/crd/bases/batch.guardedjob.dev_guardedjobs.yaml
	# The Helm chart ships the same CRD, the same manager rules, the same alerts and dashboard.
	cp config/crd/bases/*.yaml charts/guardedjob/files/crds/
	cp config/rbac/role.yaml charts/guardedjob/files/manager-role.yaml
	cp config/prometheus/guardedjob.rules.yaml charts/guardedjob/files/prometheus-rules.yaml
	cp config/grafana/guardedjob.json charts/guardedjob/files/grafana-dashboard.json

.PHONY: generate
generate: controller-gen ## Generate DeepCopy methods.
	$(CONTROLLER_GEN) object:headerFile="hack/boilerplate.go.txt" paths="./..."

.PHONY: fmt
fmt: ## Run gofmt on the code.
	gofmt -l -w $$(git ls-files '*.go')

.PHONY: vet
vet: ## Run go vet and check formatting.
	@out="$$(gofmt -l $$(git ls-files '*.go'))"; if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	go vet ./...

.PHONY: lint
lint: golangci-lint ## Run golangci-lint.
	$(GOLANGCI_LINT) run ./...
	for m in $(SIDE_MODULES); do (cd $$m && $(GOLANGCI_LINT) run ./...) || exit 1; done

.PHONY: verify
verify: manifests generate ## Fail when generated files or go.mod are stale, or when go.mod and hack/tools/k8s disagree on a shared module.
	go mod tidy
	for m in $(SIDE_MODULES); do (cd $$m && go mod tidy) || exit 1; done
	hack/check-shared-versions.sh
	@if [ -n "$$(git status --porcelain -- go.mod go.sum api config charts bench/go.mod bench/go.sum hack/ociimage/go.mod hack/ociimage/go.sum)" ]; then \
		echo "Generated files are stale; run 'make manifests generate' and 'go mod tidy' and commit:"; \
		git status --porcelain -- go.mod go.sum api config charts bench hack/ociimage; git --no-pager diff --stat -- go.mod go.sum api config charts bench hack/ociimage; exit 1; fi

##@ Test

.PHONY: prepare
prepare: ## Build everything the checks and tests run: tools, redis-server and spin, the control plane and kubectl, the project's binaries, the race-detector build (the slow part on a fresh machine).
	GOGC=$(PREPARE_GOGC) GOMEMLIMIT=$(PREPARE_GOMEMLIMIT) $(MAKE) --no-print-directory -j2 prepare-k8s prepare-others

# The compiler and linker collect garbage less often while make prepare builds: a
# cold build of the manager takes 15% less CPU at GOGC=400 than at the default 100.
# GOMEMLIMIT bounds each of the four compiles or links that run at once (24 GiB
# machines). Only the builds see these: no test runs under them.
PREPARE_GOGC ?= 400
PREPARE_GOMEMLIMIT ?= 4GiB

# make prepare's two halves, built side by side: what compiles k8s.io/kubernetes and
# the wrapper module's tools (the longer half), and the rest, which shares few of
# their packages (so that one's downloads and links fill the other's idle core).
.PHONY: prepare-k8s prepare-others
prepare-k8s: controller-gen helm
	CONTROL_PLANE_ONLY="kubectl kube-apiserver kube-controller-manager kube-scheduler kwok" hack/build-control-plane.sh --demo >/dev/null
prepare-others: golangci-lint
	hack/ensure-redis.sh
	hack/ensure-spin.sh
	CONTROL_PLANE_ONLY="etcd" hack/build-control-plane.sh --demo >/dev/null
	$(MAKE) --no-print-directory binaries bench-scale-build
	go build ./...
	tmp="$$(mktemp -d)"; trap 'rm -rf "$$tmp"' EXIT; CGO_ENABLED=1 go test -race -c -o "$$tmp" $(RACE_PACKAGES)
	@# The control plane's build ends with minutes of one large package and its links,
	@# which leave a core idle: fill it with the work the next steps would do first.
	@# go vet's and golangci-lint's results are cached (and so are the side modules'
	@# compiled dependencies); the checks themselves still run, and report, in make vet
	@# and lint. (Test binaries are not worth it: go test links them again.)
	-go vet ./... >/dev/null 2>&1
	-$(GOLANGCI_LINT) run ./... >/dev/null 2>&1
	-for m in $(SIDE_MODULES); do (cd $$m && $(GOLANGCI_LINT) run ./... >/dev/null 2>&1); done

.PHONY: test-deps
test-deps: helm ## Install redis-server (apt) and build the control plane and kubectl from Go modules (cached outside the checkout).
	hack/ensure-redis.sh
	hack/build-control-plane.sh --demo >/dev/null

.PHONY: test
test: test-deps binaries ## The operator module's tests: unit, real redis-server, real kube-apiserver + etcd, the demo on a local cluster; the lease client under the race detector (make ci runs every check; make test-race-core adds the controllers).
ifneq ($(strip $(TESTARGS)),)
	$(TEST_ENV) go test $(GOTESTFLAGS) $(TESTARGS)
else
	@race=$$(mktemp -d); trap 'rm -rf "$$race"' EXIT; \
	  ( $(RACE_TEST) >"$$race/out" 2>&1; echo $$? >"$$race/rc" ) & \
	  rc=0; $(TEST_ENV) go test -p $(TEST_P) $(GOTESTFLAGS) $$(go list $(TEST_FIRST) ./... | grep -v $(foreach p,$(RACE_PACKAGES),-e '/$(patsubst ./%/,%,$(p))$$')) || rc=$$?; \
	  wait; echo "# $(RACE_PACKAGES) under the race detector, run beside the packages above:"; cat "$$race/out"; \
	  [ "$$(cat "$$race/rc")" = 0 ] || rc=1; exit $$rc
	$(if $(MASS_STORIES),$(TEST_ENV) go test $(GOTESTFLAGS) -run '^($(MASS_STORIES))$$' $(RACE_PACKAGES))
endif

.PHONY: test-ops
test-ops: helm ## Test the Argo CD health check, the Flux health expressions, and the Prometheus alerts and Grafana dashboard as kustomize and the chart ship them.
	for m in $(OPS_TEST_MODULES); do (cd $$m && go vet ./... && HELM="$(HELM)" go test -count=1 ./...) || exit 1; done

.PHONY: test-e2e
test-e2e: test-deps binaries ## Run the fault test (two local clusters, one Redis, faults), the pod guard's cut-off node case and a shard move (docs/reliability.md; E2E_SEED=N replays a run).
	$(TEST_ENV) E2E_FAULTS=1 E2E_SHARD=1 go test -count=1 -timeout 45m -v -run '^(TestFaults|TestPodGuardStopsTheWorkloadOfAForceDeletedPodBeforeItsKeyCouldExpire|TestShardMove)$$' ./test/e2e/

.PHONY: test-e2e-shard
test-e2e-shard: test-deps binaries ## Move a GuardedJob between two shards (manager binaries, one local cluster) while its run is in flight.
	$(TEST_ENV) E2E_SHARD=1 go test -count=1 -timeout 15m -v -run '^TestShardMove$$' ./test/e2e/

.PHONY: test-race
test-race: test-deps binaries ## Run all tests with the race detector.
	$(TEST_ENV) CGO_ENABLED=1 go test $(GOTESTFLAGS) -race $(or $(strip $(TESTARGS)),./...)

.PHONY: test-race-core
test-race-core: test-deps binaries ## Run the packages with goroutines (lease client, controllers) under the race detector, without the mass stories (make test runs the lease client's).
	$(TEST_ENV) CGO_ENABLED=1 go test $(GOTESTFLAGS) -race -short $(RACE_CORE)

# Mutants test-mutants plants, e.g. MUTANTS='renew-noop release-no-compare'; empty: all.
# MUTANTS_FLAGS=-unplanted=false skips the run of every catcher on the unplanted tree
# (CI: make test has just run them on the same tree).
MUTANTS ?=
MUTANTS_FLAGS ?=

.PHONY: test-mutants
test-mutants: test-deps ## Plant known bugs one at a time (hack/mutants) and fail unless the tests catch each one.
	$(TEST_ENV) go run ./hack/mutants $(MUTANTS_FLAGS) $(MUTANTS)

# Configurations or hole switches model-check runs, e.g. MODEL=HOLE_PAUSED_CREATE; empty: all.
MODEL ?=

.PHONY: model-check
model-check: ## Verify the run protocol's model (model/run.pml) with spin: every configuration clean, every hole switch caught (docs/reliability.md).
	hack/model-check.sh $(MODEL)

# How long each fuzz target runs in test-fuzz: a number of inputs (2 to 8 s each on
# the 2-core machines we measured), not a duration. A duration can fail a clean run
# with "context deadline exceeded" when it ends while a worker is busy (a race in
# Go's fuzz coordinator before Go 1.27, golang/go#75804).
FUZZTIME ?= 30000x

.PHONY: test-fuzz
test-fuzz: ## Run every fuzz target for FUZZTIME (their seed corpora in testdata/fuzz also run in make test).
	@for f in $$(grep -rl --include='*_test.go' --exclude-dir=bin '^func Fuzz' .); do \
		for t in $$(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' $$f); do \
			echo "go test -fuzz $$t -fuzztime $(FUZZTIME) $$(dirname $$f)/"; \
			go test -run '^$$' -fuzz "^$$t$$" -fuzztime $(FUZZTIME) $$(dirname $$f)/ || exit 1; \
		done; \
	done

.PHONY: test-image
test-image: image ## Check the image make image built: a valid layout with every platform, user 65532, entrypoint /manager, labels, binaries that say their version, the SBOM, the same digest when built again, a push to a registry on 127.0.0.1.
	cd hack/ociimage && go vet ./... && \
		OCIIMAGE_TEST_LAYOUT="$(abspath $(IMAGE_LAYOUT))" OCIIMAGE_TEST_SBOM="$(abspath $(IMAGE_SBOM))" OCIIMAGE_TEST_PLATFORMS="$(IMAGE_PLATFORMS)" \
		OCIIMAGE_TEST_VERSION="$(VERSION)" OCIIMAGE_TEST_REVISION="$(COMMIT)" OCIIMAGE_TEST_CREATED="$(SOURCE_DATE_EPOCH)" go test -count=1 ./...

.PHONY: test-min-k8s
test-min-k8s: binaries ## Run a GuardedJob to completion on the oldest Kubernetes the operator supports (hack/tools/k8s-min; its kube-apiserver and etcd are built on first use, about 8 minutes of CPU, then cached).
	hack/ensure-redis.sh
	hack/build-control-plane.sh --min >/dev/null
	$(TEST_ENV) KUBEBUILDER_ASSETS="$$(hack/build-control-plane.sh --min-dir)" \
		GUARDEDJOB_EXPECT_K8S_VERSION="$$(GOWORK=off go list -C hack/tools/k8s-min -m -f '{{.Version}}' k8s.io/kubernetes)" \
		go test -count=1 -v ./test/mink8s/

.PHONY: test-release
test-release: test-deps ## Test make release for every platform krew lists (make test releases this machine's platform only: each other one compiles the plugin anew, minutes).
	$(TEST_ENV) RELEASE_TEST_PLATFORMS="linux/amd64 linux/arm64 darwin/amd64 darwin/arm64 windows/amd64" go test -count=1 -timeout 60m -run '^TestReleaseFiles$$' ./test/release/

.PHONY: ci
ci: ## Run every check CI runs, in its order, with the time of each step (.ci/run).
	.ci/run

##@ Benchmarks

.PHONY: bench
bench: ## Run the benchmarks (compare runs with benchstat).
	hack/ensure-redis.sh
	go test -run '^$$' -bench . -benchmem -count 6 ./internal/lockclient/ | tee bench.txt

# Arguments of cmd/peerbench, e.g. PEERBENCH_ARGS='-rounds 1 -benchtime 1s'.
PEERBENCH_ARGS ?= -rounds 3 -benchtime 2s

.PHONY: bench-peers
bench-peers: ## Compare the lease client with the raw Redis floor, bsm/redislock and redsync (needs taskset and 2 CPUs; docs/benchmarks.md).
	hack/ensure-redis.sh
	cd bench && go run ./cmd/peerbench $(PEERBENCH_ARGS)

.PHONY: bench-build
bench-build: ## Vet and test the bench module without running its benchmarks (no Redis needed).
	cd bench && go vet ./... && go test -count=1 ./...

# Flags for test/scale, e.g. BENCH_SCALE_ARGS='-n 100 -idle 500 -keeper-leases 10000 -keeper-duration 1m'.
BENCH_SCALE_ARGS ?=

.PHONY: bench-scale
bench-scale: test-deps binaries bench-scale-build ## Run the scale benchmark (docs/benchmarks.md): its own control plane, Redis and the manager binary; about 15 minutes.
	$(LOCALBIN)/bench-scale -assets "$(K8S_BIN)" -manager $(LOCALBIN)/manager -o bench-scale.md -json bench-scale.json $(BENCH_SCALE_ARGS)

.PHONY: bench-docs
bench-docs: ## Write docs/benchmarks.md's scale tables from the committed reports in docs/benchmarks/ (copy a run's bench-scale.json there first).
	go run ./hack/benchtables

.PHONY: bench-scale-build
bench-scale-build: ## Build the scale benchmark (CI builds it; it does not run it).
	go build -o $(LOCALBIN)/bench-scale ./test/scale

##@ Build

.PHONY: build
build: ## Build the manager binary the way the Dockerfile does.
	CGO_ENABLED=0 go build -trimpath -ldflags="-s -w -X main.version=$(VERSION) -X main.commit=$(COMMIT)" -o $(LOCALBIN)/manager ./cmd/manager

.PHONY: binaries
binaries: build ## Build the manager, the pod guard and the kubectl plugin into bin/ (the tests, the demo and the benchmarks run these).
	CGO_ENABLED=0 go build -trimpath -ldflags="-s -w -X main.version=$(VERSION) -X main.commit=$(COMMIT)" -o $(LOCALBIN)/guard ./cmd/guard
	CGO_ENABLED=0 go build -trimpath -ldflags="-s -w -X main.version=$(VERSION) -X main.commit=$(COMMIT)" -o $(LOCALBIN)/kubectl-guardedjob ./cmd/kubectl-guardedjob

.PHONY: run
run: manifests generate ## Run the manager against the cluster in your kubeconfig.
	go run ./cmd/manager $(RUN_ARGS)

.PHONY: docker-build
docker-build: ## Build the manager image (needs a Docker engine).
	docker build --build-arg VERSION=$(VERSION) --build-arg COMMIT=$(COMMIT) -t $(IMG) .

.PHONY: build-installer
build-installer: manifests kubectl ## Write dist/install.yaml (CRD, RBAC, manager) for image IMG, e.g. VERSION=0.2.0.
	mkdir -p dist
	KUBECTL="$(KUBECTL)" hack/render-manifests.sh $(IMG) > dist/install.yaml
	@echo "Wrote dist/install.yaml for image $(IMG)"

# Where a release's files are published: the krew manifest's archive URIs start with it.
RELEASE_URL ?= https://github.com/guardedjob/guardedjob/releases/download/v$(VERSION)

# make release refuses an IMAGE_REPO without a registry host unless this is 1.
ALLOW_LOCAL_IMAGE ?=

.PHONY: release
release: manifests helm kubectl ## Write release VERSION=X.Y.Z IMAGE_REPO=REGISTRY/PATH into dist/: installer, CRDs, chart, plugin archives, krew manifest, the manager image (OCI archive, digest, SBOM), checksums.
	HELM="$(HELM)" KUBECTL="$(KUBECTL)" IMAGE_REPO="$(IMAGE_REPO)" ALLOW_LOCAL_IMAGE="$(ALLOW_LOCAL_IMAGE)" RELEASE_URL="$(RELEASE_URL)" \
		IMAGE_PLATFORMS="$(IMAGE_PLATFORMS)" SOURCE_DATE_EPOCH="$(SOURCE_DATE_EPOCH)" hack/release.sh $(VERSION)

.PHONY: docker-push
docker-push: ## Push the manager image IMG (needs a Docker engine): make docker-build docker-push VERSION=... IMAGE_REPO=...
	docker push $(IMG)

# Platforms of the image docker-buildx builds. The Dockerfile's builder runs on the
# build machine's platform and cross-compiles, so no emulation is needed.
PLATFORMS ?= linux/arm64,linux/amd64,linux/s390x,linux/ppc64le

.PHONY: docker-buildx
docker-buildx: ## Build the manager image IMG for PLATFORMS and push it (needs docker buildx).
	docker buildx inspect guardedjob-builder >/dev/null 2>&1 || docker buildx create --name guardedjob-builder
	docker buildx build --builder guardedjob-builder --push --platform=$(PLATFORMS) --build-arg VERSION=$(VERSION) --build-arg COMMIT=$(COMMIT) --tag $(IMG) .

# The image without a container engine (docs/image.md): hack/ociimage assembles it
# from scratch (the files distroless static:nonroot holds, made rather than pulled)
# and the binaries the Dockerfile builds, with the same flags, as an OCI image
# layout in IMAGE_LAYOUT with a CycloneDX SBOM beside it. This machine's platform
# reuses make binaries' build; each other one compiles the manager again (minutes
# on a fresh machine, seconds once Go's build cache has it).
IMAGE_PLATFORMS ?= linux/amd64 linux/arm64
IMAGE_LAYOUT ?= dist/image
IMAGE_SBOM ?= $(IMAGE_LAYOUT).cdx.json
OCIIMAGE ?= $(LOCALBIN)/ociimage

.PHONY: image
image: binaries ociimage ## Build the manager image for IMAGE_PLATFORMS as an OCI image layout (IMAGE_LAYOUT, default dist/image) and its SBOM, without a container engine; prints its digest.
	@host="$$(go env GOOS)/$$(go env GOARCH)"; dirs=(); \
	for p in $(IMAGE_PLATFORMS); do \
		dir="$(LOCALBIN)"; \
		if [ "$$p" != "$$host" ]; then \
			dir="$(LOCALBIN)/$${p//\//_}" os="$${p%%/*}" arch="$${p#*/}"; arch="$${arch%%/*}"; \
			for cmd in manager guard; do \
				(set -x; env CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch go build -trimpath -ldflags="-s -w -X main.version=$(VERSION) -X main.commit=$(COMMIT)" -o "$$dir/$$cmd" ./cmd/$$cmd) || exit 1; \
			done; \
		fi; \
		dirs+=("$$p=$$dir"); \
	done; \
	set -x; $(OCIIMAGE) build -o $(IMAGE_LAYOUT) -sbom $(IMAGE_SBOM) -version $(VERSION) -revision $(COMMIT) -created $(SOURCE_DATE_EPOCH) "$${dirs[@]}"

# What image-push pushes: a layout (make image) or a release's OCI archive
# (dist/guardedjob-manager-VERSION.oci.tar).
IMAGE_SOURCE ?= $(IMAGE_LAYOUT)

.PHONY: image-push
image-push: ociimage ## Push the image in IMAGE_SOURCE (default: what make image built) as IMG, unchanged (same digest), with the credentials of crane auth login or podman login.
	$(OCIIMAGE) push $(IMAGE_SOURCE) $(IMG)

.PHONY: ociimage
ociimage: ## Build hack/ociimage, the image builder and pusher (its own module, so the operator's go.mod has none of its dependencies).
	go build -C hack/ociimage -o $(OCIIMAGE) .

##@ Deployment

.PHONY: install
install: manifests kubectl ## Install the CRD into the cluster in your kubeconfig.
	$(KUBECTL) apply --server-side -k config/crd

.PHONY: uninstall
uninstall: manifests kubectl ## Remove the CRD (and every GuardedJob) from the cluster.
	$(KUBECTL) delete --ignore-not-found -k config/crd

.PHONY: deploy
deploy: manifests kubectl ## Deploy the manager with image IMG (create the guardedjob-redis Secret first).
	KUBECTL="$(KUBECTL)" hack/render-manifests.sh $(IMG) | $(KUBECTL) apply --server-side -f -

# How long undeploy waits for the runs of deleted GuardedJobs to stop.
UNDEPLOY_TIMEOUT ?= 10m

.PHONY: undeploy
undeploy: kubectl ## Delete every GuardedJob, wait for their runs to stop (UNDEPLOY_TIMEOUT), then remove the manager and the CRD.
	KUBECTL="$(KUBECTL)" UNDEPLOY_TIMEOUT=$(UNDEPLOY_TIMEOUT) hack/undeploy.sh

##@ Demo

.PHONY: demo
demo: ## Run a local control plane, Redis, the manager and a sample (Ctrl-C stops all).
	hack/demo.sh up

.PHONY: demo-down
demo-down: ## Stop everything the demo started.
	hack/demo.sh down

##@ Tools

.PHONY: tools
tools: controller-gen golangci-lint helm kubectl ## Install the pinned tools (cached outside the checkout).

# Each tool is installed under its versioned name, through a temporary directory so
# that an interrupted install never leaves a file that looks complete. $(2) is the go
# command that writes the one binary into that directory ($$tmp): `install PKG@VERSION`
# (through GOBIN), or `build -C hack/tools/k8s -o $$tmp/ PKG` for the tools the
# wrapper module pins.
define install-tool
mkdir -p $(TOOLS_CACHE)
tmp="$$(mktemp -d)"; trap 'rm -rf "$$tmp"' EXIT; \
GOBIN="$$tmp" GOWORK=off go $(2) && mv "$$tmp"/* $(1)
endef

.PHONY: controller-gen
controller-gen: $(CONTROLLER_GEN)
$(CONTROLLER_GEN):
	$(call install-tool,$@,build -C hack/tools/k8s -o "$$tmp/" sigs.k8s.io/controller-tools/cmd/controller-gen)

.PHONY: golangci-lint
golangci-lint: $(GOLANGCI_LINT)
$(GOLANGCI_LINT):
	$(call install-tool,$@,install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION))

.PHONY: helm
helm: $(HELM) ## Install helm into the tools cache (outside the checkout, reused by CI).
$(HELM):
	$(call install-tool,$@,build -C hack/tools/k8s -o "$$tmp/" helm.sh/helm/v3/cmd/helm)

.PHONY: kubectl
kubectl: ## Build kubectl at the API server's version into the control-plane cache (unless KUBECTL names another).
	@if [ "$(KUBECTL)" = "$(K8S_BIN)/kubectl" ]; then hack/build-control-plane.sh --kubectl >/dev/null; fi
