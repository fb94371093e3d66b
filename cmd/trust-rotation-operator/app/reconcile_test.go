package app

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/steps/kube/clientset"
	"github.com/linkerd/trust-rotation/steps/podindex"
	"github.com/linkerd/trust-rotation/test/pki"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
	"github.com/linkerd/trust-rotation/workflow/client"
)

// testCA is a CA certificate and its key.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

// newCA makes a CA certificate valid for another day, signed by parent (self-signed when nil).
func newCA(t *testing.T, cn string, parent *testCA) *testCA {
	t.Helper()
	var pc *x509.Certificate
	var pk crypto.Signer
	if parent != nil {
		pc, pk = parent.cert, parent.key
	}
	c, key, err := pki.Issued(cn, true, time.Now().Add(24*time.Hour), pc, pk)
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{cert: c, key: key}
}

// rotationServer is the TrustAnchorRotation API of a test: it keeps the objects it is sent,
// bumps their resourceVersion on each write, and answers a status write with a stale
// resourceVersion, or any while conflict is set, with a 409.
type rotationServer struct {
	mu       sync.Mutex
	objects  map[string]*v1alpha1.TrustAnchorRotation
	writes   []*v1alpha1.TrustAnchorRotation // the status writes accepted, in order
	rv       int
	conflict bool
	// unavailableAfter, when not 0, answers every status write past that many accepted ones
	// with a 503.
	unavailableAfter int
}

func (s *rotationServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	reply := func(code int, obj any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(obj)
	}
	tar := &v1alpha1.TrustAnchorRotation{}
	if err := json.NewDecoder(r.Body).Decode(tar); err != nil {
		reply(http.StatusBadRequest, apierrors.NewBadRequest(err.Error()).Status())
		return
	}
	gr := v1alpha1.SchemeGroupVersion.WithResource(v1alpha1.Resource).GroupResource()
	switch {
	case r.Method == http.MethodPost:
		if s.objects[tar.Name] != nil {
			reply(http.StatusConflict, apierrors.NewAlreadyExists(gr, tar.Name).Status())
			return
		}
	case r.Method == http.MethodPut && strings.HasSuffix(r.URL.Path, "/status"):
		if s.unavailableAfter > 0 && len(s.writes) >= s.unavailableAfter {
			reply(http.StatusServiceUnavailable, apierrors.NewServiceUnavailable("down").Status())
			return
		}
		if cur := s.objects[tar.Name]; s.conflict || cur == nil || cur.ResourceVersion != tar.ResourceVersion {
			reply(http.StatusConflict, apierrors.NewConflict(gr, tar.Name, nil).Status())
			return
		}
		s.writes = append(s.writes, tar.DeepCopy())
	default:
		reply(http.StatusMethodNotAllowed, apierrors.NewMethodNotSupported(gr, r.Method).Status())
		return
	}
	s.rv++
	tar.ResourceVersion = strconv.Itoa(s.rv)
	tar.APIVersion, tar.Kind = v1alpha1.SchemeGroupVersion.String(), "TrustAnchorRotation"
	s.objects[tar.Name] = tar.DeepCopy()
	reply(http.StatusOK, tar)
}

// get returns the server's copy of the named rotation, nil when it has none.
func (s *rotationServer) get(name string) *v1alpha1.TrustAnchorRotation {
	s.mu.Lock()
	defer s.mu.Unlock()
	if tar := s.objects[name]; tar != nil {
		return tar.DeepCopy()
	}
	return nil
}

// put stores tar as if created earlier, and returns it with its resourceVersion.
func (s *rotationServer) put(tar *v1alpha1.TrustAnchorRotation) *v1alpha1.TrustAnchorRotation {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rv++
	tar = tar.DeepCopy()
	tar.ResourceVersion = strconv.Itoa(s.rv)
	s.objects[tar.Name] = tar.DeepCopy()
	return tar
}

// bed is a Controller whose informer caches the test fills by hand (nothing runs them), over a
// fake clientset and a rotationServer.
type bed struct {
	t      *testing.T
	c      *Controller
	kube   *fake.Clientset
	tars   *rotationServer
	events *record.FakeRecorder
	cfg    steps.Config
}

func newBed(t *testing.T, opts Options) *bed {
	t.Helper()
	srv := &rotationServer{objects: map[string]*v1alpha1.TrustAnchorRotation{}}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	tars, err := client.NewForConfig(&rest.Config{Host: hs.URL})
	if err != nil {
		t.Fatal(err)
	}
	opts.Config, opts.RotationName = steps.DefaultConfig(), steps.DefaultRotationName
	opts.ProbeConcurrency, opts.ProbeTimeout = 1, time.Second
	kube := fake.NewClientset()
	c, err := New(clientset.Kube(kube), tars, NewMetrics(), opts)
	if err != nil {
		t.Fatal(err)
	}
	events := record.NewFakeRecorder(100)
	c.recorder = events
	return &bed{t: t, c: c, kube: kube, tars: srv, events: events, cfg: opts.Config}
}

