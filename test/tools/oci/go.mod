// The image tooling of the project, on go-containerregistry (the library ko and crane are built
// on): it assembles the operator image into an OCI layout and pushes it (make image), serves a
// registry on the test bed's loopback, and exports an image's filesystem for the bed's pod
// runner. A module of its own, so that the product's module does not depend on it.
module github.com/linkerd/trust-rotation/test/tools/oci

go 1.26.0

require github.com/google/go-containerregistry v0.22.1

require (
	github.com/docker/cli v29.7.2+incompatible // indirect
	github.com/docker/docker-credential-helpers v0.9.3 // indirect
	github.com/klauspost/compress v1.19.2 // indirect
	github.com/opencontainers/go-digest v1.0.0 // indirect
	github.com/opencontainers/image-spec v1.1.1 // indirect
	github.com/sirupsen/logrus v1.9.4 // indirect
	golang.org/x/sync v0.22.0 // indirect
	golang.org/x/sys v0.47.0 // indirect
	gotest.tools/v3 v3.5.2 // indirect
)
