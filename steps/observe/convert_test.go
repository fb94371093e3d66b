package observe

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/linkerd/trust-rotation/steps"
)

// TestBundleOwners reads who owns the bundle's ca-bundle.crt from the ConfigMap's managedFields:
// the latest writer first, entries of other fields or of a subresource left out.
func TestBundleOwners(t *testing.T) {
	at := func(min int) *metav1.Time {
		t := metav1.NewTime(time.Date(2026, 6, 1, 12, min, 0, 0, time.UTC))
		return &t
	}
	entry := func(manager string, op metav1.ManagedFieldsOperationType, when *metav1.Time, fields, sub string) metav1.ManagedFieldsEntry {
		return metav1.ManagedFieldsEntry{Manager: manager, Operation: op, APIVersion: "v1", Time: when, FieldsType: "FieldsV1",
			FieldsV1: &metav1.FieldsV1{Raw: []byte(fields)}, Subresource: sub}
	}
	key := `{"f:data":{".":{},"f:ca-bundle.crt":{}}}`
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "linkerd-identity-trust-roots", Namespace: "linkerd", ManagedFields: []metav1.ManagedFieldsEntry{
		entry(steps.FieldManager, metav1.ManagedFieldsOperationApply, at(1), `{"f:data":{"f:ca-bundle.crt":{}},"f:metadata":{"f:labels":{}}}`, ""),
		entry("helm", metav1.ManagedFieldsOperationUpdate, at(5), key, ""),
		entry("kubectl-label", metav1.ManagedFieldsOperationUpdate, at(9), `{"f:metadata":{"f:labels":{"f:x":{}}}}`, ""),
		entry("odd", metav1.ManagedFieldsOperationUpdate, at(9), key, "status"),
		entry("broken", metav1.ManagedFieldsOperationUpdate, at(9), `not json`, ""),
	}}, Data: map[string]string{steps.TrustRootsKey: "x"}}
	b := BundleFromConfigMap(cm)
	if len(b.Owners) != 2 || b.Owners[0].Manager != "helm" || b.Owners[0].Operation != "Update" || !b.Owners[0].Time.Equal(at(5).Time) ||
		b.Owners[1].Manager != steps.FieldManager {
		t.Fatalf("owners = %+v, want helm then %s", b.Owners, steps.FieldManager)
	}
	if others := b.OtherOwners(); len(others) != 1 || others[0].Manager != "helm" {
		t.Fatalf("other owners = %+v", others)
	}
	if got := b.Owners[0].String(); got != `"helm" (Update at 2026-06-01T12:05:00Z)` {
		t.Errorf("String() = %s", got)
	}
}
