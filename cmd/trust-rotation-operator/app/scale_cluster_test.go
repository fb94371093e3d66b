package app

import (
	"bufio"
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/linkerd/trust-rotation/steps"
)

// The synthetic cluster runs in a process of its own (the test binary run again, scaleClusterEnv
// set), so that the parent's CPU time and heap are the operator's path alone. It serves what the
// operator's pod informer reads and its probes dial:
//
//   - the meshed pods' list and watch, with the apiserver's wire format and codecs (protobuf, the
//     watch's length-delimited frames, a watch-list's initial events ended by the bookmark the
//     reflector waits for), on an HTTP port;
//   - every proxy's admin port on one TLS port: the dialer sends the pod's IP on a line first,
//     then the handshake presents that pod's own leaf (one per pod incarnation, signed by the
//     issuer it started under, naming its identity), as a proxy does with crypto/tls.
//
// On its standard input it takes "wave <trust-root hash> <issuer> <pods a second>" lines: a
// rolling restart of every Deployment at that pace, each pod replaced by a new one as a
// ReplicaSet rollout does (the new pod added Pending, then Running with its IP; the old one
// marked terminating, then deleted), and answers "done <events>" once every event was handed to
// the watch.
const scaleClusterEnv = "SCALE_BENCH_CLUSTER"

// clusterShape is the mesh: Deployments of scaleReplicaCycle[d%len] replicas, one namespace each;
// every third Deployment injected with the proxy as a plain container, the others as a native
// sidecar (Linkerd edge-26.5.2 and later).
var scaleReplicaCycle = []int{5, 10, 20, 50}

// scaleWorkload is one Deployment of the synthetic mesh.
type scaleWorkload struct {
	namespace, name string
	replicas        int
	nativeSidecar   bool
}

func scaleWorkloads(pods int) []scaleWorkload {
	var out []scaleWorkload
	for d, left := 0, pods; left > 0; d++ {
		n := min(scaleReplicaCycle[d%len(scaleReplicaCycle)], left)
		out = append(out, scaleWorkload{namespace: fmt.Sprintf("ns-%05d", d), name: fmt.Sprintf("svc-%05d", d), replicas: n, nativeSidecar: d%3 != 0})
		left -= n
	}
	return out
}

// cluster is the synthetic cluster's state, in the child process.
type scaleCluster struct {
	cfg     steps.Config
	shape   []scaleWorkload
	issuers []scaleIssuer
	leafKey crypto.Signer

	mu       sync.Mutex
	rv       int64
	ipSeq    uint32
	uidSeq   int
	template int
	pods     [][]*corev1.Pod // by workload, by replica
	watchers []chan []byte

	// byIP holds the running pods' leaves, under leafMu: the proxies' port answers while a
	// wave waits on the watch.
	leafMu sync.Mutex
	byIP   map[string]*scaleLeaf

	podCodec  runtime.Encoder
	eventEnc  runtime.Encoder
	listCodec runtime.Encoder
}

// scaleLeaf is the leaf of one pod incarnation, made on its first handshake.
type scaleLeaf struct {
	identity string
	issuer   int
	once     sync.Once
	cert     *tls.Certificate
}

type scaleIssuer struct {
	cert *x509.Certificate
	key  crypto.Signer
}

