// Package probe reads meshed proxies' live certificates, and counts the pods whose chain
// verifies to the rotation's certificate root (steps.State.Certificates) and the issuer chains
// they present (steps.State.LiveChains).
//
// ReadChain reads a proxy's chain on its admin port with crypto/tls, as `linkerd identity`
// does, and accepts it only from the pod's own identity holding the leaf's key
// (ChainRejectedError otherwise); ProbePod reads a pod's. The operator runs a CertTracker over
// its podindex.Index: it probes each pod as it starts running, and again on a per-pod backoff
// until its chain verifies (tracker.go counts, schedule.go decides when to probe, probequeue.go
// queues the probes), and again once its proxy should have renewed its certificate: stale.go
// finds certificates a stale issuer signed, expiry.go those the proxies did not renew. The CLI probes once (ProbeAll, or StartProbes as the pod list's pages
// arrive) and judges the results with a CertificateCheck, which counts and words them as the
// CertTracker does (chains.go). The package reads pods from steps/podindex, never from
// steps/observe.
package probe
