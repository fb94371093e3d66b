package reallinkerd_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/linkerd/trust-rotation/cmd/linkerd-trust/cli"
	"github.com/linkerd/trust-rotation/test/charts"
	"github.com/linkerd/trust-rotation/test/cluster"
	"github.com/linkerd/trust-rotation/test/e2e"
	"github.com/linkerd/trust-rotation/test/internal/poll"
	"github.com/linkerd/trust-rotation/test/reallinkerd"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// checkRecording is what the real `linkerd check -o json` did with the extension on PATH, in
// one situation of the bed: how it called the extension, what the extension printed, and the
// documents Linkerd printed (its own first, then one per extension, re-rendered by Linkerd from
// what the extension printed).
type checkRecording struct {
	Comment   string            `json:"comment"`
	Linkerd   string            `json:"linkerd"`
	Command   []string          `json:"command"`
	Situation string            `json:"situation"`
	ExitCode  int               `json:"exitCode"`
	Documents []json.RawMessage `json:"documents"`
	Extension []invocation      `json:"extension"`
}

const checkComment = "Recorded by TestLinkerdCheckRunsTheExtension -update from the real linkerd CLI " +
	"(LINKERD_BIN) with this module's linkerd-trust on PATH; do not edit, record again. CI replays it: " +
	"the extension, run with the recorded arguments in the same situation, must print the document Linkerd printed."

// checkSituations are the situations the recording covers, in the order the test makes them.
var checkSituations = []struct {
	file, what string
	make       func(t *testing.T, env *e2e.Env)
}{
	{"operator-running.json", "the operator chart installed and its operator leading; a meshed Deployment",
		func(*testing.T, *e2e.Env) {}},
	{"operator-stopped.json", "the operator chart installed and a meshed Deployment; the operator stopped (its Lease released) and its Deployment scaled to 0",
		stopOperator},
	{"not-installed.json", "a meshed Deployment, and no TrustAnchorRotation CRD (so no TrustAnchorRotation): the extension is on PATH but not installed on this cluster",
		removeRotationCRD},
}

