package kube

import corev1 "k8s.io/api/core/v1"

// What the tests of package kube_test, which serve this package's interfaces from client-go's
// Clientsets through kube/clientset, reach inside.
const (
	EventBurst = eventBurst
	EventQueue = eventQueue
)

// SetWrote has r, of NewEventRecorder, call f after each Event it writes or gives up on.
func SetWrote(r EventRecorder, f func(*corev1.Event, error)) { r.(*eventWriter).wrote = f }
