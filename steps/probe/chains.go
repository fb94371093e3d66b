package probe

import (
	"bytes"
	"crypto/x509"
	"sort"
	"strings"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/steps/podindex"
)

// chainKey names an issuer chain by its certificates' fingerprints.
func chainKey(certs []*x509.Certificate) string {
	fps := make([]string, len(certs))
	for i, c := range certs {
		fps[i] = steps.Fingerprint(c)
	}
	return strings.Join(fps, ",")
}

// certificateCheck judges pods' issuer chains against one certificate root (see
// steps.State.CertificateRoot), remembering the verdict per chain: the pods of a mesh present
// a few chains, and a signature check costs far more than a map lookup. It is not safe for
// concurrent use.
type certificateCheck struct {
	root    *x509.Certificate // nil: nothing verifies
	rootFP  string
	byChain map[string]bool
}

func newCertificateCheck(root *x509.Certificate) *certificateCheck {
	c := &certificateCheck{root: root, byChain: map[string]bool{}}
	if root != nil {
		c.rootFP = steps.Fingerprint(root)
	}
	return c
}

// is reports whether the check is against root.
func (c *certificateCheck) is(root *x509.Certificate) bool {
	if c.root == nil || root == nil {
		return c.root == root
	}
	return bytes.Equal(c.root.Raw, root.Raw)
}

// verifies reports whether the issuer chain named key verifies to the root.
func (c *certificateCheck) verifies(key string, certs []*x509.Certificate) bool {
	if c.root == nil || len(certs) == 0 {
		return false
	}
	if key == "" {
		key = chainKey(certs)
	}
	ok, seen := c.byChain[key]
	if !seen {
		ok = steps.ChainsTo(certs, c.root)
		c.byChain[key] = ok
	}
	return ok
}

// offPath says why a pod whose certificate the given issuer signed has not converged.
func (c *certificateCheck) offPath(issuer string) string {
	if c.root == nil {
		return "certificate issued by " + podindex.ShortHash(issuer) + "; the active issuer, and so its trust anchor, is unknown"
	}
	return "certificate issued by " + podindex.ShortHash(issuer) + ", which does not chain to " + podindex.ShortHash(c.rootFP) + ", the active issuer's trust anchor"
}

// liveChains groups pods by the issuer chain they present (steps.LiveChain).
type liveChains struct {
	byKey map[string]int
	out   []steps.LiveChain
}

func (l *liveChains) add(key string, certs []*x509.Certificate, pod string) {
	if key == "" {
		key = chainKey(certs)
	}
	i, ok := l.byKey[key]
	if !ok {
		if l.byKey == nil {
			l.byKey = map[string]int{}
		}
		i = len(l.out)
		l.byKey[key] = i
		l.out = append(l.out, steps.LiveChain{Certs: certs, Example: pod})
	}
	c := &l.out[i]
	c.Pods++
	if pod < c.Example {
		c.Example = pod
	}
}

// list is the chains in a stable order: by example pod.
func (l *liveChains) list() []steps.LiveChain {
	sort.Slice(l.out, func(i, j int) bool { return l.out[i].Example < l.out[j].Example })
	return l.out
}
