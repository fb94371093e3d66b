# syntax=docker/dockerfile:1
# The trust-rotation image: the operator (the entrypoint) and the linkerd-trust CLI, both static
# binaries on distroless's nonroot base (no shell, no package manager, user 65532), as the
# operator chart's restricted security context expects.
#
#   docker buildx build --platform linux/amd64,linux/arm64 --build-arg VERSION=v0.1.0 \
#     -t ghcr.io/buoyantio/trust-rotation:v0.1.0 .
#
# VERSION is stamped into both binaries (`linkerd-trust version`, `trust-rotation-operator
# --version`, the operator's User-Agent): use the chart's appVersion. The build refuses to run
# without it rather than ship binaries that say "dev".

# Base images are pinned by digest (the multi-platform index of the tag), so that a rebuild of a
# release uses the same toolchain and base; bump the tag and its digest together.
#
# The Go toolchain of go.mod (go 1.26.x).
ARG GO_IMAGE=golang:1.26@sha256:3aff6657219a4d9c14e27fb1d8976c49c29fddb70ba835014f477e1c70636647
# distroless's static image, nonroot variant: user 65532, no shell.
ARG BASE_IMAGE=gcr.io/distroless/static:nonroot@sha256:f7f8f729987ad0fdf6b05eeeae94b26e6a0f613bdf46feea7fc40f7bd72953e6

# Build on the builder's own platform and cross-compile: CGO is off, so no C toolchain is needed.
FROM --platform=$BUILDPLATFORM ${GO_IMAGE} AS build
ARG TARGETOS
ARG TARGETARCH
ARG VERSION
RUN test -n "$VERSION" || { echo "build with --build-arg VERSION=<the chart's appVersion>, e.g. v0.1.0" >&2; exit 1; }
WORKDIR /src
# Dependencies first, so that a source change reuses the module download layer.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
# Only the product's packages: the test bed (test/) is not part of the image.
COPY cmd/ cmd/
COPY steps/ steps/
COPY workflow/ workflow/
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath -ldflags="-s -w -X github.com/linkerd/trust-rotation/cmd/internal/version.Version=${VERSION}" \
      -o /out/ ./cmd/trust-rotation-operator ./cmd/linkerd-trust

FROM ${BASE_IMAGE}
COPY --from=build /out/trust-rotation-operator /out/linkerd-trust /usr/local/bin/
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/trust-rotation-operator"]
