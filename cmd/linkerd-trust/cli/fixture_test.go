package cli

import (
	"bytes"
	"context"
	"crypto"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	cmfake "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned/fake"
	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	fakedynamic "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/linkerd/trust-rotation/cmd/internal/version"
	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/steps/observe"
	"github.com/linkerd/trust-rotation/steps/podindex"
	"github.com/linkerd/trust-rotation/steps/probe"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/ with the current output")

// testNow is the clock of every fixture: the fixture certificates (testdata/pki, certificates
// only, no keys) are valid then.
var testNow = time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)

// golden compares got with testdata/<name>.golden, or rewrites it with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./cmd/linkerd-trust/... -update to create it)", err)
	}
	if string(want) != got {
		t.Errorf("output differs from %s (run with -update to accept it):\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

func certPEM(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "pki", name+".pem"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func cert(t *testing.T, name string) *x509.Certificate {
	t.Helper()
	certs, err := steps.ParseCertificates(certPEM(t, name))
	if err != nil {
		t.Fatal(err)
	}
	return certs[0]
}

var linkGVR = observe.LinkGVR("v1alpha3")

// linkedRemote is a linked cluster's TrustAnchorRotation whose operator reports anchors
// [current, previous], its data plane converged on a bundle holding both.
func linkedRemote(current, previous string) fakeRotations {
	return fakeRotations{"cluster": {
		ObjectMeta: metav1.ObjectMeta{Name: "cluster", Generation: 1},
		Status: v1alpha1.TrustAnchorRotationStatus{
			ObservedGeneration: 1, Phase: v1alpha1.PhaseWaitingForRemoteClusters, PreviousAnchorFingerprint: previous,
			SourceFingerprints:   []v1alpha1.SourceFingerprint{{Fingerprint: current}, {Fingerprint: previous}},
			Checkpoint:           &v1alpha1.Checkpoint{Step: steps.StepWaitForRemoteTrustRoots, Rotation: current},
			TrustBundle:          &v1alpha1.ConvergenceStatus{Status: v1alpha1.Converged, ConvergedPods: 5, TargetPods: 5, Anchors: []string{current, previous}},
			WorkloadCertificates: &v1alpha1.ConvergenceStatus{Status: v1alpha1.Converged, ConvergedPods: 8, TargetPods: 8, Anchors: []string{previous}},
		},
	}}
}

// linkedLive is linkedMidRotation with the linked clusters behind it, every local pod restarted
// onto the expanded bundle: a Link to east, whose TrustAnchorRotation reports its data plane
// converged on the new anchor, and north in spec.remoteClusters, whose credentials Secret is
// missing.
func linkedLive(f *fixture) {
	linkedMidRotation(f)
	hash := steps.BundleHash(steps.RenderBundle(cert(f.t, "anchor-new"), cert(f.t, "anchor-old")))
	for _, o := range f.kube {
		if p, ok := o.(*corev1.Pod); ok {
			p.Annotations[steps.TrustRootSHA256Annotation] = hash
		}
	}
	nw, old := steps.Fingerprint(cert(f.t, "anchor-new")), steps.Fingerprint(cert(f.t, "anchor-old"))
	f.rotations["cluster"].Status.PreviousAnchorFingerprint = old
	f.rotations["cluster"].Spec.RemoteClusters = []v1alpha1.RemoteCluster{{Name: "north", KubeconfigSecret: v1alpha1.SecretKeyRef{Name: "north-kubeconfig", Key: "kubeconfig"}}}
	f.links = append(f.links, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": linkGVR.GroupVersion().String(), "kind": "Link",
		"metadata": map[string]any{"name": "east", "namespace": observe.DefaultMulticlusterNamespace},
		"spec":     map[string]any{"targetClusterName": "east", "clusterCredentialsSecret": "cluster-credentials-east"},
	}})
	f.remotes = map[string]fakeRotations{"east": linkedRemote(nw, old)}
}

// fakeRotations serves TrustAnchorRotations from a map.
type fakeRotations map[string]*v1alpha1.TrustAnchorRotation

func (f fakeRotations) Get(_ context.Context, name string) (*v1alpha1.TrustAnchorRotation, error) {
	if tar, ok := f[name]; ok {
		return tar.DeepCopy(), nil
	}
	return nil, apierrors.NewNotFound(schema.GroupResource{Group: v1alpha1.GroupName, Resource: v1alpha1.Resource}, name)
}

// fixture is a fake cluster with a healthy installation: cert-manager, the Linkerd PKI on
// anchor-old and issuer-old, the bundle, the control plane, the operator, and meshed pods.
type fixture struct {
	t         *testing.T
	kube      []runtime.Object
	cm        []runtime.Object
	rotations fakeRotations
	// discovery lists the served API groups; tests remove entries to simulate missing CRDs.
	discovery []*metav1.APIResourceList
	// probes are the live-certificate probe results by pod key; a missing pod is unreachable.
	probes map[string]probe.ProbeResult
	// forbid are resources ("secrets") every request for is answered Forbidden, as RBAC does
	// for a user without access to them.
	forbid []string
	// kubeClients are the Kubernetes clients the commands were given, with the requests they made.
	kubeClients []*kubefake.Clientset
	// cmClients are the cert-manager clients the commands were given.
	cmClients []*cmfake.Clientset
	// operatorDenied are the "verb resource" pairs the apiserver's authorization denies the
	// operator's ServiceAccount, as SubjectAccessReviews answer them; everything else is allowed.
	operatorDenied []string
	// links are the Links of linkerd-multicluster; remotes the TrustAnchorRotations of each
	// linked cluster, by its name: a cluster not there has no credentials Secret.
	links   []runtime.Object
	remotes map[string]fakeRotations
}

func newFixture(t *testing.T) *fixture {
	f := &fixture{t: t, rotations: fakeRotations{}, probes: map[string]probe.ProbeResult{}}
	f.discovery = []*metav1.APIResourceList{
		{GroupVersion: "cert-manager.io/v1", APIResources: []metav1.APIResource{{Name: "certificates"}, {Name: "issuers"}, {Name: "clusterissuers"}}},
		{GroupVersion: "trust.linkerd.io/v1alpha1", APIResources: []metav1.APIResource{{Name: "trustanchorrotations"}}},
	}
	oldAnchor := certPEM(t, "anchor-old")
	f.kube = append(f.kube,
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "linkerd"}},
		secret("cert-manager", "linkerd-trust-anchor", oldAnchor),
		secret("linkerd", "linkerd-previous-anchor", oldAnchor),
		secret("linkerd", "linkerd-identity-issuer", certPEM(t, "issuer-old")),
		bundleConfigMap(steps.RenderBundle(cert(t, "anchor-old"))),
		available(deployment("cert-manager", "cert-manager", map[string]string{"app.kubernetes.io/name": "cert-manager", "app.kubernetes.io/component": "controller"})),
		available(deployment("linkerd", DefaultOperatorDeployment, map[string]string{versionLabel: version.String()})),
		&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "linkerd", Name: DefaultOperatorLease},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("operator-0_1"), RenewTime: &metav1.MicroTime{Time: testNow.Add(-5 * time.Second)}}},
	)
	for _, name := range steps.DefaultConfig().ControlPlane() {
		f.kube = append(f.kube, available(deployment("linkerd", name, nil)))
	}
	ready := cmapi.CertificateCondition{Type: cmapi.CertificateConditionReady, Status: cmmeta.ConditionTrue, Reason: "Ready", Message: "Certificate is up to date and has not expired", ObservedGeneration: 1}
	issuerReady := cmapi.IssuerCondition{Type: cmapi.IssuerConditionReady, Status: cmmeta.ConditionTrue, Reason: "IsReady", ObservedGeneration: 1}
	renewal := metav1.NewTime(time.Date(2026, 6, 2, 0, 0, 0, 0, time.UTC))
	f.cm = append(f.cm,
		&cmapi.Issuer{ObjectMeta: metav1.ObjectMeta{Namespace: "cert-manager", Name: "linkerd-trust-root-issuer", Generation: 1},
			Spec:   cmapi.IssuerSpec{IssuerConfig: cmapi.IssuerConfig{SelfSigned: &cmapi.SelfSignedIssuer{}}},
			Status: cmapi.IssuerStatus{Conditions: []cmapi.IssuerCondition{issuerReady}}},
		&cmapi.Certificate{ObjectMeta: metav1.ObjectMeta{Namespace: "cert-manager", Name: "linkerd-trust-anchor", Generation: 1, UID: "uid-anchor-certificate"},
			Spec: cmapi.CertificateSpec{IsCA: true, SecretName: "linkerd-trust-anchor", PrivateKey: &cmapi.CertificatePrivateKey{RotationPolicy: cmapi.RotationPolicyAlways},
				IssuerRef: cmmeta.IssuerReference{Name: "linkerd-trust-root-issuer", Kind: cmapi.IssuerKind}},
			Status: cmapi.CertificateStatus{Conditions: []cmapi.CertificateCondition{ready}}},
		&cmapi.ClusterIssuer{ObjectMeta: metav1.ObjectMeta{Name: "linkerd-identity-issuer", Generation: 1},
			Spec:   cmapi.IssuerSpec{IssuerConfig: cmapi.IssuerConfig{CA: &cmapi.CAIssuer{SecretName: "linkerd-trust-anchor"}}},
			Status: cmapi.IssuerStatus{Conditions: []cmapi.IssuerCondition{issuerReady}}},
		&cmapi.Certificate{ObjectMeta: metav1.ObjectMeta{Namespace: "linkerd", Name: "linkerd-identity-issuer", Generation: 1, UID: "uid-issuer-certificate"},
			Spec: cmapi.CertificateSpec{IsCA: true, SecretName: "linkerd-identity-issuer",
				IssuerRef: cmmeta.IssuerReference{Name: "linkerd-identity-issuer", Kind: cmapi.ClusterIssuerKind}},
			Status: cmapi.CertificateStatus{Conditions: []cmapi.CertificateCondition{ready}, RenewalTime: &renewal}},
	)
	f.issue("cert-manager", "linkerd-trust-anchor", oldAnchor)
	f.issue("linkerd", "linkerd-identity-issuer", certPEM(t, "issuer-old"))
	since := metav1.NewTime(testNow.Add(-72 * time.Hour))
	f.rotations["cluster"] = &v1alpha1.TrustAnchorRotation{
		ObjectMeta: metav1.ObjectMeta{Name: "cluster"},
		Status: v1alpha1.TrustAnchorRotationStatus{
			Phase: v1alpha1.PhaseSynced, LastPhaseTransitionTime: &since,
			ActiveIssuerFingerprint:   steps.Fingerprint(cert(t, "issuer-old")),
			PreviousAnchorFingerprint: steps.Fingerprint(cert(t, "anchor-old")),
			TrustBundle:               &v1alpha1.ConvergenceStatus{Status: v1alpha1.Converged, ConvergedPods: 3, TargetPods: 3},
			WorkloadCertificates:      &v1alpha1.ConvergenceStatus{Status: v1alpha1.Converged, ConvergedPods: 4, TargetPods: 4},
			Checkpoint:                &v1alpha1.Checkpoint{Step: steps.StepDetectAnchorRotation},
			NextRotation:              fixtureDeadline(testNow.Add(200 * 24 * time.Hour)),
			Conditions: []metav1.Condition{{Type: v1alpha1.ConditionOutOfOrderIssuerRotation, Status: metav1.ConditionFalse,
				Reason: v1alpha1.ReasonIssuerRotationInOrder, Message: v1alpha1.MessageIssuerRotationInOrder, LastTransitionTime: since}},
		},
	}
	hash := steps.BundleHash(steps.RenderBundle(cert(t, "anchor-old")))
	f.addPod("linkerd", "linkerd-identity-5d8f9c7b6-aaaaa", "linkerd-identity", "identity", hash, "127.1.0.2")
	f.addPod("emojivoto", "web-7c9d8f6b5-qx2lp", "web", "", hash, "127.1.0.3")
	f.addPod("emojivoto", "web-7c9d8f6b5-zt7wn", "web", "", hash, "127.1.0.4")
	f.addPod("emojivoto", "voting-6b4d9f8c7-m2k9s", "voting", "", hash, "127.1.0.5")
	// voting opted out of native sidecars (config.linkerd.io/proxy-enable-native-sidecar: "false"):
	// its proxy is in spec.containers, as every Linkerd before edge-26.5.2 injected it.
	pod := f.kube[len(f.kube)-1].(*corev1.Pod)
	pod.Spec.Containers = append(pod.Spec.Containers, pod.Spec.InitContainers[0])
	pod.Spec.Containers[len(pod.Spec.Containers)-1].RestartPolicy = nil
	pod.Spec.InitContainers = nil
	return f
}