// store puts obj into the informer's cache, as a list or a watch event would.
func (b *bed) store(inf cache.SharedIndexInformer, obj any) {
	b.t.Helper()
	if err := inf.GetStore().Update(obj); err != nil {
		b.t.Fatal(err)
	}
}

// secret is a Secret holding c's certificate.
func secret(ns, name string, c *testCA) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Data: map[string][]byte{steps.CertificateKey: steps.EncodePEM(c.cert)}}
}

// mesh caches the trust anchor, the previous anchor (nil: missing), the identity issuer and the
// trust bundle of the given anchors.
func (b *bed) mesh(anchor, previous, issuer *testCA, bundle ...*testCA) {
	b.t.Helper()
	cfg := b.cfg
	b.store(b.c.anchor, secret(cfg.CertManagerNamespace, cfg.AnchorSecret, anchor))
	if previous != nil {
		b.store(b.c.previous, secret(cfg.LinkerdNamespace, cfg.PreviousAnchorSecret, previous))
	}
	b.store(b.c.issuer, secret(cfg.LinkerdNamespace, cfg.IssuerSecret, issuer))
	certs := make([]*x509.Certificate, len(bundle))
	for i, a := range bundle {
		certs[i] = a.cert
	}
	b.store(b.c.bundle, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: cfg.LinkerdNamespace, Name: cfg.TrustRootsConfigMap},
		Data: map[string]string{steps.TrustRootsKey: steps.RenderBundle(certs...)}})
}

// rotation stores the driven TrustAnchorRotation with the given status, on the server and in
// the cache.
func (b *bed) rotation(status v1alpha1.TrustAnchorRotationStatus) *v1alpha1.TrustAnchorRotation {
	b.t.Helper()
	tar := b.tars.put(&v1alpha1.TrustAnchorRotation{ObjectMeta: metav1.ObjectMeta{Name: steps.DefaultRotationName}, Status: status})
	b.store(b.c.rotation, tar)
	return tar
}

// reconcile runs one reconcile and fails the test on an error.
func (b *bed) reconcile() time.Time {
	b.t.Helper()
	recheck, err := b.c.reconcile(context.Background())
	if err != nil {
		b.t.Fatalf("reconcile: %v", err)
	}
	return recheck
}

// trustRoots returns the trust bundle the operator wrote, "" when it wrote none.
func (b *bed) trustRoots() string {
	cm, err := b.kube.CoreV1().ConfigMaps(b.cfg.LinkerdNamespace).Get(context.Background(), b.cfg.TrustRootsConfigMap, metav1.GetOptions{})
	if err != nil {
		return ""
	}
	return cm.Data[steps.TrustRootsKey]
}

// writes returns the verbs and resources of the operator's writes to the cluster.
func (b *bed) writes() []string {
	var out []string
	for _, a := range b.kube.Actions() {
		if v := a.GetVerb(); v != "get" && v != "list" && v != "watch" {
			out = append(out, v+" "+a.GetResource().Resource)
		}
	}
	return out
}

