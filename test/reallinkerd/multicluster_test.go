package reallinkerd_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/yaml"

	"github.com/linkerd/trust-rotation/test/cluster"
	"github.com/linkerd/trust-rotation/test/internal/poll"
	"github.com/linkerd/trust-rotation/test/meshsim"
)

// linkRecording is where what `linkerd multicluster link-gen` renders is recorded;
// TestLinkMatchesLinkerd (test/meshsim) replays it against meshsim.LinkObjects, which the
// multicluster tests link their clusters with, and TestLinkKubeconfigMatchesLinkerd (here)
// against the kubeconfig they put in the credentials Secret.
var linkRecording = filepath.Join("..", "meshsim", "testdata", "linkerd-multicluster", "link-gen.json")

// The names the multicluster tests (test/e2e/multicluster) link with: the target cluster
// east, whose gateway the tests reach at 127.0.0.1.
const (
	linkTarget         = "east"
	linkGatewayAddress = "127.0.0.1"
	multiclusterNS     = "linkerd-multicluster"
	remoteAccessSA     = "linkerd-service-mirror-remote-access-default"
)

// TestLinkerdMulticlusterLinkGen records, with -update and LINKERD_BIN, the objects the real
// `linkerd multicluster link-gen` renders for a link to the bed's cluster (edge-26.8.3 has
// link-gen; `linkerd multicluster link` is gone): the credentials Secrets (name, namespace,
// type, labels, annotations, data keys, and the shape of the kubeconfig, never its token) and
// the Link. The cluster is set up as Linkerd's docs do: the control plane's linkerd-config (the
// trust and cluster domains link-gen reads), then `linkerd multicluster install` applied (the
// remote-access ServiceAccount and its token Secret, the gateway Service link-gen reads its
// identity, ports and probe from).
func TestLinkerdMulticlusterLinkGen(t *testing.T) {
	bins := recordingBinaries(t, "TestLinkMatchesLinkerd (test/meshsim) and TestLinkKubeconfigMatchesLinkerd", recorder{what: "the real linkerd CLI", cli: true})
	c := cluster.Shared(t)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	version, err := bins.Version(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range strings.Split(string(renderInstall(t, ctx, c, bins)), "\n---\n") {
		var cm corev1.ConfigMap
		if yaml.Unmarshal([]byte(doc), &cm) == nil && cm.Kind == "ConfigMap" && cm.Name == "linkerd-config" {
			runWithCluster(t, ctx, c, "kubectl", []byte(doc), "apply", "--server-side", "-f", "-")
		}
	}
	runWithCluster(t, ctx, c, "kubectl", runWithCluster(t, ctx, c, bins.CLI, nil, "multicluster", "install", "--ignore-cluster"), "apply", "--server-side", "-f", "-")

	args := []string{"multicluster", "link-gen", "--cluster-name", linkTarget, "--gateway-addresses", linkGatewayAddress}
	var out []byte
	// link-gen needs the remote-access ServiceAccount's token Secret filled in by the token
	// controller.
	err = poll.Until(ctx, 2*time.Minute, "linkerd "+strings.Join(args, " ")+" to render", func(ctx context.Context) (bool, error) {
		var stderr strings.Builder
		cmd := exec.CommandContext(ctx, bins.CLI, args...)
		cmd.Env = append(os.Environ(), "KUBECONFIG="+c.Kubeconfig())
		cmd.Stderr = &stderr
		b, err := cmd.Output()
		if err != nil {
			return false, poll.Pending("%v: %s", err, strings.TrimSpace(stderr.String()))
		}
		out = b
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	admin, err := clientcmd.LoadFromFile(c.Kubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	rec := linkRecordingFile{
		Comment: "Recorded by TestLinkerdMulticlusterLinkGen -update (test/reallinkerd) from the real linkerd CLI (LINKERD_BIN); do not edit, record again. The kubeconfig is described, never stored.",
		Linkerd: version,
		Command: append([]string{"linkerd"}, args...),
	}
	for _, doc := range strings.Split(string(out), "\n---\n") {
		var u unstructured.Unstructured
		if strings.TrimSpace(strings.Trim(doc, "-")) == "" {
			continue
		}
		if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
			t.Fatalf("link-gen printed %q: %v", doc, err)
		}
		switch u.GetKind() {
		case "Secret":
			var s corev1.Secret
			if err := yaml.Unmarshal([]byte(doc), &s); err != nil {
				t.Fatal(err)
			}
			ls := linkSecret{Name: s.Name, Namespace: s.Namespace, Type: string(s.Type), Labels: s.Labels, Annotations: s.Annotations}
			for k := range s.Data {
				ls.DataKeys = append(ls.DataKeys, k)
			}
			sort.Strings(ls.DataKeys)
			if kc, ok := s.Data["kubeconfig"]; ok {
				shape, err := describeKubeconfig(kc, admin.Clusters)
				if err != nil {
					t.Fatalf("Secret %s/%s: %v", s.Namespace, s.Name, err)
				}
				ls.Kubeconfig = shape
			}
			rec.Secrets = append(rec.Secrets, ls)
		case "Link":
			spec, _, _ := unstructured.NestedMap(u.Object, "spec")
			rec.Link = &linkObject{APIVersion: u.GetAPIVersion(), Kind: u.GetKind(), Name: u.GetName(), Namespace: u.GetNamespace(),
				Annotations: u.GetAnnotations(), Spec: spec}
		default:
			t.Errorf("link-gen printed a %s %s, not recorded", u.GetKind(), u.GetName())
		}
	}
	if rec.Link == nil || len(rec.Secrets) == 0 {
		t.Fatalf("link-gen printed no Link or no Secret:\n%s", out)
	}
	writeJSON(t, linkRecording, rec)
}

type linkRecordingFile struct {
	Comment string       `json:"comment"`
	Linkerd string       `json:"linkerd"`
	Command []string     `json:"command"`
	Secrets []linkSecret `json:"secrets"`
	Link    *linkObject  `json:"link"`
}

type linkSecret struct {
	Name        string            `json:"name"`
	Namespace   string            `json:"namespace"`
	Type        string            `json:"type"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
	DataKeys    []string          `json:"dataKeys"`
	Kubeconfig  *kubeconfigShape  `json:"kubeconfig,omitempty"`
}

type linkObject struct {
	APIVersion  string            `json:"apiVersion"`
	Kind        string            `json:"kind"`
	Name        string            `json:"name"`
	Namespace   string            `json:"namespace"`
	Annotations map[string]string `json:"annotations"`
	Spec        map[string]any    `json:"spec"`
}

// kubeconfigShape is what a credentials Secret's kubeconfig is made of, without its secrets:
// how many of each entry, whether its current context resolves, what its cluster and user hold.
type kubeconfigShape struct {
	Clusters                 int      `json:"clusters"`
	Contexts                 int      `json:"contexts"`
	Users                    int      `json:"users"`
	CurrentContextResolves   bool     `json:"currentContextResolves"`
	ServerIsAPIServer        bool     `json:"serverIsAPIServer"` // the server of the kubeconfig link-gen ran with
	CertificateAuthorityData bool     `json:"certificateAuthorityData"`
	InsecureSkipTLSVerify    bool     `json:"insecureSkipTLSVerify"`
	Credentials              []string `json:"credentials"` // what the user authenticates with: token, client-certificate, exec...
	Impersonates             bool     `json:"impersonates"`
}

// describeKubeconfig is the shape of kubeconfig; servers are the clusters of the kubeconfig the
// command ran with.
func describeKubeconfig(kubeconfig []byte, servers map[string]*clientcmdapi.Cluster) (*kubeconfigShape, error) {
	cfg, err := clientcmd.Load(kubeconfig)
	if err != nil {
		return nil, err
	}
	s := &kubeconfigShape{Clusters: len(cfg.Clusters), Contexts: len(cfg.Contexts), Users: len(cfg.AuthInfos)}
	ctx, ok := cfg.Contexts[cfg.CurrentContext]
	if !ok {
		return s, nil
	}
	cl, okc := cfg.Clusters[ctx.Cluster]
	user, oku := cfg.AuthInfos[ctx.AuthInfo]
	s.CurrentContextResolves = okc && oku
	if okc {
		for _, a := range servers {
			s.ServerIsAPIServer = s.ServerIsAPIServer || a.Server == cl.Server
		}
		s.CertificateAuthorityData = len(cl.CertificateAuthorityData) > 0
		s.InsecureSkipTLSVerify = cl.InsecureSkipTLSVerify
	}
	if oku {
		for _, c := range []struct {
			name string
			set  bool
		}{
			{"token", user.Token != ""}, {"token-file", user.TokenFile != ""},
			{"client-certificate", len(user.ClientCertificateData) > 0 || user.ClientCertificate != ""},
			{"basic", user.Username != ""}, {"exec", user.Exec != nil}, {"auth-provider", user.AuthProvider != nil},
		} {
			if c.set {
				s.Credentials = append(s.Credentials, c.name)
			}
		}
		s.Impersonates = user.Impersonate != "" || len(user.ImpersonateGroups) > 0
	}
	return s, nil
}

func readLinkRecording(t *testing.T) linkRecordingFile {
	t.Helper()
	b, err := os.ReadFile(linkRecording)
	if err != nil {
		t.Fatal(err)
	}
	var rec linkRecordingFile
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rec); err != nil {
		t.Fatalf("%s: %v", linkRecording, err)
	}
	return rec
}

// TestLinkKubeconfigMatchesLinkerd replays the recorded shape of link-gen's kubeconfig against
// the one meshsim.RemoteAccessKubeconfig builds for the bed's cluster, field by field, and
// checks that it authenticates as the remote-access ServiceAccount itself.
func TestLinkKubeconfigMatchesLinkerd(t *testing.T) {
	if *update {
		t.Skip("recording: TestLinkerdMulticlusterLinkGen")
	}
	rec := readLinkRecording(t)
	c := cluster.Shared(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: multiclusterNS}}
	if _, err := c.Kube().CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	kc, err := meshsim.RemoteAccessKubeconfig(ctx, c.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	admin, err := clientcmd.LoadFromFile(c.Kubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	got, err := describeKubeconfig(kc, admin.Clusters)
	if err != nil {
		t.Fatal(err)
	}
	compared := 0
	for _, s := range rec.Secrets {
		if s.Kubeconfig == nil {
			continue
		}
		compared++
		for _, d := range diffKubeconfigShapes(got, s.Kubeconfig) {
			t.Errorf("Secret %s/%s kubeconfig %s (real: linkerd %s)", s.Namespace, s.Name, d, rec.Linkerd)
		}
	}
	if compared == 0 {
		t.Fatal("the recording holds no kubeconfig")
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(kc)
	if err != nil {
		t.Fatal(err)
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	review, err := kube.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if want := cluster.ServiceAccountUser(multiclusterNS, remoteAccessSA); review.Status.UserInfo.Username != want {
		t.Errorf("the kubeconfig authenticates as %q, want %q", review.Status.UserInfo.Username, want)
	}
}

// diffKubeconfigShapes names each field of the shapes that differs.
func diffKubeconfigShapes(got, want *kubeconfigShape) []string {
	var diffs []string
	for _, f := range []struct {
		name      string
		got, want any
	}{
		{"clusters", got.Clusters, want.Clusters},
		{"contexts", got.Contexts, want.Contexts},
		{"users", got.Users, want.Users},
		{"currentContextResolves", got.CurrentContextResolves, want.CurrentContextResolves},
		{"serverIsAPIServer", got.ServerIsAPIServer, want.ServerIsAPIServer},
		{"certificateAuthorityData", got.CertificateAuthorityData, want.CertificateAuthorityData},
		{"insecureSkipTLSVerify", got.InsecureSkipTLSVerify, want.InsecureSkipTLSVerify},
		{"credentials", got.Credentials, want.Credentials},
		{"impersonates", got.Impersonates, want.Impersonates},
	} {
		if fmt.Sprint(f.got) != fmt.Sprint(f.want) {
			diffs = append(diffs, fmt.Sprintf("%s: simulator %v, linkerd %v", f.name, f.got, f.want))
		}
	}
	return diffs
}