// addPod adds a running meshed pod of a Deployment, its proxy injected as current Linkerd does
// (a native sidecar), and a probe that finds issuer-old.
func (f *fixture) addPod(ns, name, deploy, component, hash, ip string) {
	hashSuffix := name[len(deploy)+1 : strings.LastIndex(name, "-")]
	labels := map[string]string{steps.ControlPlaneNSLabel: "linkerd", "pod-template-hash": hashSuffix}
	if component != "" {
		labels[steps.ControlPlaneComponentLabel] = component
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + name), Labels: labels,
			Annotations:     map[string]string{steps.TrustRootSHA256Annotation: hash},
			OwnerReferences: []metav1.OwnerReference{{Kind: "ReplicaSet", Name: deploy + "-" + hashSuffix, Controller: ptr.To(true), APIVersion: "apps/v1"}}},
		Spec: corev1.PodSpec{ServiceAccountName: deploy,
			InitContainers: []corev1.Container{{Name: steps.ProxyContainerName, RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways),
				Ports: []corev1.ContainerPort{{Name: steps.AdminPortName, ContainerPort: 4191}}}},
			Containers: []corev1.Container{{Name: "app"}},
		},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip},
	}
	f.kube = append(f.kube, pod)
	issuer := cert(f.t, "issuer-old")
	f.probes[ns+"/"+name] = probe.ProbeResult{Issuer: steps.Fingerprint(issuer), Chain: []*x509.Certificate{issuer}}
}