// drainEvents returns the Events recorded so far.
func (b *bed) drainEvents() []string {
	var out []string
	for {
		select {
		case e := <-b.events.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// meshPKI is a mesh's certificates: anchors A, B and C, and the identity issuer on A.
type meshPKI struct{ a, b, c, issuerA *testCA }

func newPKI(t *testing.T) meshPKI {
	a := newCA(t, "anchor-a", nil)
	return meshPKI{a: a, b: newCA(t, "anchor-b", nil), c: newCA(t, "anchor-c", nil), issuerA: newCA(t, "issuer-a", a)}
}

// syncedBed is a bed of a mesh on anchor A alone, and renewedBed of one whose anchor was
// renewed to B; both with a TrustAnchorRotation of an empty status.
func syncedBed(t *testing.T, opts Options) (*bed, meshPKI) { return meshBed(t, opts, false) }

func renewedBed(t *testing.T, opts Options) (*bed, meshPKI) { return meshBed(t, opts, true) }

func meshBed(t *testing.T, opts Options, renewed bool) (*bed, meshPKI) {
	p := newPKI(t)
	b := newBed(t, opts)
	anchor := p.a
	if renewed {
		anchor = p.b
	}
	b.mesh(anchor, p.a, p.issuerA, p.a)
	b.rotation(v1alpha1.TrustAnchorRotationStatus{})
	return b, p
}

func bundleOf(cas ...*testCA) string {
	certs := make([]*x509.Certificate, len(cas))
	for i, c := range cas {
		certs[i] = c.cert
	}
	return steps.RenderBundle(certs...)
}

// hasEvent reports whether one of events starts with prefix ("Type Reason message").
func hasEvent(events []string, prefix string) bool {
	for _, e := range events {
		if strings.HasPrefix(e, prefix) {
			return true
		}
	}
	return false
}

// Without a TrustAnchorRotation, the operator creates it, with the defaults, and does nothing else.
func TestReconcileCreatesTheRotation(t *testing.T) {
	p := newPKI(t)
	b := newBed(t, Options{})
	b.mesh(p.a, nil, p.issuerA)
	b.reconcile()
	if b.tars.get(steps.DefaultRotationName) == nil {
		t.Fatalf("TrustAnchorRotation %s not created", steps.DefaultRotationName)
	}
	if w := b.writes(); len(w) != 0 {
		t.Errorf("wrote %v before the rotation existed", w)
	}
}

// With nothing to do, the operator publishes the status and writes nothing to the cluster.
func TestReconcileSyncedWritesOnlyTheStatus(t *testing.T) {
	b, p := syncedBed(t, Options{})
	recheck := b.reconcile()
	if w := b.writes(); len(w) != 0 {
		t.Errorf("wrote %v while synced", w)
	}
	if len(b.tars.writes) != 1 {
		t.Fatalf("%d status writes, want 1", len(b.tars.writes))
	}
	st := b.tars.writes[0].Status
	if st.Phase != v1alpha1.PhaseSynced || st.Checkpoint == nil || st.Checkpoint.Step != steps.StepDetectAnchorRotation || st.Checkpoint.Acts != 0 {
		t.Errorf("status phase %s, checkpoint %+v; want Synced at %s, no act", st.Phase, st.Checkpoint, steps.StepDetectAnchorRotation)
	}
	if events := b.drainEvents(); hasEvent(events, "Normal "+ReasonStepActed) {
		t.Errorf("events %v: an act while synced", events)
	}
	// The verdict changes when the anchor expires: observe again then.
	if want := p.a.cert.NotAfter.Add(time.Second); !recheck.Equal(want) {
		t.Errorf("recheck at %v, want the anchor's expiry %v", recheck, want)
	}
}

// A renewed anchor: the checkpoint is saved at expand-trust-bundle, then the expanded bundle is
// written, then the status projected, with an Event of the act.
func TestReconcileActsOnARenewedAnchor(t *testing.T) {
	b, p := renewedBed(t, Options{})
	b.reconcile()
	if got, want := b.trustRoots(), bundleOf(p.b, p.a); got != want {
		t.Errorf("trust bundle %q, want the expanded bundle %q", got, want)
	}
	if w := b.writes(); strings.Join(w, ",") != "patch configmaps" {
		t.Errorf("writes %v, want the trust bundle alone", w)
	}
	if len(b.tars.writes) != 2 {
		t.Fatalf("%d status writes, want the checkpoint and the projection", len(b.tars.writes))
	}
	saved, projected := b.tars.writes[0].Status, b.tars.writes[1].Status
	want := v1alpha1.Checkpoint{Step: steps.StepExpandTrustBundle, Acts: 1, Rotation: steps.Fingerprint(p.b.cert)}
	if cp := saved.Checkpoint; cp == nil || cp.Step != want.Step || cp.Acts != want.Acts || cp.Rotation != want.Rotation || cp.Token == "" || saved.Phase != "" {
		t.Errorf("saved checkpoint %+v, phase %q; want %+v with a token, before any phase", cp, saved.Phase, want)
	}
	if projected.Phase != v1alpha1.PhaseRefreshingControlPlane || projected.Checkpoint.Token != saved.Checkpoint.Token {
		t.Errorf("projected phase %s, checkpoint %+v; want RefreshingControlPlane under the saved token", projected.Phase, projected.Checkpoint)
	}
	events := b.drainEvents()
	if !hasEvent(events, "Normal "+ReasonStepActed+" step "+steps.StepExpandTrustBundle) || !hasEvent(events, "Normal "+ReasonPhaseChanged) {
		t.Errorf("events %v, want the act's and the phase change's", events)
	}
}

// The State read at an idle step holds every meshed workload once a rotation is due, as during
// a rotation: the pass that starts it may go on into a restart step within the same reconcile (a
// cross-signed rotation superseded after its reduction reaches propagate-trust-roots without
// acting) and decides there on that State. Otherwise an idle step reads only the workloads
// that carry the refresh override.
func TestStateReadForARotationDue(t *testing.T) {
	rot := steps.Facts()
	detect, _ := rot.Named(steps.StepDetectAnchorRotation)
	propagate, _ := rot.Named(steps.StepPropagateTrustRoots)
	p := newPKI(t)
	src := func(ns, name string, c *testCA) steps.Source {
		return steps.Source{Namespace: ns, Name: name, Found: true, Cert: c.cert}
	}
	synced := &steps.State{Anchor: src("cert-manager", "linkerd-trust-anchor", p.a), Previous: src("linkerd", "linkerd-previous-anchor", p.a)}
	due := &steps.State{Anchor: src("cert-manager", "linkerd-trust-anchor", p.b), Previous: src("linkerd", "linkerd-previous-anchor", p.a)}
	for _, c := range []struct {
		what string
		at   steps.Step
		s    *steps.State
		want bool
	}{
		{"idle, no rotation due", detect, synced, false},
		{"idle, the anchor renewed", detect, due, true},
		{"in a rotation", propagate, due, true},
	} {
		if got := everyWorkload(c.at, c.s); got != c.want {
			t.Errorf("%s: every workload %v, want %v", c.what, got, c.want)
		}
	}
}

// The watch event of the status a reconcile wrote once it had decided is not a change to observe;
// the checkpoint it saved on the way, and any later version (a user's edit), are.
func TestReconcileIgnoresTheEchoOfItsOwnStatus(t *testing.T) {
	b, _ := renewedBed(t, Options{})
	b.reconcile()
	if len(b.tars.writes) != 2 {
		t.Fatalf("%d status writes, want the checkpoint and the projection", len(b.tars.writes))
	}
	projected := b.tars.get(steps.DefaultRotationName)
	rv, err := strconv.Atoi(projected.ResourceVersion)
	if err != nil {
		t.Fatal(err)
	}
	at := func(rv int) *v1alpha1.TrustAnchorRotation {
		tar := projected.DeepCopy()
		tar.ResourceVersion = strconv.Itoa(rv)
		return tar
	}
	other := at(rv)
	other.Name = "another"
	for _, tc := range []struct {
		name string
		obj  *v1alpha1.TrustAnchorRotation
		poke bool
	}{
		{"the projected status", projected, false},
		{"the checkpoint saved before the act", at(rv - 1), true},
		{"a later version", at(rv + 1), true},
		{"another rotation at the same version", other, true},
	} {
		b.c.rotationUpdated(tc.obj)
		poked := b.c.queue.Len() > 0
		if poked {
			key, _ := b.c.queue.Get()
			b.c.queue.Done(key)
		}
		if poked != tc.poke {
			t.Errorf("update to %s (resourceVersion %s): poked %v, want %v", tc.name, tc.obj.ResourceVersion, poked, tc.poke)
		}
	}
}

// A failed act publishes nothing but the checkpoint saved before it, with a Warning Event.
func TestReconcileFailedAct(t *testing.T) {
	b, _ := renewedBed(t, Options{})
	b.kube.PrependReactor("patch", "configmaps", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewServiceUnavailable("down")
	})
	_, err := b.c.reconcile(context.Background())
	if err == nil || !strings.Contains(err.Error(), "step "+steps.StepExpandTrustBundle) {
		t.Fatalf("reconcile: %v, want the act's error", err)
	}
	// The checkpoint saved before the act, then the failure, published at once.
	if len(b.tars.writes) != 2 || b.tars.writes[0].Status.Phase != "" {
		t.Fatalf("status writes %d: want the checkpoint, then the failure", len(b.tars.writes))
	}
	st := b.tars.writes[1].Status
	if f := st.ActFailure; f == nil || f.Step != steps.StepExpandTrustBundle || f.Reason != "ServiceUnavailable" {
		t.Errorf("actFailure %+v, want step %s, reason ServiceUnavailable", st.ActFailure, steps.StepExpandTrustBundle)
	}
	if !strings.Contains(st.BlockingMessage, "step "+steps.StepExpandTrustBundle) || !strings.Contains(st.BlockingMessage, "applying ConfigMap") {
		t.Errorf("blocking message %q names neither the step nor the write", st.BlockingMessage)
	}
	if c := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionActFailed); c == nil || c.Status != metav1.ConditionTrue || c.Reason != "ServiceUnavailable" {
		t.Errorf("ActFailed %+v", c)
	}
	if c := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionReady); c == nil || c.Status != metav1.ConditionFalse || c.Reason != v1alpha1.ReasonActFailed {
		t.Errorf("Ready %+v, want False with reason ActFailed", c)
	}
	if events := b.drainEvents(); !hasEvent(events, "Warning "+ReasonActFailed) || hasEvent(events, "Normal "+ReasonStepActed) {
		t.Errorf("events %v, want ActFailed alone", events)
	}
}

