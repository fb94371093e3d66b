package apply

import (
	"context"
	"encoding/json"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/linkerd/trust-rotation/steps/kube"
)

func patchOptions() metav1.PatchOptions { return metav1.PatchOptions{FieldManager: FieldManager} }

// serverSideApply applies obj, which holds exactly the fields the operator owns (and its kind),
// as the operator's field manager, taking those fields over from any other manager. It is what
// client-go's Apply sends, without its apply configurations (see package kube).
func serverSideApply[T runtime.Object, L runtime.Object](ctx context.Context, r kube.Resource[T, L], obj interface {
	runtime.Object
	metav1.Object
}) error {
	body, err := json.Marshal(obj)
	if err != nil {
		return err
	}
	return onTransient(func() error {
		_, err := r.Patch(ctx, obj.GetName(), types.ApplyPatchType, body, metav1.PatchOptions{FieldManager: FieldManager, Force: new(true)})
		return err
	})
}
