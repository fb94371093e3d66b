package main_test

import (
	"context"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/test/charts"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// linkerdLikeChart renders the trust-roots ConfigMap as linkerd-control-plane's
// templates/identity.yaml does (edge-26.8.3): only while identity.externalCA is false, from
// identityTrustAnchorsPEM, trimmed, so without the final newline the operator writes.
var linkerdLikeChart = map[string]string{
	"Chart.yaml":  "apiVersion: v2\nname: linkerd-control-plane\nversion: 0.0.1\n",
	"values.yaml": "identityTrustAnchorsPEM: \"\"\nidentity:\n  externalCA: false\n",
	"templates/identity.yaml": `{{ if not (.Values.identity.externalCA) -}}
kind: ConfigMap
apiVersion: v1
metadata:
  name: linkerd-identity-trust-roots
  namespace: {{ .Release.Namespace }}
  labels:
    linkerd.io/control-plane-component: identity
    linkerd.io/control-plane-ns: {{ .Release.Namespace }}
data:
  ca-bundle.crt: |-{{ .Values.identityTrustAnchorsPEM | trim | nindent 4 }}
{{- end }}
`,
}

// testAdoptFromHelm follows docs/adopting.md on a mesh whose trust-roots ConfigMap a Helm
// release rendered, with real Helm 3 and Helm 4: check warns that helm owns the bundle; adopt
// refuses until the ConfigMap is kept; the release stops rendering it and Helm keeps it;
// `bundle --adopt` hands ca-bundle.crt to the operator's field manager with its bytes
// unchanged; check is then clean, and a release that renders it again fails instead of
// overwriting it. The step leaves the ConfigMap as it found it (applied by kubectl).
func testAdoptFromHelm(e *e2e) {
	e.serveRotationCRD()
	dir := e.t.TempDir()
	for name, body := range linkerdLikeChart {
		path := filepath.Join(dir, "chart", name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			e.t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			e.t.Fatal(err)
		}
	}
	anchor, err := e.pki.Anchor(e.ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	anchorFile := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(anchorFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: anchor.Raw}), 0o644); err != nil {
		e.t.Fatal(err)
	}
	helms, err := charts.Helms(e.ctx, filepath.Join(dir, "helm"))
	if err != nil {
		e.t.Fatal(err)
	}
	kubeconfig := e.c.Kubeconfig()
	cms := e.kube.CoreV1().ConfigMaps("linkerd")
	for _, h := range helms {
		helm := func(args ...string) (string, error) {
			out, err := h.Run(e.ctx, kubeconfig, args...)
			return string(out), err
		}
		if err := cms.Delete(e.ctx, steps.DefaultTrustRootsConfigMap, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			e.t.Fatal(err)
		}
		if out, err := helm("install", "linkerd-control-plane", filepath.Join(dir, "chart"), "-n", "linkerd", "--set-file", "identityTrustAnchorsPEM="+anchorFile); err != nil {
			e.t.Fatalf("%s install: %v\n%s", h.Name, err, out)
		}
		rendered := e.configMapBundle()
		if rendered == steps.RenderBundle(anchor) || strings.TrimSpace(rendered) != strings.TrimSpace(steps.RenderBundle(anchor)) {
			e.t.Fatalf("%s rendered %q: want the anchor without the final newline", h.Name, rendered)
		}
		if res, errText := e.ownerCheck(); res != "warning" || !strings.Contains(errText, "helm") {
			e.t.Fatalf("%s: before adopting, the bundle-owner check is %s (%q), want a warning naming helm", h.Name, res, errText)
		}

		// Not kept yet: adopting refuses, and changes nothing.
		_, errOut, code := e.run("bundle", "--adopt")
		if code != 1 || !strings.Contains(errOut, "helm.sh/resource-policy=keep") {
			e.t.Fatalf("%s: adopt before keep: exit %d, stderr %q; want 1 and how to keep it", h.Name, code, errOut)
		}

		// The documented procedure.
		e.kubectl("", "annotate", "-n", "linkerd", "configmap", steps.DefaultTrustRootsConfigMap, "helm.sh/resource-policy=keep")
		if out, err := helm("upgrade", "linkerd-control-plane", filepath.Join(dir, "chart"), "-n", "linkerd", "--reuse-values", "--set", "identity.externalCA=true"); err != nil {
			e.t.Fatalf("%s upgrade --set identity.externalCA=true: %v\n%s", h.Name, err, out)
		}
		if got := e.configMapBundle(); got != rendered {
			e.t.Fatalf("%s: the upgrade that stopped rendering it changed the bundle: %q", h.Name, got)
		}
		out, errOut, code := e.run("bundle", "--adopt")
		if code != 0 || !strings.Contains(out, "adopted") {
			e.t.Fatalf("%s: bundle --adopt: exit %d\nstdout: %s\nstderr: %s", h.Name, code, out, errOut)
		}
		e.t.Logf("%s: %s", h.Name, strings.TrimSpace(out))
		if got := e.configMapBundle(); got != rendered {
			e.t.Fatalf("%s: adopting changed the bundle: %q, was %q", h.Name, got, rendered)
		}
		if res, errText := e.ownerCheck(); res != "success" {
			e.t.Fatalf("%s: after adopting, the bundle-owner check is %s: %s", h.Name, res, errText)
		}
		// Adopting again changes nothing.
		if _, errOut, code := e.run("bundle", "--adopt"); code != 0 {
			e.t.Fatalf("%s: adopting again: exit %d: %s", h.Name, code, errOut)
		}

		// A release that renders it again fails rather than overwriting the operator's bundle.
		if out, err := helm("upgrade", "linkerd-control-plane", filepath.Join(dir, "chart"), "-n", "linkerd", "--reuse-values", "--set", "identity.externalCA=false"); err == nil {
			e.t.Fatalf("%s upgrade --set identity.externalCA=false took the adopted ConfigMap back:\n%s", h.Name, out)
		} else if !strings.Contains(err.Error(), "ownership metadata") && !strings.Contains(err.Error(), "cannot be imported") {
			e.t.Fatalf("%s upgrade --set identity.externalCA=false failed for another reason: %v", h.Name, err)
		}
		if got := e.configMapBundle(); got != rendered {
			e.t.Fatalf("%s: the refused upgrade changed the bundle: %q", h.Name, got)
		}
		if out, err := helm("uninstall", "linkerd-control-plane", "-n", "linkerd"); err != nil {
			e.t.Fatalf("%s uninstall: %v\n%s", h.Name, err, out)
		}
		if got := e.configMapBundle(); got != rendered {
			e.t.Fatalf("%s: uninstalling the release changed the adopted bundle: %q", h.Name, got)
		}
	}
	if err := cms.Delete(e.ctx, steps.DefaultTrustRootsConfigMap, metav1.DeleteOptions{}); err != nil {
		e.t.Fatal(err)
	}
	e.applyBundle()
}