// A reconcile whose act wrote and whose status write failed after it fails as
// failedAfterWrites, which starts the failure backoff over (Run); an act whose only write failed
// does not.
func TestReconcileStatusFailedAfterTheAct(t *testing.T) {
	b, p := renewedBed(t, Options{})
	b.tars.unavailableAfter = 1 // the checkpoint is saved, the projection is not
	_, err := b.c.reconcile(context.Background())
	if !errors.As(err, new(failedAfterWrites)) || !apierrors.IsServiceUnavailable(err) {
		t.Fatalf("reconcile: %v, want the status write's 503 as failedAfterWrites", err)
	}
	if got, want := b.trustRoots(), bundleOf(p.b, p.a); got != want {
		t.Errorf("trust bundle %q, want the act's expanded bundle %q", got, want)
	}

	b, _ = renewedBed(t, Options{})
	b.kube.PrependReactor("patch", "configmaps", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewServiceUnavailable("down")
	})
	if _, err := b.c.reconcile(context.Background()); err == nil || errors.As(err, new(failedAfterWrites)) {
		t.Errorf("reconcile with a failed act: %v, want an error that is not failedAfterWrites", err)
	}
}

// A status write that meets a conflict is not an error: the operator observes again within
// conflictRecheck.
func TestReconcileStatusConflictObservesAgainSoon(t *testing.T) {
	b, _ := syncedBed(t, Options{})
	b.tars.conflict = true
	start := time.Now()
	recheck := b.reconcile()
	if recheck.IsZero() || recheck.Before(start) || recheck.After(time.Now().Add(conflictRecheck)) {
		t.Errorf("recheck at %v, want within %v of %v", recheck, conflictRecheck, start)
	}
}

