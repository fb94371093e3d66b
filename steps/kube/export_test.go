package kube

import corev1 "k8s.io/api/core/v1"

// What the tests of package kube_test, which serve this package's interfaces from client-go's
// Clientsets through kube/clientset, reach inside.
const (
	EventBurst = eventBurst
	EventQueue = eventQueue
)

// SetWrote has w call f after each Event it writes or gives up on.
func SetWrote(w *EventWriter, f func(*corev1.Event, error)) { w.wrote = f }
