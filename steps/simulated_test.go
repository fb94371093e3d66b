package steps

import (
	"context"
	"crypto/x509"
	"errors"
	"reflect"
	"testing"
)

// refusing is a recorder that refuses every write.
type refusing struct{}

var errRefused = errors.New("refused")

func (refusing) WritePreviousAnchor(context.Context, *x509.Certificate) error { return errRefused }
func (refusing) WriteTrustRoots(context.Context, string) error                { return errRefused }
func (refusing) RestartDeployment(context.Context, string, string, string) error {
	return errRefused
}
func (refusing) DeletePods(context.Context, string, []string) error { return errRefused }
func (refusing) ScaleDeployment(context.Context, string, string, int32) error {
	return errRefused
}
func (refusing) RestartWorkload(context.Context, WorkloadRef, string, map[string]*string) error {
	return errRefused
}
func (refusing) AnnotateWorkload(context.Context, WorkloadRef, map[string]string) error {
	return errRefused
}
func (refusing) EvictPods(context.Context, WorkloadRef, []string) (int, error) { return 0, errRefused }
func (refusing) RenewCertificate(context.Context, string, string) error        { return errRefused }

// everyWrite makes each Writer method once.
func everyWrite(ctx context.Context, w Writer, p pki) []error {
	ref, _ := ParseWorkload("a/StatefulSet/db")
	marker := "m"
	_, evictErr := w.EvictPods(ctx, ref, []string{"db-0"})
	return []error{
		w.WritePreviousAnchor(ctx, p.newAnchor.cert),
		w.WriteTrustRoots(ctx, RenderBundle(p.newAnchor.cert)),
		w.RestartDeployment(ctx, "linkerd", "linkerd-destination", "T"),
		w.ScaleDeployment(ctx, "linkerd", "linkerd-identity", 0),
		w.DeletePods(ctx, "linkerd", []string{"id-a"}),
		w.RestartWorkload(ctx, ref, "T", map[string]*string{RefreshOverrideAnnotation: &marker}),
		w.AnnotateWorkload(ctx, ref, map[string]string{EvictedForAnnotation: "T"}),
		evictErr,
		w.RenewCertificate(ctx, "linkerd", "linkerd-identity-issuer"),
	}
}

// TestSimulatedMakesOnlyWhatTheRecorderAccepts: a write the recorder refuses is returned as its
// error and leaves the state as it was.
func TestSimulatedMakesOnlyWhatTheRecorderAccepts(t *testing.T) {
	p := newPKI(t)
	s := rotatingState(p, identityPods(2, "id-a", "id-b"), workload("a/StatefulSet/db"))
	before := *s
	before.ControlPlane = map[string]Deployment{}
	for k, d := range s.ControlPlane {
		before.ControlPlane[k] = d
	}
	wl := *s.Workloads["a/StatefulSet/db"]
	for i, err := range everyWrite(context.Background(), NewSimulated(refusing{}, s), p) {
		if !errors.Is(err, errRefused) {
			t.Errorf("write %d: %v, want the recorder's refusal", i, err)
		}
	}
	if !reflect.DeepEqual(s.ControlPlane, before.ControlPlane) || !reflect.DeepEqual(*s.Workloads["a/StatefulSet/db"], wl) ||
		s.Bundle.Data != before.Bundle.Data || !reflect.DeepEqual(s.Previous, before.Previous) || s.IssuerCertificate != before.IssuerCertificate {
		t.Fatal("a refused write changed the state")
	}
}

// TestSimulatedWrites: each write shows in the state as the apiserver shows it once accepted —
// the rollouts started, not finished — and writing what is already there changes nothing.
func TestSimulatedWrites(t *testing.T) {
	p := newPKI(t)
	s := rotatingState(p, identityPods(2, "id-a", "id-b"), workload("a/StatefulSet/db"), bundlePods(4, 4))
	w := NewSimulated(nil, s)
	for i, err := range everyWrite(context.Background(), w, p) {
		if err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	if s.Previous.Fingerprint() != Fingerprint(p.newAnchor.cert) || s.TrustBundle.Converged != 0 {
		t.Errorf("previous %.12s, %d pods on the new desired bundle; want the new anchor, none", s.Previous.Fingerprint(), s.TrustBundle.Converged)
	}
	if s.Bundle.Data != RenderBundle(p.newAnchor.cert) || len(s.Bundle.Certs) != 1 || len(s.Bundle.OtherOwners()) != 0 {
		t.Errorf("bundle %+v, want the new anchor alone, written by the operator", s.Bundle)
	}
	if d := s.ControlPlane["linkerd-destination"]; d.RestartedAt != "T" || d.RolledOut {
		t.Errorf("destination %+v, want restarted under T and rolling out", d)
	}
	if d := s.ControlPlane["linkerd-identity"]; d.Replicas != 0 || d.RolledOut || !reflect.DeepEqual(d.Pods, []string{"id-b"}) || len(d.Members) != 1 {
		t.Errorf("identity %+v, want scaled to 0, rolling out, id-a gone and id-b left", d)
	}
	if d := s.ControlPlane["linkerd-proxy-injector"]; !d.RolledOut {
		t.Errorf("the injector, which no write named, is rolling out: %+v", d)
	}
	if wl := s.Workloads["a/StatefulSet/db"]; wl.RestartedAt != "T" || wl.RefreshOverride != "m" || wl.EvictedFor != "T" || wl.RolledOut {
		t.Errorf("workload %+v, want restarted and evicted under T with the override, rolling out", wl)
	}
	if !s.IssuerCertificate.Issuing {
		t.Error("the issuer's Certificate is not issuing after its renewal")
	}

	// Already so: nothing changes, the rollouts included.
	settled := func() {
		for k, d := range s.ControlPlane {
			d.RolledOut, d.Progress = true, ""
			s.ControlPlane[k] = d
		}
	}
	settled()
	before := map[string]Deployment{}
	for k, d := range s.ControlPlane {
		before[k] = d
	}
	ctx := context.Background()
	if err := errors.Join(w.RestartDeployment(ctx, "linkerd", "linkerd-destination", "T"), w.ScaleDeployment(ctx, "linkerd", "linkerd-identity", 0),
		w.DeletePods(ctx, "linkerd", []string{"id-a"})); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(s.ControlPlane, before) {
		t.Errorf("writing what is already there changed the control plane:\n%+v\nwant\n%+v", s.ControlPlane, before)
	}
	if s.Now.IsZero() || !s.Bundle.Owners[0].Time.Equal(s.Now) {
		t.Errorf("the bundle's write is not dated now: %v", s.Bundle.Owners)
	}
}