// issue does what cert-manager does when it issues the Certificate ns/name (whose Secret has
// the same name): a CertificateRequest of the next revision, controlled by the Certificate, holds
// the certificate, the Secret gets it with a key, and the Certificate's status moves to that
// revision and describes the certificate.
func (f *fixture) issue(ns, name string, crtPEM []byte) {
	f.replace(secret(ns, name, crtPEM))
	crt := f.certificate(ns, name)
	rev := 1
	if crt.Status.Revision != nil {
		rev = *crt.Status.Revision + 1
	}
	crt.Status.Revision = &rev
	crt.Status.NotAfter = nil
	if certs, err := steps.ParseCertificates(crtPEM); err == nil {
		crt.Status.NotAfter = ptr.To(metav1.NewTime(certs[0].NotAfter))
	}
	f.cm = append(f.cm, &cmapi.CertificateRequest{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("%s-%d", name, rev),
			Annotations:     map[string]string{cmapi.CertificateRequestRevisionAnnotationKey: strconv.Itoa(rev)},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(crt, cmapi.SchemeGroupVersion.WithKind(cmapi.CertificateKind))}},
		Spec:   cmapi.CertificateRequestSpec{IsCA: true, IssuerRef: crt.Spec.IssuerRef},
		Status: cmapi.CertificateRequestStatus{Certificate: crtPEM},
	})
}

