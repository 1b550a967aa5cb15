# The GuardedJob manager image.
#
# Build:  make docker-build VERSION=0.1.0 IMG=registry.example.com/guardedjob-manager:0.1.0
# Without a container engine, make image builds the same binaries into an image of the
# same shape (hack/ociimage, docs/image.md).
# The build command below is the one `make build` runs and test/config checks, so a
# change here must be made there too.

# The builder's Go matches go.mod's `go` line.
FROM --platform=$BUILDPLATFORM golang:1.26 AS builder
# Set by BuildKit for the image's platform (docker buildx build --platform ...);
# without BuildKit GOARCH stays empty and Go builds for the builder's own arch.
ARG TARGETOS=linux
ARG TARGETARCH
ENV GOOS=$TARGETOS GOARCH=$TARGETARCH GOTOOLCHAIN=local
WORKDIR /workspace

# Modules first, so a source change does not download them again.
COPY go.mod go.sum ./
RUN go mod download

# Only the packages the manager is built from (test/config checks that this list
# covers every package of the module cmd/manager imports).
COPY api/ api/
COPY cmd/ cmd/
COPY controllers/ controllers/
COPY internal/ internal/

# The release version and commit, printed by `manager --version` and in its startup
# log (the build context has no .git: make docker-build passes the commit).
ARG VERSION=dev
ARG COMMIT=unknown
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w -X main.version=${VERSION} -X main.commit=${COMMIT}" -o manager ./cmd/manager
# The pod lease guard: the sidecar the manager adds to guarded runs' Pods, run from
# this same image as /guard.
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w -X main.version=${VERSION} -X main.commit=${COMMIT}" -o guard ./cmd/guard

# Distroless static: no shell, no package manager, CA roots for rediss:// included;
# time zone rules are compiled into the binary (time/tzdata).
FROM gcr.io/distroless/static:nonroot
# An ARG ends with its stage: declared again to label the final image.
ARG VERSION=dev
ARG COMMIT=unknown
LABEL org.opencontainers.image.title="guardedjob-manager" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${COMMIT}" \
      org.opencontainers.image.source="https://github.com/guardedjob/guardedjob" \
      org.opencontainers.image.licenses="Apache-2.0"
WORKDIR /
COPY --from=builder /workspace/manager /manager
COPY --from=builder /workspace/guard /guard
# The distroless "nonroot" user; numeric, so runAsNonRoot can verify it.
USER 65532:65532

ENTRYPOINT ["/manager"]
