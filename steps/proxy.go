package steps

import corev1 "k8s.io/api/core/v1"

// ProxyLayout says where Linkerd's proxy-injector put a pod's linkerd-proxy container.
type ProxyLayout string

const (
	// NotMeshed: the pod has no linkerd-proxy container.
	NotMeshed ProxyLayout = ""
	// NativeSidecar: linkerd-proxy is an init container with restartPolicy: Always (KEP-753).
	// Linkerd's default since edge-26.5.2 (linkerd2 #15267, Helm proxy.nativeSidecar: true),
	// control plane included; opt out per workload or namespace with the annotation
	// config.linkerd.io/proxy-enable-native-sidecar: "false".
	NativeSidecar ProxyLayout = "native-sidecar"
	// Container: linkerd-proxy is one of spec.containers, the layout of every Linkerd before
	// edge-26.5.2 and of proxy.nativeSidecar: false.
	Container ProxyLayout = "container"
)

// ProxyContainer returns a pod's linkerd-proxy container and where it is. Every place that looks
// for the proxy (the pod cache, the CLI's inspect and check, the automation) goes through it, so
// a pod is meshed whichever layout injected it. Like linkerd2's own pkg/k8s (GetProxyVersion,
// GetProxyReady), it finds the proxy by name in either list; spec.containers wins if a pod had
// both, which Linkerd never injects.
func ProxyContainer(spec *corev1.PodSpec) (*corev1.Container, ProxyLayout) {
	for i := range spec.Containers {
		if spec.Containers[i].Name == ProxyContainerName {
			return &spec.Containers[i], Container
		}
	}
	for i := range spec.InitContainers {
		if spec.InitContainers[i].Name == ProxyContainerName {
			return &spec.InitContainers[i], NativeSidecar
		}
	}
	return nil, NotMeshed
}

// ProxyAdminPort is the port of the proxy container named linkerd-admin, 4191 when none is.
func ProxyAdminPort(c *corev1.Container) int32 {
	for _, port := range c.Ports {
		if port.Name == AdminPortName {
			return port.ContainerPort
		}
	}
	return DefaultAdminPort
}
