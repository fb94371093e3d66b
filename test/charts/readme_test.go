package charts

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/restmapper"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/test/cluster"
	"github.com/linkerd/trust-rotation/test/internal/poll"
	"github.com/linkerd/trust-rotation/test/meshsim"
	"github.com/linkerd/trust-rotation/test/pki"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
	"github.com/linkerd/trust-rotation/workflow/client"
)

// TestReadmeInstallAndFirstRotation follows README.md from Install to Rotate, step by step and in
// order, with the files the repository ships: the numbered comments below are README's numbered
// steps, so a change of README's steps must change this test.
//
// Each step runs what README runs, or makes its requests: the shipped PKI and the bundle are
// server-side applied object by object with kubectl's field managers (kubectl is none of the test
// bed's tools); the CLI is built from the module as `go install` builds it; Linkerd is the mesh
// simulator, whose identity runs as the shipped external-CA values configure Linkerd's; both
// charts come from the checkout with real helm (`helm upgrade --install --wait`, as a first
// install), on the image `make image IMAGE=` pushed to the test bed's registry, their Helm hooks on (the preflight check and the wait), and the
// operator's pods and the hooks' pods run from the pushed image. Then `linkerd trust check` is
// all √, and `linkerd trust rotate` completes a rotation, doing what each blocking message asks,
// with no violation of the mesh's mTLS oracle. The chart's Deployment leads it: its pods, run from
// the image under the chart's ServiceAccount, on the pod network (they reach the meshed pods'
// proxies on their pod IPs, as the operator observes their certificates), and the Lease names
// one of them at every phase of the rotation.
func TestReadmeInstallAndFirstRotation(t *testing.T) {
	c := cluster.Shared(t)
	if os.Geteuid() != 0 {
		t.Skip("skipping: running a pod's container needs root (mount, PID and network namespaces, a veth)")
	}
	cluster.DumpLogsOnFailure(t, c)
	ctx := testContext(t, 15*time.Minute)
	kube := c.Kube()
	root, err := cluster.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	tars, err := client.NewForConfig(c.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	helms, err := Helms(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	h := helms[0]
	readmeFreshCluster(t, ctx, c, h, tars)

	run := func(name string, args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "KUBECONFIG="+c.Kubeconfig())
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			t.Fatalf("%s %s: %v\n%s%s", filepath.Base(name), strings.Join(args, " "), err, out.String(), errb.String())
		}
		return out.String()
	}

	// 1. The CLI, as `go install <module>/cmd/linkerd-trust` builds it.
	trust := filepath.Join(t.TempDir(), "linkerd-trust")
	run("go", "build", "-o", trust, "./cmd/linkerd-trust")

	// 2. Linkerd's PKI on cert-manager, from the shipped manifest. (kubectl is none of the test
	// bed's tools: its requests are made here as kubectl makes them — create the namespace,
	// server-side apply with kubectl's field manager and no --force-conflicts, wait Ready.)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "linkerd"}}
	if _, err := kube.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	pkiManifest, err := os.ReadFile(filepath.Join(root, "manifests", "cert-manager", "linkerd-pki.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	serverSideApply(t, ctx, c, pkiManifest, "kubectl")
	for _, crt := range []struct{ namespace, name string }{{"cert-manager", "linkerd-trust-anchor"}, {"linkerd", "linkerd-identity-issuer"}} {
		if _, err := pki.WaitReady(ctx, kube, c.CertManager(), crt.namespace, crt.name, 2*time.Minute); err != nil {
			t.Fatal(err)
		}
	}

	// 3. Seed the trust bundle with the operator's field manager, then check --pre.
	serverSideApply(t, ctx, c, []byte(run(trust, "bundle")), "linkerd-trust-rotation")
	t.Logf("linkerd trust check --pre:\n%s", run(trust, "check", "--pre"))

	// 4. Linkerd with an external CA: the simulated control plane does what the shipped values
	// make Linkerd's chart do — no trust roots of its own (it reads the seeded ConfigMap), and
	// identity reading its issuer from cert-manager's kubernetes.io/tls Secret.
	values, err := os.ReadFile(filepath.Join(root, "manifests", "linkerd", "external-ca-values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Identity struct {
			ExternalCA bool `json:"externalCA"`
			Issuer     struct {
				Scheme string `json:"scheme"`
			} `json:"issuer"`
		} `json:"identity"`
	}
	if err := yaml.Unmarshal(values, &v); err != nil {
		t.Fatal(err)
	}
	if !v.Identity.ExternalCA {
		t.Errorf("external-ca-values.yaml: identity.externalCA is not true: Linkerd's chart would render the trust roots the operator keeps")
	}
	mesh, apps := readmeLinkerd(t, ctx, c)
	identity, err := kube.AppsV1().Deployments("linkerd").Get(ctx, "linkerd-identity", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if want := "-identity-scheme=" + v.Identity.Issuer.Scheme; !containerHasArg(identity, want) {
		t.Errorf("the control plane's identity does not run with %s, as external-ca-values.yaml makes Linkerd's run", want)
	}
	began := time.Now()

	// 5. The operator: make image IMAGE=<the bed's registry>, both charts from the checkout,
	// hooks on, its pods from the pushed image.
	pub := publishOnce(t, ctx, c, h)
	lease, pods := readmeInstallOperator(t, ctx, c, h, pub)

	// 6. Check: every check √, and the TrustAnchorRotation Synced and Ready.
	out := run(trust, "check")
	t.Logf("linkerd trust check:\n%s", out)
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "×") || strings.Contains(line, "‼") {
			t.Errorf("linkerd trust check is not all √: %s", line)
		}
	}
	err = poll.Until(ctx, 2*time.Minute, "TrustAnchorRotation cluster to be Synced and Ready", func(ctx context.Context) (bool, error) {
		tar, err := tars.Get(ctx, steps.DefaultRotationName)
		if err != nil {
			return false, err
		}
		for _, cond := range tar.Status.Conditions {
			if cond.Type == "Ready" && cond.Status == metav1.ConditionTrue && tar.Status.Phase == v1alpha1.PhaseSynced {
				return true, nil
			}
		}
		return false, poll.Pending("phase %s, conditions %v", tar.Status.Phase, tar.Status.Conditions)
	})
	if err != nil {
		t.Fatal(err)
	}

	// The leader reports the rotation's phase on its admin port, at its pod IP.
	err = poll.Until(ctx, 2*time.Minute, "the leading pod to report the rotation Synced", func(ctx context.Context) (bool, error) {
		leader, err := readmeLeader(ctx, kube, lease, pods)
		if err != nil {
			return false, poll.Pending("%v", err)
		}
		return leader.reportsSynced(ctx)
	})
	if err != nil {
		t.Fatal(err)
	}

	// Rotate: rotate, then do what each blocking message asks, as README's table says.
	t.Logf("linkerd trust rotate:\n%s", run(trust, "rotate"))
	led := readmeFollowRotation(t, ctx, c, tars, mesh, apps, func(ctx context.Context) (string, error) {
		leader, err := readmeLeader(ctx, kube, lease, pods)
		if err != nil {
			return "", err
		}
		return leader.identity(), nil
	})
	// The phases that wait for the user are observed for sure (the others may pass between two
	// looks): each was led by a pod of the chart.
	for _, p := range []v1alpha1.Phase{v1alpha1.PhasePropagatingTrustRoots, v1alpha1.PhaseWaitingForIdentityRotation, v1alpha1.PhaseRemovingOldTrustRoots} {
		if led[p] == "" {
			t.Errorf("the rotation was never observed in %s while a pod of the chart held the Lease", p)
		}
	}
	if err := mesh.Oracle().CheckNoViolationsSince(began); err != nil {
		t.Errorf("the mesh's oracle: %v", err)
	}
	t.Logf("the rotation completed with %d violations of the oracle over %d meshed pods", mesh.Oracle().ViolationCount(), len(mesh.Pods()))
}

// readmeFreshCluster makes the shared cluster what README starts from, whatever ran before:
// cert-manager without Linkerd, its PKI, its trust roots nor the operator.
func readmeFreshCluster(t *testing.T, ctx context.Context, c *cluster.Cluster, h Helm, tars *client.Client) {
	t.Helper()
	kube := c.Kube()
	_ = Uninstall(ctx, c, h, "linkerd")
	if err := tars.Delete(ctx, steps.DefaultRotationName); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	if err := kube.CoreV1().Secrets("linkerd").Delete(ctx, "linkerd-previous-anchor", metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	if err := kube.CoreV1().ConfigMaps("linkerd").Delete(ctx, "linkerd-identity-trust-roots", metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	// Nor Linkerd's PKI, which earlier tests write with other field managers and values.
	cm := c.CertManager().CertmanagerV1()
	for _, del := range []func() error{
		func() error {
			return cm.Certificates("linkerd").Delete(ctx, "linkerd-identity-issuer", metav1.DeleteOptions{})
		},
		func() error {
			return cm.ClusterIssuers().Delete(ctx, "linkerd-identity-issuer", metav1.DeleteOptions{})
		},
		func() error {
			return cm.Certificates("cert-manager").Delete(ctx, "linkerd-trust-anchor", metav1.DeleteOptions{})
		},
		func() error {
			return cm.Issuers("cert-manager").Delete(ctx, "linkerd-trust-root-issuer", metav1.DeleteOptions{})
		},
		func() error {
			return kube.CoreV1().Secrets("linkerd").Delete(ctx, "linkerd-identity-issuer", metav1.DeleteOptions{})
		},
		func() error {
			return kube.CoreV1().Secrets("cert-manager").Delete(ctx, "linkerd-trust-anchor", metav1.DeleteOptions{})
		},
	} {
		if err := del(); err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
	}
	err := poll.Until(ctx, 2*time.Minute, "no TrustAnchorRotation nor operator pods", func(ctx context.Context) (bool, error) {
		if _, err := tars.Get(ctx, steps.DefaultRotationName); !apierrors.IsNotFound(err) {
			return false, poll.Pending("TrustAnchorRotation: %v", err)
		}
		list, err := kube.CoreV1().Pods("linkerd").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=operator,app.kubernetes.io/name=" + OperatorChart})
		if err != nil {
			return false, err
		}
		if len(list.Items) > 0 {
			return false, poll.Pending("%d operator pods", len(list.Items))
		}
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		_ = Uninstall(ctx, c, h, "linkerd")
		_ = kube.CoreV1().Namespaces().Delete(ctx, readmeAppPrefix+"-0", metav1.DeleteOptions{})
	})
}

// readmeAppPrefix names the meshed workloads' namespace.
const readmeAppPrefix = "readme"

// readmeLinkerd runs the simulated Linkerd: its control plane and two meshed Deployments, each
// proxy with a certificate.
func readmeLinkerd(t *testing.T, ctx context.Context, c *cluster.Cluster) (*meshsim.Mesh, []meshsim.Workload) {
	t.Helper()
	kube := c.Kube()
	mesh, err := meshsim.Start(ctx, meshsim.Config{
		RESTConfig:         c.RESTConfig(),
		VolumeRefreshDelay: meshsim.Never, // the injector sees a new bundle only when restarted
		OracleTick:         200 * time.Millisecond,
		CertificateBound:   6 * meshsim.DefaultMinRefresh,
		Registerer:         prometheus.NewRegistry(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(mesh.Stop)
	if err := meshsim.InstallControlPlane(ctx, kube, meshsim.ControlPlaneOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := meshsim.WaitForRollouts(ctx, kube, mesh.ControlPlane()); err != nil {
		t.Fatal(err)
	}
	apps, err := meshsim.CreateMeshedWorkloads(ctx, kube, meshsim.WorkloadSpec{Prefix: readmeAppPrefix, Deployments: 2})
	if err != nil {
		t.Fatal(err)
	}
	if err := meshsim.WaitForRollouts(ctx, kube, apps); err != nil {
		t.Fatal(err)
	}
	readmeWaitCertificates(t, ctx, mesh)
	return mesh, apps
}

func readmeWaitCertificates(t *testing.T, ctx context.Context, mesh *meshsim.Mesh) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := mesh.WaitForCertificates(ctx, 0, nil); err != nil {
		t.Fatal(err)
	}
}

func containerHasArg(d *appsv1.Deployment, arg string) bool {
	for _, ctr := range d.Spec.Template.Spec.Containers {
		for _, a := range ctr.Args {
			if a == arg {
				return true
			}
		}
	}
	return false
}

// readmeInstallOperator installs both charts from the registry with the hooks on, runs the
// hook pods and the operator's pods from the pushed image, on the pod network, and waits for
// helm to return. It returns the operator's Lease and its pods.
func readmeInstallOperator(t *testing.T, ctx context.Context, c *cluster.Cluster, h Helm, pub published) (leaseConfig, []*runningPod) {
	t.Helper()
	kube := c.Kube()
	img := pullImage(t, ctx, pub.Image)
	clusterIP, _ := kubernetesService(t, ctx, c)
	hooks := newHookRunner(t, ctx, kube, img, clusterIP, "linkerd")
	// README's step 5 installs both charts from the checkout (charts/), with the image make
	// image pushed, by the repository and digest it wrote to IMAGE_DIR/ref.
	ref, err := os.ReadFile(filepath.Join(pub.ImageDir, "ref"))
	if err != nil {
		t.Fatal(err)
	}
	repo, digest, _ := strings.Cut(strings.TrimSpace(string(ref)), "@")
	dep, installed := startInstall(t, ctx, c, InstallOptions{
		Helm: h, Hooks: true,
		Set: []string{"image.repository=" + repo, "image.digest=" + digest, hookPodLabel},
	})
	// The preflight hook passed: helm went on to the Deployment.
	if pre := hooks.only(t, OperatorChart+"-preflight-"); pre.exit != 0 {
		t.Fatalf("the preflight hook exited %d:\n%s", pre.exit, pre.log)
	}
	r := &podRunner{t: t, ctx: ctx, kubelet: hooks.kubelet, img: img, clusterIP: clusterIP, podNet: c.PodCIDR()}
	var running []*runningPod
	for _, p := range deploymentPods(t, ctx, kube, dep) {
		if p.Spec.Containers[0].Image != pub.Image {
			t.Fatalf("pod %s runs %s, want the published %s", p.Name, p.Spec.Containers[0].Image, pub.Image)
		}
		running = append(running, r.run(p))
	}
	lease := leaseOf(t, running[0].ctr.Args)
	leader := r.waitLeader(lease, "", running...)
	t.Logf("%s leads", leader.identity())
	installed()
	if wait := hooks.only(t, OperatorChart+"-wait-ready-"); wait.exit != 0 {
		t.Fatalf("the post-install hook exited %d:\n%s", wait.exit, wait.log)
	}
	return lease, running
}

// readmeLeader returns the pod that holds the operator's Lease: one of pods, running, that says
// it became the leader.
func readmeLeader(ctx context.Context, kube kubernetes.Interface, l leaseConfig, pods []*runningPod) (*runningPod, error) {
	lease, err := kube.CoordinationV1().Leases(l.namespace).Get(ctx, l.name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	holder := ptr.Deref(lease.Spec.HolderIdentity, "")
	for _, p := range pods {
		if p.identity() == holder && !p.Exited() && strings.Contains(p.log(), `"Became leader"`) {
			return p, nil
		}
	}
	return nil, fmt.Errorf("Lease %s/%s is held by %q, none of the chart's running pods", l.namespace, l.name, holder)
}

// readmeFollowRotation does, phase by phase, what README's Rotate table says while the rotation
// waits for the user, until it is Synced again: restart the workloads the blocking message names,
// or renew the identity issuer as `cmctl renew` does. At each phase it asks leader who leads (an
// error fails the test), and returns, by phase, who led when it was first observed.
func readmeFollowRotation(t *testing.T, ctx context.Context, c *cluster.Cluster, tars *client.Client, mesh *meshsim.Mesh, apps []meshsim.Workload, leader func(context.Context) (string, error)) map[v1alpha1.Phase]string {
	t.Helper()
	acted := map[v1alpha1.Phase]bool{}
	led := map[v1alpha1.Phase]string{}
	left := false // the rotation has left Synced
	err := poll.Until(ctx, 10*time.Minute, "the rotation to be Synced again", func(ctx context.Context) (bool, error) {
		tar, err := tars.Get(ctx, steps.DefaultRotationName)
		if err != nil {
			return false, err
		}
		phase, msg := tar.Status.Phase, tar.Status.BlockingMessage
		if phase != v1alpha1.PhaseSynced {
			left = true
		}
		if _, seen := led[phase]; !seen && left {
			who, err := leader(ctx)
			if err != nil {
				return false, fmt.Errorf("phase %s: %w", phase, err)
			}
			led[phase] = who
			t.Logf("phase %s, led by %s", phase, who)
		}
		if phase == v1alpha1.PhaseSynced && left {
			return true, nil
		}
		if acted[phase] || msg == "" {
			return false, poll.Pending("phase %s: %s", phase, msg)
		}
		switch phase {
		case v1alpha1.PhasePropagatingTrustRoots, v1alpha1.PhaseRenewingWorkloadCerts, v1alpha1.PhaseRemovingOldTrustRoots:
			var named []meshsim.Workload
			for _, w := range apps {
				if strings.Contains(msg, w.Name) {
					named = append(named, w)
				}
			}
			if len(named) == 0 {
				return false, poll.Pending("phase %s names no workload yet: %s", phase, msg)
			}
			t.Logf("%s: %q: restarting %v", phase, msg, named)
			if err := mesh.RolloutRestartAll(ctx, named); err != nil {
				return false, err
			}
			if err := meshsim.WaitForRollouts(ctx, c.Kube(), named); err != nil {
				return false, err
			}
			readmeWaitCertificates(t, ctx, mesh)
		case v1alpha1.PhaseWaitingForIdentityRotation:
			if !strings.Contains(msg, "cmctl renew -n linkerd linkerd-identity-issuer") {
				return false, fmt.Errorf("phase %s: %q does not say how to renew the issuer", phase, msg)
			}
			t.Logf("%s: %q: renewing the issuer", phase, msg)
			old, err := c.Kube().CoreV1().Secrets("linkerd").Get(ctx, "linkerd-identity-issuer", metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			certs, err := steps.ParseCertificates(old.Data["tls.crt"])
			if err != nil {
				return false, err
			}
			if err := pki.Renew(ctx, c.CertManager(), "linkerd", "linkerd-identity-issuer"); err != nil {
				return false, err
			}
			if _, err := pki.WaitRenewed(ctx, c.Kube(), c.CertManager(), "linkerd", "linkerd-identity-issuer", steps.Fingerprint(certs[0]), 2*time.Minute); err != nil {
				return false, err
			}
		default:
			return false, poll.Pending("phase %s: %s", phase, msg)
		}
		acted[phase] = true
		return false, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []v1alpha1.Phase{v1alpha1.PhasePropagatingTrustRoots, v1alpha1.PhaseRemovingOldTrustRoots} {
		if !acted[p] {
			t.Errorf("the rotation never waited in %s for a restart", p)
		}
	}
	return led
}

// serverSideApply applies every object of manifest as `kubectl apply --server-side
// --field-manager=<fieldManager>` does: a server-side apply of each object, in order, without
// forcing conflicts.
func serverSideApply(t *testing.T, ctx context.Context, c *cluster.Cluster, manifest []byte, fieldManager string) {
	t.Helper()
	objs, err := Decode(manifest)
	if err != nil {
		t.Fatal(err)
	}
	disc, err := discovery.NewDiscoveryClientForConfig(c.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disc))
	dyn, err := dynamic.NewForConfig(c.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	for _, obj := range objs {
		gvk := obj.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			t.Fatalf("%s %s: %v", gvk.Kind, obj.GetName(), err)
		}
		var res dynamic.ResourceInterface = dyn.Resource(m.Resource)
		if m.Scope.Name() == meta.RESTScopeNameNamespace {
			res = dyn.Resource(m.Resource).Namespace(obj.GetNamespace())
		}
		if _, err := res.Apply(ctx, obj.GetName(), obj, metav1.ApplyOptions{FieldManager: fieldManager}); err != nil {
			t.Fatalf("server-side apply of %s %s/%s as %s: %v", gvk.Kind, obj.GetNamespace(), obj.GetName(), fieldManager, err)
		}
	}
}
