// Package kube is the operator's stand-ins for client-go: the few pieces of client-go it needs,
// written small, because importing client-go's own brings what the operator does not use into
// its memory. Each is held to client-go's behaviour by a test that runs client-go beside it.
//
//   - The typed clients (kube.go, typed.go): the core, apps, policy and coordination kinds the
//     rotation reads and writes, and cert-manager's Certificates, Issuers and
//     CertificateRequests, over a scheme of just those kinds. client-go's Clientset cannot be
//     narrowed: importing any of its typed clients registers every API group Kubernetes serves
//     (k8s.io/client-go/kubernetes/scheme), its apply configurations bring the OpenAPI schema,
//     and cert-manager's Clientset adds its own; its generic typed clients (gentype) link
//     client-go's fakes and through them the managed-fields and OpenAPI code. Replacing them took
//     `trust-rotation-operator --version` from 25.5–26.4 MiB of peak RSS to 18.2–18.4 MiB, and
//     dropping gentype and tools/record from 473 linked packages to 421 (19.0–19.2 MiB to
//     16.9–17.4 MiB; docs/performance-log.md). The interfaces are the generated clients' method
//     sets, signature for signature, so a client-go Clientset (the CLI's, a test's fake) serves
//     them too, through package kube/clientset. TestTypedClientsRequestLikeClientGo makes every
//     call with both against one recording server and compares the requests and the results.
//   - Election (lease.go): client-go's leader election (tools/leaderelection, uncoordinated, on
//     a LeaseLock), the same algorithm on the same Lease fields, because client-go's package
//     imports the typed clients of every API group. TestElectionHandsOverWithClientGo hands the
//     Lease of a real apiserver over to client-go's LeaderElector and back, released and
//     expired, as replicas of two releases do during an upgrade.
//   - NewEventRecorder (events.go): core/v1 Events as client-go's event recorder (tools/record)
//     writes them, whose strategic merge patches of repeated Events link the OpenAPI machinery.
//     TestEventWriterWritesWhatClientGoRecords compares the Events both write for the same
//     calls. One departure, on purpose: client-go's spam filter lets 25 Events of an object
//     through, which dropped the last of a rotation's; this one lets a burst of 200 through
//     (TestEventWriterCountsRepeatsAndFiltersSpam).
//   - ReadCoalescer (coalesce.go) is not a piece of client-go but wraps what it dials
//     (rest.Config.Dial): it paces the reads of a watch whose events trickle in, so that the
//     process wakes once per interval rather than once per event (BenchmarkPodWatch).
//
// TestOperatorImportsNoGeneratedClientset (cmd/trust-rotation-operator) fails when the operator
// imports, however indirectly, what these stand in for.
package kube