// A checkpoint save that meets a conflict is not an error either, nor an act's failure: nothing
// acted, and the operator observes again within conflictRecheck.
func TestReconcileSaveConflictObservesAgainSoon(t *testing.T) {
	b, _ := renewedBed(t, Options{})
	b.tars.conflict = true
	start := time.Now()
	recheck := b.reconcile()
	if recheck.IsZero() || recheck.Before(start) || recheck.After(time.Now().Add(conflictRecheck)) {
		t.Errorf("recheck at %v, want within %v of %v", recheck, conflictRecheck, start)
	}
	if got := b.trustRoots(); got != "" {
		t.Errorf("trust bundle written %q before the checkpoint was saved", got)
	}
	if events := b.drainEvents(); hasEvent(events, "Warning "+ReasonActFailed) {
		t.Errorf("events %v: a conflict on the save is no act's failure", events)
	}
}

// Every other TrustAnchorRotation is marked Ignored, once.
func TestReconcileMarksOtherRotationsIgnored(t *testing.T) {
	b, _ := syncedBed(t, Options{})
	b.store(b.c.rotation, b.tars.put(&v1alpha1.TrustAnchorRotation{ObjectMeta: metav1.ObjectMeta{Name: "other"}}))
	b.reconcile()
	other := b.tars.get("other")
	if !meta.IsStatusConditionTrue(other.Status.Conditions, v1alpha1.ConditionIgnored) {
		t.Fatalf("other rotation's conditions %+v, want Ignored=True", other.Status.Conditions)
	}
	if events := b.drainEvents(); !hasEvent(events, "Warning "+v1alpha1.ReasonNotDriven) {
		t.Errorf("events %v, want NotDriven", events)
	}
	b.store(b.c.rotation, other)
	before := len(b.tars.writes)
	b.reconcile()
	for _, w := range b.tars.writes[before:] {
		if w.Name == "other" {
			t.Error("marked the other rotation Ignored again")
		}
	}
}

// cpAt is a mid-rotation checkpoint at step, towards anchor.
func cpAt(step string, anchor *testCA, token string) v1alpha1.TrustAnchorRotationStatus {
	start := metav1.NewTime(time.Now().Add(-time.Hour).Truncate(time.Second))
	return v1alpha1.TrustAnchorRotationStatus{Phase: v1alpha1.PhasePropagatingTrustRoots, Checkpoint: &v1alpha1.Checkpoint{
		Step: step, Token: token, Acts: 1, Rotation: steps.Fingerprint(anchor.cert), StartTime: &start}}
}

// The previous-anchor Secret deleted mid-rotation is recreated from the trust bundle before
// anything else, and the reconcile ends there.
func TestRepairRecreatesThePreviousAnchor(t *testing.T) {
	p := newPKI(t)
	b := newBed(t, Options{})
	b.mesh(p.b, nil, p.issuerA, p.b, p.a)
	b.rotation(cpAt(steps.StepPropagateTrustRoots, p.b, ""))
	b.reconcile()
	sec, err := b.kube.CoreV1().Secrets(b.cfg.LinkerdNamespace).Get(context.Background(), b.cfg.PreviousAnchorSecret, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("previous-anchor Secret not recreated: %v", err)
	}
	if got, _ := steps.ParseCertificates(sec.Data[steps.CertificateKey]); len(got) != 1 || !got[0].Equal(p.a.cert) {
		t.Errorf("recreated with %v, want anchor A, the bundle's other anchor", got)
	}
	if len(b.tars.writes) != 0 {
		t.Errorf("%d status writes, want none: the recreated Secret comes back as a change", len(b.tars.writes))
	}
	if events := b.drainEvents(); !hasEvent(events, "Warning "+ReasonPreviousAnchorRecreated) {
		t.Errorf("events %v, want PreviousAnchorRecreated", events)
	}
}

// supersededBed is a mesh whose rotation to anchor B, at propagate-trust-roots, was superseded
// by anchor C: the bundle holds B (in flight) and A (previous).
func supersededBed(t *testing.T, opts Options) (*bed, meshPKI) {
	p := newPKI(t)
	b := newBed(t, opts)
	b.mesh(p.c, p.a, p.issuerA, p.b, p.a)
	b.rotation(cpAt(steps.StepPropagateTrustRoots, p.b, ""))
	return b, p
}

