package observe

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"strconv"
	"strings"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmfake "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned/fake"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kubefake "k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/steps/kube/clientset"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// pkiWorld is the cert-manager side of the trust anchor: its Certificate, CertificateRequests
// and Secret, built by options.
type pkiWorld struct {
	crt           *cmapi.Certificate
	requests      []runtime.Object
	secret        *corev1.Secret
	forbidSecrets bool
	forbidCM      bool
}

type worldOpt func(w *pkiWorld)

// request adds a CertificateRequest of revision rev holding c, controlled by the Certificate.
func request(name string, rev int, c *x509.Certificate) worldOpt {
	return func(w *pkiWorld) {
		w.requests = append(w.requests, &cmapi.CertificateRequest{
			ObjectMeta: metav1.ObjectMeta{Namespace: "cert-manager", Name: name,
				Annotations:     map[string]string{cmapi.CertificateRequestRevisionAnnotationKey: strconv.Itoa(rev)},
				OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(w.crt, cmapi.SchemeGroupVersion.WithKind(cmapi.CertificateKind))}},
			Status: cmapi.CertificateRequestStatus{Certificate: steps.EncodePEM(c)},
		})
	}
}

// revision sets the Certificate's status as cert-manager leaves it after issuing c as rev.
func revision(rev int, c *x509.Certificate) worldOpt {
	return func(w *pkiWorld) {
		w.crt.Status.Revision = &rev
		w.crt.Status.NotAfter = ptr.To(metav1.NewTime(c.NotAfter))
	}
}

func secretHolding(c *x509.Certificate) worldOpt {
	return func(w *pkiWorld) {
		w.secret = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "cert-manager", Name: "linkerd-trust-anchor"},
			Data: map[string][]byte{"tls.crt": steps.EncodePEM(c), "tls.key": []byte("not a key")}}
	}
}

func (w *pkiWorld) reader(t *testing.T) (PKIReader, *kubefake.Clientset) {
	t.Helper()
	var kubeObjs []runtime.Object
	if w.secret != nil {
		kubeObjs = append(kubeObjs, w.secret)
	}
	kube := kubefake.NewClientset(kubeObjs...)
	if w.forbidSecrets {
		kube.PrependReactor("get", "secrets", func(a clienttesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewForbidden(corev1.Resource("secrets"), a.(clienttesting.GetAction).GetName(), errors.New("RBAC: no"))
		})
	}
	cm := cmfake.NewClientset(append([]runtime.Object{w.crt}, w.requests...)...)
	if w.forbidCM {
		cm.PrependReactor("*", "*", func(a clienttesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewForbidden(cmapi.Resource(a.GetResource().Resource), "", errors.New("RBAC: no"))
		})
	}
	return PKIReader{Kube: clientset.Kube(kube), CertManager: clientset.CertManager(cm), Config: steps.DefaultConfig()}, kube
}

// selfSigned makes a CA certificate valid until notAfter.
func selfSigned(t *testing.T, notAfter time.Time) *x509.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: "root.linkerd.cluster.local"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: notAfter, IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func secretGets(kube *kubefake.Clientset) int {
	n := 0
	for _, a := range kube.Actions() {
		if a.GetResource().Resource == "secrets" {
			n++
		}
	}
	return n
}

