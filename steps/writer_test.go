package steps

import (
	"context"
	"crypto/x509"
	"fmt"
	"time"
)

// fakeWriter applies writes to a State, so a whole rotation can run without a cluster.
type fakeWriter struct {
	s        *State
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

func (w *fakeWriter) checkBundle(what string) {
	if w.s.Bundle.Data != w.s.DesiredBundle() {
		w.badRestarts = append(w.badRestarts, what)
	}
}

func (w *fakeWriter) WritePreviousAnchor(_ context.Context, c *x509.Certificate) error {
	before := w.s.DesiredBundle()
	w.s.Previous.Found, w.s.Previous.Cert = true, c
	w.log = append(w.log, "previous "+ShortFingerprint(Fingerprint(c)))
	if w.s.DesiredBundle() != before {
		// The operator counts the pods against the desired bundle: none is on the new one yet.
		w.s.TrustBundle.Converged = 0
	}
	return nil
}

func (w *fakeWriter) WriteTrustRoots(_ context.Context, b string) error {
	certs, _ := ParseCertificates([]byte(b))
	w.s.Bundle = Bundle{Found: true, Data: b, Certs: certs, Owners: []FieldOwner{{Manager: FieldManager, Operation: "Apply"}}}
	w.log = append(w.log, "bundle "+fingerprints(certs))
	return nil
}

func (w *fakeWriter) DeletePods(_ context.Context, _ string, names []string) error {
	w.checkBundle("delete identity pods")
	d := w.s.ControlPlane["linkerd-identity"]
	// Every named pod is gone and replaced at once, by a pod of the same template started now.
	gone := map[string]bool{}
	for _, n := range names {
		gone[n] = true
	}
	var pods []string
	var members []ControlPlanePod
	for _, m := range d.Members {
		if gone[m.Name] {
			m = ControlPlanePod{Name: m.Name + "-r", Started: w.s.Now.Add(time.Second), RestartedAt: m.RestartedAt}
		}
		members = append(members, m)
		pods = append(pods, m.Name)
	}
	d.Pods, d.Members, d.RolledOut = pods, members, true
	w.deleted = append(w.deleted, names...)
	w.s.ControlPlane["linkerd-identity"] = d
	return nil
}

// ScaleDeployment scales a control-plane Deployment: scaled to 0, its pods start terminating
// (the test removes them); scaled up from none, it gets fresh pods started now, rolled out.
func (w *fakeWriter) ScaleDeployment(_ context.Context, _, name string, replicas int32) error {
	d := w.s.ControlPlane[name]
	w.scales = append(w.scales, fmt.Sprintf("%s=%d", name, replicas))
	if d.Replicas == replicas {
		return nil
	}
	d.Replicas = replicas
	if replicas == 0 {
		for i := range d.Members {
			d.Members[i].Terminating = true
		}
		d.RolledOut, d.RunningPods = true, 0
	} else {
		w.checkBundle("scale " + name)
		d.Pods, d.Members = nil, nil
		for i := range int(replicas) {
			n := fmt.Sprintf("%s-s%d", name, i)
			d.Pods = append(d.Pods, n)
			d.Members = append(d.Members, ControlPlanePod{Name: n, Started: w.s.Now.Add(time.Second)})
		}
		d.RolledOut, d.RunningPods = true, int(replicas)
	}
	w.s.ControlPlane[name] = d
	return nil
}

func (w *fakeWriter) RestartDeployment(_ context.Context, _, name, token string) error {
	w.checkBundle("restart " + name)
	d := w.s.ControlPlane[name]
	d.RestartedAt, d.RolledOut = token, true // an instant rollout
	for i, m := range d.Members {
		d.Members[i] = ControlPlanePod{Name: m.Name + "-r", Started: w.s.Now.Add(time.Second), RestartedAt: token}
		d.Pods[i] = d.Members[i].Name
	}
	w.s.ControlPlane[name] = d
	w.restarts[name]++
	w.log = append(w.log, "restart "+name+" on "+fingerprints(w.s.Bundle.Certs))
	return nil
}

func (w *fakeWriter) RestartWorkload(_ context.Context, ref WorkloadRef, token string, ann map[string]*string) error {
	w.restarts[ref.String()]++
	if wl := w.s.Workloads[ref.String()]; wl != nil {
		wl.RestartedAt, wl.RolledOut = token, false
		if v, ok := ann[RefreshOverrideAnnotation]; ok {
			wl.RefreshOverride = ""
			if v != nil {
				wl.RefreshOverride = *v
			}
		}
		if v, ok := ann[AdditionalEnvAnnotation]; ok {
			wl.AdditionalEnv = ""
			if v != nil {
				wl.AdditionalEnv = *v
			}
		}
	}
	return nil
}

func (w *fakeWriter) AnnotateWorkload(_ context.Context, ref WorkloadRef, ann map[string]string) error {
	if wl := w.s.Workloads[ref.String()]; wl != nil {
		wl.EvictedFor = ann[EvictedForAnnotation]
	}
	return nil
}

func (w *fakeWriter) EvictPods(_ context.Context, _ WorkloadRef, names []string) (int, error) {
	w.evicted = append(w.evicted, names...)
	return len(names), nil
}

func (w *fakeWriter) RenewCertificate(_ context.Context, ns, name string) error {
	w.renewed = append(w.renewed, ns+"/"+name)
	return nil
}
