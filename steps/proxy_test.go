package steps

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestProxyContainer(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	proxy := func(port int32) corev1.Container {
		return corev1.Container{Name: ProxyContainerName, Ports: []corev1.ContainerPort{
			{Name: "linkerd-proxy", ContainerPort: 4143}, {Name: AdminPortName, ContainerPort: port}}}
	}
	native := proxy(4191)
	native.RestartPolicy = &always
	app := corev1.Container{Name: "web", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}}
	initApp := corev1.Container{Name: "linkerd-init"}

	cases := map[string]struct {
		spec       corev1.PodSpec
		wantLayout ProxyLayout
		wantPort   int32
	}{
		"a native sidecar (edge-26.5.2 and later) is found among the init containers": {
			spec:       corev1.PodSpec{InitContainers: []corev1.Container{initApp, native}, Containers: []corev1.Container{app}},
			wantLayout: NativeSidecar, wantPort: 4191,
		},
		"a proxy in spec.containers (the layout before edge-26.5.2) is found there": {
			spec:       corev1.PodSpec{InitContainers: []corev1.Container{initApp}, Containers: []corev1.Container{proxy(4191), app}},
			wantLayout: Container, wantPort: 4191,
		},
		"the admin port is read from the proxy wherever it is": {
			spec:       corev1.PodSpec{InitContainers: []corev1.Container{proxy(5191)}, Containers: []corev1.Container{app}},
			wantLayout: NativeSidecar, wantPort: 5191,
		},
		"a pod without linkerd-proxy is not meshed, whatever its other containers": {
			spec:       corev1.PodSpec{InitContainers: []corev1.Container{initApp}, Containers: []corev1.Container{app}},
			wantLayout: NotMeshed,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			c, layout := ProxyContainer(&tc.spec)
			if layout != tc.wantLayout {
				t.Fatalf("layout = %q, want %q", layout, tc.wantLayout)
			}
			if tc.wantLayout == NotMeshed {
				if c != nil {
					t.Fatalf("container = %q, want none", c.Name)
				}
				return
			}
			if c == nil || c.Name != ProxyContainerName {
				t.Fatalf("container = %v, want %s", c, ProxyContainerName)
			}
			if got := ProxyAdminPort(c); got != tc.wantPort {
				t.Errorf("admin port = %d, want %d", got, tc.wantPort)
			}
		})
	}
}

func TestProxyAdminPortDefault(t *testing.T) {
	if got := ProxyAdminPort(&corev1.Container{Name: ProxyContainerName}); got != DefaultAdminPort {
		t.Errorf("admin port of a proxy that names none = %d, want %d", got, DefaultAdminPort)
	}
}
