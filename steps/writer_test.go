package steps

import (
	"context"
	"crypto/x509"
	"fmt"
	"time"
)

// convergingWriter is the tests' Writer: Simulated, the plan's simulated Writer, makes every write in
// the State, a writeLog records it first in writes, and the control plane's controllers act at once: a
// rollout a write starts finishes with it (see rollOut), so a whole rotation runs without a
// cluster, its pods converging as soon as asked.
type convergingWriter struct {
	*Simulated
	*writes
}

func newConvergingWriter(s *State) *convergingWriter {
	ws := &writes{restarts: map[string]int{}}
	return &convergingWriter{Simulated: NewSimulated(writeLog{ws, s}, s), writes: ws}
}

func (w *convergingWriter) RestartDeployment(ctx context.Context, namespace, name, token string) error {
	if err := w.Simulated.RestartDeployment(ctx, namespace, name, token); err != nil {
		return err
	}
	w.rollOut(name)
	return nil
}

func (w *convergingWriter) ScaleDeployment(ctx context.Context, namespace, name string, replicas int32) error {
	if err := w.Simulated.ScaleDeployment(ctx, namespace, name, replicas); err != nil {
		return err
	}
	w.rollOut(name)
	return nil
}

func (w *convergingWriter) DeletePods(ctx context.Context, namespace string, names []string) error {
	if err := w.Simulated.DeletePods(ctx, namespace, names); err != nil {
		return err
	}
	for name := range w.State().ControlPlane {
		w.rollOut(name)
	}
	return nil
}

// rollOut finishes a control-plane Deployment's rollout at once, as its ReplicaSets would: scaled
// to 0, its pods are left terminating (a test removes them); otherwise every pod not of its
// template's latest restart is replaced by one that is, and a Deployment with no pod gets its
// replicas, each started a second after now.
func (w *convergingWriter) rollOut(name string) {
	d := w.State().ControlPlane[name]
	if d.RolledOut || !d.Found {
		return
	}
	switch {
	case d.Replicas == 0:
		for i := range d.Members {
			d.Members[i].Terminating = true
		}
		d.RunningPods = 0
	case len(d.Members) == 0:
		for i := range int(d.Replicas) {
			n := fmt.Sprintf("%s-s%d", name, i)
			d.Pods = append(d.Pods, n)
			d.Members = append(d.Members, ControlPlanePod{Name: n, Started: w.State().Now.Add(time.Second), RestartedAt: d.RestartedAt})
		}
		d.RunningPods = int(d.Replicas)
	default:
		for i, m := range d.Members {
			if m.RestartedAt != d.RestartedAt || m.Terminating {
				d.Members[i] = ControlPlanePod{Name: m.Name + "-r", Started: w.State().Now.Add(time.Second), RestartedAt: d.RestartedAt}
			}
		}
		d.Pods = nil
		for _, m := range d.Members {
			d.Pods = append(d.Pods, m.Name)
		}
	}
	d.RolledOut, d.Progress = true, ""
	w.State().ControlPlane[name] = d
}

// writes are what the tests count of the writes.
type writes struct {
	restarts map[string]int
	deleted  []string
	// scales are the ScaleDeployment calls, "name=replicas".
	scales  []string
	evicted []string
	renewed []string
	// log records the PKI writes and the control-plane restarts in order, each restart with
	// the bundle the ConfigMap held when it happened.
	log []string
	// badRestarts are control-plane restarts made while the ConfigMap did not hold the
	// rotation's bundle: the restarted pods load the wrong roots.
	badRestarts []string
}

// writeLog records each write in writes before Simulated makes it in s.
type writeLog struct {
	*writes
	s *State
}

func (l writeLog) checkBundle(what string) {
	if l.s.Bundle.Data != l.s.DesiredBundle() {
		l.badRestarts = append(l.badRestarts, what)
	}
}

func (l writeLog) WritePreviousAnchor(_ context.Context, c *x509.Certificate) error {
	l.log = append(l.log, "previous "+ShortFingerprint(Fingerprint(c)))
	return nil
}

func (l writeLog) WriteTrustRoots(_ context.Context, b string) error {
	certs, _ := ParseCertificates([]byte(b))
	l.log = append(l.log, "bundle "+fingerprints(certs))
	return nil
}

func (l writeLog) DeletePods(_ context.Context, _ string, names []string) error {
	l.checkBundle("delete identity pods")
	l.deleted = append(l.deleted, names...)
	return nil
}

func (l writeLog) ScaleDeployment(_ context.Context, _, name string, replicas int32) error {
	l.scales = append(l.scales, fmt.Sprintf("%s=%d", name, replicas))
	if replicas > 0 && l.s.ControlPlane[name].Replicas != replicas {
		l.checkBundle("scale " + name)
	}
	return nil
}

func (l writeLog) RestartDeployment(_ context.Context, _, name, _ string) error {
	l.checkBundle("restart " + name)
	l.restarts[name]++
	l.log = append(l.log, "restart "+name+" on "+fingerprints(l.s.Bundle.Certs))
	return nil
}

func (l writeLog) RestartWorkload(_ context.Context, ref WorkloadRef, _ string, _ map[string]*string) error {
	l.restarts[ref.String()]++
	return nil
}

func (l writeLog) AnnotateWorkload(context.Context, WorkloadRef, map[string]string) error {
	return nil
}

func (l writeLog) EvictPods(_ context.Context, _ WorkloadRef, names []string) (int, error) {
	l.evicted = append(l.evicted, names...)
	return len(names), nil
}

func (l writeLog) RenewCertificate(_ context.Context, ns, name string) error {
	l.renewed = append(l.renewed, ns+"/"+name)
	return nil
}