// The anchor comes from the Certificate's current CertificateRequest, found as cert-manager
// finds it; the Secret is read only when no request holds the certificate the Secret holds.
func TestPKIReaderAnchor(t *testing.T) {
	old := selfSigned(t, time.Now().Add(time.Hour))
	renewed := selfSigned(t, time.Now().Add(2*time.Hour))
	cases := map[string]struct {
		opts []worldOpt
		// want is the certificate read, nil for none; secret whether the Secret was requested.
		want      *x509.Certificate
		secret    bool
		forbidden bool
		problem   string
	}{
		"the current revision's request, not an older one": {
			opts: []worldOpt{request("a-1", 1, old), request("a-2", 2, renewed), revision(2, renewed), secretHolding(renewed)},
			want: renewed,
		},
		"not yet the next revision's request": {
			opts: []worldOpt{request("a-1", 1, old), request("a-2", 2, renewed), revision(1, old), secretHolding(old)},
			want: old,
		},
		"a Secret cert-manager adopted without issuing": {
			opts: []worldOpt{secretHolding(old)},
			want: old, secret: true,
		},
		"a request another object controls": {
			opts: []worldOpt{request("a-1", 1, renewed), revision(1, old), secretHolding(old), func(w *pkiWorld) {
				w.requests[0].(*cmapi.CertificateRequest).OwnerReferences[0].UID = "someone-else"
			}},
			want: old, secret: true,
		},
		"two requests of the current revision": {
			opts: []worldOpt{request("a-1", 1, old), request("a-1b", 1, renewed), revision(1, old), secretHolding(old)},
			want: old, secret: true,
		},
		"status.notAfter describes another certificate than the request's": {
			opts: []worldOpt{request("a-1", 1, old), revision(1, renewed), secretHolding(renewed)},
			want: renewed, secret: true,
		},
		"the Certificate writes another Secret": {
			opts: []worldOpt{request("a-1", 1, renewed), revision(1, renewed), secretHolding(old), func(w *pkiWorld) { w.crt.Spec.SecretName = "other" }},
			want: old, secret: true,
		},
		"cert-manager's objects may not be read": {
			opts: []worldOpt{request("a-1", 1, renewed), revision(1, renewed), secretHolding(old), func(w *pkiWorld) { w.forbidCM = true }},
			want: old, secret: true,
		},
		"nothing holds it and the Secret may not be read": {
			opts:   []worldOpt{secretHolding(old), func(w *pkiWorld) { w.forbidSecrets = true }},
			secret: true, forbidden: true,
			problem: `trust-anchor Secret cert-manager/linkerd-trust-anchor: Certificate cert-manager/linkerd-trust-anchor has issued no CertificateRequest (status.revision is not set), and reading the Secret is forbidden: secrets "linkerd-trust-anchor" is forbidden: RBAC: no`,
		},
		"nothing holds it and there is no Secret": {
			opts: []worldOpt{func(w *pkiWorld) {
				w.crt = &cmapi.Certificate{ObjectMeta: metav1.ObjectMeta{Namespace: "cert-manager", Name: "unrelated"}}
			}},
			secret:  true,
			problem: "trust-anchor Secret cert-manager/linkerd-trust-anchor not found",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			w := &pkiWorld{crt: &cmapi.Certificate{
				ObjectMeta: metav1.ObjectMeta{Namespace: "cert-manager", Name: "linkerd-trust-anchor", UID: "anchor-uid"},
				Spec:       cmapi.CertificateSpec{SecretName: "linkerd-trust-anchor", IsCA: true},
			}}
			for _, o := range tc.opts {
				o(w)
			}
			r, kube := w.reader(t)
			src, err := r.Anchor(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case tc.want != nil && (!src.Usable() || !src.Cert.Equal(tc.want)):
				t.Errorf("read %s (%s), want %s", src.Fingerprint(), src.Problem("trust-anchor Secret"), steps.Fingerprint(tc.want))
			case tc.want == nil && src.Usable():
				t.Errorf("read %s, want nothing", src.Fingerprint())
			}
			if got := secretGets(kube) > 0; got != tc.secret {
				t.Errorf("Secret requested: %v, want %v", got, tc.secret)
			}
			if Forbidden(src) != tc.forbidden {
				t.Errorf("Forbidden = %v, want %v", Forbidden(src), tc.forbidden)
			}
			if got := src.Problem("trust-anchor Secret"); got != tc.problem {
				t.Errorf("problem %q, want %q", got, tc.problem)
			}
			if src.Ref() != "cert-manager/linkerd-trust-anchor" {
				t.Errorf("the source is %s, want the anchor Secret's name whatever it was read from", src.Ref())
			}
		})
	}
}

// The previous anchor is the certificate of the trust bundle the TrustAnchorRotation names, or
// else the previous-anchor Secret.
func TestPKIReaderPrevious(t *testing.T) {
	newA, _ := newCert(t, "new", true, nil, nil)
	oldA, _ := newCert(t, "old", true, nil, nil)
	bundle := steps.Bundle{Found: true, Certs: []*x509.Certificate{newA, oldA}}
	prevSecret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "linkerd", Name: "linkerd-previous-anchor"},
		Data: map[string][]byte{"tls.crt": steps.EncodePEM(oldA)}}
	cases := map[string]struct {
		status  *v1alpha1.TrustAnchorRotationStatus
		secret  bool
		problem string
	}{
		"named in the bundle":      {status: &v1alpha1.TrustAnchorRotationStatus{PreviousAnchorFingerprint: steps.Fingerprint(oldA)}},
		"no TrustAnchorRotation":   {secret: true},
		"no fingerprint in status": {status: &v1alpha1.TrustAnchorRotationStatus{}, secret: true},
		"not in the bundle": {
			status: &v1alpha1.TrustAnchorRotationStatus{PreviousAnchorFingerprint: strings.Repeat("0", 64)}, secret: true,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			kube := kubefake.NewClientset(prevSecret)
			r := PKIReader{Kube: clientset.Kube(kube), CertManager: clientset.CertManager(cmfake.NewClientset()), Config: steps.DefaultConfig()}
			src, err := r.Previous(context.Background(), bundle, tc.status)
			if err != nil {
				t.Fatal(err)
			}
			if !src.Usable() || !src.Cert.Equal(oldA) || src.Ref() != "linkerd/linkerd-previous-anchor" {
				t.Errorf("read %s from %s (%s), want the old anchor", src.Fingerprint(), src.Ref(), src.Problem("previous-anchor Secret"))
			}
			if got := secretGets(kube) > 0; got != tc.secret {
				t.Errorf("Secret requested: %v, want %v", got, tc.secret)
			}
		})
	}
}

// newCert returns a certificate for cn, and its key: self-signed when parent is nil. Its DNS
// names are cn and names.
func newCert(t testing.TB, cn string, ca bool, parent *x509.Certificate, parentKey *ecdsa.PrivateKey, names ...string) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: ca, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature, DNSNames: append([]string{cn}, names...)}
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	return c, key
}
