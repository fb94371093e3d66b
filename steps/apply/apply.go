package apply

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/steps/kube"
)

// FieldManager owns the fields the operator writes.
const FieldManager = steps.FieldManager

// KubeWriter writes to the apiserver. Secret and ConfigMap writes are server-side applies of
// exactly the operator's fields, so they are idempotent and leave other owners' fields alone.
type KubeWriter struct {
	Client kube.Interface
	// CertManager renews the identity issuer (spec.identityIssuerRenewal Automatic); may be nil
	// otherwise.
	CertManager kube.CertManager
	Config      steps.Config
}

var _ steps.Writer = (*KubeWriter)(nil)

func managedLabels() map[string]string {
	return map[string]string{steps.ManagedByLabel: steps.ManagedByValue}
}

// WritePreviousAnchor applies the previous-anchor Secret with the certificate alone.
func (w *KubeWriter) WritePreviousAnchor(ctx context.Context, cert *x509.Certificate) error {
	ns, name := w.Config.LinkerdNamespace, w.Config.PreviousAnchorSecret
	sec := &corev1.Secret{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: managedLabels()},
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{steps.CertificateKey: steps.EncodePEM(cert)},
	}
	if err := serverSideApply(ctx, w.Client.CoreV1().Secrets(ns), sec); err != nil {
		return fmt.Errorf("applying Secret %s/%s: %w", ns, name, err)
	}
	return nil
}

// WriteTrustRoots applies the trust-roots ConfigMap's bundle.
func (w *KubeWriter) WriteTrustRoots(ctx context.Context, bundle string) error {
	ns, name := w.Config.LinkerdNamespace, w.Config.TrustRootsConfigMap
	cm := &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: managedLabels()},
		Data:       map[string]string{steps.TrustRootsKey: bundle},
	}
	if err := serverSideApply(ctx, w.Client.CoreV1().ConfigMaps(ns), cm); err != nil {
		return fmt.Errorf("applying ConfigMap %s/%s: %w", ns, name, err)
	}
	return nil
}

// RestartDeployment patches the pod-template annotation as `kubectl rollout restart` does.
// A merge patch of one annotation: with the same token it changes nothing — the apiserver
// does not even bump the resourceVersion — and starts no rollout.
func (w *KubeWriter) RestartDeployment(ctx context.Context, namespace, name, token string) error {
	patch, err := json.Marshal(map[string]any{
		"spec": map[string]any{"template": map[string]any{"metadata": map[string]any{
			"annotations": map[string]string{steps.RestartedAtAnnotation: token},
		}}},
	})
	if err != nil {
		return err
	}
	err = onTransient(func() error {
		_, err := w.Client.AppsV1().Deployments(namespace).Patch(ctx, name, types.MergePatchType, patch, patchOptions())
		return err
	})
	if err != nil {
		return fmt.Errorf("restarting Deployment %s/%s: %w", namespace, name, err)
	}
	return nil
}

// DeletePods deletes pods at once; a pod already gone is fine.
//
// The grace period is zero: the pods leave the API at once, so their ReplicaSet creates the
// replacements only after they are gone. With a grace period the old pods would still run,
// terminating, beside replacements that already sign with the new issuer — exactly the overlap
// restart-identity replaces them to avoid (the soak test saw it once in 100 rotations).
func (w *KubeWriter) DeletePods(ctx context.Context, namespace string, names []string) error {
	for _, name := range names {
		err := onTransient(func() error {
			return w.Client.CoreV1().Pods(namespace).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
		})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting Pod %s/%s: %w", namespace, name, err)
		}
	}
	return nil
}

// ScaleDeployment merge-patches the Deployment's scale subresource, as `kubectl scale` does:
// the operator's RBAC lets it patch deployments/scale of linkerd-identity alone. With the same
// replicas it changes nothing.
func (w *KubeWriter) ScaleDeployment(ctx context.Context, namespace, name string, replicas int32) error {
	patch, err := json.Marshal(map[string]any{"spec": map[string]any{"replicas": replicas}})
	if err != nil {
		return err
	}
	err = onTransient(func() error {
		_, err := w.Client.AppsV1().Deployments(namespace).Patch(ctx, name, types.MergePatchType, patch, patchOptions(), "scale")
		return err
	})
	if err != nil {
		return fmt.Errorf("scaling Deployment %s/%s to %d replica(s): %w", namespace, name, replicas, err)
	}
	return nil
}