// runScaleCluster is the child process's main.
func runScaleCluster(dir string) {
	pods, err := strconv.Atoi(os.Getenv("SCALE_BENCH_PODS"))
	if err != nil {
		scaleFail(err)
	}
	c := &scaleCluster{cfg: steps.DefaultConfig(), shape: scaleWorkloads(pods), byIP: map[string]*scaleLeaf{}}
	for i := 0; ; i++ {
		certPEM, err := os.ReadFile(fmt.Sprintf("%s/issuer-%d.crt", dir, i))
		if os.IsNotExist(err) {
			break
		}
		if err != nil {
			scaleFail(err)
		}
		keyPEM, err := os.ReadFile(fmt.Sprintf("%s/issuer-%d.key", dir, i))
		if err != nil {
			scaleFail(err)
		}
		pair, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			scaleFail(err)
		}
		c.issuers = append(c.issuers, scaleIssuer{cert: pair.Leaf, key: pair.PrivateKey.(crypto.Signer)})
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		scaleFail(err)
	}
	c.leafKey = key
	codecs := serializer.NewCodecFactory(scheme.Scheme)
	pb := protobuf.NewSerializer(scheme.Scheme, scheme.Scheme)
	c.podCodec = codecs.EncoderForVersion(pb, corev1.SchemeGroupVersion)
	c.listCodec = c.podCodec
	c.eventEnc = protobuf.NewRawSerializer(scheme.Scheme, scheme.Scheme)
	for w := range c.shape {
		c.pods = append(c.pods, make([]*corev1.Pod, c.shape[w].replicas))
		for r := range c.pods[w] {
			c.pods[w][r] = c.newPod(w, os.Getenv("SCALE_BENCH_ROOT_HASH"), 0, corev1.PodRunning)
		}
	}

	api, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		scaleFail(err)
	}
	proxies, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		scaleFail(err)
	}
	go func() { _ = http.Serve(api, http.HandlerFunc(c.serveAPI)) }()
	go c.serveProxies(proxies)
	fmt.Printf("api %s proxies %s\n", api.Addr(), proxies.Addr())

	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		f := strings.Fields(in.Text())
		if len(f) != 4 || f[0] != "wave" {
			scaleFail(fmt.Errorf("unknown command %q", in.Text()))
		}
		issuer, err := strconv.Atoi(f[2])
		if err != nil || issuer >= len(c.issuers) {
			scaleFail(fmt.Errorf("wave: issuer %q", f[2]))
		}
		rate, err := strconv.Atoi(f[3])
		if err != nil || rate <= 0 {
			scaleFail(fmt.Errorf("wave: rate %q", f[3]))
		}
		fmt.Printf("done %d\n", c.wave(f[1], issuer, rate))
	}
}

func scaleFail(err error) {
	fmt.Fprintln(os.Stderr, "synthetic cluster:", err)
	os.Exit(2)
}

