package client

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// SetSuspend sets the named TrustAnchorRotation's spec.suspend with a merge patch, which
// changes that field alone whatever else the spec holds or whoever manages it.
func (c *Client) SetSuspend(ctx context.Context, name string, suspend bool, fieldManager string) (*v1alpha1.TrustAnchorRotation, error) {
	return c.setSpecFlag(ctx, name, "suspend", suspend, fieldManager)
}

// SetTakeover sets the named TrustAnchorRotation's spec.takeover, as SetSuspend does.
func (c *Client) SetTakeover(ctx context.Context, name string, takeover bool, fieldManager string) (*v1alpha1.TrustAnchorRotation, error) {
	return c.setSpecFlag(ctx, name, "takeover", takeover, fieldManager)
}

// setSpecFlag merge-patches one boolean field of the spec.
func (c *Client) setSpecFlag(ctx context.Context, name, field string, value bool, fieldManager string) (*v1alpha1.TrustAnchorRotation, error) {
	out := &v1alpha1.TrustAnchorRotation{}
	err := c.rest.Patch(types.MergePatchType).Resource(v1alpha1.Resource).Name(name).
		VersionedParams(&metav1.PatchOptions{FieldManager: fieldManager}, parameterCodec).
		Body([]byte(fmt.Sprintf(`{"spec":{%q:%t}}`, field, value))).Do(ctx).Into(out)
	return out, err
}

// PatchSpec merge-patches the named TrustAnchorRotation's spec with the given fields (a JSON
// object, the spec's own keys): what it names changes, the rest stays.
func (c *Client) PatchSpec(ctx context.Context, name string, spec []byte, fieldManager string) (*v1alpha1.TrustAnchorRotation, error) {
	out := &v1alpha1.TrustAnchorRotation{}
	body := append(append([]byte(`{"spec":`), spec...), '}')
	err := c.rest.Patch(types.MergePatchType).Resource(v1alpha1.Resource).Name(name).
		VersionedParams(&metav1.PatchOptions{FieldManager: fieldManager}, parameterCodec).
		Body(body).Do(ctx).Into(out)
	return out, err
}
