package cluster

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
)

var portForwardGVR = schema.GroupVersionResource{Group: "kwok.x-k8s.io", Version: "v1alpha1", Resource: "portforwards"}

// ForwardPort tells kwok's kubelet where the apiserver's port-forward to port of pod
// namespace/name goes: target, a host:port of this machine (the mesh simulator's proxy at the
// pod's IP). A kubelet knows this by itself, from the pod's network namespace; kwok's nodes run
// nothing, so a test that port-forwards says it, one pod at a time. Forwards of the pod set
// before are replaced. The cluster must run with Options.PortForward.
func (c *Cluster) ForwardPort(ctx context.Context, namespace, name string, port int32, targetHost string, targetPort int32) error {
	if !c.opts.PortForward {
		return fmt.Errorf("kwok PortForward for pod %s/%s: the cluster runs without Options.PortForward", namespace, name)
	}
	dyn, err := dynamic.NewForConfig(c.restConfig)
	if err != nil {
		return err
	}
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kwok.x-k8s.io/v1alpha1",
		"kind":       "PortForward",
		"metadata":   map[string]any{"name": name, "namespace": namespace},
		"spec": map[string]any{"forwards": []any{map[string]any{
			"ports":  []any{int64(port)},
			"target": map[string]any{"address": targetHost, "port": int64(targetPort)},
		}}},
	}}
	_, err = dyn.Resource(portForwardGVR).Namespace(namespace).Apply(ctx, name, obj, metav1.ApplyOptions{FieldManager: "trust-rotation-testbed", Force: true})
	if err != nil {
		return fmt.Errorf("kwok PortForward for pod %s/%s: %w", namespace, name, err)
	}
	return nil
}
