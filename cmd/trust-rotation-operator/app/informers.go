package app

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/steps/observe"
)

// certificateOnly drops every Secret key but tls.crt before the object is cached.
func certificateOnly(obj any) (any, error) {
	sec, ok := obj.(*corev1.Secret)
	if !ok {
		return obj, nil
	}
	slim := &corev1.Secret{ObjectMeta: sec.ObjectMeta, Type: sec.Type}
	slim.ManagedFields = nil
	// The certificate of tls.crt, and of crt.pem, where Linkerd's chart renders the identity
	// issuer (steps.IssuerKey); never a key.
	for _, k := range []string{steps.CertificateKey, steps.ChartIssuerKey} {
		if crt, ok := sec.Data[k]; ok {
			if slim.Data == nil {
				slim.Data = map[string][]byte{}
			}
			slim.Data[k] = crt
		}
	}
	return slim, nil
}

// namedInformer watches one named object, so the operator reads (and may be granted) nothing else.
func namedInformer(rc cache.Getter, resource, ns, name string, obj runtime.Object) cache.SharedIndexInformer {
	lw := cache.NewListWatchFromClient(rc, resource, ns, fields.OneTermEqualSelector("metadata.name", name))
	return cache.NewSharedIndexInformer(lw, obj, 0, cache.Indexers{})
}

// caches reads the controller's informers for the snapshot (observe.Caches): the informers'
// lifecycle is the controller's, what the State makes of their objects observe's.
type caches struct{ c *Controller }

var _ observe.Caches = caches{}

func (k caches) AnchorSecret() *corev1.Secret {
	cfg := k.c.opts.Config
	return getSecret(k.c.anchor, cfg.CertManagerNamespace, cfg.AnchorSecret)
}

func (k caches) PreviousAnchorSecret() *corev1.Secret {
	cfg := k.c.opts.Config
	return getSecret(k.c.previous, cfg.LinkerdNamespace, cfg.PreviousAnchorSecret)
}

func (k caches) IssuerSecret() *corev1.Secret {
	cfg := k.c.opts.Config
	return getSecret(k.c.issuer, cfg.LinkerdNamespace, cfg.IssuerSecret)
}

func (k caches) TrustRoots() *corev1.ConfigMap {
	cfg := k.c.opts.Config
	if obj, ok, _ := k.c.bundle.GetStore().GetByKey(cfg.LinkerdNamespace + "/" + cfg.TrustRootsConfigMap); ok {
		return obj.(*corev1.ConfigMap)
	}
	return nil
}

func (k caches) ControlPlaneDeployment(name string) *appsv1.Deployment {
	if obj, ok, _ := k.c.deployments.GetStore().GetByKey(k.c.opts.Config.LinkerdNamespace + "/" + name); ok {
		return obj.(*appsv1.Deployment)
	}
	return nil
}

func getSecret(inf cache.SharedIndexInformer, ns, name string) *corev1.Secret {
	obj, ok, _ := inf.GetStore().GetByKey(ns + "/" + name)
	if !ok {
		return nil
	}
	return obj.(*corev1.Secret)
}
