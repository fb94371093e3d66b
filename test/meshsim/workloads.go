package meshsim

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
)

// Workload names a Deployment, or a StatefulSet.
type Workload struct {
	Namespace string
	Name      string
	// Kind is KindStatefulSet for a StatefulSet; empty for a Deployment.
	Kind string
}

// KindStatefulSet is Workload.Kind of a StatefulSet.
const KindStatefulSet = "StatefulSet"

// String is "<ns>/<name>" for a Deployment, "<ns>/StatefulSet/<name>" for a StatefulSet.
func (w Workload) String() string {
	if w.Kind == KindStatefulSet {
		return w.Namespace + "/" + KindStatefulSet + "/" + w.Name
	}
	return w.Namespace + "/" + w.Name
}

// WorkloadSpec describes meshed sample workloads: Deployments (and StatefulSets) spread over
// Namespaces namespaces annotated linkerd.io/inject=enabled, each workload with its own
// ServiceAccount.
type WorkloadSpec struct {
	Prefix      string // namespace prefix, default "app"
	Namespaces  int    // default 1
	Deployments int    // in total, spread round-robin over the namespaces; default 1
	Replicas    int32  // per workload, default 1
	// StatefulSets "db-<i>" in total, spread round-robin over the namespaces like the
	// Deployments (default none). A StatefulSet replaces each pod under the same name, one at a
	// time from the highest ordinal, when restarted.
	StatefulSets int
	// NamespaceAnnotations are added to every namespace (e.g. config.linkerd.io/proxy-additional-env).
	NamespaceAnnotations map[string]string
	// PodAnnotations are added to every pod template.
	PodAnnotations map[string]string
}

// CreateMeshedWorkloads creates the namespaces, ServiceAccounts, Deployments and StatefulSets of
// spec (all idempotent) and returns the workloads. It does not wait for them.
func CreateMeshedWorkloads(ctx context.Context, client kubernetes.Interface, spec WorkloadSpec) ([]Workload, error) {
	if spec.Prefix == "" {
		spec.Prefix = "app"
	}
	if spec.Namespaces == 0 {
		spec.Namespaces = 1
	}
	if spec.Deployments == 0 {
		spec.Deployments = 1
	}
	if spec.Replicas == 0 {
		spec.Replicas = 1
	}
	for i := 0; i < spec.Namespaces; i++ {
		ann := map[string]string{AnnotationInject: "enabled"}
		for k, v := range spec.NamespaceAnnotations {
			ann[k] = v
		}
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", spec.Prefix, i), Annotations: ann}}
		if _, err := client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("creating namespace %s: %w", ns.Name, err)
		}
	}
	var out []Workload
	for i := 0; i < spec.Deployments; i++ {
		w := Workload{Namespace: fmt.Sprintf("%s-%d", spec.Prefix, i%spec.Namespaces), Name: fmt.Sprintf("svc-%d", i)}
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: w.Name, Namespace: w.Namespace}}
		if _, err := client.CoreV1().ServiceAccounts(w.Namespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("creating serviceaccount %s: %w", w, err)
		}
		labels := map[string]string{"app": w.Name}
		replicas := spec.Replicas
		d := &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: w.Name, Namespace: w.Namespace, Labels: labels},
			Spec: appsv1.DeploymentSpec{
				Replicas: &replicas,
				Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: spec.PodAnnotations},
					Spec: corev1.PodSpec{ServiceAccountName: w.Name, Containers: []corev1.Container{{
						Name: "app", Image: "ghcr.io/example/app:latest",
						Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
					}}},
				},
			},
		}
		if _, err := client.AppsV1().Deployments(w.Namespace).Create(ctx, d, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("creating deployment %s: %w", w, err)
		}
		out = append(out, w)
	}
	for i := 0; i < spec.StatefulSets; i++ {
		w := Workload{Namespace: fmt.Sprintf("%s-%d", spec.Prefix, i%spec.Namespaces), Name: fmt.Sprintf("db-%d", i), Kind: KindStatefulSet}
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: w.Name, Namespace: w.Namespace}}
		if _, err := client.CoreV1().ServiceAccounts(w.Namespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("creating serviceaccount %s: %w", w, err)
		}
		labels := map[string]string{"app": w.Name}
		replicas := spec.Replicas
		ss := &appsv1.StatefulSet{
			ObjectMeta: metav1.ObjectMeta{Name: w.Name, Namespace: w.Namespace, Labels: labels},
			Spec: appsv1.StatefulSetSpec{
				Replicas:    &replicas,
				ServiceName: w.Name,
				Selector:    &metav1.LabelSelector{MatchLabels: labels},
				// Parallel only speeds up the first start; a restart still replaces one pod at a
				// time, each under its old name.
				PodManagementPolicy: appsv1.ParallelPodManagement,
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: spec.PodAnnotations},
					Spec: corev1.PodSpec{ServiceAccountName: w.Name, Containers: []corev1.Container{{
						Name: "db", Image: "ghcr.io/example/db:latest",
						Ports: []corev1.ContainerPort{{Name: "sql", ContainerPort: 5432}},
					}}},
				},
			},
		}
		if _, err := client.AppsV1().StatefulSets(w.Namespace).Create(ctx, ss, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("creating statefulset %s: %w", w, err)
		}
		out = append(out, w)
	}
	return out, nil
}

