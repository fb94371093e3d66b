package main

import (
	"bytes"
	"context"
	"strconv"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/steps/podindex"
	"github.com/linkerd/trust-rotation/test/meshsim"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
	"github.com/linkerd/trust-rotation/workflow/client"
)

// world watches, from outside the operator, everything a phase's exit condition is made of —
// the anchor and issuer Secrets, every Deployment, every meshed pod, and (from the mesh
// simulator's ground truth) which proxies hold a certificate — and the rotation's phase.
//
// Reaction latency. During a rotation nothing changes in the world but what the user (this
// program, which acts only right after a phase change) and the operator do. So the moment a
// phase's exit condition became true is the last world change before the phase changed: the
// anchor or issuer Secret changing, the last pod of a rollout coming or going, the last proxy
// getting its certificate. A world change counts when its resourceVersion is older than the
// status write that changed the phase (resourceVersions are etcd's global revision), so an
// effect of the operator's own later act, delivered first on another watch, is not mistaken
// for it; certificate changes carry no resourceVersion and count by the time they were seen.
// Deployment spec changes are acts (the operator's or the user's restarts), not conditions.
//
// Operator-added time. The world is busy while cert-manager renews a Secret, while a
// Deployment rolls out, while a meshed pod terminates, while a proxy waits for its certificate
// and while the user acts; the rest of the rotation's wall time is the operator's: noticing,
// deciding, writing, and waiting on nothing.
type world struct {
	mu sync.Mutex
	// changes are the recent world changes, in the order seen.
	changes []change
	// busy holds the reasons the world is busy now; busySince is when it last became busy.
	busy      map[string]bool
	busySince time.Time
	busyTotal time.Duration
	// incomplete are the Deployments whose rollout is not complete; terminating the meshed pods
	// being deleted.
	incomplete  map[string]bool
	terminating map[string]bool
	certless    int
	phase       v1alpha1.Phase
	step        string
	status      v1alpha1.TrustAnchorRotationStatus
	// transitions are the phase changes seen since the last reset.
	transitions []transition
	notify      chan struct{}
	// gaps are the idle spells of the world since the last reset: the operator's time.
	gaps      []gap
	idleSince time.Time
	idleStep  string
	secrets   map[string][]byte
}

type change struct {
	at time.Time
	rv int64 // 0 when the change is not an apiserver object's
}

// gap is one idle spell of the world: from the step the rotation was at when the world went
// idle, until the reason it became busy again.
type gap struct {
	step, until string
	d           time.Duration
}

type transition struct {
	from, to v1alpha1.Phase
	at       time.Time
	latency  time.Duration
}

func newWorld() *world {
	return &world{busy: map[string]bool{}, incomplete: map[string]bool{}, terminating: map[string]bool{},
		notify: make(chan struct{}), secrets: map[string][]byte{}}
}

func rvOf(obj any) int64 {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return 0
	}
	rv, _ := strconv.ParseInt(m.GetResourceVersion(), 10, 64)
	return rv
}

// changed records a world change; call with w.mu held.
func (w *world) changedLocked(rv int64) {
	w.changes = append(w.changes, change{at: time.Now(), rv: rv})
	if len(w.changes) > 4096 {
		w.changes = append(w.changes[:0:0], w.changes[len(w.changes)-1024:]...)
	}
}

// wakeLocked wakes the waiters of waitFor to check their condition again; call with w.mu held.
func (w *world) wakeLocked() {
	close(w.notify)
	w.notify = make(chan struct{})
}

// setBusy marks the world busy (or not) for reason; call with w.mu held.
func (w *world) setBusyLocked(reason string, on bool) {
	was := len(w.busy) > 0
	if on {
		w.busy[reason] = true
	} else {
		delete(w.busy, reason)
	}
	now := len(w.busy) > 0
	switch {
	case !was && now:
		w.busySince = time.Now()
	case was && !now:
		w.busyTotal += time.Since(w.busySince)
	}
	switch {
	case was && !now:
		w.idleSince, w.idleStep = time.Now(), w.step
	case !was && now && !w.idleSince.IsZero():
		w.gaps = append(w.gaps, gap{step: w.idleStep, until: reason, d: time.Since(w.idleSince)})
		w.idleSince = time.Time{}
	}
}

