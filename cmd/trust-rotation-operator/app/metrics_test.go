package app

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/steps/kube/clientset"
	"github.com/linkerd/trust-rotation/steps/probe"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
	"github.com/linkerd/trust-rotation/workflow/client"
)

func selfSigned(t *testing.T, cn string, notAfter time.Time) *x509.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn}, NotBefore: time.Now(), NotAfter: notAfter,
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
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

// expirySeries gathers the expiry gauge as "role fingerprint value" lines.
func expirySeries(t *testing.T, m *Metrics) []string {
	t.Helper()
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, mf := range mfs {
		if mf.GetName() != "trust_rotation_certificate_expiration_timestamp_seconds" {
			continue
		}
		for _, mt := range mf.GetMetric() {
			l := map[string]string{}
			for _, lp := range mt.GetLabel() {
				l[lp.GetName()] = lp.GetValue()
			}
			out = append(out, l["role"]+" "+l["fingerprint"]+" "+strconv.FormatFloat(mt.GetGauge().GetValue(), 'f', 0, 64))
		}
	}
	return out
}

// The expiry gauges carry every certificate of the snapshot by role and fingerprint, and drop
// the ones that are gone.
func TestObserveCertificates(t *testing.T) {
	notAfter := time.Unix(2000000000, 0)
	oldA, newA, iss := selfSigned(t, "old", notAfter), selfSigned(t, "new", notAfter.Add(time.Hour)), selfSigned(t, "issuer", notAfter)
	src := func(c *x509.Certificate) steps.Source { return steps.Source{Found: true, Cert: c} }
	s := &steps.State{Anchor: src(newA), Previous: src(oldA), Issuer: src(iss), Bundle: steps.Bundle{Found: true, Certs: []*x509.Certificate{newA, oldA}}}
	m := NewMetrics()
	m.ObserveCertificates(s)
	got := expirySeries(t, m)
	if len(got) != 5 {
		t.Fatalf("series %v, want 5 (anchor, 2 in the bundle, issuer, previous)", got)
	}
	if want := "identity-issuer " + steps.Fingerprint(iss) + " 2000000000"; !slices.Contains(got, want) {
		t.Fatalf("series %v lack %s", got, want)
	}
	s.Bundle.Certs, s.Previous = []*x509.Certificate{newA}, src(newA)
	m.ObserveCertificates(s)
	if got := expirySeries(t, m); len(got) != 4 || strings.Contains(strings.Join(got, ","), steps.Fingerprint(oldA)) {
		t.Fatalf("series after the bundle was reduced %v, want 4 without the old anchor", got)
	}

	// The bridges the issuer's and the anchor's chains carry, each once by fingerprint.
	bridge, older := selfSigned(t, "bridge", notAfter.Add(-time.Hour)), selfSigned(t, "older", notAfter.Add(-2*time.Hour))
	s.Issuer.Chain, s.Anchor.Chain = []*x509.Certificate{bridge, older}, []*x509.Certificate{older}
	m.ObserveCertificates(s)
	got = expirySeries(t, m)
	for _, want := range []string{"bridge " + steps.Fingerprint(bridge) + " 1999996400", "bridge " + steps.Fingerprint(older) + " 1999992800"} {
		if !slices.Contains(got, want) {
			t.Errorf("series %v lack %s", got, want)
		}
	}
	if len(got) != 6 {
		t.Errorf("series %v, want 6 (4 and two bridges)", got)
	}
}

// series gathers a gauge as "label=value,... value" lines, sorted.
func series(t *testing.T, m *Metrics, name string) []string {
	t.Helper()
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, mt := range mf.GetMetric() {
			var ls []string
			for _, lp := range mt.GetLabel() {
				ls = append(ls, lp.GetName()+"="+lp.GetValue())
			}
			out = append(out, strings.Join(ls, ",")+" "+strconv.FormatFloat(mt.GetGauge().GetValue(), 'f', 0, 64))
		}
	}
	slices.Sort(out)
	return out
}

