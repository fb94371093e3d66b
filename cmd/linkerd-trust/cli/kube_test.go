package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/spf13/pflag"
)

func TestAsGroupAcceptsLinkerdCheckForm(t *testing.T) {
	// What `linkerd check` forwards is the String() of its own pflag string array: print the
	// groups through pflag itself, as linkerd does, rather than spelling the form by hand.
	forwarded := func(groups ...string) string {
		fs := pflag.NewFlagSet("linkerd", pflag.ContinueOnError)
		fs.StringArray("as-group", []string{}, "")
		for _, g := range groups {
			if err := fs.Set("as-group", g); err != nil {
				t.Fatal(err)
			}
		}
		return "--as-group=" + fs.Lookup("as-group").Value.String()
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct {
		args []string
		want []string
	}{
		"no flag":                              {nil, nil},
		"linkerd check with no group: []":      {[]string{forwarded()}, nil},
		"linkerd check with two groups: [a,b]": {[]string{forwarded("system:masters", "ops")}, []string{"system:masters", "ops"}},
		"a group with a comma, CSV-quoted":     {[]string{forwarded("a,b", "c")}, []string{"a,b", "c"}},
		"repeated plain flags, as kubectl":     {[]string{"--as-group=a", "--as-group", "b"}, []string{"a", "b"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			fs := pflag.NewFlagSet("linkerd-trust", pflag.ContinueOnError)
			k := addKubeFlags(fs)
			args := tc.args
			if len(tc.want) > 0 {
				args = append([]string{"--as=jane"}, args...) // client-go impersonates groups only for a user
			}
			if err := fs.Parse(args); err != nil {
				t.Fatalf("parsing %q: %v", tc.args, err)
			}
			if fmt.Sprintf("%q", k.AsGroups) != fmt.Sprintf("%q", tc.want) {
				t.Errorf("%q gave groups %q, want %q", tc.args, k.AsGroups, tc.want)
			}
			// The client configuration is where an empty group list without --as failed.
			k.Kubeconfig = kubeconfig
			cfg, err := k.restConfig()
			if err != nil {
				t.Fatal(err)
			}
			if len(cfg.Impersonate.Groups) != len(tc.want) {
				t.Errorf("impersonated groups %q, want %q", cfg.Impersonate.Groups, tc.want)
			}
		})
	}
	fs := pflag.NewFlagSet("linkerd-trust", pflag.ContinueOnError)
	addKubeFlags(fs)
	if err := fs.Parse([]string{`--as-group=["a]`}); err == nil {
		t.Error(`--as-group=["a] was accepted`)
	}
}

// LINKERD_NAMESPACE names the Linkerd namespace as it does for the linkerd CLI: while
// -L/--linkerd-namespace holds its default.
func TestLinkerdNamespaceFromTheEnvironment(t *testing.T) {
	t.Setenv(EnvLinkerdNamespace, "mesh")
	for _, tc := range []struct {
		args []string
		want string
	}{{nil, "mesh"}, {[]string{"-L", "other"}, "other"}} {
		fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
		k := addKubeFlags(fs)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		if err := k.validate(); err != nil {
			t.Fatal(err)
		}
		if got := k.Config.LinkerdNamespace; got != tc.want {
			t.Errorf("%v with %s=mesh: namespace %q, want %q", tc.args, EnvLinkerdNamespace, got, tc.want)
		}
	}
}
