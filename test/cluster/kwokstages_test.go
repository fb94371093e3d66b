package cluster

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// kwok's pod-complete stage is narrowed to the pods without PodRunnerLabel; every other stage is
// kwok's own file, untouched.
func TestKwokStagesLeavePodRunnerPodsRunning(t *testing.T) {
	src := t.TempDir()
	complete := `apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: pod-complete
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.ownerReferences.[].kind'
      operator: 'In'
      values:
      - 'Job'
  next:
    statusTemplate: |
      phase: Succeeded
`
	for name, data := range map[string]string{"pod-complete.yaml": complete, "pod-ready.yaml": "kind: Stage\n"} {
		if err := os.WriteFile(filepath.Join(src, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(t.TempDir(), "stages")
	got, err := kwokStages([]string{filepath.Join(src, "pod-complete.yaml"), filepath.Join(src, "pod-ready.yaml")}, out)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0] != filepath.Join(out, "pod-complete.yaml") || got[1] != filepath.Join(src, "pod-ready.yaml") {
		t.Fatalf("stages %q", got)
	}
	data, err := os.ReadFile(got[0])
	if err != nil {
		t.Fatal(err)
	}
	var stage struct {
		Spec struct {
			Selector struct {
				MatchExpressions []struct {
					Key, Operator string
					Values        []string
				} `json:"matchExpressions"`
			} `json:"selector"`
			Next struct {
				StatusTemplate string `json:"statusTemplate"`
			} `json:"next"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(data, &stage); err != nil {
		t.Fatal(err)
	}
	exprs := stage.Spec.Selector.MatchExpressions
	if len(exprs) != 2 || exprs[0].Operator != "In" {
		t.Fatalf("match expressions %+v, want kwok's and one more", exprs)
	}
	if want := `.metadata.labels["` + PodRunnerLabel + `"]`; exprs[1].Key != want || exprs[1].Operator != "DoesNotExist" {
		t.Errorf("added expression %+v, want %s DoesNotExist", exprs[1], want)
	}
	if !strings.Contains(stage.Spec.Next.StatusTemplate, "phase: Succeeded") {
		t.Errorf("the status template was lost: %q", stage.Spec.Next.StatusTemplate)
	}
}