// scaleProxyEnv is the environment of an injected proxy, as Linkerd's injector writes it (names from
// charts/partials/templates/_proxy.tpl; values shortened): the bulk of a meshed pod's spec that
// every list and watch event carries, whether or not the operator keeps it.
var scaleProxyEnv = func() []corev1.EnvVar {
	var env []corev1.EnvVar
	for _, kv := range [][2]string{
		{"_pod_name", ""}, {"_pod_ns", ""}, {"_pod_nodeName", ""}, {"LINKERD2_PROXY_LOG", "warn,linkerd=info,hickory=error"},
		{"LINKERD2_PROXY_LOG_FORMAT", "plain"}, {"LINKERD2_PROXY_DESTINATION_SVC_ADDR", "linkerd-dst-headless.linkerd.svc.cluster.local.:8086"},
		{"LINKERD2_PROXY_DESTINATION_PROFILE_NETWORKS", "10.0.0.0/8,100.64.0.0/10,172.16.0.0/12,192.168.0.0/16,fd00::/8"},
		{"LINKERD2_PROXY_POLICY_SVC_ADDR", "linkerd-policy.linkerd.svc.cluster.local.:8090"},
		{"LINKERD2_PROXY_POLICY_WORKLOAD", `{"ns":"$(_pod_ns)", "pod":"$(_pod_name)"}`},
		{"LINKERD2_PROXY_INBOUND_DEFAULT_POLICY", "all-unauthenticated"},
		{"LINKERD2_PROXY_POLICY_CLUSTER_NETWORKS", "10.0.0.0/8,100.64.0.0/10,172.16.0.0/12,192.168.0.0/16,fd00::/8"},
		{"LINKERD2_PROXY_CONTROL_STREAM_INITIAL_TIMEOUT", "3s"}, {"LINKERD2_PROXY_CONTROL_STREAM_IDLE_TIMEOUT", "5m"},
		{"LINKERD2_PROXY_CONTROL_STREAM_LIFETIME", "1h"}, {"LINKERD2_PROXY_INBOUND_CONNECT_TIMEOUT", "100ms"},
		{"LINKERD2_PROXY_OUTBOUND_CONNECT_TIMEOUT", "1000ms"}, {"LINKERD2_PROXY_OUTBOUND_DISCOVERY_IDLE_TIMEOUT", "5s"},
		{"LINKERD2_PROXY_INBOUND_DISCOVERY_IDLE_TIMEOUT", "90s"}, {"LINKERD2_PROXY_CONTROL_LISTEN_ADDR", "[::]:4190"},
		{"LINKERD2_PROXY_ADMIN_LISTEN_ADDR", "[::]:4191"}, {"LINKERD2_PROXY_OUTBOUND_LISTEN_ADDR", "127.0.0.1:4140"},
		{"LINKERD2_PROXY_INBOUND_LISTEN_ADDR", "[::]:4143"}, {"LINKERD2_PROXY_INBOUND_IPS", ""},
		{"LINKERD2_PROXY_INBOUND_PORTS", "8080"}, {"LINKERD2_PROXY_DESTINATION_PROFILE_SUFFIXES", "svc.cluster.local."},
		{"LINKERD2_PROXY_INBOUND_ACCEPT_KEEPALIVE", "10000ms"}, {"LINKERD2_PROXY_OUTBOUND_CONNECT_KEEPALIVE", "10000ms"},
		{"LINKERD2_PROXY_SHUTDOWN_ENDPOINT_ENABLED", "false"}, {"LINKERD2_PROXY_IDENTITY_DIR", "/var/run/linkerd/identity/end-entity"},
		{"LINKERD2_PROXY_IDENTITY_TRUST_ANCHORS", "-----BEGIN CERTIFICATE-----\n(the trust bundle, about 600 bytes per anchor)\n-----END CERTIFICATE-----\n"},
		{"LINKERD2_PROXY_IDENTITY_TOKEN_FILE", "/var/run/secrets/tokens/linkerd-identity-token"},
		{"LINKERD2_PROXY_IDENTITY_SVC_ADDR", "linkerd-identity-headless.linkerd.svc.cluster.local.:8080"},
		{"LINKERD2_PROXY_IDENTITY_LOCAL_NAME", "$(_l5d_sa).$(_l5d_ns).serviceaccount.identity.linkerd.cluster.local"},
		{"LINKERD2_PROXY_IDENTITY_SVC_NAME", "linkerd-identity.linkerd.serviceaccount.identity.linkerd.cluster.local"},
		{"LINKERD2_PROXY_DESTINATION_SVC_NAME", "linkerd-destination.linkerd.serviceaccount.identity.linkerd.cluster.local"},
		{"LINKERD2_PROXY_POLICY_SVC_NAME", "linkerd-destination.linkerd.serviceaccount.identity.linkerd.cluster.local"},
	} {
		env = append(env, corev1.EnvVar{Name: kv[0], Value: kv[1]})
	}
	return env
}()

// newPod makes a pod of workload w, on the trust-root hash and under the issuer given; the caller
// holds mu or owns c. A Running pod has its IP.
func (c *scaleCluster) newPod(w int, rootHash string, issuer int, phase corev1.PodPhase) *corev1.Pod {
	wl := c.shape[w]
	c.uidSeq++
	hash := fmt.Sprintf("%08x", c.template)
	yes := true
	always := corev1.ContainerRestartPolicyAlways
	proxy := corev1.Container{
		Name: steps.ProxyContainerName, Image: "cr.l5d.io/linkerd/proxy:edge-26.8.3", Env: scaleProxyEnv,
		Ports: []corev1.ContainerPort{{Name: "linkerd-proxy", ContainerPort: 4143}, {Name: steps.AdminPortName, ContainerPort: 4191}},
		VolumeMounts: []corev1.VolumeMount{{Name: "linkerd-identity-end-entity", MountPath: "/var/run/linkerd/identity/end-entity"},
			{Name: "linkerd-identity-token", MountPath: "/var/run/secrets/tokens"}},
	}
	app := corev1.Container{Name: "app", Image: "example/app:1", Ports: []corev1.ContainerPort{{ContainerPort: 8080}}}
	spec := corev1.PodSpec{ServiceAccountName: wl.name, Containers: []corev1.Container{proxy, app}}
	if wl.nativeSidecar {
		proxy.RestartPolicy = &always
		spec.InitContainers = []corev1.Container{{Name: "linkerd-init", Image: "cr.l5d.io/linkerd/proxy-init:v2.4.3"}, proxy}
		spec.Containers = []corev1.Container{app}
	}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: wl.namespace, Name: fmt.Sprintf("%s-%s-%07d", wl.name, hash, c.uidSeq),
			UID: types.UID(fmt.Sprintf("00000000-0000-0000-0000-%012d", c.uidSeq)), CreationTimestamp: metav1.Now(),
			Labels: map[string]string{"app": wl.name, "pod-template-hash": hash, steps.ControlPlaneNSLabel: "linkerd",
				"linkerd.io/proxy-deployment": wl.name, "linkerd.io/workload-ns": wl.namespace},
			Annotations: map[string]string{steps.TrustRootSHA256Annotation: rootHash, "linkerd.io/created-by": "linkerd/proxy-injector edge-26.8.3",
				"linkerd.io/proxy-version": "edge-26.8.3", "linkerd.io/identity-mode": "default", "linkerd.io/inject": "enabled"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: wl.name + "-" + hash, UID: "rs", Controller: &yes}},
		},
		Spec:   spec,
		Status: corev1.PodStatus{Phase: corev1.PodPending},
	}
	p.Annotations["scale.bench/issuer"] = strconv.Itoa(issuer)
	if phase == corev1.PodRunning {
		c.run(p)
	}
	return p
}

