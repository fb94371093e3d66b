// Package observe turns cluster objects into the rotation's steps.State, in one place for the
// operator and the CLI: the operator's Snapshotter (snapshot*.go, fed by its informers through
// the Caches and AutomationCaches getters), the CLI's Read (one round of reads: one GET per
// object and one LIST of meshed pods), the converters both use (convert.go), the
// PKI's certificates read without their keys (PKIReader), the workloads automatic restarts
// read (workloads.go), the linked clusters' rotations (remote.go) and what the next rotation's
// deadline reads of the data plane (FillDeadline).
//
// The meshed pods are counted by a steps/podindex Index, and their live certificates are read
// by steps/probe; observe puts what both say into the State.
package observe
