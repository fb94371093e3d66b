package apply

import (
	"context"
	"crypto/x509"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/steps/observe"
	"github.com/linkerd/trust-rotation/steps/podindex"
	"github.com/linkerd/trust-rotation/steps/probe"
)

// Ahead carries a plan forward: it is steps.Simulated, the simulated Writer, which hands every
// write to a recorder (the plan shows them) and makes it in a copy of the state read from the
// cluster, as the cluster would show it once made; Ahead adds the pods of the observe.Reading
// and makes the assumptions (steps.Assumption) that let a step's wait pass. Each step of a plan
// then observes the state the steps before it leave, not today's: the trust bundle
// reduce-trust-bundle writes is the reduced one, whatever the ConfigMap holds today.
//
// What it changes are objects, never decisions: the ConfigMap, the previous-anchor Secret, the
// control-plane Deployments and their pods, the workloads, the pods' injected bundle and their
// live certificates, the identity issuer; the counts are made again from them by the code that
// makes them from a cluster.
type Ahead struct {
	*steps.Simulated
	// RenewIssuer makes the stand-in of the identity issuer renewed onto the state's trust anchor;
	// nil when the plan cannot make one (it holds no key of the anchor): a wait for the issuer
	// then cannot be assumed away.
	RenewIssuer func(s *steps.State) (*x509.Certificate, error)

	reading *observe.Reading
	results map[string]probe.ProbeResult
	// certsRenewed: every meshed pod presents a certificate from the issuer (assumed).
	certsRenewed bool
}

// NewAhead returns the simulation of a plan from the reading and the probe results, which it
// copies: the reading itself is left as observed. recorder records the writes.
func NewAhead(recorder steps.Writer, r *observe.Reading, results map[string]probe.ProbeResult) *Ahead {
	s := *r.State
	s.ControlPlane = maps.Clone(r.State.ControlPlane)
	if r.State.Workloads != nil {
		s.Workloads = map[string]*steps.Workload{}
		for k, w := range r.State.Workloads {
			c := *w
			s.Workloads[k] = &c
		}
	}
	pods := make([]*podindex.Pod, len(r.Pods))
	for i, p := range r.Pods {
		c := *p
		pods[i] = &c
	}
	return &Ahead{Simulated: steps.NewSimulated(recorder, &s), reading: &observe.Reading{State: &s, Pods: pods}, results: maps.Clone(results)}
}

// recount counts again what the steps read of the pods: the trust-bundle convergence, the
// control-plane pods, the workloads' pods behind the bundle, the live certificates.
func (a *Ahead) recount() {
	s := a.reading.State
	a.reading.Recount()
	hashes := s.BundleHashes()
	for _, w := range s.Workloads {
		w.BundleBehind = nil
	}
	for _, p := range a.reading.Pods {
		if w := s.Workloads[p.Workload]; w != nil && p.Meshed && p.Alive && !p.ControlPlane && !p.Terminating && !slices.Contains(hashes, p.TrustRootHash) {
			w.BundleBehind = append(w.BundleBehind, p.Name)
		}
	}
	if a.certsRenewed && s.Issuer.Usable() {
		chain := []*x509.Certificate{s.Issuer.Cert}
		for _, p := range a.reading.Pods {
			if p.Meshed && p.Alive {
				a.results[p.Key()] = probe.ProbeResult{Issuer: steps.Fingerprint(s.Issuer.Cert), Chain: chain}
			}
		}
	}
	s.Certificates = probe.NewCertificateCheck(s.CertificateRoot()).Convergence(a.reading.Pods, a.results)
	s.LiveChains = probe.LiveChains(a.reading.Pods, a.results)
}

// WritePreviousAnchor changes the desired bundle: the pods are counted against it again.
func (a *Ahead) WritePreviousAnchor(ctx context.Context, cert *x509.Certificate) error {
	if err := a.Simulated.WritePreviousAnchor(ctx, cert); err != nil {
		return err
	}
	a.recount()
	return nil
}

// WriteTrustRoots changes the bundle the live chains are checked against: counted again.
func (a *Ahead) WriteTrustRoots(ctx context.Context, bundle string) error {
	if err := a.Simulated.WriteTrustRoots(ctx, bundle); err != nil {
		return err
	}
	a.recount()
	return nil
}

// DeletePods makes the named pods gone, and counts again.
func (a *Ahead) DeletePods(ctx context.Context, namespace string, names []string) error {
	if err := a.Simulated.DeletePods(ctx, namespace, names); err != nil {
		return err
	}
	for _, n := range names {
		for _, p := range a.reading.Pods {
			if p.Namespace == namespace && p.Name == n {
				p.Alive = false
			}
		}
	}
	a.recount()
	return nil
}