// serveRotationCRD applies the TrustAnchorRotation CRD, as the rotation step does: the
// bundle-owner check comes after the operator category's fatal CRD check.
func (e *e2e) serveRotationCRD() {
	e.t.Helper()
	e.kubectl("", "apply", "--server-side", "-f", filepath.Join("..", "..", "manifests", "crds"))
	e.until("the TrustAnchorRotation CRD to be served", time.Minute, func(context.Context) (bool, error) {
		_, err := e.kube.Discovery().ServerResourcesForGroupVersion(v1alpha1.SchemeGroupVersion.String())
		return err == nil, nil
	})
}

// ownerCheck runs check and returns the result and error of the bundle-owner check.
func (e *e2e) ownerCheck() (result, errText string) {
	e.t.Helper()
	out, _, _ := e.run("check", "-o", "json")
	co := parseCheck(e.t, out)
	for _, cat := range co.Categories {
		for _, ch := range cat.Checks {
			if strings.HasSuffix(ch.Description, "is written by the operator alone") {
				return ch.Result, ch.Error
			}
		}
	}
	e.t.Fatalf("check ran no bundle-owner check:\n%s", out)
	return "", ""
}

// bundleCRD serves trust-manager's API group and kind on the test bed (trust-manager itself is
// not part of it), so that the garbage collector follows an ownerReference to a Bundle.
const bundleCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: bundles.trust.cert-manager.io
spec:
  group: trust.cert-manager.io
  scope: Cluster
  names: {kind: Bundle, listKind: BundleList, plural: bundles, singular: bundle}
  versions:
  - name: v1alpha1
    served: true
    storage: true
    schema:
      openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
`

// trustManagerTarget is the target ConfigMap as trust-manager server-side applies it (field
// manager trust-manager, pkg/bundle/internal/target): its label, its controller ownerReference
// and, unless it is cleaning the target up, the data.
func trustManagerTarget(uid, data string) string {
	doc := `apiVersion: v1