// RolloutRestart restarts a Deployment or StatefulSet as `kubectl rollout restart` does: a
// strategic merge patch of the pod-template annotation kubectl.kubernetes.io/restartedAt = now in
// RFC 3339. kubectl's second precision makes a second restart within the same second a silent
// no-op; this helper then writes the next second instead, so that every call really restarts.
func RolloutRestart(ctx context.Context, client kubernetes.Interface, w Workload) error {
	now := time.Now()
	var current map[string]string
	if w.Kind == KindStatefulSet {
		if ss, err := client.AppsV1().StatefulSets(w.Namespace).Get(ctx, w.Name, metav1.GetOptions{}); err == nil {
			current = ss.Spec.Template.Annotations
		}
	} else if d, err := client.AppsV1().Deployments(w.Namespace).Get(ctx, w.Name, metav1.GetOptions{}); err == nil {
		current = d.Spec.Template.Annotations
	}
	if prev, err := time.Parse(time.RFC3339, current[AnnotationRestartedAt]); err == nil && !now.Truncate(time.Second).After(prev) {
		now = prev.Add(time.Second)
	}
	patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"template": map[string]any{"metadata": map[string]any{
		"annotations": map[string]string{AnnotationRestartedAt: now.Format(time.RFC3339)}}}}})
	opts := metav1.PatchOptions{FieldManager: "kubectl-rollout"}
	var err error
	if w.Kind == KindStatefulSet {
		_, err = client.AppsV1().StatefulSets(w.Namespace).Patch(ctx, w.Name, types.StrategicMergePatchType, patch, opts)
	} else {
		_, err = client.AppsV1().Deployments(w.Namespace).Patch(ctx, w.Name, types.StrategicMergePatchType, patch, opts)
	}
	if err != nil {
		return fmt.Errorf("restarting %s: %w", w, err)
	}
	return nil
}

// RolloutRestart restarts a Deployment (see the package function) and counts it.
func (m *Mesh) RolloutRestart(ctx context.Context, w Workload) error {
	if err := RolloutRestart(ctx, m.client, w); err != nil {
		return err
	}
	m.mu.Lock()
	m.restarts[w.String()]++
	m.mu.Unlock()
	return nil
}

// RolloutRestartAll restarts every workload, then waits for all the rollouts.
func (m *Mesh) RolloutRestartAll(ctx context.Context, ws []Workload) error {
	for _, w := range ws {
		if err := m.RolloutRestart(ctx, w); err != nil {
			return err
		}
	}
	return WaitForRollouts(ctx, m.client, ws)
}

// ControlPlane lists the control-plane Deployments.
func (m *Mesh) ControlPlane() []Workload {
	ns := m.cfg.LinkerdNamespace
	return []Workload{{Namespace: ns, Name: IdentityDeployment}, {Namespace: ns, Name: DestinationDeployment}, {Namespace: ns, Name: ProxyInjectorDeployment}}
}

// WaitForRollouts waits for every workload's rollout (see WaitForRollout).
func WaitForRollouts(ctx context.Context, client kubernetes.Interface, ws []Workload) error {
	for _, w := range ws {
		if err := WaitForRollout(ctx, client, w); err != nil {
			return err
		}
	}
	return nil
}

