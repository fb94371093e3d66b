package e2e

import (
	"context"
	"crypto/x509"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/test/charts"
	"github.com/linkerd/trust-rotation/test/cluster"
	"github.com/linkerd/trust-rotation/test/internal/poll"
	"github.com/linkerd/trust-rotation/test/meshsim"
	"github.com/linkerd/trust-rotation/test/pki"
	"github.com/linkerd/trust-rotation/test/reallinkerd"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
	"github.com/linkerd/trust-rotation/workflow/client"
)

// Env is a cluster with Linkerd's PKI, the TrustAnchorRotation CRD, a simulated Linkerd control
// plane and meshed workloads.
type Env struct {
	T       testing.TB
	Ctx     context.Context
	Cluster *cluster.Cluster
	PKI     *pki.PKI
	Mesh    *meshsim.Mesh
	TARs    *client.Client
	Apps    []meshsim.Workload
	// Operator is the operator process the environment was bootstrapped with.
	Operator *Operator
	// Release is the charts' installation: the operator's ServiceAccount identity and flags.
	Release *charts.Release
}

// EnvOptions size the environment.
type EnvOptions struct {
	Namespaces, Deployments int
	Replicas                int32
	// ProxyContainerDeployments are added in a namespace of their own that opts out of native
	// sidecars (config.linkerd.io/proxy-enable-native-sidecar: "false"), so their proxies are
	// in spec.containers as before edge-26.5.2; every other meshed pod runs its proxy as a
	// native sidecar, current Linkerd's default (but linkerd-identity, whose proxy the chart
	// keeps in spec.containers).
	ProxyContainerDeployments int
	// StatefulSets are added beside the Deployments, in the same namespaces: a StatefulSet
	// replaces its pods under the same names when restarted.
	StatefulSets int
	// ChartSet are --set values of the operator chart (the TrustAnchorRotation's spec, say).
	ChartSet []string

	// For linked clusters: PKI configures the PKI (CopiedAnchor for a cluster whose anchor is a
	// copy of another's); ClusterName and Oracle join the mesh to an oracle shared by the linked
	// clusters' meshes (see meshsim.Config); Gateway adds Linkerd multicluster's gateway, a
	// meshed workload of its own (the last of Apps).
	PKI         pki.Options
	ClusterName string
	Oracle      *meshsim.Oracle
	Gateway     bool
	// ControlPlaneReplicas is the replicas of each control-plane Deployment (the Linkerd
	// chart's controllerReplicas; 1 when 0). A test that sets it scales the control plane back
	// to 1 when it ends (ScaleControlPlane): the other tests expect one replica each.
	ControlPlaneReplicas int32
	// IssuanceLifetime is identity's workload certificate lifetime (24h when 0): a short one
	// makes proxies refresh by themselves within a test (at 70 % of it).
	IssuanceLifetime time.Duration
}

// proxyContainerPrefix names the namespaces of EnvOptions.ProxyContainerDeployments.
const proxyContainerPrefix = "proxy-container"

// CertificateBound is how long a meshed pod may run without a certificate before the oracle
// fails the test (meshsim.Config.CertificateBound): a proxy asks identity at once when it starts
// and, while it has none, again every minimum refresh interval (meshsim.DefaultMinRefresh, 10s).
// A pod started while identity restarts misses the first attempt or two; six intervals cover
// that on a loaded machine. A pod whose proxy rejects every certificate identity signs (its
// roots lack the issuer's anchor) never gets one, and crosses it.
const CertificateBound = 6 * meshsim.DefaultMinRefresh