// checkJumpSaved checks the first status write: the jump's checkpoint at expand-trust-bundle
// towards anchor C, with anchor B kept in flight.
func checkJumpSaved(t *testing.T, b *bed, p meshPKI) {
	t.Helper()
	if len(b.tars.writes) == 0 {
		t.Fatal("no status write")
	}
	st := b.tars.writes[0].Status
	if cp := st.Checkpoint; cp == nil || cp.Step != steps.StepExpandTrustBundle || cp.Token != "" || cp.Rotation != steps.Fingerprint(p.c.cert) {
		t.Errorf("checkpoint saved %+v, want %s towards anchor C, no token", cp, steps.StepExpandTrustBundle)
	}
	if inFlight, err := steps.ParseInFlight(st.InFlightAnchors); err != nil || len(inFlight) != 1 || !inFlight[0].Equal(p.b.cert) {
		t.Errorf("in-flight anchors saved with the jump %v (%v), want anchor B", inFlight, err)
	}
}

// The anchor renewed again mid-rotation: the workflow jumps to expand-trust-bundle towards the
// newest anchor, saving the in-flight one with the jump's checkpoint, with a RotationSuperseded
// Event, and writes nothing else (the drifted-looking bundle is not rewritten); the next
// reconcile expands the bundle keeping it.
func TestReconcileJumpsWhenSuperseded(t *testing.T) {
	b, p := supersededBed(t, Options{})
	b.reconcile()
	if w := b.writes(); len(w) != 0 {
		t.Errorf("wrote %v to the cluster, want the status alone", w)
	}
	checkJumpSaved(t, b, p)
	if n := len(b.tars.writes); n > 2 {
		t.Errorf("%d status writes, want the jump's and at most the projection", n)
	}
	events := b.drainEvents()
	if !hasEvent(events, "Warning "+ReasonRotationSuperseded+" trust anchor renewed again") || hasEvent(events, "Normal "+ReasonStepActed) {
		t.Errorf("events %v, want RotationSuperseded and no act", events)
	}

	b.store(b.c.rotation, b.tars.get(steps.DefaultRotationName))
	b.reconcile()
	if got, want := b.trustRoots(), bundleOf(p.c, p.b, p.a); got != want {
		t.Errorf("trust bundle after the jump %q, want [C, B, A]", got)
	}
}

// Killed right after the jump's checkpoint is saved (crash point jump:<step>): the restarted
// operator finds the in-flight anchor in the status and expands the bundle keeping it.
func TestReconcileCrashAfterJump(t *testing.T) {
	b, p := supersededBed(t, Options{CrashAt: "jump:" + steps.StepPropagateTrustRoots, Crash: func() { panic(crashed{}) }})
	func() {
		defer func() {
			if r := recover(); r != (crashed{}) {
				t.Fatalf("reconcile ended with %v, want the crash", r)
			}
		}()
		_, _ = b.c.reconcile(context.Background())
	}()
	if len(b.tars.writes) != 1 || len(b.writes()) != 0 {
		t.Fatalf("%d status writes and %v at the crash, want the jump's checkpoint alone", len(b.tars.writes), b.writes())
	}
	checkJumpSaved(t, b, p)
	b.c.crash.at = ""
	b.store(b.c.rotation, b.tars.get(steps.DefaultRotationName))
	b.reconcile()
	if got, want := b.trustRoots(), bundleOf(p.c, p.b, p.a); got != want {
		t.Errorf("trust bundle after the restart %q, want [C, B, A]", got)
	}
}

