package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupName is the API group of the TrustAnchorRotation resource.
const GroupName = "trust.linkerd.io"

// SchemeGroupVersion is the group and version of this package's types.
var SchemeGroupVersion = schema.GroupVersion{Group: GroupName, Version: "v1alpha1"}

// Resource is the plural resource name, as used in REST paths and RBAC rules.
const Resource = "trustanchorrotations"

// Kind is the kind of the TrustAnchorRotation resource.
const Kind = "TrustAnchorRotation"

// AnnotationDecodeErrors is set, in memory only, on a TrustAnchorRotation the client decoded
// with fields that Go could not hold (workflow/client.DecodeErrors reads it): never stored.
const AnnotationDecodeErrors = "trust.linkerd.io/decode-errors"

var (
	// SchemeBuilder registers this package's types with a runtime.Scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme adds this package's types to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(SchemeGroupVersion, &TrustAnchorRotation{}, &TrustAnchorRotationList{})
	metav1.AddToGroupVersion(scheme, SchemeGroupVersion)
	return nil
}