// NewEnv installs the PKI, then both charts with helm (the CRD, the operator's ServiceAccount
// and RBAC, the TrustAnchorRotation `cluster`), then runs bootstrap through the given operator
// start function, which gets the chart's release (the operator creates
// linkerd-identity-trust-roots, which the control plane needs), then the mesh, its control
// plane and the workloads, and waits until every proxy holds a certificate.
func NewEnv(t testing.TB, ctx context.Context, c *cluster.Cluster, opts EnvOptions, startOperator func(*charts.Release) *Operator) *Env {
	t.Helper()
	kube := c.Kube()
	e := &Env{T: t, Ctx: ctx, Cluster: c}
	var err error
	if e.PKI, err = pki.Install(ctx, kube, c.CertManager(), opts.PKI); err != nil {
		t.Fatal(err)
	}
	if e.Release, err = charts.Install(ctx, c, charts.InstallOptions{Set: opts.ChartSet}); err != nil {
		t.Fatal(err)
	}
	if e.TARs, err = client.NewForConfig(c.RESTConfig()); err != nil {
		t.Fatal(err)
	}
	e.Operator = startOperator(e.Release)
	// Until it leads, the status read below may be the one a previous test's operator left.
	if err := e.Operator.WaitLeading(ctx, kube, e.Release.Namespace); err != nil {
		t.Fatal(err)
	}
	if _, err := WaitRotation(ctx, e.TARs, steps.DefaultRotationName, 2*time.Minute, "bootstrap",
		func(tar *v1alpha1.TrustAnchorRotation) bool {
			return tar.Status.Checkpoint != nil && tar.Status.Checkpoint.Step == steps.StepDetectAnchorRotation
		}); err != nil {
		t.Fatal(err)
	}

	e.Mesh, err = meshsim.Start(ctx, meshsim.Config{
		RESTConfig:         c.RESTConfig(),
		VolumeRefreshDelay: meshsim.Never, // the injector sees a new bundle only when restarted
		OracleTick:         200 * time.Millisecond,
		CertificateBound:   CertificateBound,
		Registerer:         prometheus.NewRegistry(),
		ClusterName:        opts.ClusterName,
		Oracle:             opts.Oracle,
		IssuanceLifetime:   opts.IssuanceLifetime,
		Linkerd:            reallinkerd.FromEnv(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Mesh.Stop)
	t.Cleanup(e.settleOnFailure)
	if err := meshsim.InstallControlPlane(ctx, kube, meshsim.ControlPlaneOptions{Replicas: opts.ControlPlaneReplicas}); err != nil {
		t.Fatal(err)
	}
	if err := meshsim.WaitForRollouts(ctx, kube, e.Mesh.ControlPlane()); err != nil {
		t.Fatal(err)
	}
	e.Apps, err = meshsim.CreateMeshedWorkloads(ctx, kube, meshsim.WorkloadSpec{
		Prefix: "app", Namespaces: opts.Namespaces, Deployments: opts.Deployments, Replicas: opts.Replicas,
		StatefulSets: opts.StatefulSets,
	})
	if err != nil {
		t.Fatal(err)
	}
	if opts.ProxyContainerDeployments > 0 {
		legacy, err := meshsim.CreateMeshedWorkloads(ctx, kube, meshsim.WorkloadSpec{
			Prefix: proxyContainerPrefix, Deployments: opts.ProxyContainerDeployments, Replicas: opts.Replicas,
			NamespaceAnnotations: map[string]string{meshsim.AnnotationNativeSidecar: "false"},
		})
		if err != nil {
			t.Fatal(err)
		}
		e.Apps = append(e.Apps, legacy...)
	}
	if opts.Gateway {
		gw, err := meshsim.InstallGateway(ctx, kube)
		if err != nil {
			t.Fatal(err)
		}
		e.Apps = append(e.Apps, gw)
	}
	if err := meshsim.WaitForRollouts(ctx, kube, e.Apps); err != nil {
		t.Fatal(err)
	}
	e.WaitCertificates()
	return e
}

// playUserUntil plays a user following README's Rotate section until done holds: it restarts
// the workloads when the operator waits for them and renews the issuer when it asks for that,
// once each per step.
func (e *Env) playUserUntil(timeout time.Duration, what string, done func(*v1alpha1.TrustAnchorRotation) bool) error {
	e.T.Helper()
	did := map[string]bool{}
	return poll.Until(e.Ctx, timeout, what, func(ctx context.Context) (bool, error) {
		tar, err := e.TARs.Get(ctx, steps.DefaultRotationName)
		if err != nil {
			return false, poll.Pending("getting the TrustAnchorRotation: %v", err)
		}
		if done(tar) {
			return true, nil
		}
		step := stepOf(tar)
		once := func(fn func()) {
			if !did[step] {
				did[step] = true
				fn()
			}
		}
		switch step {
		case steps.StepPropagateTrustRoots, steps.StepRenewWorkloadCertificates, steps.StepRemoveOldTrustRoots:
			once(e.RestartApps)
		case steps.StepWaitForIdentityIssuer:
			once(func() { e.Renew("linkerd", "linkerd-identity-issuer") })
		}
		return false, poll.Pending("phase %s, step %s: %q", tar.Status.Phase, step, tar.Status.BlockingMessage)
	})
}

// atRest says whether the rotation is Synced and waits for nothing.
func atRest(tar *v1alpha1.TrustAnchorRotation) bool {
	return tar.Status.Phase == v1alpha1.PhaseSynced && stepOf(tar) == steps.StepDetectAnchorRotation && tar.Status.BlockingMessage == ""
}

// settleOnFailure runs when a test ends. If the test failed and left the rotation midway, it plays
// the user until the rotation is at rest, with the test's mesh and operator still running: the
// tests share one cluster, and the next test's bootstrap waits for a rotation at rest before its
// mesh runs, so a rotation left midway would fail every test after it.
func (e *Env) settleOnFailure() {
	if !e.T.Failed() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	ec := *e
	ec.Ctx = ctx
	tar, err := e.TARs.Get(ctx, steps.DefaultRotationName)
	if err != nil || atRest(tar) {
		return
	}
	e.T.Logf("settling the rotation the failed test left in phase %s, step %s, for the tests after it", tar.Status.Phase, stepOf(tar))
	if err := ec.playUserUntil(5*time.Minute, "the rotation at rest", atRest); err != nil {
		e.T.Logf("could not settle the rotation: %v", err)
	}
}

// MeshedPods is the number of meshed pods the environment runs, control plane included.
func (e *Env) MeshedPods() int { return len(e.Mesh.Pods()) }

// ControlPlanePods is the number of meshed pods of the control plane.
func (e *Env) ControlPlanePods() int {
	n := 0
	for _, p := range e.Mesh.Pods() {
		if p.Component != "" {
			n++
		}
	}
	return n
}

// RestoreControlPlaneOnCleanup scales the control plane back to one replica of each Deployment
// when the test ends, as the other tests expect it (see EnvOptions.ControlPlaneReplicas).
func (e *Env) RestoreControlPlaneOnCleanup() {
	e.T.Cleanup(func() {
		// The test's context has ended by now.
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		ec := *e
		ec.Ctx = ctx
		ec.ScaleControlPlane(1)
	})
}

// ScaleControlPlane sets the replicas of every control-plane Deployment, as `kubectl scale`
// does (no change of the pod template, so no restart), and waits for the rollouts and for every
// proxy's certificate.
func (e *Env) ScaleControlPlane(replicas int32) {
	e.T.Helper()
	patch := []byte(fmt.Sprintf(`{"spec":{"replicas":%d}}`, replicas))
	for _, w := range e.Mesh.ControlPlane() {
		if _, err := e.Cluster.Kube().AppsV1().Deployments(w.Namespace).Patch(e.Ctx, w.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			e.T.Fatalf("scaling Deployment %s/%s to %d: %v", w.Namespace, w.Name, replicas, err)
		}
	}
	if err := meshsim.WaitForRollouts(e.Ctx, e.Cluster.Kube(), e.Mesh.ControlPlane()); err != nil {
		e.T.Fatal(err)
	}
	e.WaitCertificates()
}

// WaitCertificates waits until every running proxy holds a certificate.
func (e *Env) WaitCertificates() {
	e.T.Helper()
	ctx, cancel := context.WithTimeout(e.Ctx, 2*time.Minute)
	defer cancel()
	if err := e.Mesh.WaitForCertificates(ctx, 0, nil); err != nil {
		e.T.Fatal(err)
	}
}

// RestartApps restarts every application workload as `kubectl rollout restart` does and waits
// for the rollouts and the new proxies' certificates.
func (e *Env) RestartApps() {
	e.T.Helper()
	e.Restart(e.Apps)
}

// Restart restarts the workloads as `kubectl rollout restart` does and waits for the rollouts
// and the new proxies' certificates.
func (e *Env) Restart(ws []meshsim.Workload) {
	e.T.Helper()
	if err := e.Mesh.RolloutRestartAll(e.Ctx, ws); err != nil {
		e.T.Fatal(err)
	}
	if err := meshsim.WaitForRollouts(e.Ctx, e.Cluster.Kube(), ws); err != nil {
		e.T.Fatal(err)
	}
	e.WaitCertificates()
}

// Renew renews a cert-manager Certificate as `cmctl renew` does and waits for its new Secret.
func (e *Env) Renew(namespace, name string) *x509.Certificate {
	e.T.Helper()
	old := e.SecretCert(namespace, name)
	if err := pki.Renew(e.Ctx, e.Cluster.CertManager(), namespace, name); err != nil {
		e.T.Fatal(err)
	}
	if _, err := pki.WaitRenewed(e.Ctx, e.Cluster.Kube(), e.Cluster.CertManager(), namespace, name, steps.Fingerprint(old), 2*time.Minute); err != nil {
		e.T.Fatal(err)
	}
	return e.SecretCert(namespace, name)
}

// SecretCert returns the first certificate of a Secret's tls.crt.
func (e *Env) SecretCert(namespace, name string) *x509.Certificate {
	e.T.Helper()
	return e.SecretChain(namespace, name)[0]
}

// SecretChain returns every certificate of a Secret's tls.crt, in order.
func (e *Env) SecretChain(namespace, name string) []*x509.Certificate {
	e.T.Helper()
	sec, err := e.Cluster.Kube().CoreV1().Secrets(namespace).Get(e.Ctx, name, metav1.GetOptions{})
	if err != nil {
		e.T.Fatal(err)
	}
	certs, err := steps.ParseCertificates(sec.Data["tls.crt"])
	if err != nil {
		e.T.Fatalf("Secret %s/%s: %v", namespace, name, err)
	}
	if len(certs) == 0 {
		e.T.Fatalf("Secret %s/%s: no certificate in tls.crt", namespace, name)
	}
	return certs
}

// StartChartOperator runs the operator out of cluster exactly as the chart configures it —
// its flags, and its ServiceAccount's identity, so RBAC allows it what the chart grants and no
// more — plus extra flags.
func StartChartOperator(t testing.TB, rel *charts.Release, extra ...string) *Operator {
	t.Helper()
	args := append(append([]string{}, rel.OperatorArgs...), extra...)
	return StartOperatorWithEnv(t, []string{"POD_NAMESPACE=" + rel.Namespace}, rel.Kubeconfig, args...)
}