// Write is one write a DryRun recorded.
type Write struct {
	// Verb is "apply", "restart", "delete" or "scale".
	Verb      string `json:"verb"`
	Kind      string `json:"kind"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Detail says what changes: a fingerprint, a bundle hash, a token.
	Detail string `json:"detail"`
}

// DryRun records writes instead of making them: it applies nothing. Writes returns them.
type DryRun struct {
	Config steps.Config
	mu     sync.Mutex
	writes []Write
}

var _ steps.Writer = (*DryRun)(nil)

func (r *DryRun) record(w Write) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.writes = append(r.writes, w)
	return nil
}

// Writes returns what was recorded, in order.
func (r *DryRun) Writes() []Write {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Write(nil), r.writes...)
}

func (r *DryRun) WritePreviousAnchor(_ context.Context, cert *x509.Certificate) error {
	return r.record(Write{"apply", "Secret", r.Config.LinkerdNamespace, r.Config.PreviousAnchorSecret, "certificate " + steps.Fingerprint(cert)})
}

func (r *DryRun) WriteTrustRoots(_ context.Context, bundle string) error {
	return r.record(Write{"apply", "ConfigMap", r.Config.LinkerdNamespace, r.Config.TrustRootsConfigMap, "bundle sha256 " + steps.BundleHash(bundle)})
}

func (r *DryRun) DeletePods(_ context.Context, namespace string, names []string) error {
	for _, n := range names {
		if err := r.record(Write{"delete", "Pod", namespace, n, "replaced by its ReplicaSet"}); err != nil {
			return err
		}
	}
	return nil
}

func (r *DryRun) ScaleDeployment(_ context.Context, namespace, name string, replicas int32) error {
	return r.record(Write{"scale", "Deployment", namespace, name, fmt.Sprintf("replicas %d", replicas)})
}

func (r *DryRun) RestartDeployment(_ context.Context, namespace, name, token string) error {
	return r.record(Write{"restart", "Deployment", namespace, name, "restartedAt " + token})
}

// workloadPatch merge-patches a Deployment, StatefulSet or DaemonSet.
func (w *KubeWriter) workloadPatch(ctx context.Context, ref steps.WorkloadRef, patch []byte) error {
	apps := w.Client.AppsV1()
	var write func() error
	switch ref.Kind {
	case "Deployment":
		write = func() error {
			_, err := apps.Deployments(ref.Namespace).Patch(ctx, ref.Name, types.MergePatchType, patch, patchOptions())
			return err
		}
	case "StatefulSet":
		write = func() error {
			_, err := apps.StatefulSets(ref.Namespace).Patch(ctx, ref.Name, types.MergePatchType, patch, patchOptions())
			return err
		}
	case "DaemonSet":
		write = func() error {
			_, err := apps.DaemonSets(ref.Namespace).Patch(ctx, ref.Name, types.MergePatchType, patch, patchOptions())
			return err
		}
	default:
		return fmt.Errorf("cannot restart %s: not a Deployment, StatefulSet or DaemonSet", ref)
	}
	if err := onTransient(write); err != nil {
		return fmt.Errorf("patching %s: %w", ref, err)
	}
	return nil
}

// RestartWorkload merge-patches the pod-template annotations: restartedAt = token, as `kubectl
// rollout restart` does, and the given ones (null removes an annotation). With the same token
// and annotations it changes nothing and starts no rollout.
func (w *KubeWriter) RestartWorkload(ctx context.Context, ref steps.WorkloadRef, token string, annotations map[string]*string) error {
	ann := map[string]any{steps.RestartedAtAnnotation: token}
	for k, v := range annotations {
		if v == nil {
			ann[k] = nil
		} else {
			ann[k] = *v
		}
	}
	patch, err := json.Marshal(map[string]any{"spec": map[string]any{"template": map[string]any{"metadata": map[string]any{"annotations": ann}}}})
	if err != nil {
		return err
	}
	return w.workloadPatch(ctx, ref, patch)
}

// AnnotateWorkload merge-patches the workload's own annotations.
func (w *KubeWriter) AnnotateWorkload(ctx context.Context, ref steps.WorkloadRef, annotations map[string]string) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": annotations}})
	if err != nil {
		return err
	}
	return w.workloadPatch(ctx, ref, patch)
}

// EvictPods evicts each pod through the Eviction API. A PodDisruptionBudget that does not allow
// the eviction now answers 429: the pod is skipped, the step sees the budget and waits.
func (w *KubeWriter) EvictPods(ctx context.Context, ref steps.WorkloadRef, names []string) (int, error) {
	namespace, evicted := ref.Namespace, 0
	for _, name := range names {
		ev := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}}
		err := onTransient(func() error { return w.Client.PolicyV1().Evictions(namespace).Evict(ctx, ev) })
		switch {
		case err == nil:
			evicted++
		case apierrors.IsNotFound(err), apierrors.IsTooManyRequests(err):
		default:
			return evicted, fmt.Errorf("evicting Pod %s/%s: %w", namespace, name, err)
		}
	}
	return evicted, nil
}

// RenewCertificate sets the Certificate's Issuing condition as `cmctl renew` does (cert-manager
// cmctl pkg/renew): Issuing=True, reason ManuallyTriggered, message "Certificate re-issuance
// manually triggered", through the status subresource; cert-manager then re-issues it.
func (w *KubeWriter) RenewCertificate(ctx context.Context, namespace, name string) error {
	if w.CertManager == nil {
		return fmt.Errorf("renewing Certificate %s/%s: no cert-manager client", namespace, name)
	}
	return RenewCertificate(ctx, w.CertManager, namespace, name)
}

// DryRun's versions of the automation writes.

func (r *DryRun) RestartWorkload(_ context.Context, ref steps.WorkloadRef, token string, annotations map[string]*string) error {
	detail := "restartedAt " + token
	keys := make([]string, 0, len(annotations))
	for k := range annotations {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if annotations[k] == nil {
			detail += ", remove " + k
		} else {
			detail += ", set " + k
		}
	}
	return r.record(Write{"restart", ref.Kind, ref.Namespace, ref.Name, detail})
}

func (r *DryRun) AnnotateWorkload(_ context.Context, ref steps.WorkloadRef, annotations map[string]string) error {
	keys := make([]string, 0, len(annotations))
	for k, v := range annotations {
		keys = append(keys, k+"="+v)
	}
	sort.Strings(keys)
	return r.record(Write{"annotate", ref.Kind, ref.Namespace, ref.Name, strings.Join(keys, ", ")})
}

func (r *DryRun) EvictPods(_ context.Context, ref steps.WorkloadRef, names []string) (int, error) {
	for i, n := range names {
		if err := r.record(Write{"evict", "Pod", ref.Namespace, n, "Eviction API (respects PodDisruptionBudgets)"}); err != nil {
			return i, err
		}
	}
	return len(names), nil
}

func (r *DryRun) RenewCertificate(_ context.Context, namespace, name string) error {
	return r.record(Write{"renew", "Certificate", namespace, name, "Issuing=True, ManuallyTriggered"})
}
