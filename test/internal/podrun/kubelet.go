package podrun

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
)

// Image is a container image unpacked into a directory, as a runtime unpacks it before it starts
// a container: its filesystem (Root) and its configuration.
type Image struct {
	Root       string
	Entrypoint []string
	Cmd        []string
	Env        []string
	WorkingDir string
	// UID and GID are the image's USER, used when the pod's security context sets none.
	UID, GID uint32
}

// Kubelet resolves a pod's container into a sandbox Spec as a kubelet does: its command, its
// environment, its security context and its volumes, with the ServiceAccount token from the
// TokenRequest API.
type Kubelet struct {
	Kube kubernetes.Interface
}

// Unapplied lists what a Spec does not enforce of a container's configuration, for a test to
// report: no cgroups (resources), no seccomp profile.
func Unapplied(pod *corev1.Pod, ctr *corev1.Container) []string {
	var out []string
	if len(ctr.Resources.Limits) > 0 || len(ctr.Resources.Requests) > 0 {
		out = append(out, "resources (no cgroup)")
	}
	if sc := ctr.SecurityContext; (sc != nil && sc.SeccompProfile != nil) || (pod.Spec.SecurityContext != nil && pod.Spec.SecurityContext.SeccompProfile != nil) {
		out = append(out, "seccompProfile")
	}
	return out
}

// Container returns the named container of pod.
func Container(pod *corev1.Pod, name string) (*corev1.Container, error) {
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name == name {
			return &pod.Spec.Containers[i], nil
		}
	}
	return nil, fmt.Errorf("pod %s/%s has no container %q", pod.Namespace, pod.Name, name)
}

// Spec resolves container name of pod, to run from img with pod IP podIP. It refuses what it
// cannot do as a kubelet would, naming it, rather than run something else.
func (k *Kubelet) Spec(ctx context.Context, pod *corev1.Pod, name string, img Image, podIP net.IP) (Spec, error) {
	ctr, err := Container(pod, name)
	if err != nil {
		return Spec{}, err
	}
	where := fmt.Sprintf("pod %s/%s, container %s", pod.Namespace, pod.Name, name)
	s := Spec{Root: img.Root, Hostname: pod.Name, Dir: img.WorkingDir, UID: img.UID, GID: img.GID}
	if ctr.WorkingDir != "" {
		s.Dir = ctr.WorkingDir
	}
	// The command: the container's command or the image's entrypoint, then the container's args
	// or, with neither command nor args, the image's cmd.
	switch {
	case len(ctr.Command) > 0:
		s.Argv = append(append([]string{}, ctr.Command...), ctr.Args...)
	case len(ctr.Args) > 0:
		s.Argv = append(append([]string{}, img.Entrypoint...), ctr.Args...)
	default:
		s.Argv = append(append([]string{}, img.Entrypoint...), img.Cmd...)
	}
	if len(s.Argv) == 0 {
		return Spec{}, fmt.Errorf("%s: no command", where)
	}

	if err := k.securityContext(pod, ctr, &s); err != nil {
		return Spec{}, fmt.Errorf("%s: %w", where, err)
	}
	if s.Env, err = k.env(ctx, pod, ctr, img, s.UID, podIP); err != nil {
		return Spec{}, fmt.Errorf("%s: %w", where, err)
	}
	for _, vm := range ctr.VolumeMounts {
		m, err := k.mount(ctx, pod, vm)
		if err != nil {
			return Spec{}, fmt.Errorf("%s: volume %s: %w", where, vm.Name, err)
		}
		s.Mounts = append(s.Mounts, m)
	}
	return s, nil
}

// securityContext applies the pod's and the container's security context, the container's
// winning.
func (k *Kubelet) securityContext(pod *corev1.Pod, ctr *corev1.Container, s *Spec) error {
	var nonRoot *bool
	if psc := pod.Spec.SecurityContext; psc != nil {
		if psc.RunAsUser != nil {
			s.UID = uint32(*psc.RunAsUser)
		}
		if psc.RunAsGroup != nil {
			s.GID = uint32(*psc.RunAsGroup)
		}
		nonRoot = psc.RunAsNonRoot
		for _, g := range psc.SupplementalGroups {
			s.Groups = append(s.Groups, uint32(g))
		}
		if psc.FSGroup != nil {
			return fmt.Errorf("fsGroup is not supported")
		}
	}
	if sc := ctr.SecurityContext; sc != nil {
		if sc.RunAsUser != nil {
			s.UID = uint32(*sc.RunAsUser)
		}
		if sc.RunAsGroup != nil {
			s.GID = uint32(*sc.RunAsGroup)
		}
		if sc.RunAsNonRoot != nil {
			nonRoot = sc.RunAsNonRoot
		}
		if sc.Privileged != nil && *sc.Privileged {
			return fmt.Errorf("privileged containers are not supported")
		}
		s.ReadOnlyRoot = sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem
		s.NoNewPrivs = sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation
		if c := sc.Capabilities; c != nil {
			if len(c.Add) > 0 {
				return fmt.Errorf("adding capabilities (%v) is not supported", c.Add)
			}
			for _, d := range c.Drop {
				if d != "ALL" {
					return fmt.Errorf("dropping capability %s alone is not supported, only ALL", d)
				}
				s.DropAllCapabilities = true
			}
		}
	}
	// As the kubelet: runAsNonRoot refuses to start a container that would run as root.
	if nonRoot != nil && *nonRoot && s.UID == 0 {
		return fmt.Errorf("runAsNonRoot and the container would run as root")
	}
	s.Groups = append([]uint32{s.GID}, s.Groups...)
	return nil
}

