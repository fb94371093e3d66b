package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/linkerd/trust-rotation/test/cluster"
	"github.com/linkerd/trust-rotation/test/meshsim"
	"github.com/linkerd/trust-rotation/test/pki"
)

// linkedName is the second cluster of `testbed up --clusters 2`; the first is "west".
const linkedName = "east"

// startLinked starts a second cluster beside the bed's (`testbed up --clusters 2`, `make
// cluster-up CLUSTERS=2`), with its own cert-manager and a copy of the first cluster's trust
// anchor (linked clusters share one), installs Linkerd multicluster's namespace and Link CRD in
// both and links them both ways as `linkerd multicluster link` does (Link west/east, Secret
// cluster-credentials-<name>), and, with mesh, starts its mesh simulator and sample app and a
// meshed linkerd-gateway in both. It writes <dir>/kubeconfig-east and records it in the state;
// the trust-rotation charts are yours to install in both, with multicluster.enabled=true and
// multicluster.remoteAccess.enabled=true. stop stops what it started.
func startLinked(ctx context.Context, b *Bed, mesh, proxyAsContainer bool) (stop func() error, err error) {
	workDir := filepath.Join(b.Dir, "work-"+linkedName)
	east, err := cluster.Start(ctx, cluster.Options{Nodes: 1, WorkDir: workDir, LogDir: filepath.Join(b.Dir, "logs", linkedName)})
	if err != nil {
		return nil, fmt.Errorf("starting cluster %s: %w", linkedName, err)
	}
	var stopMesh func() error
	kubeconfigPath := filepath.Join(b.Dir, "kubeconfig-"+linkedName)
	stop = func() error {
		_ = os.Remove(kubeconfigPath)
		var errs []error
		if stopMesh != nil {
			errs = append(errs, stopMesh())
		}
		errs = append(errs, east.Stop(), os.RemoveAll(workDir))
		for _, e := range errs {
			if e != nil {
				return e
			}
		}
		return nil
	}
	fail := func(err error) (func() error, error) {
		_ = stop()
		return nil, err
	}
	if _, err := pki.CopyAnchor(ctx, b.Cluster.Kube(), east.Kube(), pki.Options{}); err != nil {
		return fail(err)
	}
	if _, err := pki.Install(ctx, east.Kube(), east.CertManager(), pki.Options{CopiedAnchor: true}); err != nil {
		return fail(fmt.Errorf("installing the Linkerd PKI in %s: %w", linkedName, err))
	}
	if mesh {
		eb := &Bed{Dir: b.Dir, Cluster: east, Extra: map[string]string{}}
		if stopMesh, err = startMesh(ctx, eb, proxyAsContainer); err != nil {
			return fail(err)
		}
		b.Extra[linkedName+"MeshWorkloads"] = eb.Extra["meshWorkloads"]
	}
	clusters := map[string]*cluster.Cluster{"west": b.Cluster, linkedName: east}
	for name, c := range clusters {
		if err := installMulticluster(ctx, c, mesh); err != nil {
			return fail(fmt.Errorf("cluster %s: %w", name, err))
		}
	}
	for from, to := range map[string]string{"west": linkedName, linkedName: "west"} {
		// As link-gen writes it: the remote-access ServiceAccount's own token.
		kubeconfig, err := meshsim.RemoteAccessKubeconfig(ctx, clusters[to].RESTConfig())
		if err != nil {
			return fail(err)
		}
		if err := meshsim.Link(ctx, meshsim.LinkOptions{Source: clusters[from].RESTConfig(), Target: to, Kubeconfig: kubeconfig, GatewayAddress: "127.0.0.1"}); err != nil {
			return fail(fmt.Errorf("linking %s to %s: %w", from, to, err))
		}
	}
	admin, err := os.ReadFile(east.Kubeconfig())
	if err != nil {
		return fail(err)
	}
	if err := writeFileAtomic(kubeconfigPath, admin, 0o600); err != nil {
		return fail(err)
	}
	b.Extra[linkedName+"Kubeconfig"], b.Extra[linkedName+"Server"], b.Extra[linkedName+"LogDir"] = kubeconfigPath, east.Server(), east.LogDir()
	return stop, nil
}

// installMulticluster does what `linkerd multicluster install` does that the operator and the
// links need: the linkerd-multicluster namespace, the Link CRD, and (with the mesh) the meshed
// gateway and the remote-access ServiceAccount; without the mesh, that ServiceAccount alone.
func installMulticluster(ctx context.Context, c *cluster.Cluster, mesh bool) error {
	if mesh {
		if _, err := meshsim.InstallGateway(ctx, c.Kube()); err != nil {
			return err
		}
	} else {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: meshsim.MulticlusterNamespace}}
		if _, err := c.Kube().CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: meshsim.RemoteAccessServiceAccount, Namespace: meshsim.MulticlusterNamespace}}
		if _, err := c.Kube().CoreV1().ServiceAccounts(meshsim.MulticlusterNamespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	return meshsim.InstallLinkCRD(ctx, c.RESTConfig())
}