// run gives the pod an IP and its leaf, and marks it Running.
func (c *scaleCluster) run(p *corev1.Pod) {
	c.ipSeq++
	var ip [4]byte
	binary.BigEndian.PutUint32(ip[:], 0x0a000000+c.ipSeq)
	p.Status.Phase, p.Status.PodIP = corev1.PodRunning, net.IP(ip[:]).String()
	issuer, _ := strconv.Atoi(p.Annotations["scale.bench/issuer"])
	c.leafMu.Lock()
	c.byIP[p.Status.PodIP] = &scaleLeaf{identity: c.cfg.IdentityName(p.Spec.ServiceAccountName, p.Namespace), issuer: issuer}
	c.leafMu.Unlock()
}

// wave restarts every Deployment, one pod after another, and returns the events it sent.
func (c *scaleCluster) wave(rootHash string, issuer, rate int) int {
	c.mu.Lock()
	c.template++
	c.mu.Unlock()
	// rate replacements a second, a hundredth of them every 10 ms: the pace of a cluster's
	// scheduler and kubelets, where the apiserver sends each event as it happens.
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	batch := max(rate/100, 1)
	events := 0
	for w := range c.shape {
		for r := range c.pods[w] {
			if events/4%batch == 0 {
				<-tick.C
			}
			c.mu.Lock()
			old := c.pods[w][r]
			p := c.newPod(w, rootHash, issuer, corev1.PodPending)
			c.emit(watch.Added, p)
			running := p.DeepCopy()
			c.run(running)
			c.emit(watch.Modified, running)
			gone := old.DeepCopy()
			now := metav1.Now()
			gone.DeletionTimestamp = &now
			c.emit(watch.Modified, gone)
			c.emit(watch.Deleted, gone)
			c.leafMu.Lock()
			delete(c.byIP, old.Status.PodIP)
			c.leafMu.Unlock()
			c.pods[w][r] = running
			c.mu.Unlock()
			events += 4
		}
	}
	return events
}

// emit hands an event to every watcher, in order; mu is held.
func (c *scaleCluster) emit(t watch.EventType, p *corev1.Pod) {
	c.rv++
	p.ResourceVersion = strconv.FormatInt(c.rv, 10)
	frame := c.frame(t, p)
	for _, w := range c.watchers {
		w <- frame
	}
}

// frame is one watch event as the apiserver frames it in protobuf: a length-delimited
// metav1.WatchEvent whose object is the pod in the protobuf envelope.
func (c *scaleCluster) frame(t watch.EventType, p *corev1.Pod) []byte {
	var obj bytes.Buffer
	if err := c.podCodec.Encode(p, &obj); err != nil {
		scaleFail(err)
	}
	var ev bytes.Buffer
	if err := c.eventEnc.Encode(&metav1.WatchEvent{Type: string(t), Object: runtime.RawExtension{Raw: obj.Bytes()}}, &ev); err != nil {
		scaleFail(err)
	}
	out := make([]byte, 4+ev.Len())
	binary.BigEndian.PutUint32(out, uint32(ev.Len()))
	copy(out[4:], ev.Bytes())
	return out
}