// env is the container's environment as a kubelet and a runtime make it: the image's, HOSTNAME,
// HOME (the user's home in the image's /etc/passwd), the `kubernetes` Service's variables, then
// the container's env.
func (k *Kubelet) env(ctx context.Context, pod *corev1.Pod, ctr *corev1.Container, img Image, uid uint32, podIP net.IP) ([]string, error) {
	if len(ctr.EnvFrom) > 0 {
		return nil, fmt.Errorf("envFrom is not supported")
	}
	env := append([]string{}, img.Env...)
	env = append(env, "HOSTNAME="+pod.Name, "HOME="+home(img.Root, uid))
	svc, err := k.Kube.CoreV1().Services(metav1.NamespaceDefault).Get(ctx, "kubernetes", metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("the kubernetes Service: %w", err)
	}
	for _, p := range svc.Spec.Ports {
		if p.Name == "https" {
			port := strconv.Itoa(int(p.Port))
			env = append(env,
				"KUBERNETES_SERVICE_HOST="+svc.Spec.ClusterIP,
				"KUBERNETES_SERVICE_PORT="+port,
				"KUBERNETES_SERVICE_PORT_HTTPS="+port,
				"KUBERNETES_PORT=tcp://"+net.JoinHostPort(svc.Spec.ClusterIP, port),
			)
		}
	}
	for _, e := range ctr.Env {
		v := e.Value
		if e.ValueFrom != nil {
			f := e.ValueFrom.FieldRef
			if f == nil {
				return nil, fmt.Errorf("env %s: only fieldRef values are supported", e.Name)
			}
			if v, err = field(pod, f.FieldPath, podIP); err != nil {
				return nil, fmt.Errorf("env %s: %w", e.Name, err)
			}
		}
		env = append(env, e.Name+"="+v)
	}
	return env, nil
}

// field is a downward API field of pod.
func field(pod *corev1.Pod, path string, podIP net.IP) (string, error) {
	switch path {
	case "metadata.name":
		return pod.Name, nil
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.uid":
		return string(pod.UID), nil
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, nil
	case "status.podIP":
		return podIP.String(), nil
	}
	return "", fmt.Errorf("field %s is not supported", path)
}

// home returns the home directory of uid in the image's /etc/passwd, or "/".
func home(root string, uid uint32) string {
	f, err := os.Open(filepath.Join(root, "etc", "passwd"))
	if err != nil {
		return "/"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Split(sc.Text(), ":")
		if len(fields) >= 6 && fields[2] == strconv.Itoa(int(uid)) {
			return fields[5]
		}
	}
	return "/"
}

// mount resolves a volume mount into a tmpfs with the volume's content.
func (k *Kubelet) mount(ctx context.Context, pod *corev1.Pod, vm corev1.VolumeMount) (Mount, error) {
	if vm.SubPath != "" || vm.SubPathExpr != "" {
		return Mount{}, fmt.Errorf("subPath is not supported")
	}
	var vol *corev1.Volume
	for i := range pod.Spec.Volumes {
		if pod.Spec.Volumes[i].Name == vm.Name {
			vol = &pod.Spec.Volumes[i]
		}
	}
	if vol == nil {
		return Mount{}, fmt.Errorf("the pod has no such volume")
	}
	m := Mount{Target: vm.MountPath, ReadOnly: vm.ReadOnly, Files: map[string]File{}}
	switch {
	case vol.EmptyDir != nil:
		m.Mode = 0o777 // as the kubelet makes an emptyDir
		return m, nil
	case vol.Projected != nil:
		m.Mode = 0o755
		mode := os.FileMode(0o644)
		if vol.Projected.DefaultMode != nil {
			mode = os.FileMode(*vol.Projected.DefaultMode)
		}
		for _, src := range vol.Projected.Sources {
			if err := k.project(ctx, pod, src, mode, m.Files); err != nil {
				return Mount{}, err
			}
		}
		return m, nil
	}
	return Mount{}, fmt.Errorf("only emptyDir and projected volumes are supported")
}

