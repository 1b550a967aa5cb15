# Image the manager is built into by docker-build and deployed by deploy.
IMG ?= guardedjob-manager:dev

# Tools are pinned and installed into ./bin from the Go module proxy.
LOCALBIN ?= $(shell pwd)/bin
CONTROLLER_GEN ?= $(LOCALBIN)/controller-gen
GOLANGCI_LINT ?= $(LOCALBIN)/golangci-lint
CONTROLLER_TOOLS_VERSION ?= v0.23.0
GOLANGCI_LINT_VERSION ?= v2.15.0

# Test flags; override for a focused run, e.g. make test TESTARGS='-run TestKeeper ./internal/lockclient/'.
TESTARGS ?= ./...
GOTESTFLAGS ?= -count=1 -timeout 25m

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
	$(CONTROLLER_GEN) rbac:roleName=manager-role crd:generateEmbeddedObjectMeta=true,maxDescLen=0 webhook paths="./..." output:crd:artifacts:config=config/crd/bases

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

.PHONY: verify
verify: manifests generate ## Fail when generated files or go.mod are stale.
	go mod tidy
	@if [ -n "$$(git status --porcelain -- go.mod go.sum api config)" ]; then \
		echo "Generated files are stale; run 'make manifests generate' and 'go mod tidy' and commit:"; \
		git status --porcelain -- go.mod go.sum api config; git --no-pager diff --stat -- go.mod go.sum api config; exit 1; fi

.PHONY: test
test: ## Run all tests (installs redis-server and builds kube-apiserver + etcd on first use).
	hack/ensure-redis.sh
	assets="$$(hack/build-control-plane.sh)"; \
	KUBEBUILDER_ASSETS="$$assets" go test $(GOTESTFLAGS) $(TESTARGS)

.PHONY: test-e2e
test-e2e: ## Run the fault test: two local clusters, one Redis, faults (docs/reliability.md; E2E_SEED=N replays a run).
	hack/ensure-redis.sh
	E2E_FAULTS=1 go test -count=1 -timeout 45m -v -run '^TestFaults$$' ./test/e2e/

.PHONY: test-race
test-race: ## Run all tests with the race detector.
	$(MAKE) test GOTESTFLAGS="$(GOTESTFLAGS) -race"

.PHONY: bench
bench: ## Run the benchmarks (compare runs with benchstat).
	hack/ensure-redis.sh
	go test -run '^$$' -bench . -benchmem -count 6 ./internal/lockclient/ | tee bench.txt

##@ Build

.PHONY: build
build: ## Build the manager binary the way the Dockerfile does.
	CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o $(LOCALBIN)/manager ./cmd/manager

.PHONY: run
run: manifests generate ## Run the manager against the cluster in your kubeconfig.
	go run ./cmd/manager $(RUN_ARGS)

.PHONY: docker-build
docker-build: ## Build the manager image (needs a Docker engine).
	docker build -t $(IMG) .

##@ Deployment

.PHONY: install
install: manifests ## Install the CRD into the cluster in your kubeconfig.
	kubectl apply --server-side -k config/crd

.PHONY: uninstall
uninstall: manifests ## Remove the CRD (and every GuardedJob) from the cluster.
	kubectl delete --ignore-not-found -k config/crd

.PHONY: deploy
deploy: manifests ## Deploy the manager with image IMG (create the guardedjob-redis Secret first).
	kubectl kustomize config/default | sed "s|image: guardedjob-manager:dev|image: $(IMG)|" | kubectl apply --server-side -f -

.PHONY: undeploy
undeploy: ## Remove the manager AND the CRD: this deletes every GuardedJob.
	kubectl delete --ignore-not-found -k config/default

##@ Demo

.PHONY: demo
demo: ## Run a local control plane, Redis, the manager and a sample (Ctrl-C stops all).
	hack/demo.sh up

.PHONY: demo-down
demo-down: ## Stop everything the demo started.
	hack/demo.sh down

##@ Tools

.PHONY: controller-gen
controller-gen: $(CONTROLLER_GEN)
$(CONTROLLER_GEN): | $(LOCALBIN)
	GOBIN=$(LOCALBIN) go install sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_TOOLS_VERSION)

.PHONY: golangci-lint
golangci-lint: $(GOLANGCI_LINT)
$(GOLANGCI_LINT): | $(LOCALBIN)
	GOBIN=$(LOCALBIN) go install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)

$(LOCALBIN):
	mkdir -p $(LOCALBIN)
