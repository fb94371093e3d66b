package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/linkerd/trust-rotation/test/meshsim"
	"github.com/linkerd/trust-rotation/test/reallinkerd"
)

// startMesh starts the Linkerd mesh simulator (package test/meshsim) and a small meshed sample
// app on the running bed, in this process, and returns a function that stops them; testbed calls
// it after the PKI is issued and before it writes the ready marker, and calls stop before it
// stops the cluster. It runs only with `testbed up --mesh`.
//
// The sample: the control plane in linkerd, and namespace emojivoto (annotated
// linkerd.io/inject=enabled) with three meshed Deployments of two replicas. Linkerd's defaults
// apply (24h workload certificates, 60s kubelet volume refresh, the proxy as a native sidecar
// unless proxyAsContainer), so the playground behaves like a real cluster for a person trying the
// product by hand.
func startMesh(ctx context.Context, b *Bed, proxyAsContainer bool) (stop func() error, err error) {
	m, ws, err := meshsim.StartSample(ctx, meshsim.Config{RESTConfig: b.Cluster.RESTConfig(), ProxyAsContainer: proxyAsContainer,
		Linkerd: reallinkerd.FromEnv()},
		meshsim.WorkloadSpec{Prefix: "emojivoto", Namespaces: 1, Deployments: 3, Replicas: 2})
	if err != nil {
		return nil, fmt.Errorf("starting the mesh simulator: %w", err)
	}
	names := make([]string, 0, len(ws))
	for _, w := range ws {
		names = append(names, w.String())
	}
	b.Extra["meshWebhook"] = m.WebhookURL()
	b.Extra["meshWorkloads"] = strings.Join(names, ",")
	return func() error { m.Stop(); return nil }, nil
}
