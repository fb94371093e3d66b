package charts

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/test/cluster"
	"github.com/linkerd/trust-rotation/test/internal/podrun"
	"github.com/linkerd/trust-rotation/test/internal/poll"
	"github.com/linkerd/trust-rotation/test/internal/proc"
	"github.com/linkerd/trust-rotation/test/pki"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
	"github.com/linkerd/trust-rotation/workflow/client"
)

func TestMain(m *testing.M) {
	podrun.Init() // this binary is also the init of the pods TestChartPodRunsAsAPod runs
	os.Exit(cluster.ForTest(m, cluster.Options{Registry: true}))
}

// Both charts install with real helm into a real cluster, and the operator, run out of cluster
// under the chart's ServiceAccount with the chart's arguments, bootstraps the rotation: the
// chart's RBAC is enough. The same identity cannot read other Secrets nor restart other
// Deployments: the chart's RBAC is no more than enough.
func TestInstallAndBootstrapUnderTheChartsIdentity(t *testing.T) {
	c := cluster.Shared(t)
	cluster.DumpLogsOnFailure(t, c)
	ctx := testContext(t, 8*time.Minute)
	kube := c.Kube()

	if _, err := pki.Install(ctx, kube, c.CertManager(), pki.Options{}); err != nil {
		t.Fatal(err)
	}
	rel, err := Install(ctx, c, InstallOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("installed; the operator runs as %s with %v", rel.User, rel.OperatorArgs)

	// kwok runs the Deployment's pods: they are scheduled and Running, and nothing runs in them.
	if rel.Deployment.Status.ReadyReplicas != 2 {
		t.Errorf("operator Deployment has %d ready replicas, want 2", rel.Deployment.Status.ReadyReplicas)
	}

	// Bootstrap: the operator creates linkerd-previous-anchor and linkerd-identity-trust-roots
	// and records its progress in the status of the chart's TrustAnchorRotation. It creates
	// them by name (server-side apply), which is all the chart lets it create: make sure it has
	// to.
	if err := kube.CoreV1().Secrets("linkerd").Delete(ctx, "linkerd-previous-anchor", metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	if err := kube.CoreV1().ConfigMaps("linkerd").Delete(ctx, "linkerd-identity-trust-roots", metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	op := startOperator(t, ctx, rel)

	tars, err := client.NewForConfig(c.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	var tar *v1alpha1.TrustAnchorRotation
	err = poll.Until(ctx, 2*time.Minute, "the TrustAnchorRotation to be Synced past bootstrap", func(ctx context.Context) (bool, error) {
		if op.Exited() {
			return false, fmt.Errorf("the operator exited:\n%s", op.LogTail(40))
		}
		tar, err = tars.Get(ctx, steps.DefaultRotationName)
		if err != nil {
			return false, poll.Pending("getting the TrustAnchorRotation: %v", err)
		}
		st := tar.Status
		if st.Phase != v1alpha1.PhaseSynced || st.Checkpoint == nil || st.Checkpoint.Step == "" || st.Checkpoint.Step == steps.StepBootstrap {
			return false, poll.Pending("phase %q, checkpoint %+v, blocking %q", st.Phase, st.Checkpoint, st.BlockingMessage)
		}
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if tar.Labels["app.kubernetes.io/managed-by"] != "Helm" {
		t.Errorf("the TrustAnchorRotation was not created by the chart: labels %v", tar.Labels)
	}
	anchor, err := kube.CoreV1().Secrets("cert-manager").Get(ctx, "linkerd-trust-anchor", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	prev, err := kube.CoreV1().Secrets("linkerd").Get(ctx, "linkerd-previous-anchor", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("linkerd-previous-anchor: %v", err)
	}
	if string(prev.Data["tls.crt"]) != string(anchor.Data["tls.crt"]) || len(prev.Data["tls.key"]) != 0 {
		t.Errorf("linkerd-previous-anchor holds %v; want the anchor's certificate and no key", keys(prev.Data))
	}
	roots, err := kube.CoreV1().ConfigMaps("linkerd").Get(ctx, "linkerd-identity-trust-roots", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("linkerd-identity-trust-roots: %v", err)
	}
	if !strings.Contains(roots.Data["ca-bundle.crt"], strings.TrimSpace(string(anchor.Data["tls.crt"]))) {
		t.Errorf("the trust bundle does not hold the anchor:\n%s", roots.Data["ca-bundle.crt"])
	}

	// Leader election on the chart's Lease, and Events about the rotation in "default".
	err = poll.Until(ctx, time.Minute, "the operator to hold the Lease", func(ctx context.Context) (bool, error) {
		l, err := kube.CoordinationV1().Leases("linkerd").Get(ctx, "trust-rotation-operator", metav1.GetOptions{})
		if err != nil {
			return false, poll.Pending("%v", err)
		}
		return l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "", nil
	})
	if err != nil {
		t.Error(err)
	}
	err = poll.Until(ctx, time.Minute, "an Event about the TrustAnchorRotation in default", func(ctx context.Context) (bool, error) {
		evs, err := kube.CoreV1().Events("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, e := range evs.Items {
			if e.InvolvedObject.Kind == "TrustAnchorRotation" && e.Source.Component == "trust-rotation-operator" {
				return true, nil
			}
		}
		return false, poll.Pending("%d events, none from the operator", len(evs.Items))
	})
	if err != nil {
		t.Error(err)
	}

	// The admin endpoint the probes and the ServiceMonitor use.
	for path, want := range map[string]string{"/healthz": "ok", "/readyz": "ok", "/metrics": `trust_rotation_phase{phase="Synced"} 1`} {
		body, err := op.get(ctx, path)
		if err != nil || !strings.Contains(body, want) {
			t.Errorf("GET %s: %v; want %q in:\n%.400s", path, err, want, body)
		}
	}

	t.Run("the chart's identity is no more than the operator needs", func(t *testing.T) {
		assertLeastPrivilege(t, ctx, c, rel)
	})

	t.Run("the built-in view and edit roles reach TrustAnchorRotations", func(t *testing.T) {
		assertUserRoles(t, ctx, c)
	})

	if op.Exited() {
		t.Errorf("the operator exited:\n%s", op.LogTail(40))
	}

	t.Run("helm4 upgrades the releases helm3 installed", func(t *testing.T) {
		hs, err := Helms(ctx, t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		up, err := Install(ctx, c, InstallOptions{Helm: hs[1]})
		if err != nil {
			t.Fatal(err)
		}
		if up.Deployment.Status.ReadyReplicas != 2 || up.ServiceAccount != rel.ServiceAccount {
			t.Errorf("after the upgrade: %d ready replicas, ServiceAccount %s", up.Deployment.Status.ReadyReplicas, up.ServiceAccount)
		}
		got, err := tars.Get(ctx, steps.DefaultRotationName)
		if err != nil {
			t.Fatal(err)
		}
		if got.Status.Phase != v1alpha1.PhaseSynced || got.Status.Checkpoint == nil || got.Status.Checkpoint.Step != tar.Status.Checkpoint.Step {
			t.Errorf("the upgrade changed the rotation's status: %+v", got.Status)
		}
	})

	t.Run("uninstalling keeps the TrustAnchorRotation and the CRD", func(t *testing.T) {
		op.stop(t)
		hs, err := Helms(ctx, t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		if err := Uninstall(ctx, c, hs[0], rel.Namespace); err != nil {
			t.Fatal(err)
		}
		if _, err := tars.Get(ctx, steps.DefaultRotationName); err != nil {
			t.Errorf("the TrustAnchorRotation is gone: %v", err)
		}
		if _, err := kube.AppsV1().Deployments(rel.Namespace).Get(ctx, rel.Deployment.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("the operator Deployment survived the uninstall: %v", err)
		}
		// Installing again adopts the kept objects.
		if _, err := Install(ctx, c, InstallOptions{}); err != nil {
			t.Errorf("reinstalling: %v", err)
		}
	})
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// assertLeastPrivilege makes requests as the chart's ServiceAccount that the operator never
// makes, and expects each to be Forbidden.
func assertLeastPrivilege(t *testing.T, ctx context.Context, c *cluster.Cluster, rel *Release) {
	admin := c.Kube()
	as, err := kubernetes.NewForConfig(rel.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	// Objects the operator has no business with, next to the ones it has.
	secret := func(ns, name string) {
		_, err := admin.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			StringData: map[string]string{"password": "hunter2"},
		}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	secret("default", "not-for-the-operator")
	secret("kube-system", "not-for-the-operator")
	secret("linkerd", "not-for-the-operator")
	one := int32(1)
	labels := map[string]string{"app": "other"}
	_, err = admin.AppsV1().Deployments("linkerd").Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "other", Namespace: "linkerd"},
		Spec: appsv1.DeploymentSpec{
			Replicas: &one,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "example.com/app:v1"}}},
			},
		},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	restart := []byte(`{"spec":{"template":{"metadata":{"annotations":{"kubectl.kubernetes.io/restartedAt":"x"}}}}}`)
	tars, err := client.NewForConfig(rel.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}

	// What the operator does is allowed: the denials below are RBAC's, not a broken identity's.
	for name, call := range map[string]func() error{
		"get the trust anchor Secret": func() error {
			_, err := as.CoreV1().Secrets("cert-manager").Get(ctx, "linkerd-trust-anchor", metav1.GetOptions{})
			return err
		},
		"list meshed pods cluster-wide": func() error {
			_, err := as.CoreV1().Pods("").List(ctx, metav1.ListOptions{LabelSelector: steps.ControlPlaneNSLabel})
			return err
		},
		"list the trust roots by name": func() error {
			_, err := as.CoreV1().ConfigMaps("linkerd").List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=linkerd-identity-trust-roots"})
			return err
		},
		"list Deployments in linkerd": func() error {
			_, err := as.AppsV1().Deployments("linkerd").List(ctx, metav1.ListOptions{})
			return err
		},
	} {
		t.Run("allowed: "+name, func(t *testing.T) {
			if err := call(); err != nil {
				t.Errorf("want allowed, got %v", err)
			}
		})
	}

	for name, call := range map[string]func() error{
		"get a Secret in default": func() error {
			_, err := as.CoreV1().Secrets("default").Get(ctx, "not-for-the-operator", metav1.GetOptions{})
			return err
		},
		"get a Secret in kube-system": func() error {
			_, err := as.CoreV1().Secrets("kube-system").Get(ctx, "not-for-the-operator", metav1.GetOptions{})
			return err
		},
		"get an unlisted Secret in linkerd": func() error {
			_, err := as.CoreV1().Secrets("linkerd").Get(ctx, "not-for-the-operator", metav1.GetOptions{})
			return err
		},
		"list every Secret in linkerd": func() error {
			_, err := as.CoreV1().Secrets("linkerd").List(ctx, metav1.ListOptions{})
			return err
		},
		"list every Secret in cert-manager": func() error {
			_, err := as.CoreV1().Secrets("cert-manager").List(ctx, metav1.ListOptions{})
			return err
		},
		"list Secrets cluster-wide": func() error {
			_, err := as.CoreV1().Secrets("").List(ctx, metav1.ListOptions{})
			return err
		},
		"patch the identity issuer Secret": func() error {
			_, err := as.CoreV1().Secrets("linkerd").Patch(ctx, "linkerd-identity-issuer", types.MergePatchType, []byte(`{"metadata":{"labels":{"x":"y"}}}`), metav1.PatchOptions{})
			return err
		},
		"delete the previous-anchor Secret": func() error {
			return as.CoreV1().Secrets("linkerd").Delete(ctx, "linkerd-previous-anchor", metav1.DeleteOptions{})
		},
		"delete the trust roots": func() error {
			return as.CoreV1().ConfigMaps("linkerd").Delete(ctx, "linkerd-identity-trust-roots", metav1.DeleteOptions{})
		},
		"restart another Deployment in linkerd": func() error {
			_, err := as.AppsV1().Deployments("linkerd").Patch(ctx, "other", types.MergePatchType, restart, metav1.PatchOptions{})
			return err
		},
		"restart the operator's own Deployment": func() error {
			_, err := as.AppsV1().Deployments("linkerd").Patch(ctx, rel.Deployment.Name, types.MergePatchType, restart, metav1.PatchOptions{})
			return err
		},
		"list Deployments in another namespace": func() error {
			_, err := as.AppsV1().Deployments("kube-system").List(ctx, metav1.ListOptions{})
			return err
		},
		"create a Secret in cert-manager": func() error {
			_, err := as.CoreV1().Secrets("cert-manager").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "planted"}}, metav1.CreateOptions{})
			return err
		},
		// The operator creates exactly two objects, by server-side apply of their names.
		"create a Secret in linkerd": func() error {
			_, err := as.CoreV1().Secrets("linkerd").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "planted"}}, metav1.CreateOptions{})
			return err
		},
		"create the previous-anchor Secret's name without server-side apply": func() error {
			_, err := as.CoreV1().Secrets("linkerd").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "linkerd-previous-anchor"}},
				metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			return err
		},
		"server-side apply a new Secret in linkerd": func() error {
			_, err := as.CoreV1().Secrets("linkerd").Apply(ctx, corev1ac.Secret("planted", "linkerd").WithStringData(map[string]string{"k": "v"}),
				metav1.ApplyOptions{FieldManager: "linkerd-trust-rotation"})
			return err
		},
		"create a ConfigMap in linkerd": func() error {
			_, err := as.CoreV1().ConfigMaps("linkerd").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "planted"}}, metav1.CreateOptions{})
			return err
		},
		"server-side apply a new ConfigMap in linkerd": func() error {
			_, err := as.CoreV1().ConfigMaps("linkerd").Apply(ctx, corev1ac.ConfigMap("planted", "linkerd").WithData(map[string]string{"k": "v"}),
				metav1.ApplyOptions{FieldManager: "linkerd-trust-rotation"})
			return err
		},
		"get a ConfigMap in kube-system": func() error {
			_, err := as.CoreV1().ConfigMaps("kube-system").Get(ctx, "extension-apiserver-authentication", metav1.GetOptions{})
			return err
		},
		"get a pod by name": func() error {
			_, err := as.CoreV1().Pods("kube-system").Get(ctx, "anything", metav1.GetOptions{})
			return err
		},
		"delete the TrustAnchorRotation": func() error {
			return tars.Delete(ctx, steps.DefaultRotationName)
		},
		"delete another TrustAnchorRotation": func() error {
			return tars.Delete(ctx, "other")
		},
		"write Events in linkerd": func() error {
			_, err := as.CoreV1().Events("linkerd").Create(ctx, &corev1.Event{
				ObjectMeta:     metav1.ObjectMeta{GenerateName: "x-"},
				InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: "linkerd", Name: "x"},
				Reason:         "X", Message: "x", Type: corev1.EventTypeNormal,
			}, metav1.CreateOptions{})
			return err
		},
		"take another Lease": func() error {
			_, err := as.CoordinationV1().Leases("kube-system").Get(ctx, "kube-controller-manager", metav1.GetOptions{})
			return err
		},
	} {
		t.Run(name, func(t *testing.T) {
			if err := call(); !apierrors.IsForbidden(err) {
				t.Errorf("want Forbidden, got %v", err)
			}
		})
	}
}