// Superseded while restart-identity holds identity at 0: identity is scaled back, once its pods
// are gone, by restart-identity's own act under its checkpoint (act 2, the token recording the
// scale-up), and the rotation jumps after.
func TestReconcileScalesIdentityBackBeforeSuperseding(t *testing.T) {
	p := newPKI(t)
	b := newBed(t, Options{})
	token := steps.NewActStamp(time.Now().Add(-time.Minute)) + " scale 3"
	if tok, err := steps.ParseActToken(token); err != nil {
		t.Fatal(err)
	} else if n, up, ok := tok.Scale(); !ok || n != 3 || up {
		t.Fatalf("token %q: scale %d up %v ok %v, want a scale-down from 3", token, n, up, ok)
	}
	b.mesh(p.c, p.a, p.issuerA, p.b, p.a)
	b.rotation(cpAt(steps.StepRestartIdentity, p.b, token))
	ns, name := b.cfg.LinkerdNamespace, b.cfg.IdentityDeployment
	identity := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](0)}}
	b.store(b.c.deployments, identity)
	if err := b.kube.Tracker().Add(identity); err != nil {
		t.Fatal(err)
	}
	pod := &podindex.Pod{Namespace: ns, Name: name + "-old", UID: "u", Workload: ns + "/Deployment/" + name, ControlPlane: true, Meshed: true, Alive: true}
	b.c.index.Upsert(pod)

	b.reconcile()
	if w := b.writes(); len(w) != 0 {
		t.Errorf("wrote %v while an identity pod is left, want nothing", w)
	}
	for _, w := range b.tars.writes {
		if cp := w.Status.Checkpoint; cp.Step != steps.StepRestartIdentity || cp.Token != token {
			t.Errorf("checkpoint %+v while an identity pod is left, want restart-identity's under %q", cp, token)
		}
	}

	b.c.index.Delete(pod.Key())
	b.store(b.c.rotation, b.tars.get(steps.DefaultRotationName))
	before := len(b.tars.writes)
	b.reconcile()
	var scaled []string
	for _, a := range b.kube.Actions() {
		if pa, ok := a.(k8stesting.PatchAction); ok && a.GetSubresource() == "scale" {
			scaled = append(scaled, string(pa.GetPatch()))
		}
	}
	if len(scaled) != 1 || !strings.Contains(scaled[0], `"replicas":3`) {
		t.Errorf("scale patches %v, want identity back to 3", scaled)
	}
	if len(b.tars.writes) == before {
		t.Fatal("no checkpoint saved before scaling identity back")
	}
	if cp := b.tars.writes[before].Status.Checkpoint; cp.Step != steps.StepRestartIdentity || cp.Token != token+" up" || cp.Acts != 2 {
		t.Errorf("checkpoint saved before the scale-up %+v, want restart-identity's act 2 under %q", cp, token+" up")
	}
	if events := b.drainEvents(); !hasEvent(events, "Normal "+ReasonStepActed+" step "+steps.StepRestartIdentity) || hasEvent(events, "Warning "+ReasonRotationSuperseded) {
		t.Errorf("events %v, want restart-identity's act and no jump yet", events)
	}

	// Identity is back: the rotation jumps.
	identity.Spec.Replicas = ptr.To[int32](3)
	b.store(b.c.deployments, identity)
	b.store(b.c.rotation, b.tars.get(steps.DefaultRotationName))
	before = len(b.tars.writes)
	b.reconcile()
	if len(b.tars.writes) == before {
		t.Fatal("no status write once identity is back")
	}
	if cp := b.tars.writes[before].Status.Checkpoint; cp.Step != steps.StepExpandTrustBundle || cp.Rotation != steps.Fingerprint(p.c.cert) {
		t.Errorf("checkpoint %+v once identity is back, want the jump to %s", cp, steps.StepExpandTrustBundle)
	}
}

// A trust bundle another writer changed mid-rotation is rewritten, with one Event; changed again
// moments later it is rewritten only once the back-off has passed.
func TestRepairBundleRewritesADriftedBundle(t *testing.T) {
	p := newPKI(t)
	b := newBed(t, Options{})
	b.mesh(p.b, p.a, p.issuerA, p.b) // the previous anchor dropped by hand
	b.rotation(cpAt(steps.StepPropagateTrustRoots, p.b, ""))
	b.reconcile()
	expanded := bundleOf(p.b, p.a)
	if got := b.trustRoots(); got != expanded {
		t.Fatalf("trust bundle %q, want the expanded bundle rewritten", got)
	}
	events := b.drainEvents()
	if !hasEvent(events, "Warning "+ReasonTrustBundleDrifted) {
		t.Errorf("events %v, want TrustBundleDrifted", events)
	}
	if n := len(b.tars.writes); n == 0 || !strings.Contains(b.tars.writes[n-1].Status.BlockingMessage, "was changed by") {
		t.Errorf("status writes %d, want the drift in the blocking message", n)
	}

	// The cache still shows the drifted bundle: within the back-off, no rewrite and no Event.
	b.reconcile()
	if n := len(b.writes()); n != 1 {
		t.Errorf("%d writes, want the one rewrite within the back-off", n)
	}
	if due := b.c.bundleRewriteAt.Add(b.c.bundleRewriteBackoff()); b.c.recheckAt.IsZero() || b.c.recheckAt.After(due.Add(time.Second)) {
		t.Errorf("reconcile scheduled at %v, want one for when the back-off ends (%v)", b.c.recheckAt, due)
	}
	b.c.bundleRewriteAt = time.Now().Add(-time.Minute)
	b.reconcile()
	if n := len(b.writes()); n != 2 || b.c.bundleRewrites != 2 {
		t.Errorf("%d writes, %d rewrites in a row; want the second rewrite once the back-off passed", n, b.c.bundleRewrites)
	}
	if events := b.drainEvents(); hasEvent(events, "Warning "+ReasonTrustBundleDrifted) {
		t.Errorf("events %v: the same drift reported twice", events)
	}
}

