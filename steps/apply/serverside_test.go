package apply

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/steps/kube/clientset"
)

// The trust bundle is a server-side apply of the operator's fields alone (without client-go's
// apply configurations, see package kube): a rewrite leaves another manager's key alone, and the
// operator is the only manager that applied.
func TestWriteTrustRootsLeavesOtherManagersFieldsAlone(t *testing.T) {
	ctx := context.Background()
	cfg := steps.DefaultConfig()
	cs := fake.NewClientset()
	w := &KubeWriter{Client: clientset.Kube(cs), Config: cfg}
	if err := w.WriteTrustRoots(ctx, "bundle-1"); err != nil {
		t.Fatal(err)
	}
	cms := cs.CoreV1().ConfigMaps(cfg.LinkerdNamespace)
	cm, err := cms.Get(ctx, cfg.TrustRootsConfigMap, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := cm.Data[steps.TrustRootsKey]; got != "bundle-1" {
		t.Errorf("%s = %q, want bundle-1", steps.TrustRootsKey, got)
	}
	if got := cm.Labels[steps.ManagedByLabel]; got != steps.ManagedByValue {
		t.Errorf("label %s = %q, want %q", steps.ManagedByLabel, got, steps.ManagedByValue)
	}

	cm.Data["other"] = "kept"
	if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{FieldManager: "someone-else"}); err != nil {
		t.Fatal(err)
	}
	if err := w.WriteTrustRoots(ctx, "bundle-2"); err != nil {
		t.Fatal(err)
	}
	cm, err = cms.Get(ctx, cfg.TrustRootsConfigMap, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := cm.Data, map[string]string{steps.TrustRootsKey: "bundle-2", "other": "kept"}; len(got) != 2 || got[steps.TrustRootsKey] != want[steps.TrustRootsKey] || got["other"] != "kept" {
		t.Errorf("data = %v, want %v", got, want)
	}
	var managers []string
	for _, m := range cm.ManagedFields {
		if m.Operation == metav1.ManagedFieldsOperationApply {
			managers = append(managers, m.Manager)
		}
	}
	if len(managers) != 1 || managers[0] != FieldManager {
		t.Errorf("apply managers = %v, want [%s]", managers, FieldManager)
	}
}