// serveAPI answers the meshed pods' list and watch.
func (c *scaleCluster) serveAPI(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/api/v1/pods" {
		http.NotFound(w, r)
		return
	}
	q := r.URL.Query()
	if q.Get("watch") != "true" && q.Get("watch") != "1" {
		c.mu.Lock()
		list := &corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: strconv.FormatInt(c.rv, 10)}}
		for _, ps := range c.pods {
			for _, p := range ps {
				list.Items = append(list.Items, *p)
			}
		}
		c.mu.Unlock()
		w.Header().Set("Content-Type", "application/vnd.kubernetes.protobuf")
		if err := c.listCodec.Encode(list, w); err != nil {
			fmt.Fprintln(os.Stderr, "list:", err)
		}
		return
	}
	ch := make(chan []byte, 4096)
	var initial [][]byte
	c.mu.Lock()
	if q.Get("sendInitialEvents") == "true" {
		for _, ps := range c.pods {
			for _, p := range ps {
				initial = append(initial, c.frame(watch.Added, p))
			}
		}
		end := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{ResourceVersion: strconv.FormatInt(c.rv, 10),
			Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true"}}}
		initial = append(initial, c.frame(watch.Bookmark, end))
	}
	c.watchers = append(c.watchers, ch)
	c.mu.Unlock()
	defer func() {
		// A wave blocked on this watcher's channel, holding mu, goes on.
		stop := make(chan struct{})
		go func() {
			for {
				select {
				case <-ch:
				case <-stop:
					return
				}
			}
		}()
		c.mu.Lock()
		for i, x := range c.watchers {
			if x == ch {
				c.watchers = append(c.watchers[:i], c.watchers[i+1:]...)
				break
			}
		}
		c.mu.Unlock()
		close(stop)
	}()
	w.Header().Set("Content-Type", "application/vnd.kubernetes.protobuf;stream=watch")
	w.WriteHeader(http.StatusOK)
	flusher := w.(http.Flusher)
	for _, f := range initial {
		if _, err := w.Write(f); err != nil {
			return
		}
	}
	flusher.Flush()
	initial = nil
	for {
		select {
		case f := <-ch:
			if _, err := w.Write(f); err != nil {
				return
			}
			if len(ch) == 0 {
				flusher.Flush()
			}
		case <-r.Context().Done():
			return
		}
	}
}

// serveProxies answers every proxy's admin port: a line with the pod's IP, then the TLS
// handshake with its leaf.
func (c *scaleCluster) serveProxies(ln net.Listener) {
	cfg := &tls.Config{}
	for {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer conn.Close()
			br := bufio.NewReader(conn)
			ip, err := br.ReadString('\n')
			if err != nil {
				return
			}
			c.leafMu.Lock()
			leaf := c.byIP[strings.TrimSpace(ip)]
			c.leafMu.Unlock()
			if leaf == nil {
				return // the pod is gone: the connection is refused
			}
			cert := c.leafOf(leaf)
			sc := cfg.Clone()
			sc.Certificates = []tls.Certificate{*cert}
			_ = tls.Server(&scaleConn{Conn: conn, r: br}, sc).Handshake()
		}()
	}
}

// leafOf issues the pod's leaf on its first handshake: 24 hours, as identity's default
// issuanceLifetime, so that no renewal falls within the benchmark.
func (c *scaleCluster) leafOf(l *scaleLeaf) *tls.Certificate {
	l.once.Do(func() {
		is := c.issuers[l.issuer]
		now := time.Now()
		serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
		tmpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: l.identity}, DNSNames: []string{l.identity},
			NotBefore: now.Add(-20 * time.Second), NotAfter: now.Add(24 * time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, is.cert, c.leafKey.Public(), is.key)
		if err != nil {
			scaleFail(err)
		}
		l.cert = &tls.Certificate{Certificate: [][]byte{der, is.cert.Raw}, PrivateKey: c.leafKey}
	})
	return l.cert
}

// scaleConn reads what the line reader buffered before the connection.
type scaleConn struct {
	net.Conn
	r io.Reader
}

func (b *scaleConn) Read(p []byte) (int, error) { return b.r.Read(p) }
