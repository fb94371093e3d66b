package main

import (
	"context"
	"errors"
)

// startMesh starts the Linkerd mesh simulator (package test/meshsim) and a small meshed sample
// app on the running bed, in this process, and returns a function that stops them; testbed calls
// it after the PKI is issued and before it writes the ready marker, and calls stop before it
// stops the cluster. It runs only with `testbed up --mesh`.
//
// Extension point for the mesh-simulator engineer (test/meshsim): fill in this function — install
// the control plane, start the injector webhook, identity and proxies with b.Cluster's clients
// and kubeconfigs, create the sample workloads — and record anything a person needs (addresses,
// namespaces) in b.Extra, which lands in .local/testbed.json. When it works, make --mesh the
// default (or pass it from scripts/testbed.sh) so `make cluster-up` brings the mesh up too.
func startMesh(ctx context.Context, b *Bed) (stop func() error, err error) {
	return nil, errors.New("--mesh is not wired in yet: the mesh simulator's start-up belongs in startMesh (test/cmd/testbed/mesh.go)")
}