// certificate returns the cert-manager Certificate ns/name of the fixture, to change it.
func (f *fixture) certificate(ns, name string) *cmapi.Certificate {
	for _, o := range f.cm {
		if c, ok := o.(*cmapi.Certificate); ok && c.Namespace == ns && c.Name == name {
			return c
		}
	}
	f.t.Fatalf("no Certificate %s/%s in the fixture", ns, name)
	return nil
}

// secretRequests lists the requests for Secrets the commands made, as "verb namespace/name".
func (f *fixture) secretRequests() []string {
	var out []string
	for _, kube := range f.kubeClients {
		for _, a := range kube.Actions() {
			if a.GetResource().Resource != "secrets" {
				continue
			}
			name := ""
			if g, ok := a.(clienttesting.GetAction); ok {
				name = g.GetName()
			}
			out = append(out, a.GetVerb()+" "+a.GetNamespace()+"/"+name)
		}
	}
	return out
}

// replace swaps the object of the same kind, namespace and name.
func (f *fixture) replace(obj runtime.Object) {
	m := obj.(metav1.Object)
	for i, o := range f.kube {
		if om := o.(metav1.Object); om.GetName() == m.GetName() && om.GetNamespace() == m.GetNamespace() && sameKind(o, obj) {
			f.kube[i] = obj
			return
		}
	}
	f.kube = append(f.kube, obj)
}