kind: ConfigMap
metadata:
  name: linkerd-identity-trust-roots
  namespace: linkerd
  labels: {trust.cert-manager.io/bundle: linkerd-identity-trust-roots}
  ownerReferences:
  - {apiVersion: trust.cert-manager.io/v1alpha1, kind: Bundle, name: linkerd-identity-trust-roots, uid: ` + uid + `, controller: true, blockOwnerDeletion: true}
`
	if data != "" {
		doc += "data:\n  ca-bundle.crt: |\n    " + strings.ReplaceAll(strings.TrimSpace(data), "\n", "\n    ") + "\n"
	}
	return doc
}

// testAdoptFromTrustManager follows docs/adopting.md's trust-manager order on the real
// apiserver and garbage collector, with trust-manager's two writes made as it makes them
// (server-side applies as field manager trust-manager): adopt co-owns the key and stops; the
// target's cleanup then leaves the key in place; adopt again removes the Bundle's claim, so
// deleting the Bundle (foreground: the apiserver waits for the collector) keeps the ConfigMap.
func testAdoptFromTrustManager(e *e2e) {
	e.serveRotationCRD()
	e.kubectl(bundleCRD, "apply", "--server-side", "-f", "-")
	e.until("the Bundle CRD to be served", time.Minute, func(context.Context) (bool, error) {
		_, err := e.kube.Discovery().ServerResourcesForGroupVersion("trust.cert-manager.io/v1alpha1")
		return err == nil, nil
	})
	e.kubectl("apiVersion: trust.cert-manager.io/v1alpha1\nkind: Bundle\nmetadata: {name: linkerd-identity-trust-roots}\n", "apply", "--server-side", "-f", "-")
	uid := strings.TrimSpace(e.kubectl("", "get", "bundle", "linkerd-identity-trust-roots", "-o", "jsonpath={.metadata.uid}"))
	cms := e.kube.CoreV1().ConfigMaps("linkerd")
	if err := cms.Delete(e.ctx, steps.DefaultTrustRootsConfigMap, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		e.t.Fatal(err)
	}
	out, _, code := e.run("bundle")
	if code != 0 {
		e.t.Fatalf("bundle: exit %d", code)
	}
	var manifest struct {
		Data map[string]string `json:"data"`
	}
	if err := yaml.Unmarshal([]byte(out), &manifest); err != nil {
		e.t.Fatal(err)
	}
	trustManagerApply := []string{"apply", "--server-side", "--field-manager=trust-manager", "--force-conflicts", "-f", "-"}
	e.kubectl(trustManagerTarget(uid, manifest.Data[steps.TrustRootsKey]), trustManagerApply...)
	before := e.configMapBundle()
	if res, errText := e.ownerCheck(); res != "warning" || !strings.Contains(errText, "trust-manager") {
		e.t.Fatalf("before adopting, the bundle-owner check is %s (%q), want a warning naming trust-manager", res, errText)
	}

	out, errOut, code := e.run("bundle", "--adopt")
	if code != 0 || !strings.Contains(out, "co-owned") || !strings.Contains(out, "Bundle linkerd-identity-trust-roots") {
		e.t.Fatalf("adopt while trust-manager writes: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	// The Bundle's target is removed: trust-manager's cleanup apply.
	e.kubectl(trustManagerTarget(uid, ""), trustManagerApply...)
	if got := e.configMapBundle(); got != before {
		e.t.Fatalf("trust-manager's cleanup changed the co-owned bundle: %q", got)
	}
	out, errOut, code = e.run("bundle", "--adopt")
	if code != 0 || !strings.Contains(out, "adopted") {
		e.t.Fatalf("adopt after the cleanup: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	cm, err := cms.Get(e.ctx, steps.DefaultTrustRootsConfigMap, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	if len(cm.OwnerReferences) != 0 || cm.Labels["trust.cert-manager.io/bundle"] != "" {
		e.t.Fatalf("adopted ConfigMap still claimed by the Bundle: %v %v", cm.OwnerReferences, cm.Labels)
	}
	if res, errText := e.ownerCheck(); res != "success" {
		e.t.Fatalf("after adopting, the bundle-owner check is %s: %s", res, errText)
	}
	e.kubectl("", "delete", "bundle", "linkerd-identity-trust-roots", "--cascade=foreground", "--timeout=1m")
	if got := e.configMapBundle(); got != before {
		e.t.Fatalf("deleting the Bundle changed the adopted bundle: %q", got)
	}
	e.kubectl("", "delete", "crd", "bundles.trust.cert-manager.io")
	if err := cms.Delete(e.ctx, steps.DefaultTrustRootsConfigMap, metav1.DeleteOptions{}); err != nil {
		e.t.Fatal(err)
	}
	e.applyBundle()
}
