package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/test/charts"
	"github.com/linkerd/trust-rotation/test/cluster"
	"github.com/linkerd/trust-rotation/test/internal/poll"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// ReadOnlyUser is a static-token identity of the shared cluster that TestReadOnlyCommands binds
// to what linkerd-trust's read-only commands read, and to no Secret.
const ReadOnlyUser = "trust-rotation:cli-reader"

// readOnlyRules are what `linkerd trust check`, `bundle`, `inspect` and `plan` read: no Secret.
var readOnlyRules = []rbacv1.PolicyRule{
	{APIGroups: []string{""}, Resources: []string{"namespaces", "pods", "configmaps"}, Verbs: []string{"get", "list"}},
	{APIGroups: []string{"apps"}, Resources: []string{"deployments"}, Verbs: []string{"get", "list"}},
	{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get"}},
	{APIGroups: []string{"cert-manager.io"}, Resources: []string{"certificates", "certificaterequests", "issuers", "clusterissuers"}, Verbs: []string{"get", "list"}},
	{APIGroups: []string{v1alpha1.GroupName}, Resources: []string{v1alpha1.Resource}, Verbs: []string{"get", "list"}},
}

// TestReadOnlyCommands runs every read-only command of the CLI binary, through a whole rotation,
// as a user who may read everything they read but no Secret, and checks each against the truth
// in the Secrets (read by the admin). The apiserver's audit log then shows that the user never
// requested a Secret: no private key crossed the wire.
func TestReadOnlyCommands(t *testing.T) {
	c := cluster.Shared(t)
	cluster.DumpLogsOnFailure(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()

	// The workloads the other tests of the package leave on the shared cluster: its rotation
	// restarts every one of them (a smaller set would leave the others behind).
	e := NewEnv(t, ctx, c, EnvOptions{Namespaces: 2, Deployments: 4, Replicas: 2, ProxyContainerDeployments: 1}, func(rel *charts.Release) *Operator {
		return StartChartOperator(t, rel)
	})
	kubeconfig := grantReadOnly(t, ctx, c)
	r := &reader{e: e, bin: Binary(t, "linkerd-trust"), kubeconfig: kubeconfig, runs: new(int)}

	// The user really may not read Secrets, not even the ones the commands show.
	reader, err := c.TokenRESTConfig(ReadOnlyUser)
	if err != nil {
		t.Fatal(err)
	}
	readerKube := kubernetes.NewForConfigOrDie(reader)

	t.Run("Synced", func(t *testing.T) {
		r := r.withT(t)
		r.checkAgainstSecrets(v1alpha1.PhaseSynced)
		// The other output formats, the whole-rotation plan, and check as `linkerd check` runs it.
		for _, args := range [][]string{
			{"bundle"}, {"check"}, {"check", "--pre"}, {"inspect"}, {"plan"},
			{"plan", "--assume-anchor-renewed", "-o", "json"},
			{"check", "--as-group=[]", "--linkerd-namespace=linkerd", "--verbose=false", "--proxy=false", "--wait=5m0s", "--output=json"},
		} {
			r.run(args...)
		}
	})
	if t.Failed() {
		return
	}
	t.Run("ThroughARotation", func(t *testing.T) {
		e := *e
		e.T = t
		rotate(&e, issuerWhenAsked, r.withT(t).checkAgainstSecrets)
	})

	t.Run("NoSecretWasRequested", func(t *testing.T) {
		events, err := c.AuditEvents()
		if err != nil {
			t.Fatal(err)
		}
		// Every request has a RequestReceived event, written before the apiserver answers it.
		var requested []string
		for _, ev := range events {
			if ev.User.Username == ReadOnlyUser && ev.Stage == "RequestReceived" {
				requested = append(requested, ev.Verb+" "+ev.RequestURI)
			}
		}
		if len(requested) > 0 {
			t.Errorf("%s requested Secrets %d times: %s", ReadOnlyUser, len(requested), strings.Join(slices.Compact(slices.Sorted(slices.Values(requested))), ", "))
		}
		t.Logf("the audit log holds %d events about Secrets, none from %s's %d commands", len(events), ReadOnlyUser, *r.runs)
		if *r.runs < 30 {
			t.Errorf("only %d commands ran", *r.runs)
		}

		// The control: the same user's request for a Secret is refused, and the audit log shows it,
		// so the absence above is not a blind spot.
		_, err = readerKube.CoreV1().Secrets("cert-manager").Get(ctx, "linkerd-trust-anchor", metav1.GetOptions{})
		if !apierrors.IsForbidden(err) {
			t.Fatalf("%s reading the trust-anchor Secret: %v, want Forbidden", ReadOnlyUser, err)
		}
		err = poll.Until(ctx, 30*time.Second, "the refused request in the audit log", func(context.Context) (bool, error) {
			events, err := c.AuditEvents()
			if err != nil {
				return false, err
			}
			for _, ev := range events {
				if ev.User.Username == ReadOnlyUser && ev.ObjectRef != nil && ev.ObjectRef.Resource == "secrets" &&
					ev.ObjectRef.Namespace == "cert-manager" && ev.ObjectRef.Name == "linkerd-trust-anchor" &&
					ev.ResponseStatus != nil && ev.ResponseStatus.Code == 403 {
					return true, nil
				}
			}
			return false, poll.Pending("%d events, not this one", len(events))
		})
		if err != nil {
			t.Error(err)
		}
	})
}

// grantReadOnly binds ReadOnlyUser to readOnlyRules and returns a kubeconfig that authenticates
// as that user with its own token.
func grantReadOnly(t *testing.T, ctx context.Context, c *cluster.Cluster) string {
	t.Helper()
	rbac := c.Kube().RbacV1()
	name := "linkerd-trust-read-only"
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: readOnlyRules}
	if _, err := rbac.ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: ReadOnlyUser}},
	}
	if _, err := rbac.ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	path, err := c.TokenKubeconfig(ReadOnlyUser)
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// reader runs the linkerd-trust binary as ReadOnlyUser.
type reader struct {
	t          *testing.T
	e          *Env
	bin        string
	kubeconfig string
	// runs counts the commands run, across the copies withT makes.
	runs *int
}