// A trust bundle changed under a step that restarted pods: the step starts over first — the
// workflow's jump to itself, saved, with a Warning Event — and the bundle is rewritten only in
// the next reconcile, so a crash before the jump's save rewrote nothing, and one after it loses
// nothing: the restarted operator rewrites the bundle under the fresh token.
func TestRepairBundleStartsTheStepOverBeforeTheRewrite(t *testing.T) {
	for _, crash := range []bool{false, true} {
		t.Run(fmt.Sprintf("crash after the jump %v", crash), func(t *testing.T) {
			p := newPKI(t)
			opts := Options{}
			if crash {
				opts = Options{CrashAt: "jump:" + steps.StepRefreshControlPlane, Crash: func() { panic(crashed{}) }}
			}
			b := newBed(t, opts)
			b.mesh(p.b, p.a, p.issuerA, p.a) // reverted to the old anchor alone by another writer
			b.rotation(cpAt(steps.StepRefreshControlPlane, p.b, steps.NewActStamp(time.Now().Add(-time.Minute))))
			func() {
				defer func() {
					if r := recover(); crash && r != (crashed{}) || !crash && r != nil {
						t.Fatalf("reconcile ended with %v (crash %v)", r, crash)
					}
				}()
				_, _ = b.c.reconcile(context.Background())
			}()
			if n := len(b.writes()); n != 0 {
				t.Fatalf("writes %v in the reconcile that started the step over, want none", b.writes())
			}
			if len(b.tars.writes) == 0 {
				t.Fatal("no status write, want the jump's checkpoint")
			}
			if cp := b.tars.writes[0].Status.Checkpoint; cp.Step != steps.StepRefreshControlPlane || cp.Token != "" || cp.Acts != 0 {
				t.Fatalf("checkpoint %+v, want %s again with a fresh token", cp, steps.StepRefreshControlPlane)
			}
			if events := b.drainEvents(); !crash && !hasEvent(events, "Warning "+steps.ReasonStepStartedOver) {
				t.Errorf("events %v, want the start over", events)
			}

			b.c.crash.at = ""
			b.store(b.c.rotation, b.tars.get(steps.DefaultRotationName))
			b.reconcile()
			if got, want := b.trustRoots(), bundleOf(p.b, p.a); got != want {
				t.Errorf("trust bundle %q after the jump, want the expanded bundle rewritten", got)
			}
			cp := b.tars.get(steps.DefaultRotationName).Status.Checkpoint
			if cp.Step != steps.StepRefreshControlPlane || cp.Token != "" {
				t.Errorf("checkpoint %+v after the rewrite, want %s waiting under no token", cp, steps.StepRefreshControlPlane)
			}
			if events := b.drainEvents(); hasEvent(events, "Warning "+steps.ReasonStepStartedOver) {
				t.Errorf("events %v after the rewrite: the step started over twice", events)
			}
		})
	}
}

// crashed is what a test's crash hook panics with: the process stops there.
type crashed struct{}

// The crash hook (Options.CrashAt) stops the operator exactly where it names: after the
// checkpoint is saved and before the act, right after the act's write, or after the act and
// before the status projection and its Event. A restarted operator acts again under the saved
// token.
func TestReconcileCrashPoints(t *testing.T) {
	for _, tc := range []struct {
		point   string
		written bool // whether the expanded bundle was written when it crashed
	}{
		{"save", false},
		{"write", true},
		{"acted", true},
	} {
		t.Run(tc.point, func(t *testing.T) {
			b, p := renewedBed(t, Options{CrashAt: tc.point + ":" + steps.StepExpandTrustBundle, Crash: func() { panic(crashed{}) }})
			expanded := bundleOf(p.b, p.a)
			written := map[bool]string{true: expanded}[tc.written]
			func() {
				defer func() {
					if r := recover(); r != (crashed{}) {
						t.Fatalf("reconcile ended with %v, want the crash", r)
					}
				}()
				_, _ = b.c.reconcile(context.Background())
			}()
			if got := b.trustRoots(); got != written {
				t.Errorf("trust bundle at the crash %q, want %q", got, written)
			}
			if len(b.tars.writes) != 1 || b.tars.writes[0].Status.Checkpoint.Step != steps.StepExpandTrustBundle || b.tars.writes[0].Status.Phase != "" {
				t.Fatalf("status writes at the crash %d, want the checkpoint alone", len(b.tars.writes))
			}
			if events := b.drainEvents(); len(events) != 0 {
				t.Errorf("events %v before the crash, want none", events)
			}

			// The restarted operator observes the saved checkpoint and, the bundle not in its
			// cache yet, acts again under the same token.
			saved := b.tars.writes[0].Status.Checkpoint
			b.c.crash.at = "" // the restarted operator runs without the hook
			b.store(b.c.rotation, b.tars.get(steps.DefaultRotationName))
			b.reconcile()
			again := b.tars.writes[1].Status.Checkpoint
			if again.Token != saved.Token || again.Acts != 2 {
				t.Errorf("after the restart the checkpoint is %+v, want the token %s at act 2", again, saved.Token)
			}
			if got := b.trustRoots(); got != expanded {
				t.Errorf("trust bundle %q after the restart, want %q", got, expanded)
			}
		})
	}
}
