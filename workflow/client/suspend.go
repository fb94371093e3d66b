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

// MergePatch applies a JSON merge patch to the named TrustAnchorRotation (its metadata and
// spec; the status has its own subresource): what the patch names changes, the rest stays.
func (c *Client) MergePatch(ctx context.Context, name string, patch []byte, fieldManager string) (*v1alpha1.TrustAnchorRotation, error) {
	out := &v1alpha1.TrustAnchorRotation{}
	err := c.rest.Patch(types.MergePatchType).Resource(v1alpha1.Resource).Name(name).
		VersionedParams(&metav1.PatchOptions{FieldManager: fieldManager}, parameterCodec).
		Body(patch).Do(ctx).Into(out)
	return out, err
}
