package reallinkerd_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/linkerd/trust-rotation/test/cluster"
	"github.com/linkerd/trust-rotation/test/internal/poll"
)

// injectorRecording is where what the proxy injector writes into a pod around a trust-roots
// change is recorded; TestInjectorConfigChangeMatchesLinkerd (test/meshsim) replays it.
var injectorRecording = filepath.Join("..", "meshsim", "testdata", "linkerd-proxy-injector", "config-change.json")

// The names of the recording's objects.
const (
	injectNamespace    = "inject-recording"
	injectWebhook      = "trust-rotation-recording-proxy-injector"
	trustRootsCM       = "linkerd-identity-trust-roots"
	trustRootsKey      = "ca-bundle.crt"
	nativeSidecarKey   = "config.linkerd.io/proxy-enable-native-sidecar"
	trustAnchorsEnv    = "LINKERD2_PROXY_IDENTITY_TRUST_ANCHORS"
	trustRootHashKey   = "linkerd.io/trust-root-sha256"
	proxyContainerName = "linkerd-proxy"
)

// The moments of the recording, in order: the injector started on the "before" bundle; the
// ConfigMap changed in the apiserver but not yet in the injector's volume; the kubelet refreshed
// the volume's file.
const (
	momentStart            = "start"
	momentConfigMapUpdated = "configmap-updated"
	momentFileRefreshed    = "file-refreshed"
)

// TestLinkerdInjectorAfterTrustRootsChange records, with -update, LINKERD_BIN,
// LINKERD_CONTROLLER_BIN and root, what Linkerd's own proxy injector writes into a pod before
// and after the linkerd-identity-trust-roots ConfigMap changes, in both proxy layouts. It runs
// `controller proxy-injector` with the arguments the recorded `linkerd install` rendered for it,
// plus -kubeconfig (it runs beside the bed, not in a pod) and loopback addresses, its volumes
// (linkerd-config's values, the trust roots, its serving certificate) laid out as a kubelet lays
// them out at /var/run/linkerd in a private mount namespace. The bed's apiserver calls it as an
// admission webhook (HTTPS, a MutatingWebhookConfiguration by URL limited to one namespace);
// each admission is a dry-run pod create, so the pod is never stored or run. The ConfigMap is
// changed in the apiserver first, then in the volume as a kubelet refreshes it (a new ..data
// link), and a pod of each layout is admitted at each moment.
func TestLinkerdInjectorAfterTrustRootsChange(t *testing.T) {
	bins := recordingBinaries(t, "TestInjectorConfigChangeMatchesLinkerd (test/meshsim)", recorder{what: "the real proxy injector", cli: true, controller: true, root: true})
	c := cluster.Shared(t)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	kube := c.Kube()
	values := linkerdConfigValues(t, renderInstall(t, ctx, c, bins))
	before, after := anchorBundles(t)
	setConfigMap(t, ctx, kube, before)

	srv, srvCA := servingCert(t)
	args := renderedArgs(t, "proxy-injector")
	inj := startInjector(t, bins.Controller, args, c.Kubeconfig(), map[string][]byte{
		"config/values":                         values,
		"identity/trust-roots/" + trustRootsKey: []byte(before),
		"tls/tls.crt":                           srv.crt,
		"tls/tls.key":                           srv.key,
	})
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: injectNamespace,
		Annotations: map[string]string{"linkerd.io/inject": "enabled"}}}
	if _, err := kube.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	registerInjector(t, ctx, kube, "https://"+inj.addr+"/", srvCA)

	rec := injectorRecordingFile{
		Comment:              "Recorded by TestLinkerdInjectorAfterTrustRootsChange -update (test/reallinkerd) from the real proxy injector (LINKERD_CONTROLLER_BIN) called by the bed's apiserver; do not edit, record again.",
		Command:              args,
		Namespace:            injectNamespace,
		NamespaceAnnotations: ns.Annotations,
		Bundles:              map[string]string{"before": before, "after": after},
	}
	admit := func(moment, configMap, file string) {
		for _, layout := range []struct{ name, native string }{{"native-sidecar", "true"}, {"proxy-container", "false"}} {
			ann := map[string]string{nativeSidecarKey: layout.native}
			pod := admitPod(t, ctx, kube, "web-"+layout.name, ann, inj)
			a := injectorAdmission{Moment: moment, ConfigMap: configMap, File: file, Layout: layout.name, PodAnnotations: ann}
			a.observe(pod)
			rec.Admissions = append(rec.Admissions, a)
		}
	}
	admit(momentStart, "before", "before")
	setConfigMap(t, ctx, kube, after)
	admit(momentConfigMapUpdated, "after", "before")
	inj.refresh(t, "identity/trust-roots", map[string][]byte{trustRootsKey: []byte(after)})
	admit(momentFileRefreshed, "after", "after")

	rec.Linkerd = inj.version()
	if rec.Linkerd == "" {
		v, err := bins.Version(ctx)
		if err != nil {
			t.Fatal(err)
		}
		rec.Linkerd = v
	}
	writeJSON(t, injectorRecording, rec)
}

