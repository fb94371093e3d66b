package observe

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/linkerd/trust-rotation/steps"
)

// parsedSources are the certificates the snapshot last parsed out of the anchor, previous-anchor
// and issuer Secrets and the trust bundle's ConfigMap.
type parsedSources struct {
	anchor, previous, issuer sourceMemo
	// chartIssuer is the issuer Secret's crt.pem, read while identity runs with the chart's
	// scheme (steps.IssuerKey).
	chartIssuer sourceMemo
	bundle      memo[*corev1.ConfigMap, steps.Bundle]
}

// memo keeps what a conversion made of one informer object. An informer replaces an object on
// each change and never modifies one in its store, so the same pointer converts the same way:
// parsing the PEM of three Secrets and the bundle on every reconcile was a sixth of the
// reconciles' CPU while pods rolled, for objects that change a few times a rotation. The
// steps read what a snapshot holds and never modify it.
type memo[O comparable, T any] struct {
	obj  O
	val  T
	held bool
}

func (m *memo[O, T]) get(obj O, convert func() T) T {
	if !m.held || m.obj != obj {
		m.obj, m.val, m.held = obj, convert(), true
	}
	return m.val
}

// source is the Source of the Secret ns/name, secret (nil when it does not exist).
func (m *sourceMemo) source(ns, name string, secret *corev1.Secret) steps.Source {
	return m.sourceKey(ns, name, secret, steps.CertificateKey)
}

// sourceKey is source reading key. A memo always reads the same key.
func (m *sourceMemo) sourceKey(ns, name string, secret *corev1.Secret, key string) steps.Source {
	return m.get(secret, func() steps.Source { return SourceFromSecretKey(ns, name, secret, key) })
}

type sourceMemo struct {
	memo[*corev1.Secret, steps.Source]
}