// The linked clusters' gauges follow status.remoteClusters: converged per group, the last read
// time, and no series for a cluster no longer linked.
func TestObserveRemotes(t *testing.T) {
	m := NewMetrics()
	read := metav1.NewTime(time.Unix(1700000000, 0))
	m.ObserveRemotes([]v1alpha1.RemoteClusterStatus{
		{Name: "east", LastObserved: &read,
			TrustBundle:          &v1alpha1.ConvergenceStatus{Status: v1alpha1.Converged},
			WorkloadCertificates: &v1alpha1.ConvergenceStatus{Status: v1alpha1.Converging}},
		{Name: "north"}, // never read
	})
	want := []string{
		"cluster=east,group=trust-bundle 1", "cluster=east,group=workload-certificates 0",
		"cluster=north,group=trust-bundle 0", "cluster=north,group=workload-certificates 0",
	}
	if got := series(t, m, "trust_rotation_remote_cluster_converged"); !slices.Equal(got, want) {
		t.Errorf("converged = %v, want %v", got, want)
	}
	if got := series(t, m, "trust_rotation_remote_cluster_last_observed_timestamp_seconds"); !slices.Equal(got, []string{"cluster=east 1700000000"}) {
		t.Errorf("last observed = %v", got)
	}
	m.ObserveRemotes(nil)
	if got := series(t, m, "trust_rotation_remote_cluster_converged"); len(got) != 0 {
		t.Errorf("series left for unlinked clusters: %v", got)
	}
}

// TestProbeCounter counts probes by result, both results exported from the start.
func TestProbeCounter(t *testing.T) {
	m := NewMetrics()
	count := func() map[string]float64 {
		mfs, err := m.Registry.Gather()
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]float64{}
		for _, mf := range mfs {
			if mf.GetName() == "trust_rotation_certificate_probes_total" {
				for _, mt := range mf.GetMetric() {
					out[mt.GetLabel()[0].GetValue()] = mt.GetCounter().GetValue()
				}
			}
		}
		return out
	}
	if got := count(); len(got) != 3 || got[ProbePresented] != 0 || got[ProbeRejected] != 0 || got[ProbeFailed] != 0 {
		t.Fatalf("before any probe: %v", got)
	}
	m.countProbe(nil)
	m.countProbe(nil)
	m.countProbe(errors.New("connection refused"))
	// A rejected chain, however the probe wrapped it, is counted as rejected, not failed.
	m.countProbe(fmt.Errorf("probing pod emojivoto/web-1: %w", &probe.ChainRejectedError{
		Expected: "web.emojivoto.serviceaccount.identity.linkerd.cluster.local", Presented: []string{"vote.emojivoto.serviceaccount.identity.linkerd.cluster.local"}}))
	if got := count(); got[ProbePresented] != 2 || got[ProbeRejected] != 1 || got[ProbeFailed] != 1 {
		t.Errorf("after 2 chains read, 1 rejected and 1 failure: %v", got)
	}
}

// A list the operator cannot decode at all (an object without a name to report it by) is
// counted in trust_rotation_watch_errors_total, not only logged: the operator's cache is stale
// and the metric says so. One whose objects only hold fields Go cannot hold lists whole
// (client.DecodeErrors) and counts nothing.
func TestWatchErrorsAreCounted(t *testing.T) {
	const undecodable = `{"apiVersion":"trust.linkerd.io/v1alpha1","kind":"TrustAnchorRotationList","metadata":{"resourceVersion":"1"},"items":[{"metadata":{"name":7}}]}`
	const tolerable = `{"apiVersion":"trust.linkerd.io/v1alpha1","kind":"TrustAnchorRotationList","metadata":{"resourceVersion":"1"},"items":[{"metadata":{"name":"other"},"spec":{"naturalChurnPeriod":"9999999999999h"}}]}`
	for _, tc := range []struct {
		name, list string
		errors     bool
	}{{"undecodable", undecodable, true}, {"tolerable", tolerable, false}} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				if r.URL.Query().Get("watch") == "true" {
					<-r.Context().Done()
					return
				}
				_, _ = w.Write([]byte(tc.list))
			}))
			defer srv.Close()
			tars, err := client.NewForConfig(&rest.Config{Host: srv.URL})
			if err != nil {
				t.Fatal(err)
			}
			opts := Options{Config: steps.DefaultConfig(), RotationName: steps.DefaultRotationName, ProbeConcurrency: 1, ProbeTimeout: time.Second}
			m := NewMetrics()
			c, err := New(clientset.Kube(fake.NewClientset()), tars, m, opts)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			go c.rotation.RunWithContext(ctx)
			counted := func() float64 { return testutil.ToFloat64(m.watchErrors.WithLabelValues(WatchRotations)) }
			if !tc.errors {
				if !cache.WaitForCacheSync(ctx.Done(), c.rotation.HasSynced) {
					t.Fatalf("the informer did not sync on a list it can decode tolerantly (%v errors)", counted())
				}
				if n := counted(); n != 0 {
					t.Errorf("trust_rotation_watch_errors_total = %v, want 0", n)
				}
				return
			}
			for counted() == 0 {
				select {
				case <-ctx.Done():
					t.Fatal("the failed list was not counted")
				case <-time.After(10 * time.Millisecond):
				}
			}
		})
	}
}