type injectorRecordingFile struct {
	Comment              string              `json:"comment"`
	Linkerd              string              `json:"linkerd"`
	Command              []string            `json:"command"` // the proxy-injector container's args
	Namespace            string              `json:"namespace"`
	NamespaceAnnotations map[string]string   `json:"namespaceAnnotations"`
	Bundles              map[string]string   `json:"bundles"` // the trust-roots file's content, by name
	Admissions           []injectorAdmission `json:"admissions"`
}

// injectorAdmission is one pod admitted by the injector, and what it wrote into it.
type injectorAdmission struct {
	Moment         string            `json:"moment"`
	ConfigMap      string            `json:"configMap"` // the bundle the ConfigMap holds in the apiserver
	File           string            `json:"file"`      // the bundle the injector's mounted file holds
	Layout         string            `json:"layout"`
	PodAnnotations map[string]string `json:"podAnnotations"`

	ProxyPlace      string `json:"proxyPlace"`
	RestartPolicy   string `json:"restartPolicy"`
	TrustAnchors    string `json:"trustAnchors"`    // the proxy's LINKERD2_PROXY_IDENTITY_TRUST_ANCHORS
	TrustRootSHA256 string `json:"trustRootSHA256"` // the pod's linkerd.io/trust-root-sha256
}

func (a *injectorAdmission) observe(pod *corev1.Pod) {
	a.ProxyPlace, a.RestartPolicy, a.TrustAnchors = "(none)", "(none)", "(unset)"
	a.TrustRootSHA256 = pod.Annotations[trustRootHashKey]
	for _, list := range []struct {
		name string
		cs   []corev1.Container
	}{{"initContainers", pod.Spec.InitContainers}, {"containers", pod.Spec.Containers}} {
		own := 0
		for _, ct := range list.cs {
			if ct.Name != proxyContainerName {
				if !strings.HasPrefix(ct.Name, "linkerd-") {
					own++
				}
				continue
			}
			a.ProxyPlace = fmt.Sprintf("%s, after %d of the pod's own", list.name, own)
			if ct.RestartPolicy != nil {
				a.RestartPolicy = string(*ct.RestartPolicy)
			}
			for _, e := range ct.Env {
				if e.Name == trustAnchorsEnv {
					a.TrustAnchors = e.Value
				}
			}
			return
		}
	}
}

// linkerdConfigValues is the "values" key of the linkerd-config ConfigMap `linkerd install`
// rendered: the proxy injector's /var/run/linkerd/config/values.
func linkerdConfigValues(t *testing.T, rendered []byte) []byte {
	t.Helper()
	for _, doc := range strings.Split(string(rendered), "\n---\n") {
		var cm corev1.ConfigMap
		if yaml.Unmarshal([]byte(doc), &cm) != nil || cm.Kind != "ConfigMap" || cm.Name != "linkerd-config" {
			continue
		}
		if v, ok := cm.Data["values"]; ok {
			return []byte(v)
		}
	}
	t.Fatal("linkerd install rendered no ConfigMap linkerd-config with a values key")
	return nil
}

// anchorBundles are two trust bundles as a rotation writes them: one anchor, then the same
// anchor and a new one.
func anchorBundles(t *testing.T) (before, after string) {
	t.Helper()
	anchor := func(cn string) string {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(365 * 24 * time.Hour),
			KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign, IsCA: true, BasicConstraintsValid: true}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
		if err != nil {
			t.Fatal(err)
		}
		return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	}
	old := anchor("root.linkerd.cluster.local")
	return old, old + anchor("root.linkerd.cluster.local")
}

func setConfigMap(t *testing.T, ctx context.Context, kube kubernetes.Interface, bundle string) {
	t.Helper()
	api := kube.CoreV1().ConfigMaps("linkerd")
	cm, err := api.Get(ctx, trustRootsCM, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: trustRootsCM, Namespace: "linkerd"}, Data: map[string]string{trustRootsKey: bundle}}
		_, err = api.Create(ctx, cm, metav1.CreateOptions{})
	case err == nil:
		cm.Data = map[string]string{trustRootsKey: bundle}
		_, err = api.Update(ctx, cm, metav1.UpdateOptions{})
	}
	if err != nil {
		t.Fatal(err)
	}
}