// remove deletes a Kubernetes or cert-manager object by kind, namespace and name.
func (f *fixture) remove(kind runtime.Object, ns, name string) {
	drop := func(objs []runtime.Object) []runtime.Object {
		var out []runtime.Object
		for _, o := range objs {
			if om := o.(metav1.Object); om.GetName() == name && om.GetNamespace() == ns && sameKind(o, kind) {
				continue
			}
			out = append(out, o)
		}
		return out
	}
	f.kube, f.cm = drop(f.kube), drop(f.cm)
}

func sameKind(a, b runtime.Object) bool { return reflect.TypeOf(a) == reflect.TypeOf(b) }

func secret(ns, name string, crt []byte) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{"tls.crt": crt, "tls.key": []byte("not a key")}}
}

func bundleConfigMap(bundle string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "linkerd", Name: "linkerd-identity-trust-roots"},
		Data: map[string]string{"ca-bundle.crt": bundle}}
}

func deployment(ns, name string, labels map[string]string) *appsv1.Deployment {
	return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels, Generation: 1},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To(int32(1))}}
}

func available(d *appsv1.Deployment) *appsv1.Deployment {
	d.Status = appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: 1, UpdatedReplicas: 1, ReadyReplicas: 1, AvailableReplicas: 1,
		Conditions: []appsv1.DeploymentCondition{{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue, Reason: "MinimumReplicasAvailable"}}}
	return d
}

// env returns an Env over the fixture's fake clients, with a fixed clock, anchor stand-in and
// probe results.
func (f *fixture) env(out, errOut *bytes.Buffer) *Env {
	return &Env{
		Out: out, Err: errOut,
		Now: func() time.Time { return testNow },
		Clients: func(*KubeFlags) (*Clients, error) {
			kube := kubefake.NewClientset(f.kube...)
			kube.Resources = f.discovery
			for _, res := range f.forbid {
				kube.PrependReactor("*", res, func(a clienttesting.Action) (bool, runtime.Object, error) {
					name := ""
					if g, ok := a.(clienttesting.GetAction); ok {
						name = g.GetName()
					}
					return true, nil, apierrors.NewForbidden(corev1.Resource(res), name,
						fmt.Errorf(`User "alice" cannot %s resource %q in API group "" in the namespace %q`, a.GetVerb(), res, a.GetNamespace()))
				})
			}
			kube.PrependReactor("create", "subjectaccessreviews", func(a clienttesting.Action) (bool, runtime.Object, error) {
				review := a.(clienttesting.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview).DeepCopy()
				attrs := review.Spec.ResourceAttributes
				review.Status.Allowed = !slices.Contains(f.operatorDenied, attrs.Verb+" "+attrs.Resource)
				return true, review, nil
			})
			f.kubeClients = append(f.kubeClients, kube)
			cm := cmfake.NewClientset(f.cm...)
			f.cmClients = append(f.cmClients, cm)
			cl := &Clients{Kube: kube, CertManager: cm, Rotations: f.rotations}
			if len(f.links) > 0 {
				kube.Resources = append(kube.Resources, &metav1.APIResourceList{GroupVersion: linkGVR.GroupVersion().String(),
					APIResources: []metav1.APIResource{{Name: linkGVR.Resource, Namespaced: true, Kind: "Link"}}})
				cl.Dynamic = fakedynamic.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{linkGVR: "LinkList"}, f.links...)
			}
			cl.Remote = func(_ context.Context, ns string, t observe.RemoteTarget) (observe.RotationGetter, error) {
				if r, ok := f.remotes[t.Name]; ok {
					return r, nil
				}
				return nil, fmt.Errorf("credentials Secret %s/%s not found", ns, t.Secret)
			}
			return cl, nil
		},
		IsTerminal: func() bool { return false },
		NewAnchor: func(*x509.Certificate, time.Time) (*x509.Certificate, crypto.Signer, error) {
			return cert(f.t, "anchor-new"), nil, nil
		},
		// issuer-new, signed by anchor-new: the stand-in is the same at every run.
		NewIssuer: func(*x509.Certificate, *x509.Certificate, crypto.Signer, time.Time) (*x509.Certificate, error) {
			return cert(f.t, "issuer-new"), nil
		},
		Probe: func(_ context.Context, pods []*podindex.Pod, progress func(int, int)) map[string]probe.ProbeResult {
			out := map[string]probe.ProbeResult{}
			for _, p := range pods {
				if !probe.Probeable(p) {
					continue
				}
				r, ok := f.probes[p.Key()]
				if !ok {
					r = probe.ProbeResult{Err: errors.New("dial tcp " + p.IP + ":4191: connect: connection refused")}
				}
				out[p.Key()] = r
			}
			return out
		},
	}
}