// project adds the files of one projected volume source.
func (k *Kubelet) project(ctx context.Context, pod *corev1.Pod, src corev1.VolumeProjection, mode os.FileMode, files map[string]File) error {
	switch {
	case src.ServiceAccountToken != nil:
		t := src.ServiceAccountToken
		req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
			ExpirationSeconds: t.ExpirationSeconds,
			// Bound to the pod, as the kubelet's tokens are: deleting the pod revokes it.
			BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
		}}
		if t.Audience != "" {
			req.Spec.Audiences = []string{t.Audience}
		}
		tok, err := k.Kube.CoreV1().ServiceAccounts(pod.Namespace).CreateToken(ctx, pod.Spec.ServiceAccountName, req, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("TokenRequest for ServiceAccount %s/%s: %w", pod.Namespace, pod.Spec.ServiceAccountName, err)
		}
		files[t.Path] = File{Data: []byte(tok.Status.Token), Mode: mode}
	case src.ConfigMap != nil:
		cm, err := k.Kube.CoreV1().ConfigMaps(pod.Namespace).Get(ctx, src.ConfigMap.Name, metav1.GetOptions{})
		if err != nil {
			if src.ConfigMap.Optional != nil && *src.ConfigMap.Optional {
				return nil
			}
			return fmt.Errorf("ConfigMap %s/%s: %w", pod.Namespace, src.ConfigMap.Name, err)
		}
		items := src.ConfigMap.Items
		if len(items) == 0 {
			for key := range cm.Data {
				items = append(items, corev1.KeyToPath{Key: key, Path: key})
			}
		}
		for _, it := range items {
			v, ok := cm.Data[it.Key]
			if !ok {
				return fmt.Errorf("ConfigMap %s/%s has no key %s", pod.Namespace, cm.Name, it.Key)
			}
			files[it.Path] = File{Data: []byte(v), Mode: itemMode(it.Mode, mode)}
		}
	case src.DownwardAPI != nil:
		for _, it := range src.DownwardAPI.Items {
			if it.FieldRef == nil {
				return fmt.Errorf("downwardAPI item %s: only fieldRef is supported", it.Path)
			}
			v, err := field(pod, it.FieldRef.FieldPath, nil)
			if err != nil {
				return fmt.Errorf("downwardAPI item %s: %w", it.Path, err)
			}
			files[it.Path] = File{Data: []byte(v), Mode: itemMode(it.Mode, mode)}
		}
	default:
		return fmt.Errorf("only serviceAccountToken, configMap and downwardAPI projections are supported")
	}
	return nil
}

func itemMode(m *int32, def os.FileMode) os.FileMode {
	if m != nil {
		return os.FileMode(*m)
	}
	return def
}

// Probe runs an httpGet probe against a container at podIP exactly as declared — its scheme,
// host, path, headers, timeout, and its port, a number or the name of one of the container's
// ports — and succeeds, as the kubelet's, on a status from 200 to 399.
func Probe(ctx context.Context, ctr *corev1.Container, p *corev1.Probe, podIP net.IP) error {
	if p == nil || p.HTTPGet == nil {
		return fmt.Errorf("container %s: only httpGet probes are supported", ctr.Name)
	}
	g := p.HTTPGet
	port, err := containerPort(ctr, g.Port)
	if err != nil {
		return err
	}
	host := g.Host
	if host == "" {
		host = podIP.String()
	}
	scheme := strings.ToLower(string(g.Scheme))
	if scheme == "" {
		scheme = "http"
	}
	timeout := time.Duration(p.TimeoutSeconds) * time.Second
	if timeout == 0 {
		timeout = time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	url := scheme + "://" + net.JoinHostPort(host, strconv.Itoa(port)) + g.Path
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	req.Header.Set("User-Agent", "kube-probe/podrun")
	for _, h := range g.HTTPHeaders {
		req.Header.Add(h.Name, h.Value)
	}
	// The kubelet does not verify an HTTPS probe's certificate.
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true, TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // as the kubelet
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("GET %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode >= 400 {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}

// containerPort resolves a probe's port: a number, or the name of a container port.
func containerPort(ctr *corev1.Container, p intstr.IntOrString) (int, error) {
	if p.Type == intstr.Int {
		return p.IntValue(), nil
	}
	for _, cp := range ctr.Ports {
		if cp.Name == p.StrVal {
			return int(cp.ContainerPort), nil
		}
	}
	return 0, fmt.Errorf("container %s has no port named %q", ctr.Name, p.StrVal)
}
