// Package client is a small typed client for TrustAnchorRotation.
//
// It is written by hand rather than generated with k8s.io/code-generator: the API has one
// cluster-scoped kind, and the operator and CLI need a handful of verbs and one informer.
// A generated clientset, informer and lister would add thousands of lines to maintain for that.
//
// Its codec decodes a TrustAnchorRotation that holds a value Go cannot (an object stored under an
// older CRD) field by field, naming what failed, so that one bad object never fails a list or a
// watch of the others (decode.go, DecodeErrors).
package client

import (
	"context"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// Scheme knows the v1alpha1 types (and meta types for options and status errors).
var Scheme = runtime.NewScheme()

func init() {
	if err := v1alpha1.AddToScheme(Scheme); err != nil {
		panic(err)
	}
	metav1.AddToGroupVersion(Scheme, metav1.SchemeGroupVersion)
}

var parameterCodec = runtime.NewParameterCodec(Scheme)

// Client reads and writes TrustAnchorRotations.
type Client struct {
	rest rest.Interface
}

// NewForConfig returns a client for the cluster of cfg.
func NewForConfig(cfg *rest.Config) (*Client, error) {
	c := rest.CopyConfig(cfg)
	c.GroupVersion = &v1alpha1.SchemeGroupVersion
	c.APIPath = "/apis"
	c.NegotiatedSerializer = tolerantCodecs{serializer.NewCodecFactory(Scheme).WithoutConversion()}
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	rc, err := rest.RESTClientFor(c)
	if err != nil {
		return nil, err
	}
	return &Client{rest: rc}, nil
}

// Get returns the named TrustAnchorRotation.
func (c *Client) Get(ctx context.Context, name string) (*v1alpha1.TrustAnchorRotation, error) {
	out := &v1alpha1.TrustAnchorRotation{}
	err := c.rest.Get().Resource(v1alpha1.Resource).Name(name).Do(ctx).Into(out)
	return out, err
}

// List returns the TrustAnchorRotations matching opts.
func (c *Client) List(ctx context.Context, opts metav1.ListOptions) (*v1alpha1.TrustAnchorRotationList, error) {
	out := &v1alpha1.TrustAnchorRotationList{}
	err := c.rest.Get().Resource(v1alpha1.Resource).VersionedParams(&opts, parameterCodec).Do(ctx).Into(out)
	return out, err
}

// Watch watches the TrustAnchorRotations matching opts.
func (c *Client) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	var timeout time.Duration
	if opts.TimeoutSeconds != nil {
		timeout = time.Duration(*opts.TimeoutSeconds) * time.Second
	}
	return c.rest.Get().Resource(v1alpha1.Resource).VersionedParams(&opts, parameterCodec).Timeout(timeout).Watch(ctx)
}

// Create creates a TrustAnchorRotation.
func (c *Client) Create(ctx context.Context, tar *v1alpha1.TrustAnchorRotation, fieldManager string) (*v1alpha1.TrustAnchorRotation, error) {
	out := &v1alpha1.TrustAnchorRotation{}
	err := c.rest.Post().Resource(v1alpha1.Resource).
		VersionedParams(&metav1.CreateOptions{FieldManager: fieldManager}, parameterCodec).
		Body(tar).Do(ctx).Into(out)
	return out, err
}

// UpdateStatus writes tar's status through the status subresource. It fails with a Conflict
// when tar's resourceVersion is stale, so a status write never overwrites a newer checkpoint.
func (c *Client) UpdateStatus(ctx context.Context, tar *v1alpha1.TrustAnchorRotation, fieldManager string) (*v1alpha1.TrustAnchorRotation, error) {
	out := &v1alpha1.TrustAnchorRotation{}
	err := c.rest.Put().Resource(v1alpha1.Resource).Name(tar.Name).SubResource("status").
		VersionedParams(&metav1.UpdateOptions{FieldManager: fieldManager}, parameterCodec).
		Body(tar).Do(ctx).Into(out)
	return out, err
}

// Delete deletes the named TrustAnchorRotation.
func (c *Client) Delete(ctx context.Context, name string) error {
	return c.rest.Delete().Resource(v1alpha1.Resource).Name(name).Do(ctx).Error()
}

// ListWatch lists and watches the TrustAnchorRotations matching the field selector (for
// example fields.OneTermEqualSelector("metadata.name", "cluster")), for an informer.
func (c *Client) ListWatch(selector fields.Selector) *cache.ListWatch {
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			opts.FieldSelector = selector.String()
			return c.List(ctx, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.FieldSelector = selector.String()
			return c.Watch(ctx, opts)
		},
	}
}