func (w *world) setBusy(reason string, on bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.setBusyLocked(reason, on)
}

// busyFor returns how long the world has been busy since the last reset.
func (w *world) busyFor() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	d := w.busyTotal
	if len(w.busy) > 0 {
		d += time.Since(w.busySince)
	}
	return d
}

// reset starts a new measurement: no transitions, no busy time.
func (w *world) reset() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.transitions = nil
	w.gaps = nil
	w.idleSince = time.Time{}
	w.busyTotal = 0
	if len(w.busy) > 0 {
		w.busySince = time.Now()
	}
}

func (w *world) takeGaps() []gap {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := append([]gap(nil), w.gaps...)
	if !w.idleSince.IsZero() {
		out = append(out, gap{step: w.idleStep, until: "(end)", d: time.Since(w.idleSince)})
	}
	return out
}

func (w *world) takeTransitions() []transition {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]transition(nil), w.transitions...)
}

// run starts the informers and the certificate watch; it returns once they are synced.
func (w *world) run(ctx context.Context, kube kubernetes.Interface, tars *client.Client, mesh *meshsim.Mesh, cfg steps.Config) {
	secrets := func(ns, name string) cache.SharedIndexInformer {
		return cache.NewSharedIndexInformer(cache.NewListWatchFromClient(kube.CoreV1().RESTClient(), "secrets", ns,
			fields.OneTermEqualSelector("metadata.name", name)), &corev1.Secret{}, 0, cache.Indexers{})
	}
	anchor, issuer := secrets(cfg.CertManagerNamespace, cfg.AnchorSecret), secrets(cfg.LinkerdNamespace, cfg.IssuerSecret)
	secretHandler := func(obj any) {
		s, ok := obj.(*corev1.Secret)
		if !ok {
			return
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		key := s.Namespace + "/" + s.Name
		if crt := s.Data[steps.CertificateKey]; !bytes.Equal(crt, w.secrets[key]) {
			w.secrets[key] = crt
			w.changedLocked(rvOf(s))
		}
	}
	for _, inf := range []cache.SharedIndexInformer{anchor, issuer} {
		_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc: secretHandler, UpdateFunc: func(_, obj any) { secretHandler(obj) },
		})
	}

	deployments := cache.NewSharedIndexInformer(cache.NewListWatchFromClient(kube.AppsV1().RESTClient(), "deployments",
		metav1.NamespaceAll, fields.Everything()), &appsv1.Deployment{}, 0, cache.Indexers{})
	deploymentHandler := func(old, obj any) {
		d, ok := obj.(*appsv1.Deployment)
		if !ok {
			return
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		key := d.Namespace + "/" + d.Name
		if complete(d) {
			// A rollout completing is part of an exit condition; the other updates of a
			// Deployment are an act (a restart) or its first echoes (observedGeneration), which
			// can reach this watch before the status write of the same reconcile.
			if w.incomplete[key] || old == nil {
				w.changedLocked(rvOf(d))
			}
			delete(w.incomplete, key)
		} else {
			w.incomplete[key] = true
		}
		w.setBusyLocked("rollouts", len(w.incomplete) > 0)
		w.wakeLocked()
	}
	_, _ = deployments.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { deploymentHandler(nil, obj) },
		UpdateFunc: deploymentHandler,
		DeleteFunc: func(obj any) {
			if d, ok := obj.(*appsv1.Deployment); ok {
				w.mu.Lock()
				delete(w.incomplete, d.Namespace+"/"+d.Name)
				w.setBusyLocked("rollouts", len(w.incomplete) > 0)
				w.wakeLocked()
				w.mu.Unlock()
			}
		},
	})

	pods := cache.NewSharedIndexInformer(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = podindex.MeshedPodSelector
			return kube.CoreV1().Pods(metav1.NamespaceAll).List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = podindex.MeshedPodSelector
			return kube.CoreV1().Pods(metav1.NamespaceAll).Watch(ctx, o)
		},
	}, &corev1.Pod{}, 0, cache.Indexers{})
	_ = pods.SetTransform(podindex.TransformPod)
	podHandler := func(obj any, deleted bool) {
		w.mu.Lock()
		defer w.mu.Unlock()
		var key string
		switch p := obj.(type) {
		case *corev1.Pod:
			key = p.Namespace + "/" + p.Name
			if !deleted && p.DeletionTimestamp != nil {
				w.terminating[key] = true
			} else {
				delete(w.terminating, key)
			}
		case cache.DeletedFinalStateUnknown:
			key = p.Key
			delete(w.terminating, key)
		}
		w.setBusyLocked("terminating pods", len(w.terminating) > 0)
		w.changedLocked(rvOf(obj))
		w.wakeLocked()
	}
	_, _ = pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { podHandler(obj, false) },
		UpdateFunc: func(_, obj any) { podHandler(obj, false) },
		DeleteFunc: func(obj any) { podHandler(obj, true) },
	})

	rotation := cache.NewSharedIndexInformer(tars.ListWatch(fields.Everything()), &v1alpha1.TrustAnchorRotation{}, 0, cache.Indexers{})
	rotationHandler := func(obj any) {
		tar, ok := obj.(*v1alpha1.TrustAnchorRotation)
		if !ok {
			return
		}
		now := time.Now()
		w.mu.Lock()
		defer w.mu.Unlock()
		if tar.Status.Checkpoint != nil {
			w.step = tar.Status.Checkpoint.Step
		}
		w.status = *tar.Status.DeepCopy()
		if tar.Status.Phase != w.phase {
			rv := rvOf(tar)
			exit := time.Time{}
			for i := len(w.changes) - 1; i >= 0; i-- {
				if c := w.changes[i]; c.rv == 0 || c.rv < rv {
					exit = c.at
					break
				}
			}
			if w.phase != "" && !exit.IsZero() {
				w.transitions = append(w.transitions, transition{from: w.phase, to: tar.Status.Phase, at: now, latency: now.Sub(exit)})
			}
			w.phase = tar.Status.Phase
		}
		w.wakeLocked()
	}
	_, _ = rotation.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: rotationHandler, UpdateFunc: func(_, obj any) { rotationHandler(obj) },
	})

	infs := []cache.SharedIndexInformer{anchor, issuer, deployments, pods, rotation}
	synced := make([]cache.InformerSynced, 0, len(infs))
	for _, inf := range infs {
		go inf.RunWithContext(ctx)
		synced = append(synced, inf.HasSynced)
	}
	cache.WaitForCacheSync(ctx.Done(), synced...)

	// The simulator's oracle re-checks after every proxy change: its count of proxies without a
	// certificate is the ground truth of certificate issuance.
	go func() {
		_ = mesh.Oracle().WaitFor(ctx, func(s meshsim.OracleStatus) bool {
			w.mu.Lock()
			defer w.mu.Unlock()
			if s.PodsWithoutCertificate != w.certless {
				w.certless = s.PodsWithoutCertificate
				w.changedLocked(0)
			}
			w.setBusyLocked("certificates", s.PodsWithoutCertificate > 0)
			return false
		})
	}()
}

// waitPhase waits until the rotation is in phase and returns when it saw it.
func (w *world) waitPhase(ctx context.Context, phase v1alpha1.Phase) (time.Time, error) {
	return w.waitFor(ctx, func() bool { return w.phase == phase })
}

// waitStep waits until the rotation's checkpoint is at step.
func (w *world) waitStep(ctx context.Context, step string) (time.Time, error) {
	return w.waitFor(ctx, func() bool { return w.step == step })
}

func (w *world) waitFor(ctx context.Context, cond func() bool) (time.Time, error) {
	for {
		w.mu.Lock()
		ok, ch := cond(), w.notify
		w.mu.Unlock()
		if ok {
			return time.Now(), nil
		}
		select {
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		case <-ch:
		}
	}
}

// complete is `kubectl rollout status`'s condition (see meshsim.WaitForRollout).
func complete(d *appsv1.Deployment) bool {
	want := int32(1)
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	s := d.Status
	return d.Generation <= s.ObservedGeneration && s.UpdatedReplicas >= want && s.Replicas <= s.UpdatedReplicas &&
		s.AvailableReplicas >= s.UpdatedReplicas
}
