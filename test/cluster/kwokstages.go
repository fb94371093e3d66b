package cluster

import (
	"fmt"
	"os"
	"path/filepath"

	"sigs.k8s.io/yaml"
)

// PodRunnerLabel marks the pods whose containers a test runs itself (test/internal/podrun) and
// whose end it reports as a kubelet does: kwok runs their lifecycle up to Running (scheduled, a
// pod IP, Ready) and leaves their completion to the test. kwok's stock stages complete every pod
// a Job owns as soon as it runs, successfully, without running anything: a Job whose outcome
// matters, such as a Helm hook that gates an install, must not end that way.
const PodRunnerLabel = "test.trust.linkerd.io/pod-runner"

// kwokStages returns kwok's stage files, with pod-complete restricted to the pods without
// PodRunnerLabel (written into dir).
func kwokStages(stages []string, dir string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	out := make([]string, 0, len(stages))
	for _, path := range stages {
		if filepath.Base(path) != "pod-complete.yaml" {
			out = append(out, path)
			continue
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		var stage map[string]any
		if err := yaml.Unmarshal(data, &stage); err != nil {
			return nil, fmt.Errorf("kwok stage %s: %w", path, err)
		}
		spec, _ := stage["spec"].(map[string]any)
		sel, _ := spec["selector"].(map[string]any)
		exprs, ok := sel["matchExpressions"].([]any)
		if !ok {
			return nil, fmt.Errorf("kwok stage %s has no spec.selector.matchExpressions", path)
		}
		sel["matchExpressions"] = append(exprs, map[string]any{
			"key": fmt.Sprintf(".metadata.labels[%q]", PodRunnerLabel), "operator": "DoesNotExist",
		})
		data, err = yaml.Marshal(stage)
		if err != nil {
			return nil, err
		}
		to := filepath.Join(dir, filepath.Base(path))
		if err := os.WriteFile(to, data, 0o644); err != nil {
			return nil, err
		}
		out = append(out, to)
	}
	return out, nil
}
