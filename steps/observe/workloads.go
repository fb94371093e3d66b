package observe

import (
	"context"
	"fmt"
	"slices"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/steps/kube"
	"github.com/linkerd/trust-rotation/steps/podindex"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// The conversion of the objects automatic restarts read (Deployments, StatefulSets, DaemonSets,
// PodDisruptionBudgets and namespaces) into the rotation's view (steps.Workload). The operator
// feeds it from its informers, `linkerd trust plan` from one round of lists: both see the same
// workloads the same way.

// WorkloadObjects are the objects automatic restarts read.
type WorkloadObjects interface {
	// Workload returns the Deployment, StatefulSet or DaemonSet ref names, nil when there is none.
	Workload(ref steps.WorkloadRef) any
	// Namespace returns the namespace, nil when there is none.
	Namespace(name string) *corev1.Namespace
	// PodDisruptionBudgets returns the namespace's PodDisruptionBudgets.
	PodDisruptionBudgets(namespace string) []*policyv1.PodDisruptionBudget
}

// SlimWorkload keeps what automatic restarts read of a workload: metadata without managed
// fields, the pod template's metadata, replicas, selector and status — never the pod spec. It
// slims namespaces, PodDisruptionBudgets and Certificates of their managed fields too.
func SlimWorkload(obj any) (any, error) {
	switch o := obj.(type) {
	case *appsv1.Deployment:
		o.ManagedFields, o.Spec.Template.Spec = nil, corev1.PodSpec{}
	case *appsv1.StatefulSet:
		o.ManagedFields, o.Spec.Template.Spec, o.Spec.VolumeClaimTemplates = nil, corev1.PodSpec{}, nil
	case *appsv1.DaemonSet:
		o.ManagedFields, o.Spec.Template.Spec = nil, corev1.PodSpec{}
	case *corev1.Namespace:
		o.ManagedFields = nil
	case *policyv1.PodDisruptionBudget:
		o.ManagedFields = nil
	case *cmapi.Certificate:
		o.ManagedFields = nil
	}
	return obj, nil
}

// TemplateOf is a workload's pod template, nil for another object.
func TemplateOf(obj any) *corev1.PodTemplateSpec {
	switch o := obj.(type) {
	case *appsv1.Deployment:
		return &o.Spec.Template
	case *appsv1.StatefulSet:
		return &o.Spec.Template
	case *appsv1.DaemonSet:
		return &o.Spec.Template
	}
	return nil
}

// KindOf is a workload's kind, "" for another object.
func KindOf(obj any) string {
	switch obj.(type) {
	case *appsv1.Deployment:
		return "Deployment"
	case *appsv1.StatefulSet:
		return "StatefulSet"
	case *appsv1.DaemonSet:
		return "DaemonSet"
	}
	return ""
}

// WorkloadKey is a workload's "namespace/Kind/name".
func WorkloadKey(obj any) string {
	m, ok := obj.(metav1.Object)
	if !ok {
		return ""
	}
	return m.GetNamespace() + "/" + KindOf(obj) + "/" + m.GetName()
}

// WorkloadOf returns the workload of s.Workloads under key, adding it when it is not there.
func WorkloadOf(s *steps.State, key string) *steps.Workload {
	if w := s.Workloads[key]; w != nil {
		return w
	}
	if s.Workloads == nil {
		s.Workloads = map[string]*steps.Workload{}
	}
	ref, _ := steps.ParseWorkload(key)
	w := &steps.Workload{WorkloadRef: ref}
	s.Workloads[key] = w
	return w
}

// AddMeshedWorkloads adds to s.Workloads the workloads of the meshed non-control-plane pods of
// the index, with their pods, how many run or terminate, and which were not injected with the
// desired trust bundle; and the workloads whose live certificates are behind
// (s.Certificates.Behind).
func AddMeshedWorkloads(s *steps.State, index *podindex.Index) {
	hashes := s.BundleHashes()
	index.Each(func(p *podindex.Pod) {
		if p.ControlPlane {
			return
		}
		w := WorkloadOf(s, p.Workload)
		if p.Terminating {
			w.Terminating++
			return
		}
		if p.Running {
			w.Running++
		}
		w.Pods = append(w.Pods, p.Name)
		if w.Created == nil {
			w.Created = map[string]time.Time{}
		}
		w.Created[p.Name] = p.Created
		if !slices.Contains(hashes, p.TrustRootHash) {
			w.BundleBehind = append(w.BundleBehind, p.Name)
		}
	})
	for _, b := range s.Certificates.Behind {
		WorkloadOf(s, b.Workload)
	}
}

// DescribeWorkload fills w from its object, its namespace and the PodDisruptionBudgets of objs,
// and returns the object; nil, and w left as it is, when w is no restartable kind, is out of
// scope (not inScope: the operator may not restart in its namespace) or has no object.
func DescribeWorkload(s *steps.State, objs WorkloadObjects, w *steps.Workload, inScope bool) any {
	if !w.Restartable() {
		return nil
	}
	if !inScope {
		w.OutOfScope = true
		return nil
	}
	obj := objs.Workload(w.WorkloadRef)
	if obj == nil {
		return nil
	}
	w.Found = true
	m, t := obj.(metav1.Object), TemplateOf(obj)
	w.RestartedAt = t.Annotations[steps.RestartedAtAnnotation]
	w.AdditionalEnv = t.Annotations[steps.AdditionalEnvAnnotation]
	w.RefreshOverride = t.Annotations[steps.RefreshOverrideAnnotation]
	w.EvictedFor = m.GetAnnotations()[steps.EvictedForAnnotation]
	w.RolledOut, w.Progress, w.Failed = Rollout(obj)
	w.Replicas = replicas(obj)
	w.NoRollout = noRollout(obj)
	w.Selected = selected(s, objs, w, m.GetLabels())
	podLabels := labels.Set(t.Labels)
	for _, pdb := range objs.PodDisruptionBudgets(w.Namespace) {
		sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
		if err != nil || sel.Empty() || !sel.Matches(podLabels) {
			continue
		}
		if w.PDB == "" || pdb.Status.DisruptionsAllowed < w.DisruptionsAllowed {
			w.PDB, w.DisruptionsAllowed = pdb.Name, pdb.Status.DisruptionsAllowed
		}
	}
	return obj
}

// selected applies the spec's selectors; without a namespace selector, the Linkerd namespace
// is left out.
func selected(s *steps.State, objs WorkloadObjects, w *steps.Workload, objLabels map[string]string) bool {
	dp := s.Spec.DataPlaneRestart
	if dp.WorkloadSelector != nil {
		sel, err := metav1.LabelSelectorAsSelector(dp.WorkloadSelector)
		if err != nil || !sel.Matches(labels.Set(objLabels)) {
			return false
		}
	}
	if dp.NamespaceSelector == nil {
		return w.Namespace != s.Config.LinkerdNamespace
	}
	sel, err := metav1.LabelSelectorAsSelector(dp.NamespaceSelector)
	if err != nil {
		return false
	}
	ns := objs.Namespace(w.Namespace)
	if ns == nil {
		return false
	}
	return sel.Matches(labels.Set(ns.Labels))
}

// replicas is how many pods a workload wants.
func replicas(obj any) int32 {
	switch o := obj.(type) {
	case *appsv1.Deployment:
		if o.Spec.Replicas != nil {
			return *o.Spec.Replicas
		}
		return 1
	case *appsv1.StatefulSet:
		if o.Spec.Replicas != nil {
			return *o.Spec.Replicas
		}
		return 1
	case *appsv1.DaemonSet:
		return o.Status.DesiredNumberScheduled
	}
	return 0
}

// noRollout says why a change of the workload's pod template does not replace its pods, "" when
// it does: updateStrategy OnDelete, or a StatefulSet's partition (the pods below it keep their
// revision).
func noRollout(obj any) string {
	switch o := obj.(type) {
	case *appsv1.StatefulSet:
		u := o.Spec.UpdateStrategy
		switch {
		case u.Type == appsv1.OnDeleteStatefulSetStrategyType:
			return "updateStrategy OnDelete"
		case u.RollingUpdate != nil && u.RollingUpdate.Partition != nil && *u.RollingUpdate.Partition > 0:
			return fmt.Sprintf("rolling update partition %d", *u.RollingUpdate.Partition)
		}
	case *appsv1.DaemonSet:
		if o.Spec.UpdateStrategy.Type == appsv1.OnDeleteDaemonSetStrategyType {
			return "updateStrategy OnDelete"
		}
	}
	return ""
}

// Rollout reports whether a workload's latest template is rolled out and available (the tests
// of `kubectl rollout status`), what it waits for, and why it failed.
func Rollout(obj any) (done bool, progress, failed string) {
	switch o := obj.(type) {
	case *appsv1.Deployment:
		d := DeploymentFrom(o.Namespace, o.Name, o)
		for _, c := range o.Status.Conditions {
			if c.Type == appsv1.DeploymentProgressing && c.Reason == "ProgressDeadlineExceeded" {
				failed = "progress deadline exceeded: " + c.Message
			}
		}
		if d.RolledOut {
			// Also what kubectl's rollout status leaves out, as the restart budget needs it: every
			// wanted replica ready and available (after an eviction, the updated count does not
			// move, only these do).
			st := o.Status
			switch {
			case st.ReadyReplicas < d.Replicas:
				return false, fmt.Sprintf("%d of %d pods ready", st.ReadyReplicas, d.Replicas), failed
			case st.AvailableReplicas < d.Replicas || st.UnavailableReplicas > 0:
				return false, fmt.Sprintf("%d of %d pods available", st.AvailableReplicas, d.Replicas), failed
			}
		}
		return d.RolledOut, d.Progress, failed
	case *appsv1.StatefulSet:
		want := int32(1)
		if o.Spec.Replicas != nil {
			want = *o.Spec.Replicas
		}
		st := o.Status
		switch {
		case o.Generation > st.ObservedGeneration:
			return false, "waiting for the statefulset spec update to be observed", ""
		case noRollout(o) != "":
			// Its pods are replaced by eviction, not by a rollout: restarted when all are
			// ready again, whatever revision they run.
			if st.ReadyReplicas < want || st.AvailableReplicas < want {
				return false, fmt.Sprintf("%d of %d pods ready", st.ReadyReplicas, want), ""
			}
			return true, "", ""
		case st.UpdatedReplicas < want || st.UpdateRevision != "" && st.CurrentRevision != st.UpdateRevision:
			return false, fmt.Sprintf("%d of %d pods updated", st.UpdatedReplicas, want), ""
		case st.ReadyReplicas < want:
			return false, fmt.Sprintf("%d of %d pods ready", st.ReadyReplicas, want), ""
		}
		return true, "", ""
	case *appsv1.DaemonSet:
		st := o.Status
		switch {
		case o.Generation > st.ObservedGeneration:
			return false, "waiting for the daemonset spec update to be observed", ""
		case noRollout(o) == "" && st.UpdatedNumberScheduled < st.DesiredNumberScheduled:
			return false, fmt.Sprintf("%d of %d pods updated", st.UpdatedNumberScheduled, st.DesiredNumberScheduled), ""
		case st.NumberAvailable < st.DesiredNumberScheduled:
			return false, fmt.Sprintf("%d of %d pods available", st.NumberAvailable, st.DesiredNumberScheduled), ""
		}
		return true, "", ""
	}
	return false, "", ""
}

// WorkloadList is WorkloadObjects from one round of lists, for a command: every Deployment,
// StatefulSet, DaemonSet and PodDisruptionBudget of every namespace, and the namespaces.
type WorkloadList struct {
	workloads  map[string]any
	namespaces map[string]*corev1.Namespace
	pdbs       map[string][]*policyv1.PodDisruptionBudget
}

var _ WorkloadObjects = (*WorkloadList)(nil)

// ListWorkloads lists what automatic restarts read, cluster-wide, in pages. It returns the
// first error (a Forbidden one when the user may not list a kind everywhere).
func ListWorkloads(ctx context.Context, k kube.Interface) (*WorkloadList, error) {
	l := &WorkloadList{workloads: map[string]any{}, namespaces: map[string]*corev1.Namespace{}, pdbs: map[string][]*policyv1.PodDisruptionBudget{}}
	apps := k.AppsV1()
	if err := listAll(ctx, "deployments", apps.Deployments(metav1.NamespaceAll).List, func(d *appsv1.DeploymentList) []appsv1.Deployment { return d.Items }, l.addWorkload); err != nil {
		return nil, err
	}
	if err := listAll(ctx, "statefulsets", apps.StatefulSets(metav1.NamespaceAll).List, func(d *appsv1.StatefulSetList) []appsv1.StatefulSet { return d.Items }, l.addWorkload); err != nil {
		return nil, err
	}
	if err := listAll(ctx, "daemonsets", apps.DaemonSets(metav1.NamespaceAll).List, func(d *appsv1.DaemonSetList) []appsv1.DaemonSet { return d.Items }, l.addWorkload); err != nil {
		return nil, err
	}
	if err := listAll(ctx, "namespaces", k.CoreV1().Namespaces().List, func(d *corev1.NamespaceList) []corev1.Namespace { return d.Items }, func(o any) {
		ns := o.(*corev1.Namespace)
		l.namespaces[ns.Name] = ns
	}); err != nil {
		return nil, err
	}
	if err := listAll(ctx, "poddisruptionbudgets", k.PolicyV1().PodDisruptionBudgets(metav1.NamespaceAll).List, func(d *policyv1.PodDisruptionBudgetList) []policyv1.PodDisruptionBudget { return d.Items }, func(o any) {
		pdb := o.(*policyv1.PodDisruptionBudget)
		l.pdbs[pdb.Namespace] = append(l.pdbs[pdb.Namespace], pdb)
	}); err != nil {
		return nil, err
	}
	return l, nil
}

func (l *WorkloadList) addWorkload(obj any) { l.workloads[WorkloadKey(obj)] = obj }

// listAll lists every page of a kind, slims each item and hands it to add.
func listAll[L any, T any](ctx context.Context, what string, list func(context.Context, metav1.ListOptions) (L, error), items func(L) []T, add func(any)) error {
	opts := metav1.ListOptions{Limit: 500}
	for {
		page, err := list(ctx, opts)
		if err != nil {
			return fmt.Errorf("listing %s: %w", what, err)
		}
		its := items(page)
		for i := range its {
			obj, _ := SlimWorkload(any(&its[i]))
			add(obj)
		}
		next := ""
		if m, ok := any(page).(metav1.ListInterface); ok {
			next = m.GetContinue()
		}
		if next == "" {
			return nil
		}
		opts.Continue = next
	}
}

func (l *WorkloadList) Workload(ref steps.WorkloadRef) any { return l.workloads[ref.String()] }

func (l *WorkloadList) Namespace(name string) *corev1.Namespace { return l.namespaces[name] }

func (l *WorkloadList) PodDisruptionBudgets(namespace string) []*policyv1.PodDisruptionBudget {
	return l.pdbs[namespace]
}

// Fill builds s.Workloads as the operator's automation does from its caches: the workloads
// carrying the refresh override; with all (a rotation under way), every workload of a meshed
// pod, those whose live certificates are behind, and those carrying token (the step's act
// restarted or evicted them); each described from its object.
func (l *WorkloadList) Fill(s *steps.State, index *podindex.Index, all bool, token string) {
	s.Workloads = map[string]*steps.Workload{}
	for key, obj := range l.workloads {
		ann := map[string]string{}
		if t := TemplateOf(obj); t != nil {
			ann = t.Annotations
		}
		marked := token != "" && (ann[steps.RestartedAtAnnotation] == token || obj.(metav1.Object).GetAnnotations()[steps.EvictedForAnnotation] == token)
		if ann[steps.RefreshOverrideAnnotation] != "" || all && marked {
			WorkloadOf(s, key)
		}
	}
	if all {
		AddMeshedWorkloads(s, index)
	}
	for _, w := range s.Workloads {
		DescribeWorkload(s, l, w, true)
	}
}

// FromRotation adds to s what the TrustAnchorRotation says: its spec (the automations) and,
// in phase RenewingWorkloadCerts, since when (the fallback restarts count from it).
func FromRotation(s *steps.State, tar *v1alpha1.TrustAnchorRotation) {
	s.Spec, s.SpecErrors = tar.Spec, steps.SpecErrors(tar)
	if tar.Status.Phase == v1alpha1.PhaseRenewingWorkloadCerts && tar.Status.LastPhaseTransitionTime != nil {
		s.PhaseSince = tar.Status.LastPhaseTransitionTime.Time
	}
}

// IssuerCertificateFrom is what automatic issuer renewal reads of the identity issuer's
// Certificate namespace/name; crt nil: not found.
func IssuerCertificateFrom(namespace, name string, crt *cmapi.Certificate) steps.IssuerCertificate {
	ic := steps.IssuerCertificate{Namespace: namespace, Name: name}
	if crt == nil {
		return ic
	}
	ic.Found = true
	if crt.Status.Revision != nil {
		ic.Revision = *crt.Status.Revision
	}
	for _, c := range crt.Status.Conditions {
		if c.Type == cmapi.CertificateConditionIssuing && c.Status == cmmeta.ConditionTrue {
			ic.Issuing = true
		}
	}
	return ic
}
