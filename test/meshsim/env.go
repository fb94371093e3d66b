package meshsim

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// resolveEnv computes a container's environment the way the kubelet does when it starts the
// container: literal values with $(VAR) references to earlier variables expanded, downward-API
// fieldRefs, and configMapKeyRefs read NOW — which is why a proxy's trust roots are fixed at
// container start. lookupCM returns a ConfigMap key's value as the kubelet reads it then.
func resolveEnv(pod *corev1.Pod, c *corev1.Container, lookupCM func(ns, name, key string) (string, bool)) (map[string]string, error) {
	env := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = expandEnv(e.Value, env)
		case e.ValueFrom.FieldRef != nil:
			v, err := podField(pod, e.ValueFrom.FieldRef.FieldPath)
			if err != nil {
				return nil, fmt.Errorf("env %s: %w", e.Name, err)
			}
			env[e.Name] = v
		case e.ValueFrom.ConfigMapKeyRef != nil:
			ref := e.ValueFrom.ConfigMapKeyRef
			v, ok := lookupCM(pod.Namespace, ref.Name, ref.Key)
			if !ok {
				if ref.Optional != nil && *ref.Optional {
					continue
				}
				// The kubelet refuses to start the container: CreateContainerConfigError.
				return nil, fmt.Errorf("env %s: configmap %s/%s key %q not found", e.Name, pod.Namespace, ref.Name, ref.Key)
			}
			env[e.Name] = v
		default:
			return nil, fmt.Errorf("env %s: unsupported valueFrom in the simulator", e.Name)
		}
	}
	return env, nil
}

func podField(pod *corev1.Pod, path string) (string, error) {
	switch path {
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.name":
		return pod.Name, nil
	case "metadata.uid":
		return string(pod.UID), nil
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, nil
	case "spec.nodeName":
		return pod.Spec.NodeName, nil
	case "status.podIP":
		return pod.Status.PodIP, nil
	case "status.podIPs":
		// The kubelet joins the pod's IPs with commas; Linkerd's own injector sets
		// LINKERD2_PROXY_INBOUND_IPS from it (edge-26.8.3).
		ips := make([]string, 0, len(pod.Status.PodIPs))
		for _, ip := range pod.Status.PodIPs {
			ips = append(ips, ip.IP)
		}
		if len(ips) == 0 && pod.Status.PodIP != "" {
			ips = append(ips, pod.Status.PodIP)
		}
		return strings.Join(ips, ","), nil
	case "status.hostIP":
		return pod.Status.HostIP, nil
	}
	return "", fmt.Errorf("unsupported fieldPath %q", path)
}

// expandEnv expands $(VAR) with variables defined earlier and $$ to $, leaving unknown
// references as they are (Kubernetes' expansion rules).
func expandEnv(s string, env map[string]string) string {
	if !strings.Contains(s, "$") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 >= len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				b.WriteString(s[i:])
				return b.String()
			}
			name := s[i+2 : i+2+end]
			if v, ok := env[name]; ok {
				b.WriteString(v)
			} else {
				b.WriteString(s[i : i+3+end])
			}
			i += 2 + end
		default:
			b.WriteByte('$')
		}
	}
	return b.String()
}

// ProxyOf returns the pod's linkerd-proxy container, in spec.containers or, as a native
// sidecar, in spec.initContainers; the kubelet runs both the same way for what the simulator
// models (env resolved at container start, the admin port served while the pod runs). The
// simulator keeps its own lookup rather than the product's: it is the product's judge.
func ProxyOf(pod *corev1.Pod) *corev1.Container {
	for _, list := range [][]corev1.Container{pod.Spec.Containers, pod.Spec.InitContainers} {
		for i := range list {
			if list[i].Name == ProxyContainerName {
				return &list[i]
			}
		}
	}
	return nil
}

// adminPort is the proxy container's port named linkerd-admin (4191 by default).
func adminPort(c *corev1.Container) int32 {
	for _, p := range c.Ports {
		if p.Name == AdminPortName {
			return p.ContainerPort
		}
	}
	return AdminPort
}

func labelsEverything() labels.Selector { return labels.Everything() }