// Assume makes what the assumption stands for happen in the state, and says so ("assuming ...");
// ok is false when it cannot (the stand-in issuer cannot be made, or there is nothing to assume),
// and why says why.
func (a *Ahead) Assume(as steps.Assumption) (said string, ok bool, why string) {
	s := a.State()
	switch as {
	case steps.AssumeControlPlaneRestarted:
		a.controlPlaneRolledOut()
	case steps.AssumeWorkloadsRestarted:
		hash := steps.BundleHash(s.DesiredBundle())
		// The operator restarts in batches: the restarts of this batch roll out, and the step
		// acts again for the next one; once none is rolling, the rest is the user's (or the
		// workloads the operator may not restart) and every pod is assumed replaced.
		rolling := map[string]bool{}
		for k, w := range s.Workloads {
			if !w.RolledOut && w.Found && (w.RestartedAt != "" || w.EvictedFor != "") {
				rolling[k] = true
			}
		}
		for _, p := range a.reading.Pods {
			if p.Meshed && !p.ControlPlane && (len(rolling) == 0 || rolling[p.Workload]) {
				p.TrustRootHash = hash
			}
		}
		a.workloadsRolledOut()
		if len(rolling) > 0 {
			a.recount()
			return "assuming the operator's restarts rolled out: " + strings.Join(slices.Sorted(maps.Keys(rolling)), ", "), true, ""
		}
	case steps.AssumeTakeoverHandedOver:
		if len(s.TakeoverAnchors()) == 0 {
			return "", false, "a plan cannot stand in for what it waits on"
		}
		if !s.Spec.Takeover {
			return "", false, "the takeover is not requested (spec.takeover): linkerd trust takeover"
		}
		s.Bundle.Helm.Keep, s.Issuer.Helm.Keep = true, true
	case steps.AssumeIssuerRenewed:
		if cmd := s.SchemeSwitch(); cmd != "" && s.StagedIssuer.Usable() {
			// Identity reads the issuer Linkerd's chart rendered: the user's helm upgrade switches
			// it to cert-manager's, staged in tls.crt (no stand-in needed).
			d := s.ControlPlane[s.Config.IdentityDeployment]
			d.IssuerScheme = steps.SchemeKubernetes
			s.ControlPlane[s.Config.IdentityDeployment] = d
			chart := s.Issuer.ChartIssuer
			s.Issuer, s.StagedIssuer = s.StagedIssuer, steps.Source{}
			s.Issuer.ChartIssuer = chart
			a.recount()
			return "assuming you ran " + cmd, true, ""
		}
		if a.RenewIssuer == nil {
			return "", false, "plan cannot stand in for an issuer signed by the new trust anchor without its private key, which it never reads"
		}
		issuer, err := a.RenewIssuer(s)
		if err != nil {
			return "", false, fmt.Sprintf("making a stand-in for the renewed identity issuer: %v", err)
		}
		s.Issuer.Found, s.Issuer.Cert, s.Issuer.Chain, s.Issuer.Err = true, issuer, nil, nil
		s.IssuerCertificate.Issuing = false
		s.IssuerCertificate.Revision++
	case steps.AssumeCertificatesRenewed:
		a.certsRenewed = true
		a.workloadsRolledOut()
	default:
		return "", false, "a plan cannot stand in for what it waits on"
	}
	a.recount()
	return as.Describe(s.Spec), true, ""
}

// controlPlaneRolledOut replaces the pods of every control-plane Deployment rolling out by as
// many pods of its template as it wants, started a second from now: a pod starts after the write
// that restarted it, and a step that tells pods started before a write from those started after
// (restart-identity, by the bundle's expansion) reads start times in whole seconds.
func (a *Ahead) controlPlaneRolledOut() {
	s := a.reading.State
	hash := steps.BundleHash(s.DesiredBundle())
	for name, d := range s.ControlPlane {
		if d.RolledOut || !d.Found {
			continue
		}
		workload := d.Namespace + "/Deployment/" + name
		var kept []*podindex.Pod
		for _, p := range a.reading.Pods {
			if p.Workload != workload || !p.ControlPlane {
				kept = append(kept, p)
			}
		}
		for i := range int(d.Replicas) {
			key := fmt.Sprintf("%s/%s-<new pod %d>", d.Namespace, name, i+1)
			kept = append(kept, &podindex.Pod{Namespace: d.Namespace, Name: key[len(d.Namespace)+1:], Workload: workload, ControlPlane: true,
				TrustRootHash: hash, Meshed: true, Alive: true, Running: true, Created: s.Now,
				ControlPlaneStart: &podindex.ControlPlaneStart{Started: s.Now.Add(time.Second), RestartedAt: d.RestartedAt}})
			if s.Issuer.Usable() {
				// A new pod's proxy presents a certificate from the issuer identity signs with now.
				chain := []*x509.Certificate{s.Issuer.Cert}
				a.results[key] = probe.ProbeResult{Issuer: steps.Fingerprint(s.Issuer.Cert), Chain: chain}
			}
		}
		a.reading.Pods = kept
		d.RolledOut, d.Progress = true, ""
		s.ControlPlane[name] = d
	}
}

// workloadsRolledOut settles every workload's restart.
func (a *Ahead) workloadsRolledOut() {
	for _, w := range a.reading.State.Workloads {
		w.RolledOut, w.Progress, w.Settling, w.Failed = true, "", "", ""
	}
}