type keyPair struct{ crt, key []byte }

// servingCert is the injector's serving certificate for 127.0.0.1, and the CA that signed it
// (the webhook configuration's caBundle).
func servingCert(t *testing.T) (keyPair, []byte) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "webhook.linkerd.cluster.local"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageCertSign, IsCA: true, BasicConstraintsValid: true}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "linkerd-proxy-injector.linkerd.svc"},
		DNSNames: []string{"linkerd-proxy-injector.linkerd.svc"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caTmpl, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return keyPair{crt: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
			key: pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})},
		pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
}

// registerInjector registers the injector with the apiserver as Linkerd's chart does
// (proxy-injector-rbac.yaml: pods, CREATE, admission review v1 and v1beta1, no side effects),
// by URL and for the recording's namespace alone, and removes it at the end of the test.
func registerInjector(t *testing.T, ctx context.Context, kube kubernetes.Interface, url string, caPEM []byte) {
	t.Helper()
	fail := admissionregistrationv1.Fail
	none := admissionregistrationv1.SideEffectClassNone
	scope := admissionregistrationv1.NamespacedScope
	timeout := int32(10)
	cfg := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: injectWebhook},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:         "linkerd-proxy-injector.linkerd.io",
			ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: caPEM},
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{
				"kubernetes.io/metadata.name": injectNamespace}},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"},
					Resources: []string{"pods"}, Scope: &scope},
			}},
			FailurePolicy:           &fail,
			SideEffects:             &none,
			AdmissionReviewVersions: []string{"v1", "v1beta1"},
			TimeoutSeconds:          &timeout,
		}},
	}
	api := kube.AdmissionregistrationV1().MutatingWebhookConfigurations()
	_ = api.Delete(ctx, injectWebhook, metav1.DeleteOptions{})
	if _, err := api.Create(ctx, cfg, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = api.Delete(context.Background(), injectWebhook, metav1.DeleteOptions{}) })
}

// admitPod creates the pod as a dry run, so that the apiserver runs its admission (the
// injector's webhook included) and returns the pod it would store. It waits for the apiserver to
// call the webhook: its configuration reaches the apiserver's admission chain a moment after
// it is created, and the namespace's default ServiceAccount a moment after the namespace.
func admitPod(t *testing.T, ctx context.Context, kube kubernetes.Interface, name string, annotations map[string]string, inj *injectorProc) *corev1.Pod {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: injectNamespace, Labels: map[string]string{"app": "web"}, Annotations: annotations},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "registry.example/web:1"}}},
	}
	var got *corev1.Pod
	err := poll.Until(ctx, time.Minute, "the apiserver to admit pod "+name+" through the proxy injector", func(ctx context.Context) (bool, error) {
		out, err := kube.CoreV1().Pods(injectNamespace).Create(ctx, pod.DeepCopy(), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return false, poll.Pending("%v", err)
		}
		for _, cs := range [][]corev1.Container{out.Spec.InitContainers, out.Spec.Containers} {
			for _, c := range cs {
				if c.Name == proxyContainerName {
					got = out
					return true, nil
				}
			}
		}
		return false, poll.Pending("admitted without a %s container (the webhook not called yet)", proxyContainerName)
	})
	if err != nil {
		t.Fatalf("%v\ninjector log:\n%s", err, inj.log())
	}
	return got
}

// injectorProc is one run of the real proxy injector.
type injectorProc struct{ *controllerProc }

func startInjector(t *testing.T, bin string, args []string, kubeconfig string, files map[string][]byte) *injectorProc {
	t.Helper()
	p := &injectorProc{startController(t, bin, args, kubeconfig, "-metrics-addr", files)}
	// Ready once its informers have synced and it serves (controller/webhook/launcher.go).
	err := poll.Until(t.Context(), time.Minute, "the proxy injector to be ready", func(ctx context.Context) (bool, error) {
		select {
		case <-p.done:
			return false, fmt.Errorf("the proxy injector exited")
		default:
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.admin+"/ready", nil)
		if err != nil {
			return false, err
		}
		rsp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, poll.Pending("%v", err)
		}
		rsp.Body.Close()
		return rsp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, p.log())
	}
	return p
}