// run runs the CLI over the fixture and returns its stdout, stderr and exit code.
func (f *fixture) run(args ...string) (string, string, int) {
	var out, errOut bytes.Buffer
	code := Main(context.Background(), args, f.env(&out, &errOut))
	return out.String(), errOut.String(), code
}

// midRotation puts the fixture in PropagatingTrustRoots: the anchor renewed to anchor-new, the
// bundle expanded, the control plane restarted, one workload not restarted yet.
func (f *fixture) midRotation() {
	t := f.t
	f.issue("cert-manager", "linkerd-trust-anchor", certPEM(t, "anchor-new"))
	expanded := steps.RenderBundle(cert(t, "anchor-new"), cert(t, "anchor-old"))
	f.replace(bundleConfigMap(expanded))
	hash := steps.BundleHash(expanded)
	for i, o := range f.kube {
		if p, ok := o.(*corev1.Pod); ok && !strings.HasPrefix(p.Name, "voting-") {
			p.Annotations[steps.TrustRootSHA256Annotation] = hash
			f.kube[i] = p
		}
	}
	delete(f.probes, "emojivoto/web-7c9d8f6b5-zt7wn") // its proxy does not answer
	since := metav1.NewTime(testNow.Add(-90 * time.Minute))
	tar := f.rotations["cluster"]
	tar.Status.Phase = v1alpha1.PhasePropagatingTrustRoots
	tar.Status.LastPhaseTransitionTime = &since
	tar.Status.BlockingMessage = "Waiting for 1 pod(s) to converge on the expanded trust bundle; restart: emojivoto/Deployment/voting (1 pod)"
	tar.Status.TrustBundle = &v1alpha1.ConvergenceStatus{Status: v1alpha1.Converging, ConvergedPods: 2, TargetPods: 3}
	tar.Status.Checkpoint = &v1alpha1.Checkpoint{Step: steps.StepPropagateTrustRoots, Rotation: steps.Fingerprint(cert(t, "anchor-new")), StartTime: &since}
}

// rejectedChains is midRotation where two pods' addresses answer with a chain that is not
// theirs: identity's with another workload's certificate, and a web pod's with a certificate for
// its identity but without its key.
func rejectedChains(f *fixture) {
	f.midRotation()
	f.probes["linkerd/linkerd-identity-5d8f9c7b6-aaaaa"] = probe.ProbeResult{Err: &probe.ChainRejectedError{
		Expected:  "linkerd-identity.linkerd.serviceaccount.identity.linkerd.cluster.local",
		Presented: []string{"web.emojivoto.serviceaccount.identity.linkerd.cluster.local"}}}
	f.probes["emojivoto/web-7c9d8f6b5-qx2lp"] = probe.ProbeResult{Err: &probe.ChainRejectedError{
		Expected:  "web.emojivoto.serviceaccount.identity.linkerd.cluster.local",
		Presented: []string{"web.emojivoto.serviceaccount.identity.linkerd.cluster.local"},
		Proof:     errors.New("tls: invalid signature by the server certificate: ECDSA verification failure")}}
}

