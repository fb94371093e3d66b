// Tests of the Argo CD example in manifests/argocd: the TrustAnchorRotation health check runs in
// gopher-lua, the Lua VM Argo CD runs health checks in. A module of its own, so that the product's
// module does not depend on a Lua VM.
module github.com/linkerd/trust-rotation/test/tools/argocd

go 1.26.0

require (
	github.com/yuin/gopher-lua v1.1.1
	sigs.k8s.io/yaml v1.6.0
)

require go.yaml.in/yaml/v2 v2.4.2 // indirect
