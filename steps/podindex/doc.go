// Package podindex keeps the meshed pods the rotation counts: a Pod per meshed pod, what the
// rotation reads of it (SlimPod), in an Index that keeps per event the trust-bundle convergence
// (TrustBundle), the control-plane pods (FillControlPlane) and the oldest data-plane pod
// (OldestMeshed), so that a reconcile reads counts instead of walking the mesh.
//
// The operator fills its Index with a PodInformer: a list-watch of the meshed pods
// (MeshedPodsListWatch) that decodes each pod off the apiserver's protobuf as a WirePod, only
// what SlimPod reads (wirepod.go, wiredecode.go, wireserializer.go), and upserts its Pod as the
// event is dequeued (cache.go). The CLI lists the same pods once through the same list-watch
// (observe.ListMeshedPods) and counts them in an Index of its own, so that both count alike.
//
// The prober (steps/probe) and the State's reader (steps/observe) use the index; it imports
// neither.
package podindex