// issuerRenewedEarly is midRotation at restart-identity: every pod converged on the expanded
// bundle, and the identity issuer already renewed onto the new anchor (the user renewed it right
// after the anchor), so identity is to be scaled to 0 and back.
func issuerRenewedEarly(f *fixture) {
	t := f.t
	f.midRotation()
	hash := steps.BundleHash(steps.RenderBundle(cert(t, "anchor-new"), cert(t, "anchor-old")))
	for _, o := range f.kube {
		if p, ok := o.(*corev1.Pod); ok {
			p.Annotations[steps.TrustRootSHA256Annotation] = hash
		}
	}
	f.issue("linkerd", "linkerd-identity-issuer", certPEM(t, "issuer-new"))
	tar := f.rotations["cluster"]
	tar.Status.BlockingMessage = ""
	tar.Status.TrustBundle = &v1alpha1.ConvergenceStatus{Status: v1alpha1.Converged, ConvergedPods: 3, TargetPods: 3}
	tar.Status.Checkpoint.Step = steps.StepRestartIdentity
}

// superseded is midRotation with the trust anchor renewed again (to anchor-soon) before the
// rotation to anchor-new finished: the workflow jumps back to expand-trust-bundle, keeping
// anchor-new in flight.
func superseded(f *fixture) {
	f.midRotation()
	f.issue("cert-manager", "linkerd-trust-anchor", certPEM(f.t, "anchor-soon"))
}

// linkedMidRotation is midRotation in a cluster linked to two others, parked at the first remote
// gate: east has converged, north's pods are behind.
func linkedMidRotation(f *fixture) {
	t := f.t
	f.midRotation()
	nw, old := steps.Fingerprint(cert(t, "anchor-new")), steps.Fingerprint(cert(t, "anchor-old"))
	read := metav1.NewTime(testNow.Add(-12 * time.Second))
	tar := f.rotations["cluster"]
	tar.Status.Phase = v1alpha1.PhaseWaitingForRemoteClusters
	tar.Status.Checkpoint.Step = steps.StepWaitForRemoteTrustRoots
	tar.Status.BlockingMessage = "Waiting for linked clusters: cluster north: 3 of 5 meshed pod(s) run with a trust bundle holding the new anchor " + nw[:12] + " (phase PropagatingTrustRoots)"
	tar.Status.RemoteClusters = []v1alpha1.RemoteClusterStatus{
		{Name: "east", Source: "Link linkerd-multicluster/east", Phase: v1alpha1.PhaseWaitingForRemoteClusters, Rotation: nw, Anchors: []string{nw, old},
			TrustBundle:          &v1alpha1.ConvergenceStatus{Status: v1alpha1.Converged, ConvergedPods: 5, TargetPods: 5, Anchors: []string{nw, old}},
			WorkloadCertificates: &v1alpha1.ConvergenceStatus{Status: v1alpha1.Converged, ConvergedPods: 8, TargetPods: 8, Anchors: []string{old}},
			LastObserved:         &read},
		{Name: "north", Source: "spec.remoteClusters", Phase: v1alpha1.PhasePropagatingTrustRoots, Rotation: nw, Anchors: []string{nw, old},
			TrustBundle:          &v1alpha1.ConvergenceStatus{Status: v1alpha1.Converging, ConvergedPods: 3, TargetPods: 5, Anchors: []string{nw, old}},
			WorkloadCertificates: &v1alpha1.ConvergenceStatus{Status: v1alpha1.Converged, ConvergedPods: 8, TargetPods: 8, Anchors: []string{old}},
			LastObserved:         &read, BlockingReason: steps.ReasonRemoteTrustBundlePending,
			BlockingMessage: "cluster north: 3 of 5 meshed pod(s) run with a trust bundle holding the new anchor " + nw[:12] + " (phase PropagatingTrustRoots)"},
	}
}

// withoutRotationCRD is a cluster the extension is not installed on: the API serves no
// TrustAnchorRotation (cert-manager may be there or not).
func withoutRotationCRD(f *fixture) {
	f.discovery = f.discovery[:1]
	f.rotations = fakeRotations{}
}
