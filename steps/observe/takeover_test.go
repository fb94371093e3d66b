package observe

import (
	"context"
	"testing"
	"time"

	cmfake "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned/fake"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubefake "k8s.io/client-go/kubernetes/fake"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/steps/kube/clientset"
	"github.com/linkerd/trust-rotation/steps/podindex"
	"github.com/linkerd/trust-rotation/steps/probe"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// The issuer is the one identity signs with: crt.pem, Linkerd's chart's, while identity's
// Deployment runs with -identity-scheme=linkerd.io/tls (cert-manager's tls.crt is then staged),
// tls.crt under kubernetes.io/tls. The operator's snapshot and the CLI's read agree, and both
// read Helm's annotations on the Secret and the ConfigMap.
func TestIssuerIsTheOneIdentityReads(t *testing.T) {
	cfg := steps.DefaultConfig()
	chart, certManager := selfSigned(t, time.Now().Add(48*time.Hour)), selfSigned(t, time.Now().Add(24*time.Hour))
	helm := map[string]string{steps.HelmReleaseNameAnnotation: "linkerd-control-plane", steps.HelmReleaseNamespaceAnnotation: "linkerd",
		steps.HelmResourcePolicyAnnotation: steps.HelmKeep}
	issuer := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: cfg.LinkerdNamespace, Name: cfg.IssuerSecret, Annotations: helm},
		Data: map[string][]byte{steps.ChartIssuerKey: steps.EncodePEM(chart), "key.pem": []byte("not read"), steps.CertificateKey: steps.EncodePEM(certManager)}}
	bundle := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: cfg.LinkerdNamespace, Name: cfg.TrustRootsConfigMap, Annotations: helm},
		Data: map[string]string{steps.TrustRootsKey: steps.RenderBundle(chart)}}
	for _, tc := range []struct {
		scheme           string
		issuer, staged   string
		wantStagedSource bool
	}{
		{steps.SchemeLinkerd, steps.Fingerprint(chart), steps.Fingerprint(certManager), true},
		{steps.SchemeKubernetes, steps.Fingerprint(certManager), "", false},
	} {
		t.Run(tc.scheme, func(t *testing.T) {
			identity := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: cfg.LinkerdNamespace, Name: cfg.IdentityDeployment},
				Spec: appsv1.DeploymentSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{
					{Name: "identity", Args: []string{"identity", "-identity-trust-domain=cluster.local", steps.IdentitySchemeArg + tc.scheme}},
					{Name: steps.ProxyContainerName}}}}}}
			caches := objectCaches{issuer: issuer, bundle: bundle, deployments: map[string]*appsv1.Deployment{cfg.IdentityDeployment: identity}}
			index := podindex.New(nil)
			snap := &Snapshotter{Config: cfg, Steps: steps.Facts(), Caches: caches, Index: index,
				Certs: probe.NewCertTracker(index, nil, 1, time.Second, nil)}
			got, err := snap.Snapshot(time.Now(), "", &v1alpha1.TrustAnchorRotation{})
			if err != nil {
				t.Fatal(err)
			}
			reader := PKIReader{Kube: clientset.Kube(kubefake.NewClientset(issuer, bundle, identity)),
				CertManager: clientset.CertManager(cmfake.NewClientset()), Config: cfg}
			read, err := Read(context.Background(), reader, nil, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			for who, s := range map[string]*steps.State{"snapshot": got, "CLI": read.State} {
				if s.IdentityScheme() != tc.scheme {
					t.Errorf("%s: identity scheme %q, want %q", who, s.IdentityScheme(), tc.scheme)
				}
				if s.Issuer.Fingerprint() != tc.issuer || s.StagedIssuer.Fingerprint() != tc.staged || s.StagedIssuer.Found != tc.wantStagedSource {
					t.Errorf("%s: issuer %.12s, staged %.12s (found %v); want %.12s and %.12s", who, s.Issuer.Fingerprint(), s.StagedIssuer.Fingerprint(),
						s.StagedIssuer.Found, tc.issuer, tc.staged)
				}
				want := steps.HelmRender{Release: "linkerd-control-plane", Namespace: "linkerd", Keep: true}
				if s.Issuer.Helm != want || s.Bundle.Helm != want || !s.Issuer.ChartIssuer {
					t.Errorf("%s: Helm on the Secret %+v (chart issuer %v), on the ConfigMap %+v; want %+v", who, s.Issuer.Helm, s.Issuer.ChartIssuer, s.Bundle.Helm, want)
				}
			}
		})
	}
}