// assertUserRoles binds a user to Kubernetes' built-in view ClusterRole and another to edit, as
// a platform team grants them cluster-wide, and checks what the chart's aggregated ClusterRoles
// add: view reads TrustAnchorRotations and cannot change them, edit changes their spec, and
// neither writes their status (the operator's record). kube-controller-manager's aggregation
// controller fills view and edit from the chart's roles, as in any cluster.
func assertUserRoles(t *testing.T, ctx context.Context, c *cluster.Cluster) {
	const viewer, editor = "trust-rotation:viewer", "trust-rotation:editor"
	rbac := c.Kube().RbacV1()
	for user, role := range map[string]string{viewer: "view", editor: "edit"} {
		b := &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "test-" + role + "-trustanchorrotations"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
		}
		if _, err := rbac.ClusterRoleBindings().Create(ctx, b, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = rbac.ClusterRoleBindings().Delete(context.Background(), b.Name, metav1.DeleteOptions{}) })
	}
	tars := func(user string) dynamic.ResourceInterface {
		cl, err := dynamic.NewForConfig(c.RESTConfigFor(user))
		if err != nil {
			t.Fatal(err)
		}
		return cl.Resource(v1alpha1.SchemeGroupVersion.WithResource(v1alpha1.Resource))
	}
	viewTARs, editTARs := tars(viewer), tars(editor)

	// The aggregation controller updates view and edit asynchronously.
	var tar *unstructured.Unstructured
	err := poll.Until(ctx, time.Minute, "view to include the chart's -view ClusterRole", func(ctx context.Context) (bool, error) {
		var err error
		tar, err = viewTARs.Get(ctx, steps.DefaultRotationName, metav1.GetOptions{})
		if apierrors.IsForbidden(err) {
			return false, poll.Pending("%v", err)
		}
		return err == nil, err
	})
	if err != nil {
		t.Fatal(err)
	}
	if list, err := viewTARs.List(ctx, metav1.ListOptions{}); err != nil || len(list.Items) == 0 {
		t.Errorf("view lists TrustAnchorRotations: %v, %v", err, list)
	}
	labelled := func(tar *unstructured.Unstructured) *unstructured.Unstructured {
		tar = tar.DeepCopy()
		labels := tar.GetLabels()
		if labels == nil {
			labels = map[string]string{}
		}
		labels["example.com/team"] = "platform"
		tar.SetLabels(labels)
		return tar
	}
	if _, err := viewTARs.Update(ctx, labelled(tar), metav1.UpdateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("view updated the TrustAnchorRotation: %v, want Forbidden", err)
	}
	if _, err := viewTARs.UpdateStatus(ctx, tar, metav1.UpdateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("view updated the TrustAnchorRotation's status: %v, want Forbidden", err)
	}

	err = poll.Until(ctx, time.Minute, "edit to include the chart's -edit ClusterRole", func(ctx context.Context) (bool, error) {
		cur, err := editTARs.Get(ctx, steps.DefaultRotationName, metav1.GetOptions{})
		if err != nil {
			return false, poll.Pending("get: %v", err)
		}
		_, err = editTARs.Update(ctx, labelled(cur), metav1.UpdateOptions{})
		if apierrors.IsForbidden(err) || apierrors.IsConflict(err) {
			return false, poll.Pending("update: %v", err)
		}
		return err == nil, err
	})
	if err != nil {
		t.Fatal(err)
	}
	cur, err := editTARs.Get(ctx, steps.DefaultRotationName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cur.GetLabels()["example.com/team"] != "platform" {
		t.Errorf("edit's update did not land: labels %v", cur.GetLabels())
	}
	if _, err := editTARs.UpdateStatus(ctx, cur, metav1.UpdateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("edit updated the TrustAnchorRotation's status: %v, want Forbidden", err)
	}
}

