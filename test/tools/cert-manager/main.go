// Command cert-manager-controller runs the real cert-manager controllers that Linkerd's PKI
// needs (SelfSigned and CA issuers, Certificates, CertificateRequests and their approver) out of
// cluster against the local test cluster.
//
// The upstream binary's main lives in a nested module that is not published on the Go module
// proxy, so this small main assembles the same controllers from the published main module. The
// Venafi issuer is left out: its dependency cannot be fetched here, and Linkerd does not use it.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	controller "github.com/cert-manager/cert-manager/pkg/controller"
	"github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/approver"
	crca "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/ca"
	crselfsigned "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/selfsigned"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/issuing"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/keymanager"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/readiness"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/requestmanager"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/revisionmanager"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/trigger"
	"github.com/cert-manager/cert-manager/pkg/controller/clusterissuers"
	"github.com/cert-manager/cert-manager/pkg/controller/issuers"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/ca"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/selfsigned"
	logf "github.com/cert-manager/cert-manager/pkg/logs"
)

// controllers are the upstream controller names this binary runs, in the order upstream lists them.
var controllers = []string{
	issuers.ControllerName,
	clusterissuers.ControllerName,
	approver.ControllerName,
	crca.CRControllerName,
	crselfsigned.CRControllerName,
	trigger.ControllerName,
	issuing.ControllerName,
	keymanager.ControllerName,
	requestmanager.ControllerName,
	readiness.ControllerName,
	revisionmanager.ControllerName,
}

func main() {
	kubeconfig := flag.String("kubeconfig", "", "path to the kubeconfig of the cluster")
	clusterResourceNamespace := flag.String("cluster-resource-namespace", "cert-manager",
		"namespace holding the Secrets that ClusterIssuers refer to")
	workers := flag.Int("workers", 5, "workers per controller")
	klog.InitFlags(nil)
	flag.Parse()

	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	if err := run(ctx, *kubeconfig, *clusterResourceNamespace, *workers); err != nil {
		fmt.Fprintln(os.Stderr, "cert-manager-controller:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, kubeconfig, clusterResourceNamespace string, workers int) error {
	ctx, cancel := context.WithCancel(logf.NewContext(ctx, klog.Background()))
	defer cancel()
	factory, err := controller.NewContextFactory(ctx, controller.ContextOptions{
		Kubeconfig:         kubeconfig,
		KubernetesAPIQPS:   100,
		KubernetesAPIBurst: 200,
		IssuerOptions:      controller.IssuerOptions{ClusterResourceNamespace: clusterResourceNamespace},
		CertificateOptions: controller.CertificateOptions{
			// Upstream's defaults.
			CertificateRequestMinimumBackoffDuration: time.Hour,
			CertificateRequestMaximumBackoffDuration: 32 * time.Hour,
		},
	})
	if err != nil {
		return err
	}

	known := controller.Known()
	var run []controller.Interface
	for _, name := range controllers {
		ctor, ok := known[name]
		if !ok {
			return fmt.Errorf("controller %q is not registered", name)
		}
		c, err := ctor(factory)
		if err != nil {
			return fmt.Errorf("constructing controller %q: %w", name, err)
		}
		run = append(run, c)
	}

	// Every controller shares the factory's informers; start them once all have registered.
	shared, err := factory.Build()
	if err != nil {
		return err
	}
	shared.KubeSharedInformerFactory.Start(ctx.Done())
	shared.SharedInformerFactory.Start(ctx.Done())
	shared.HTTP01ResourceMetadataInformersFactory.Start(ctx.Done())

	klog.InfoS("starting cert-manager controllers", "controllers", controllers)
	var wg sync.WaitGroup
	errs := make(chan error, len(run))
	for i, c := range run {
		wg.Add(1)
		go func(name string, c controller.Interface) {
			defer wg.Done()
			if err := c.Run(workers, ctx); err != nil {
				errs <- fmt.Errorf("controller %q: %w", name, err)
				cancel() // one controller down means the bed is broken: stop them all
			}
		}(controllers[i], c)
	}
	wg.Wait()
	close(errs)
	return <-errs
}
