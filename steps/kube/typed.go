package kube

import (
	"context"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
)

// typed is a typed client of one resource, in one namespace or cluster-wide: the requests of
// client-go's generated clients (k8s.io/client-go/gentype), which this package used until it
// showed that gentype links client-go's fake clients (k8s.io/client-go/testing), and through them
// the managed-fields and OpenAPI machinery, into the operator.
type typed[T interface {
	runtime.Object
	metav1.Object
}, L runtime.Object] struct {
	client    rest.Interface
	resource  string
	namespace string // "" for a cluster-scoped resource, or every namespace
	newT      func() T
	newL      func() L
	protobuf  bool // ask for protobuf first, as the generated clients of built-in kinds do
}

func (c *typed[T, L]) request(r *rest.Request) *rest.Request {
	if c.protobuf {
		r = r.UseProtobufAsDefault()
	}
	return r.NamespaceIfScoped(c.namespace, c.namespace != "").Resource(c.resource)
}

// timeout is the request timeout of a list or watch: opts.TimeoutSeconds, if set.
func timeout(opts metav1.ListOptions) time.Duration {
	if opts.TimeoutSeconds == nil {
		return 0
	}
	return time.Duration(*opts.TimeoutSeconds) * time.Second
}

func (c *typed[T, L]) Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error) {
	out := c.newT()
	err := c.request(c.client.Get()).Name(name).VersionedParams(&opts, parameterCodec).Do(ctx).Into(out)
	return out, err
}

func (c *typed[T, L]) List(ctx context.Context, opts metav1.ListOptions) (L, error) {
	out := c.newL()
	err := c.request(c.client.Get()).VersionedParams(&opts, parameterCodec).Timeout(timeout(opts)).Do(ctx).Into(out)
	return out, err
}

func (c *typed[T, L]) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	return c.request(c.client.Get()).VersionedParams(&opts, parameterCodec).Timeout(timeout(opts)).Watch(ctx)
}

func (c *typed[T, L]) Create(ctx context.Context, obj T, opts metav1.CreateOptions) (T, error) {
	out := c.newT()
	err := c.request(c.client.Post()).VersionedParams(&opts, parameterCodec).Body(obj).Do(ctx).Into(out)
	return out, err
}

func (c *typed[T, L]) Update(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error) {
	out := c.newT()
	err := c.request(c.client.Put()).Name(obj.GetName()).VersionedParams(&opts, parameterCodec).Body(obj).Do(ctx).Into(out)
	return out, err
}

func (c *typed[T, L]) UpdateStatus(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error) {
	out := c.newT()
	err := c.request(c.client.Put()).Name(obj.GetName()).SubResource("status").VersionedParams(&opts, parameterCodec).
		Body(obj).Do(ctx).Into(out)
	return out, err
}

func (c *typed[T, L]) Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error {
	return c.request(c.client.Delete()).Name(name).Body(&opts).Do(ctx).Error()
}

func (c *typed[T, L]) Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (T, error) {
	out := c.newT()
	err := c.request(c.client.Patch(pt)).Name(name).SubResource(subresources...).VersionedParams(&opts, parameterCodec).
		Body(data).Do(ctx).Into(out)
	return out, err
}