// WaitForRollout watches a Deployment until its rollout is complete by the conditions of
// `kubectl rollout status`: the controller observed the latest generation, every replica is
// updated, no old replica remains, every updated replica is available. A rollout that exceeded
// its progress deadline is an error. A StatefulSet: see waitForStatefulSetRollout.
func WaitForRollout(ctx context.Context, client kubernetes.Interface, w Workload) error {
	if w.Kind == KindStatefulSet {
		return waitForStatefulSetRollout(ctx, client, w)
	}
	sel := fields.OneTermEqualSelector("metadata.name", w.Name).String()
	lw := &cache.ListWatch{
		ListFunc: func(o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = sel
			return client.AppsV1().Deployments(w.Namespace).List(ctx, o)
		},
		WatchFunc: func(o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = sel
			return client.AppsV1().Deployments(w.Namespace).Watch(ctx, o)
		},
	}
	last := "not found"
	_, err := watchtools.UntilWithSync(ctx, lw, &appsv1.Deployment{}, nil, func(ev watch.Event) (bool, error) {
		d, ok := ev.Object.(*appsv1.Deployment)
		if !ok {
			return false, nil
		}
		done, why, err := rolloutComplete(d)
		last = why
		return done, err
	})
	if err != nil {
		return fmt.Errorf("waiting for the rollout of deployment %s (%s): %w", w, last, err)
	}
	return nil
}

func rolloutComplete(d *appsv1.Deployment) (bool, string, error) {
	if d.Generation > d.Status.ObservedGeneration {
		return false, "waiting for the deployment spec update to be observed", nil
	}
	for _, c := range d.Status.Conditions {
		if c.Type == appsv1.DeploymentProgressing && c.Reason == "ProgressDeadlineExceeded" {
			return false, "", fmt.Errorf("deployment %s/%s exceeded its progress deadline", d.Namespace, d.Name)
		}
	}
	want := int32(1)
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	s := d.Status
	switch {
	case s.UpdatedReplicas < want:
		return false, fmt.Sprintf("%d out of %d new replicas have been updated", s.UpdatedReplicas, want), nil
	case s.Replicas > s.UpdatedReplicas:
		return false, fmt.Sprintf("%d old replicas are pending termination", s.Replicas-s.UpdatedReplicas), nil
	case s.AvailableReplicas < s.UpdatedReplicas:
		return false, fmt.Sprintf("%d of %d updated replicas are available", s.AvailableReplicas, s.UpdatedReplicas), nil
	}
	return true, "successfully rolled out", nil
}

// waitForStatefulSetRollout watches a StatefulSet until its rolling update is complete by the
// conditions of `kubectl rollout status` (kubectl's StatefulSetStatusViewer): the controller
// observed the latest generation, every replica is ready, and the current revision is the update
// revision (every pod was replaced from the latest template).
func waitForStatefulSetRollout(ctx context.Context, client kubernetes.Interface, w Workload) error {
	sel := fields.OneTermEqualSelector("metadata.name", w.Name).String()
	lw := &cache.ListWatch{
		ListFunc: func(o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = sel
			return client.AppsV1().StatefulSets(w.Namespace).List(ctx, o)
		},
		WatchFunc: func(o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = sel
			return client.AppsV1().StatefulSets(w.Namespace).Watch(ctx, o)
		},
	}
	last := "not found"
	_, err := watchtools.UntilWithSync(ctx, lw, &appsv1.StatefulSet{}, nil, func(ev watch.Event) (bool, error) {
		ss, ok := ev.Object.(*appsv1.StatefulSet)
		if !ok {
			return false, nil
		}
		done, why := statefulSetRolledOut(ss)
		last = why
		return done, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for the rollout of %s (%s): %w", w, last, err)
	}
	return nil
}

func statefulSetRolledOut(ss *appsv1.StatefulSet) (bool, string) {
	want := int32(1)
	if ss.Spec.Replicas != nil {
		want = *ss.Spec.Replicas
	}
	s := ss.Status
	switch {
	case s.ObservedGeneration == 0 || ss.Generation > s.ObservedGeneration:
		return false, "waiting for statefulset spec update to be observed"
	case s.ReadyReplicas < want:
		return false, fmt.Sprintf("%d of %d pods are ready", s.ReadyReplicas, want)
	case s.UpdateRevision != s.CurrentRevision:
		return false, fmt.Sprintf("waiting for the rolling update to complete: %d pods at revision %s", s.UpdatedReplicas, s.UpdateRevision)
	}
	return true, "rolling update complete"
}