// operator is the trust-rotation-operator binary running out of cluster.
type operator struct {
	*proc.Process
	admin string
}

// startOperator builds the operator and runs it with the release's kubeconfig (the chart's
// ServiceAccount) and the installed Deployment's arguments, as the Deployment runs it in the
// release namespace. It stops it (SIGTERM, then SIGKILL) when the test ends.
func startOperator(t *testing.T, ctx context.Context, rel *Release) *operator {
	t.Helper()
	root, err := cluster.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	build := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(dir, "trust-rotation-operator"), "./cmd/trust-rotation-operator")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the operator: %v\n%s", err, out)
	}
	return startOperatorBinary(t, filepath.Join(dir, "trust-rotation-operator"), rel)
}

// startOperatorBinary runs the operator binary bin as startOperator does.
func startOperatorBinary(t *testing.T, bin string, rel *Release) *operator {
	t.Helper()
	dir := t.TempDir()
	admin, err := proc.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	args := append([]string{"--kubeconfig=" + rel.Kubeconfig, "--admin-addr=" + admin}, rel.OperatorArgs...)
	p, err := proc.Start(bin, args, []string{"POD_NAMESPACE=" + rel.Namespace}, filepath.Join(dir, "operator.log"))
	if err != nil {
		t.Fatal(err)
	}
	o := &operator{Process: p, admin: admin}
	t.Cleanup(func() {
		o.stop(t)
		if t.Failed() {
			t.Logf("operator log:\n%s", o.LogTail(60))
		}
	})
	return o
}

// stop stops the operator: SIGTERM (the leader releases its Lease), SIGKILL after 15 seconds.
func (o *operator) stop(t *testing.T) {
	if o.Stop(15 * time.Second) {
		t.Log("the operator ignored SIGTERM for 15s: killed it")
	}
}

func (o *operator) get(ctx context.Context, path string) (string, error) {
	b, err := proc.Get(ctx, o.admin, path)
	return string(b), err
}
