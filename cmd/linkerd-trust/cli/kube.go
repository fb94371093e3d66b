package cli

import (
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	cmclient "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned"
	"github.com/spf13/pflag"
	"golang.org/x/term"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/linkerd/trust-rotation/steps"
	stepskube "github.com/linkerd/trust-rotation/steps/kube"
	"github.com/linkerd/trust-rotation/steps/kube/clientset"
	"github.com/linkerd/trust-rotation/steps/observe"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
	"github.com/linkerd/trust-rotation/workflow/client"
)

// KubeFlags are the flags every command that reads the cluster shares: how to reach the
// apiserver (the flags `linkerd check` passes to extensions) and the names of the Linkerd PKI
// objects (the operator's own flags, from steps.Config).
type KubeFlags struct {
	Kubeconfig   string
	Context      string
	As           string
	AsGroups     []string
	APIAddr      string
	Config       steps.Config
	RotationName string
	// MulticlusterNamespace holds Linkerd multicluster's Links and credentials Secrets.
	MulticlusterNamespace string
}

// addKubeFlags registers the global flags on fs, each marked with its group so that a
// command's help can name the groups instead of repeating them (see printHelp).
func addKubeFlags(fs *pflag.FlagSet) *KubeFlags {
	k := &KubeFlags{Config: steps.DefaultConfig(), RotationName: steps.DefaultRotationName}
	cluster := pflag.NewFlagSet("cluster", pflag.ContinueOnError)
	cluster.SortFlags = false
	cluster.StringVar(&k.Kubeconfig, "kubeconfig", "", "path to the kubeconfig file to use for CLI requests")
	cluster.StringVar(&k.Context, "context", "", "name of the kubeconfig context to use")
	cluster.StringVar(&k.As, "as", "", "username to impersonate for Kubernetes operations")
	cluster.Var((*groupsFlag)(&k.AsGroups), "as-group", "group to impersonate for Kubernetes operations (repeatable, or a list in brackets: [a,b])")
	cluster.StringVar(&k.APIAddr, "api-addr", "", "override the kubeconfig and talk to the Kubernetes API at this address (for testing)")
	names := pflag.NewFlagSet("names", pflag.ContinueOnError)
	names.SortFlags = false
	k.Config.AddFlags(names)
	names.StringVar(&k.RotationName, "rotation-name", k.RotationName, "name of the TrustAnchorRotation the operator drives")
	names.StringVar(&k.MulticlusterNamespace, "multicluster-namespace", observe.DefaultMulticlusterNamespace, "namespace of Linkerd multicluster's Links and their credentials Secrets, as the operator's flag (empty: no linked clusters)")
	addGroup(fs, cluster, groupCluster)
	addGroup(fs, names, groupNames)
	return k
}

// groupsFlag is --as-group. Repeated flags add one group each, as kubectl's do. `linkerd check`
// forwards its own string-array flag to every extension in pflag's printed form, always, even
// empty: --as-group=[] for none, --as-group=[a,b] for two (linkerd2 cli/cmd/check.go
// getExtensionCheckFlags), so a value in brackets is that form: comma-separated, CSV-quoted.
type groupsFlag []string

func (g *groupsFlag) String() string { return "[" + strings.Join(*g, ",") + "]" }

func (g *groupsFlag) Type() string { return "stringArray" }

func (g *groupsFlag) Set(v string) error {
	if !strings.HasPrefix(v, "[") || !strings.HasSuffix(v, "]") {
		*g = append(*g, v)
		return nil
	}
	inner := v[1 : len(v)-1]
	if strings.TrimSpace(inner) == "" {
		return nil
	}
	groups, err := csv.NewReader(strings.NewReader(inner)).Read()
	if err != nil {
		return fmt.Errorf("%q is not a list of groups in brackets ([a,b]): %w", v, err)
	}
	*g = append(*g, groups...)
	return nil
}

func (k *KubeFlags) validate() error {
	// As the linkerd CLI does (cli/cmd/root.go): LINKERD_NAMESPACE replaces the namespace while
	// -L/--linkerd-namespace holds its default.
	if env := os.Getenv(EnvLinkerdNamespace); env != "" && k.Config.LinkerdNamespace == steps.DefaultLinkerdNamespace {
		k.Config.LinkerdNamespace = env
	}
	if err := k.Config.Validate(); err != nil {
		return usageError{err}
	}
	if k.RotationName == "" {
		return usagef("--rotation-name must not be empty")
	}
	return nil
}

// EnvLinkerdNamespace names the Linkerd control plane's namespace for every command, as it does
// for the linkerd CLI.
const EnvLinkerdNamespace = "LINKERD_NAMESPACE"

