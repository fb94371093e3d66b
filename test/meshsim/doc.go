// Package meshsim simulates Linkerd's control plane and data plane on a real Kubernetes API
// server, and checks the mesh's mTLS safety with an oracle.
//
// The product under test (the trust-rotation operator and CLI) only ever sees what a real Linkerd
// would show it: Deployments and pods with Linkerd's labels, annotations and containers, a real
// mutating admission webhook that injects proxies, Events from the identity controller, and TLS
// on every meshed pod's admin port (podIP:4191). Behind those objects, the processes that a real
// cluster would run in containers run here as goroutines of one Go process:
//
//   - proxy-injector (one simulated process per Running injector pod) answers the admission
//     webhook with the trust bundle it can see: the ConfigMap value as of its pod start, refreshed
//     after a kubelet-like volume refresh delay.
//   - identity (one per Running identity pod) reads the trust roots once at start-up, signs
//     workload certificates with the issuer Secret, hot-reloads the issuer but only accepts one
//     that chains to its start-up roots (Events IssuerUpdated / IssuerUpdateSkipped).
//   - a proxy per Running meshed pod (control plane included) reads its roots from its env at
//     start, certifies with identity, refreshes at 70 % of the certificate lifetime clamped to
//     [MIN_REFRESH, MAX_REFRESH], rejects a certificate that does not chain to its own roots, and
//     serves its live chain over TLS on podIP:4191.
//
// In real-Linkerd mode (Config.Linkerd: LINKERD_BIN and LINKERD_CONTROLLER_BIN), Linkerd's own
// identity and proxy injector run as those pods' containers instead (realidentity.go,
// realinjector.go): the simulated proxies certify with Linkerd's identity over gRPC and the
// webhook forwards admissions to Linkerd's injector. Only the proxy stays simulated.
//
// As a pod starts, its ConfigMap and Secret volumes and its configMapKeyRef env are read from
// the apiserver, not from the simulator's informers. The kubelet resolves volumes and env alike
// from its ConfigMap and Secret managers as the pod starts, so every container of a pod starts
// on the same version — the identity container's roots and its own proxy's alike — and the
// simulator takes it to be the one the apiserver holds then (a real kubelet serves it from its
// own watch, which can lag just after an apiserver outage: docs/contributing.md, on the
// multicluster tests, says what that leaves open). The informers drive only what happens while a pod runs (a
// volume refresh, an issuer reload).
//
// The proxy's layout follows the Linkerd release it stands for:
//
//   - Native sidecar, the default: linkerd-proxy is an init container with restartPolicy: Always,
//     placed first among the init containers, in application pods and in linkerd-destination
//     and linkerd-proxy-injector. This is Linkerd edge-26.5.2 and later (linkerd2 #15267, Helm
//     proxy.nativeSidecar: true; charts/partials _proxy.tpl, charts/patch patch.json). The
//     chart keeps linkerd-identity's proxy in spec.containers whatever that value says
//     (charts/linkerd-control-plane/templates/identity.yaml), and so does the simulator;
//     testdata/linkerd-install holds the control plane the real `linkerd install` rendered, and
//     TestControlPlaneMatchesLinkerd compares InstallControlPlane's with it.
//   - Proxy container: linkerd-proxy appended to spec.containers, as every Linkerd before
//     edge-26.5.2 injects it, and a current one with proxy.nativeSidecar: false
//     (Config.ProxyAsContainer, ControlPlaneOptions.ProxyAsContainer).
//
// Per workload or namespace, the annotation config.linkerd.io/proxy-enable-native-sidecar (and
// its deprecated beta and alpha spellings) overrides the default exactly as linkerd2
// pkg/inject decides it (nativeSidecar). Both layouts run the same simulated proxy: the env is
// resolved at container start and the admin port serves while the pod runs.
// testdata/linkerd-inject holds what the real `linkerd inject --manual` produced for both, and
// TestInjectorMatchesLinkerd compares the webhook's output with it field by field.
//
// Every behaviour follows ../shared/docs/linkerd-contracts.md and the upstream sources it cites
// (linkerd/linkerd2 pkg/identity, pkg/tls, controller/cmd/identity; linkerd/linkerd2-proxy
// identity-client certify.rs, meshtls creds store.rs); the doc comments name the upstream
// behaviour each piece reproduces.
//
// The Oracle continuously verifies that every meshed pod's live chain validates against every
// other meshed pod's roots, in both directions, by comparing equivalence classes (distinct root
// sets × distinct issuer chains) so that it scales to 10,000 pods. It verifies a chain as the
// proxy's rustls-webpki does — path building over the presented certificates, trust anchors
// without a validity check — rather than as Go's crypto/x509 would; webpki.go cites each rule
// and names where the two differ.
package meshsim