// withT returns the reader for the (sub)test t.
func (r *reader) withT(t *testing.T) *reader {
	e := *r.e
	e.T = t
	return &reader{t: t, e: &e, bin: r.bin, kubeconfig: r.kubeconfig, runs: r.runs}
}

// run runs a command, which must succeed and write nothing to standard error, and returns its
// standard output.
func (r *reader) run(args ...string) string {
	r.t.Helper()
	cmd := exec.CommandContext(r.e.Ctx, r.bin, append(args, "--kubeconfig", r.kubeconfig)...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	*r.runs++
	if err != nil || errOut.Len() > 0 {
		r.t.Fatalf("linkerd-trust %s: %v\nstderr: %s\nstdout:\n%s", strings.Join(args, " "), err, errOut.String(), out.String())
	}
	if strings.Contains(strings.ToLower(out.String()), "forbidden") {
		r.t.Errorf("linkerd-trust %s reports a forbidden read:\n%s", strings.Join(args, " "), out.String())
	}
	return out.String()
}

func (r *reader) json(v any, args ...string) {
	r.t.Helper()
	out := r.run(args...)
	if err := json.Unmarshal([]byte(out), v); err != nil {
		r.t.Fatalf("linkerd-trust %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// checkAgainstSecrets runs bundle, check, inspect and plan as ReadOnlyUser and compares what
// they say with the Secrets and the trust bundle as the admin reads them. In every phase the
// rotation waits in, the bundle it wants is the one in the ConfigMap.
func (r *reader) checkAgainstSecrets(phase v1alpha1.Phase) {
	t, e := r.t, r.e
	t.Helper()
	anchor := steps.Fingerprint(e.SecretCert("cert-manager", "linkerd-trust-anchor"))
	previous := steps.Fingerprint(e.SecretCert("linkerd", "linkerd-previous-anchor"))
	issuer := steps.Fingerprint(e.SecretCert("linkerd", "linkerd-identity-issuer"))
	bundle := e.bundle()
	t.Logf("%s: anchor %.12s, previous %.12s, issuer %.12s", phase, anchor, previous, issuer)

	var cm struct {
		Data map[string]string `json:"data"`
	}
	r.json(&cm, "bundle", "-o", "json")
	if got := cm.Data[steps.TrustRootsKey]; got != bundle {
		t.Errorf("%s: bundle renders\n%s\nthe operator's ConfigMap holds\n%s", phase, got, bundle)
	}

	for _, args := range [][]string{{"check", "-o", "json"}, {"check", "--proxy", "-o", "json"}} {
		var co struct {
			Success    bool `json:"success"`
			Categories []struct {
				Name   string                                        `json:"categoryName"`
				Checks []struct{ Description, Result, Error string } `json:"checks"`
			} `json:"categories"`
		}
		r.json(&co, args...)
		n := 0
		for _, cat := range co.Categories {
			for _, ch := range cat.Checks {
				n++
				// Mid-rotation, pods on the previous bundle are a warning of --proxy.
				if ch.Result == "error" || (ch.Result == "warning" && cat.Name != "linkerd-trust-data-plane") {
					t.Errorf("%s: %v: %s: %s: %s", phase, args, ch.Description, ch.Result, ch.Error)
				}
			}
		}
		if !co.Success || n < 15 {
			t.Errorf("%s: %v: success %v after %d checks", phase, args, co.Success, n)
		}
	}

	var in struct {
		Phase string `json:"phase"`
		Live  struct {
			TrustBundleSHA256 string   `json:"trustBundleSHA256"`
			ActiveIssuer      string   `json:"activeIssuer"`
			Problems          []string `json:"problems"`
		} `json:"live"`
	}
	r.json(&in, "inspect", "-o", "json")
	if in.Phase != string(phase) || in.Live.TrustBundleSHA256 != steps.BundleHash(bundle) || in.Live.ActiveIssuer != issuer || len(in.Live.Problems) > 0 {
		t.Errorf("%s: inspect sees phase %s, bundle %.12s, issuer %.12s, problems %q; want bundle %.12s, issuer %.12s",
			phase, in.Phase, in.Live.TrustBundleSHA256, in.Live.ActiveIssuer, in.Live.Problems, steps.BundleHash(bundle), issuer)
	}

	type cert struct{ Fingerprint, Problem string }
	var p struct {
		Phase                                       string
		Notes                                       []string
		TrustAnchor, PreviousAnchor, IdentityIssuer cert
		TrustBundle                                 struct{ SHA256 string }
	}
	r.json(&p, "plan", "-o", "json")
	for _, got := range []struct {
		what      string
		view      cert
		secretsFP string
	}{{"trust anchor", p.TrustAnchor, anchor}, {"previous anchor", p.PreviousAnchor, previous}, {"identity issuer", p.IdentityIssuer, issuer}} {
		if got.view.Fingerprint != got.secretsFP || got.view.Problem != "" {
			t.Errorf("%s: plan's %s is %.12s (%s), its Secret holds %.12s", phase, got.what, got.view.Fingerprint, got.view.Problem, got.secretsFP)
		}
	}
	if p.Phase != string(phase) || p.TrustBundle.SHA256 != steps.BundleHash(bundle) {
		t.Errorf("%s: plan is in phase %s with bundle %.12s, notes %q", phase, p.Phase, p.TrustBundle.SHA256, p.Notes)
	}
}