// RotationReader reads TrustAnchorRotations; *client.Client is one, tests use a fake.
type RotationReader interface {
	Get(ctx context.Context, name string) (*v1alpha1.TrustAnchorRotation, error)
}

// Clients are the cluster clients of a command.
type Clients struct {
	// REST is the client configuration, for port-forwarding; nil in tests.
	REST        *rest.Config
	Kube        kubernetes.Interface
	CertManager cmclient.Interface
	Rotations   RotationReader
	// Dynamic lists the Links of the multicluster namespace; nil: no Link is read.
	Dynamic dynamic.Interface
	// Remote makes a client of a linked cluster's TrustAnchorRotations from its credentials
	// Secret in namespace; nil: observe.RemoteClient (tests use a fake).
	Remote func(ctx context.Context, namespace string, t observe.RemoteTarget) (observe.RotationGetter, error)
	// Reader, when set, reads the cluster through the operator's own clients, which decode
	// meshed pods off the wire (podindex.WirePod), at a quarter of a full decode's CPU
	// (BenchmarkPodDecode). Nil: reads go through Kube (tests use a fake).
	Reader stepskube.Interface
}

// pkiReader reads the Linkerd PKI's certificates without reading a private key.
func (cl *Clients) pkiReader(cfg steps.Config) observe.PKIReader {
	r := observe.PKIReader{Kube: clientset.Kube(cl.Kube), CertManager: clientset.CertManager(cl.CertManager), Config: cfg}
	if cl.Reader != nil {
		r.Kube = cl.Reader
	}
	return r
}

// clients builds the clients from the flags, through env.Clients when set.
func (e *Env) clients(k *KubeFlags) (*Clients, error) {
	if e.Clients != nil {
		return e.Clients(k)
	}
	return NewClients(k)
}

// NewClients builds real clients from the flags (restConfig).
func NewClients(k *KubeFlags) (*Clients, error) {
	cfg, err := k.restConfig()
	if err != nil {
		return nil, err
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating the Kubernetes client: %w", err)
	}
	cm, err := cmclient.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating the cert-manager client: %w", err)
	}
	tars, err := client.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating the TrustAnchorRotation client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating the dynamic client: %w", err)
	}
	reader, err := stepskube.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating the Kubernetes client: %w", err)
	}
	return &Clients{REST: cfg, Kube: kube, CertManager: cm, Rotations: tars, Dynamic: dyn, Reader: reader}, nil
}

func isTerminalFile(f *os.File) bool { return term.IsTerminal(int(f.Fd())) }

// missingKubeconfigs says where the kubeconfig was looked for, and what is wrong with each: a
// KUBECONFIG that names a file that does not exist is skipped by client-go without a word.
func missingKubeconfigs(paths []string) string {
	from := "~/.kube/config"
	if env := os.Getenv(clientcmd.RecommendedConfigPathEnvVar); env != "" {
		from = clientcmd.RecommendedConfigPathEnvVar + "=" + env
	}
	var why []string
	for _, p := range paths {
		switch _, err := os.Stat(p); {
		case errors.Is(err, fs.ErrNotExist):
			why = append(why, p+" does not exist")
		case err != nil:
			why = append(why, err.Error())
		default:
			why = append(why, p+" holds no cluster")
		}
	}
	return fmt.Sprintf("looked for %s: %s", from, strings.Join(why, ", "))
}

// restConfig loads the client configuration: the kubeconfig (KUBECONFIG or ~/.kube/config unless
// --kubeconfig), its context unless --context, with --as/--as-group impersonation and --api-addr.
func (k *KubeFlags) restConfig() (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = k.Kubeconfig
	overrides := &clientcmd.ConfigOverrides{CurrentContext: k.Context}
	overrides.AuthInfo.Impersonate = k.As
	overrides.AuthInfo.ImpersonateGroups = k.AsGroups
	if k.APIAddr != "" {
		overrides.ClusterInfo.Server = k.APIAddr
	}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides).ClientConfig()
	if err != nil {
		if clientcmd.IsEmptyConfig(err) && k.Kubeconfig == "" {
			return nil, fmt.Errorf("loading the Kubernetes client configuration: no kubeconfig found: %s; "+
				"point --kubeconfig or KUBECONFIG at one", missingKubeconfigs(rules.Precedence))
		}
		return nil, fmt.Errorf("loading the Kubernetes client configuration: %w", err)
	}
	cfg.UserAgent = binary
	// One command makes a burst of reads (one GET per object, a LIST of pods): let it through.
	cfg.QPS, cfg.Burst = 50, 100
	return cfg, nil
}
