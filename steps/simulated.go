package steps

import (
	"context"
	"crypto/x509"
	"slices"
)

// Simulated is the simulated Writer: it makes each write in a State as the apiserver shows it
// once it accepted the write, before any controller acted on it. A restarted or scaled
// Deployment, a restarted workload, a workload whose pods were evicted are rolling out: they
// keep the pods they had until their rollout is observed (a plan assumes it, see Assumption; a
// test plays the controllers). A plan walks the rotation over one (apply.Ahead, which builds on
// it for the pods and their counts), and so do the steps' own tests: a write means the same
// thing to both.
//
// It knows no pods: what is counted from them (TrustBundle, Certificates, LiveChains, a
// Deployment's Pods and Members) is its caller's to count again; apply.Ahead counts them from
// the pods after every write that changes them. A write that gives the bundle a new desired
// content leaves TrustBundle counting no pod on it: none was injected with it yet.
//
// Each write goes first to the recorder it was given (a dry run's, or a test's log), and is made
// only when the recorder accepts it. As the Writer's contract says, a write of what is already
// there changes nothing.
type Simulated struct {
	record Writer
	s      *State
}

// NewSimulated returns the simulated Writer over s, which it changes in place; record (nil for
// none) receives every write first.
func NewSimulated(record Writer, s *State) *Simulated { return &Simulated{record: record, s: s} }

// State is the simulated state: the one the writes change and the steps observe.
func (w *Simulated) State() *State { return w.s }

// rollingOut is the progress of a Deployment or a workload whose restart a write started.
const rollingOut = "waiting for the restart to roll out"

// evictedRolling is the progress of a workload whose pods were evicted.
const evictedRolling = "waiting for the evicted pods to be replaced"

func (w *Simulated) WritePreviousAnchor(ctx context.Context, cert *x509.Certificate) error {
	if w.record != nil {
		if err := w.record.WritePreviousAnchor(ctx, cert); err != nil {
			return err
		}
	}
	before := w.s.DesiredBundle()
	w.s.Previous.Found, w.s.Previous.Cert, w.s.Previous.Err = true, cert, nil
	if w.s.DesiredBundle() != before {
		w.s.TrustBundle.Converged = 0
	}
	return nil
}

func (w *Simulated) WriteTrustRoots(ctx context.Context, bundle string) error {
	if w.record != nil {
		if err := w.record.WriteTrustRoots(ctx, bundle); err != nil {
			return err
		}
	}
	certs, _ := ParseCertificates([]byte(bundle))
	w.s.Bundle = Bundle{Found: true, Data: bundle, Certs: certs,
		Owners: []FieldOwner{{Manager: FieldManager, Operation: "Apply", Time: w.s.Now}}}
	return nil
}

// rolling starts the rollout of a control-plane Deployment, changed by change.
func (w *Simulated) rolling(name string, change func(*Deployment)) {
	d := w.s.ControlPlane[name]
	change(&d)
	d.RolledOut, d.Progress = false, rollingOut
	w.s.ControlPlane[name] = d
}

func (w *Simulated) RestartDeployment(ctx context.Context, namespace, name, token string) error {
	if w.record != nil {
		if err := w.record.RestartDeployment(ctx, namespace, name, token); err != nil {
			return err
		}
	}
	if w.s.ControlPlane[name].RestartedAt != token {
		w.rolling(name, func(d *Deployment) { d.RestartedAt = token })
	}
	return nil
}

func (w *Simulated) ScaleDeployment(ctx context.Context, namespace, name string, replicas int32) error {
	if w.record != nil {
		if err := w.record.ScaleDeployment(ctx, namespace, name, replicas); err != nil {
			return err
		}
	}
	if w.s.ControlPlane[name].Replicas != replicas {
		w.rolling(name, func(d *Deployment) { d.Replicas = replicas })
	}
	return nil
}

// DeletePods removes the named pods from the control-plane Deployments they belong to, which
// roll out their replacements.
func (w *Simulated) DeletePods(ctx context.Context, namespace string, names []string) error {
	if w.record != nil {
		if err := w.record.DeletePods(ctx, namespace, names); err != nil {
			return err
		}
	}
	for name, d := range w.s.ControlPlane {
		gone := func(m ControlPlanePod) bool { return slices.Contains(names, m.Name) }
		if d.Namespace != namespace || !slices.ContainsFunc(d.Members, gone) {
			continue
		}
		w.rolling(name, func(d *Deployment) {
			d.Members = slices.DeleteFunc(slices.Clone(d.Members), gone)
			d.Pods = slices.DeleteFunc(slices.Clone(d.Pods), func(p string) bool { return slices.Contains(names, p) })
		})
	}
	return nil
}

// workload changes a workload of the state, when the state has it.
func (w *Simulated) workload(ref WorkloadRef, change func(*Workload)) {
	if wl := w.s.Workloads[ref.String()]; wl != nil {
		change(wl)
	}
}

func (w *Simulated) RestartWorkload(ctx context.Context, ref WorkloadRef, token string, annotations map[string]*string) error {
	if w.record != nil {
		if err := w.record.RestartWorkload(ctx, ref, token, annotations); err != nil {
			return err
		}
	}
	w.workload(ref, func(wl *Workload) {
		wl.RestartedAt, wl.RolledOut, wl.Progress = token, false, rollingOut
		for k, v := range annotations {
			val := ""
			if v != nil {
				val = *v
			}
			switch k {
			case RefreshOverrideAnnotation:
				wl.RefreshOverride = val
			case AdditionalEnvAnnotation:
				wl.AdditionalEnv = val
			}
		}
	})
	return nil
}

func (w *Simulated) AnnotateWorkload(ctx context.Context, ref WorkloadRef, annotations map[string]string) error {
	if w.record != nil {
		if err := w.record.AnnotateWorkload(ctx, ref, annotations); err != nil {
			return err
		}
	}
	if v, ok := annotations[EvictedForAnnotation]; ok {
		w.workload(ref, func(wl *Workload) { wl.EvictedFor = v })
	}
	return nil
}

// EvictPods returns the evictions the recorder says were accepted (all of them without one).
func (w *Simulated) EvictPods(ctx context.Context, ref WorkloadRef, names []string) (int, error) {
	n := len(names)
	if w.record != nil {
		var err error
		if n, err = w.record.EvictPods(ctx, ref, names); err != nil {
			return n, err
		}
	}
	w.workload(ref, func(wl *Workload) { wl.RolledOut, wl.Progress = false, evictedRolling })
	return n, nil
}

func (w *Simulated) RenewCertificate(ctx context.Context, namespace, name string) error {
	if w.record != nil {
		if err := w.record.RenewCertificate(ctx, namespace, name); err != nil {
			return err
		}
	}
	w.s.IssuerCertificate.Issuing = true
	return nil
}
