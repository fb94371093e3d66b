package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/sethvargo/go-retry"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/reference"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/klog/v2"
)

// EventRecorder is what the operator records Events with: client-go's record.EventRecorder's
// two methods it uses (a test's record.FakeRecorder has them too).
type EventRecorder interface {
	Event(object runtime.Object, eventtype, reason, message string)
	Eventf(object runtime.Object, eventtype, reason, messageFmt string, args ...any)
}

// eventWriter records core/v1 Events as client-go's recorder does: in the object's namespace
// ("default" for a cluster-scoped one), named <object>.<hex nanoseconds>, from the operator's
// component, written in the background so that a reconcile never waits on them. An Event
// identical to one written before (same object, type, reason and message) raises that Event's
// count instead of adding another. Each object may emit a burst of eventBurst Events, then one
// per 1/eventQPS seconds: client-go's default spam filter lets only 25 through, and a rotation
// with automatic restarts, or a writer fighting the trust bundle, emits more than that; the
// Events that matter most (RotationComplete) came last and were dropped.
//
// It replaces client-go's tools/record, whose broadcaster patches Events with strategic merge
// patches and links the OpenAPI machinery that needs into the operator, for the few Events of
// one object an operator emits.
type eventWriter struct {
	events func(namespace string) Resource[*corev1.Event, *corev1.EventList]
	scheme *runtime.Scheme
	source corev1.EventSource
	queue  chan *corev1.Event
	now    func() time.Time

	mu      sync.Mutex
	written map[eventKey]*corev1.Event // the last Event written of each kind, for its count
	spam    map[types.UID]flowcontrol.RateLimiter

	// wrote, when set (tests), is called after each Event is written or given up on.
	wrote func(*corev1.Event, error)
}

// eventKey is what makes two Events the same Event, counted rather than repeated.
type eventKey struct {
	object                  types.UID
	eventtype, reason, text string
}

const (
	eventBurst      = 200
	eventQPS        = 0.1
	eventQueue      = 1000
	maxEventsCached = 4096
	eventTries      = 12
)

// NewEventRecorder returns a recorder that writes the Events of component until ctx ends, as
// client-go's recorder does, in the background, a repeat counted, a burst of 200 per object.
func NewEventRecorder(ctx context.Context, clients Interface, scheme *runtime.Scheme, component string) EventRecorder {
	return newEventWriter(ctx, clients, scheme, component)
}

// newEventWriter starts writing Events until ctx ends.
func newEventWriter(ctx context.Context, clients Interface, scheme *runtime.Scheme, component string) *eventWriter {
	w := &eventWriter{
		events: clients.CoreV1().Events,
		scheme: scheme,
		source: corev1.EventSource{Component: component},
		queue:  make(chan *corev1.Event, eventQueue),
		now:    time.Now,

		written: map[eventKey]*corev1.Event{},
		spam:    map[types.UID]flowcontrol.RateLimiter{},
	}
	go w.run(ctx)
	return w
}

func (w *eventWriter) Event(obj runtime.Object, eventtype, reason, message string) {
	w.record(obj, eventtype, reason, message)
}

func (w *eventWriter) Eventf(obj runtime.Object, eventtype, reason, messageFmt string, args ...any) {
	w.record(obj, eventtype, reason, fmt.Sprintf(messageFmt, args...))
}

// record queues an Event of obj, dropping it (and saying so in the log) when the queue is full
// or obj has emitted too many.
func (w *eventWriter) record(obj runtime.Object, eventtype, reason, message string) {
	ref, err := reference.GetReference(w.scheme, obj)
	if err != nil {
		klog.Background().Error(err, "Not recording an Event: no reference to its object", "reason", reason, "message", message)
		return
	}
	if !w.allow(ref.UID) {
		klog.Background().Info("Dropping an Event: its object emitted too many", "object", ref.Name, "reason", reason, "message", message)
		return
	}
	t := metav1.NewTime(w.now())
	ns := ref.Namespace
	if ns == "" {
		ns = metav1.NamespaceDefault
	}
	e := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: ref.Name + "." + strconv.FormatInt(t.UnixNano(), 16), Namespace: ns},
		InvolvedObject: *ref,
		Reason:         reason,
		Message:        message,
		FirstTimestamp: t,
		LastTimestamp:  t,
		Count:          1,
		Type:           eventtype,
		Source:         w.source,

		ReportingController: w.source.Component,
	}
	select {
	case w.queue <- e:
	default:
		klog.Background().Info("Dropping an Event: too many queued", "object", ref.Name, "reason", reason, "message", message)
	}
}

// allow is the spam filter: a token bucket per object.
func (w *eventWriter) allow(uid types.UID) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	l := w.spam[uid]
	if l == nil {
		if len(w.spam) >= maxEventsCached {
			clear(w.spam)
		}
		l = flowcontrol.NewTokenBucketRateLimiter(eventQPS, eventBurst)
		w.spam[uid] = l
	}
	return l.TryAccept()
}

func (w *eventWriter) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case e := <-w.queue:
			w.write(ctx, e)
		}
	}
}

// write creates e, or raises the count of the same Event written before; it retries a failed
// write with a backoff, eventTries times, as client-go's recorder does.
func (w *eventWriter) write(ctx context.Context, e *corev1.Event) {
	key := eventKey{object: e.InvolvedObject.UID, eventtype: e.Type, reason: e.Reason, text: e.Message}
	backoff := retry.WithMaxRetries(eventTries-1, retry.WithJitterPercent(10, retry.NewConstant(10*time.Second)))
	err := retry.Do(ctx, backoff, func(ctx context.Context) error {
		w.mu.Lock()
		prev := w.written[key]
		w.mu.Unlock()
		var out *corev1.Event
		var err error
		if prev != nil {
			out, err = w.repeat(ctx, prev, e.LastTimestamp)
			if apierrors.IsNotFound(err) {
				prev = nil // expired (the apiserver keeps Events an hour): written anew
			}
		}
		if prev == nil {
			out, err = w.events(e.Namespace).Create(ctx, e, metav1.CreateOptions{})
		}
		switch {
		case err == nil:
			w.mu.Lock()
			if len(w.written) >= maxEventsCached {
				clear(w.written)
			}
			w.written[key] = out
			w.mu.Unlock()
			return nil
		case apierrors.IsAlreadyExists(err), apierrors.IsInvalid(err), apierrors.IsBadRequest(err),
			apierrors.IsForbidden(err) && apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause):
			return err // will not succeed on a retry
		default:
			return retry.RetryableError(err)
		}
	})
	if err != nil && ctx.Err() == nil {
		klog.FromContext(ctx).Error(err, "Could not write an Event", "object", e.InvolvedObject.Name, "reason", e.Reason, "message", e.Message)
	}
	if w.wrote != nil {
		w.wrote(e, err)
	}
}

// repeat raises prev's count and moves its last timestamp to at, with a merge patch.
func (w *eventWriter) repeat(ctx context.Context, prev *corev1.Event, at metav1.Time) (*corev1.Event, error) {
	patch, err := json.Marshal(map[string]any{"count": prev.Count + 1, "lastTimestamp": at})
	if err != nil {
		return nil, err
	}
	return w.events(prev.Namespace).Patch(ctx, prev.Name, types.MergePatchType, patch, metav1.PatchOptions{})
}
