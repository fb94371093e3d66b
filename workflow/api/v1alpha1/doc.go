// Package v1alpha1 is the trust.linkerd.io/v1alpha1 API: the TrustAnchorRotation resource.
//
// A TrustAnchorRotation is both the user's knob (spec) and the workflow's checkpoint (status):
// the operator records the step it is at, and the idempotency token of the step's act, in the
// status subresource before acting, so an operator restarted anywhere resumes where it left off
// without repeating a destructive action.
//
// +kubebuilder:object:generate=true
// +groupName=trust.linkerd.io
package v1alpha1