// TestLinkerdCheckRunsTheExtension replays (or, with -update, records) `linkerd check -o json`
// with linkerd-trust on PATH, with the operator running and stopped, and on a cluster without
// the operator's CRD, where the extension passes saying it is not installed. Replaying, it runs the
// extension with the arguments real Linkerd passed and compares what it prints with the
// document Linkerd printed for it, field by field; it also checks that the recorded Linkerd
// printed the extension's document as the extension printed it.
func TestLinkerdCheckRunsTheExtension(t *testing.T) {
	bins := reallinkerd.FromEnv()
	if *update && bins.CLI == "" {
		t.Fatalf("-update records from the real linkerd CLI: set %s", reallinkerd.EnvCLI)
	}
	dir := filepath.Join("testdata", "linkerd-check")
	recs := map[string]*checkRecording{}
	if !*update {
		for _, s := range checkSituations {
			rec, err := readCheckRecording(filepath.Join(dir, s.file))
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range append(recordingProblems(rec), situationProblems(s.file, rec)...) {
				t.Errorf("%s: %s", s.file, d)
			}
			recs[s.file] = rec
		}
	}

	c := cluster.Shared(t)
	cluster.DumpLogsOnFailure(t, c)
	ctx, cancel := context.WithTimeout(t.Context(), 8*time.Minute)
	defer cancel()
	env := e2e.NewEnv(t, ctx, c, e2e.EnvOptions{Namespaces: 1, Deployments: 1, Replicas: 1},
		func(rel *charts.Release) *e2e.Operator { return e2e.StartChartOperator(t, rel) })
	// Linkerd and the extension read the cluster from KUBECONFIG, as a user's shell sets it:
	// `linkerd check` forwards --kubeconfig only when given one.
	t.Setenv("KUBECONFIG", c.Kubeconfig())

	var version string
	if *update {
		var err error
		if version, err = bins.Version(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range checkSituations {
		s.make(t, env)
		if *update {
			rec := recordCheck(t, ctx, bins.CLI, version, s.what)
			for _, d := range append(recordingProblems(rec), situationProblems(s.file, rec)...) {
				t.Errorf("%s: %s", s.file, d)
			}
			writeJSON(t, filepath.Join(dir, s.file), rec)
			continue
		}
		rec := recs[s.file]
		for _, d := range replayCheck(t, ctx, rec) {
			t.Errorf("%s (linkerd %s, %s): %s", s.file, rec.Linkerd, rec.Situation, d)
		}
	}
}

// stopOperator stops the operator as a user does: the process ends (it gives its Lease up) and
// its Deployment is scaled to 0.
func stopOperator(t *testing.T, env *e2e.Env) {
	env.Operator.Stop()
	kube := env.Cluster.Kube()
	ns, name := env.Release.Namespace, cli.DefaultOperatorDeployment
	_, err := kube.AppsV1().Deployments(ns).UpdateScale(env.Ctx, name,
		&autoscalingv1.Scale{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: autoscalingv1.ScaleSpec{Replicas: 0}},
		metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	err = poll.Until(env.Ctx, time.Minute, "the operator Deployment to have no pod and its Lease no holder", func(ctx context.Context) (bool, error) {
		d, err := kube.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil || d.Status.ObservedGeneration < d.Generation || d.Status.Replicas != 0 || d.Status.AvailableReplicas != 0 {
			return false, nil
		}
		l, err := kube.CoordinationV1().Leases(ns).Get(ctx, cli.DefaultOperatorLease, metav1.GetOptions{})
		return err == nil && (l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == ""), nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// removeRotationCRD deletes the TrustAnchorRotation CRD, and with it every TrustAnchorRotation,
// as on a cluster the extension was never installed on, and waits until the API no longer
// serves the resource. The next test's environment installs the charts again.
func removeRotationCRD(t *testing.T, env *e2e.Env) {
	dyn, err := dynamic.NewForConfig(env.Cluster.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	crds := dyn.Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"})
	if err := crds.Delete(env.Ctx, v1alpha1.Resource+"."+v1alpha1.GroupName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err = poll.Until(env.Ctx, time.Minute, "the API to serve no TrustAnchorRotation", func(context.Context) (bool, error) {
		list, err := env.Cluster.Kube().Discovery().ServerResourcesForGroupVersion(v1alpha1.SchemeGroupVersion.String())
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		if err != nil {
			return false, err
		}
		return len(list.APIResources) == 0, nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// recordCheck runs the real `linkerd check -o json` with this test binary on PATH as
// linkerd-trust, and returns what happened.
func recordCheck(t *testing.T, ctx context.Context, linkerd, version, situation string) *checkRecording {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.Symlink(self, filepath.Join(dir, extensionName)); err != nil {
		t.Fatal(err)
	}
	invPath := filepath.Join(dir, "invocations.jsonl")
	args := []string{"check", "-o", "json"}
	cmd := exec.CommandContext(ctx, linkerd, args...)
	// The extension under test first on PATH, the system's directories after it.
	cmd.Env = append(os.Environ(), "PATH="+dir+":/usr/bin:/bin", envInvocations+"="+invPath)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	code := cmd.ProcessState.ExitCode()
	if err != nil && code < 0 {
		t.Fatalf("%s check: %v\n%s", linkerd, err, stderr.String())
	}
	t.Logf("linkerd check -o json: exit %d, stderr %q", code, stderr.String())
	docs, err := splitDocuments(stdout.Bytes())
	if err != nil {
		t.Fatalf("linkerd check -o json printed no sequence of JSON documents: %v\n%s", err, stdout.String())
	}
	invs, err := readInvocations(invPath)
	if err != nil {
		t.Fatalf("linkerd check ran no %s: %v", extensionName, err)
	}
	return &checkRecording{Comment: checkComment, Linkerd: version, Command: append([]string{"linkerd"}, args...),
		Situation: situation, ExitCode: code, Documents: docs, Extension: invs}
}

// splitDocuments splits `linkerd check -o json` output: several JSON documents in a row.
func splitDocuments(b []byte) ([]json.RawMessage, error) {
	var docs []json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(b))
	for dec.More() {
		var d json.RawMessage
		if err := dec.Decode(&d); err != nil {
			return nil, err
		}
		docs = append(docs, d)
	}
	if len(docs) == 0 {
		return nil, fmt.Errorf("no document")
	}
	return docs, nil
}

// checkInvocation is the extension's `check` run in a recording.
func (r *checkRecording) checkInvocation() (invocation, bool) {
	for _, inv := range r.Extension {
		if len(inv.Args) > 0 && inv.Args[0] == "check" {
			return inv, true
		}
	}
	return invocation{}, false
}

// situationProblems lists what a recording shows against what its situation requires: where the
// extension is not installed, Linkerd ran it, it exited 0, and Linkerd printed its document as a
// success whose one line says it is not installed (Linkerd's own checks are its own business).
func situationProblems(file string, r *checkRecording) []string {
	if file != "not-installed.json" {
		return nil
	}
	inv, ok := r.checkInvocation()
	if !ok {
		return []string{"Linkerd never ran linkerd-trust check"}
	}
	var probs []string
	if inv.ExitCode != 0 {
		probs = append(probs, fmt.Sprintf("linkerd-trust check exited %d where it is not installed, want 0", inv.ExitCode))
	}
	var doc struct {
		Success    bool `json:"success"`
		Categories []struct {
			Checks []struct{ Description, Result string }
		}
	}
	if err := json.Unmarshal(r.Documents[len(r.Documents)-1], &doc); err != nil {
		return append(probs, err.Error())
	}
	if !doc.Success || len(doc.Categories) != 1 || len(doc.Categories[0].Checks) != 1 ||
		!strings.Contains(doc.Categories[0].Checks[0].Description, "not installed on this cluster") {
		probs = append(probs, fmt.Sprintf("Linkerd printed %+v, want one successful line saying the extension is not installed", doc))
	}
	return probs
}

// recordingProblems lists what in a recording breaks the contract the extension relies on:
// Linkerd asked for the metadata, ran `check` with --output=json, and printed the extension's
// document as the extension printed it, after its own.
func recordingProblems(r *checkRecording) []string {
	var probs []string
	if len(r.Extension) == 0 || len(r.Extension[0].Args) != 1 || r.Extension[0].Args[0] != "_extension-metadata" {
		probs = append(probs, "Linkerd did not ask linkerd-trust for its _extension-metadata first")
	}
	inv, ok := r.checkInvocation()
	if !ok {
		return append(probs, "Linkerd never ran linkerd-trust check")
	}
	if inv.Args[len(inv.Args)-1] != "--output=json" {
		probs = append(probs, fmt.Sprintf("Linkerd's last argument to the extension is %q, not --output=json", inv.Args[len(inv.Args)-1]))
	}
	if len(r.Documents) != 2 {
		return append(probs, fmt.Sprintf("Linkerd printed %d documents, want its own and the extension's", len(r.Documents)))
	}
	ext, err := parseCheckDoc([]byte(inv.Stdout))
	if err != nil {
		return append(probs, fmt.Sprintf("what linkerd-trust printed: %v", err))
	}
	printed, err := parseCheckDoc(r.Documents[1])
	if err != nil {
		return append(probs, fmt.Sprintf("Linkerd's second document: %v", err))
	}
	for _, d := range diffCheckDocs(ext, printed) {
		probs = append(probs, "Linkerd re-rendered the extension's document: "+d)
	}
	return probs
}

// replayCheck runs the extension as the recorded Linkerd ran it and compares what it prints
// with the recording.
func replayCheck(t *testing.T, ctx context.Context, rec *checkRecording) []string {
	t.Helper()
	var diffs []string
	for _, inv := range rec.Extension {
		var out, errOut bytes.Buffer
		code := cli.Main(ctx, inv.Args, &cli.Env{Out: &out, Err: &errOut})
		name := strings.Join(inv.Args, " ")
		if code != inv.ExitCode {
			diffs = append(diffs, fmt.Sprintf("linkerd-trust %s: exit code: extension %d, recorded %d (stderr %q)", name, code, inv.ExitCode, errOut.String()))
		}
		if inv.Args[0] != "check" {
			if out.String() != inv.Stdout {
				diffs = append(diffs, fmt.Sprintf("linkerd-trust %s: stdout: extension %q, recorded %q", name, out.String(), inv.Stdout))
			}
			continue
		}
		got, err := parseCheckDoc(out.Bytes())
		if err != nil {
			diffs = append(diffs, fmt.Sprintf("linkerd-trust %s: %v", name, err))
			continue
		}
		want, err := parseCheckDoc(rec.Documents[len(rec.Documents)-1])
		if err != nil {
			diffs = append(diffs, fmt.Sprintf("the recorded document: %v", err))
			continue
		}
		for _, d := range diffCheckDocs(got, want) {
			diffs = append(diffs, fmt.Sprintf("linkerd-trust %s: %s", name, d))
		}
	}
	return diffs
}

func readCheckRecording(path string) (*checkRecording, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w (record it with LINKERD_BIN set and go test -run TestLinkerdCheckRunsTheExtension -update)", err)
	}
	var rec checkRecording
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rec); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &rec, nil
}

func writeJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
}
