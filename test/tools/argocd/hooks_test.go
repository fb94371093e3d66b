package argocd

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/argoproj/argo-cd/gitops-engine/pkg/sync/common"
	"github.com/argoproj/argo-cd/gitops-engine/pkg/sync/hook"
	"github.com/argoproj/argo-cd/gitops-engine/pkg/sync/syncwaves"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// renderOperatorChart renders the operator chart with its defaults, as Argo CD's repo server
// renders a Helm source (helm template), with the test bed's helm.
func renderOperatorChart(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	bin := os.Getenv("TRUST_ROTATION_TOOLS_BIN")
	if bin == "" {
		t.Skip("skipping: needs helm from the test bed's tools (TRUST_ROTATION_TOOLS_BIN=$(scripts/tools.sh bin-dir))")
	}
	home := t.TempDir()
	cmd := exec.Command(filepath.Join(bin, "helm3"), "template", "trust-rotation-operator",
		filepath.Join(repoRoot, "charts", "trust-rotation-operator"), "--namespace", "linkerd")
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+home, "HELM_CONFIG_HOME="+home, "HELM_DATA_HOME="+home)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("helm template: %v\n%s", err, stderr.String())
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(&out, 4096)
	var objs []*unstructured.Unstructured
	for {
		obj := map[string]any{}
		if err := dec.Decode(&obj); err != nil {
			if errors.Is(err, io.EOF) {
				return objs
			}
			t.Fatal(err)
		}
		if len(obj) > 0 {
			objs = append(objs, &unstructured.Unstructured{Object: obj})
		}
	}
}

// Argo CD runs the chart's Helm hooks as its own (gitops-engine's pkg/sync/hook, the code its
// sync runs): the preflight check and its RBAC as PreSync hooks, the wait and its RBAC as
// PostSync hooks, each deleted before it is created again and once it succeeded, and within each
// phase the RBAC in an earlier wave (Helm's hook weight) than the Job that needs it. Every other
// object of the chart is an ordinary resource of the Sync phase.
func TestHelmHooksRunAsPreSyncAndPostSync(t *testing.T) {
	objs := renderOperatorChart(t)
	jobs := map[common.HookType]*unstructured.Unstructured{}
	hooks := map[common.HookType][]*unstructured.Unstructured{}
	for _, o := range objs {
		id := o.GetKind() + " " + o.GetName()
		_, helmHook := o.GetAnnotations()["helm.sh/hook"]
		if !helmHook {
			if hook.IsHook(o) {
				t.Errorf("%s is an Argo CD hook, but no Helm hook", id)
			}
			continue
		}
		if !hook.IsHook(o) {
			t.Errorf("Helm hook %s is no Argo CD hook", id)
			continue
		}
		types := slices.Compact(hook.Types(o))
		if len(types) != 1 {
			t.Errorf("%s runs as Argo CD hooks %v, want one phase", id, types)
			continue
		}
		want := common.HookTypePreSync
		if strings.HasSuffix(o.GetName(), "-wait-ready") {
			want = common.HookTypePostSync
		}
		if types[0] != want {
			t.Errorf("%s runs as %s, want %s", id, types[0], want)
		}
		policies := hook.DeletePolicies(o)
		if !slices.Contains(policies, common.HookDeletePolicyBeforeHookCreation) || !slices.Contains(policies, common.HookDeletePolicyHookSucceeded) {
			t.Errorf("%s: Argo CD delete policies %v, want BeforeHookCreation and HookSucceeded", id, policies)
		}
		hooks[types[0]] = append(hooks[types[0]], o)
		if o.GetKind() == "Job" {
			jobs[types[0]] = o
		}
	}
	for _, phase := range []common.HookType{common.HookTypePreSync, common.HookTypePostSync} {
		job := jobs[phase]
		if job == nil {
			t.Errorf("no %s Job", phase)
			continue
		}
		t.Logf("%s: Job %s (wave %d) and %d objects before it", phase, job.GetName(), syncwaves.Wave(job), len(hooks[phase])-1)
		for _, o := range hooks[phase] {
			if o != job && syncwaves.Wave(o) >= syncwaves.Wave(job) {
				t.Errorf("%s %s is in wave %d, not before its Job's %d", o.GetKind(), o.GetName(), syncwaves.Wave(o), syncwaves.Wave(job))
			}
		}
	}
}
