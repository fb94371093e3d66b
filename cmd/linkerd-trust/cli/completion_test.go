package cli

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The bash script completes, in real bash, the commands, a command's flags (after global flags
// with their values, as Main takes them before the command), and the shells of completion.
func TestBashCompletion(t *testing.T) {
	f := newFixture(t)
	script, errOut, code := f.run("completion", "bash")
	if code != ExitOK {
		t.Fatalf("completion bash: exit %d: %s", code, errOut)
	}
	path := filepath.Join(t.TempDir(), "completion.bash")
	if err := os.WriteFile(path, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		words string
		want  []string
	}{
		{"linkerd-trust ch", []string{"check"}},
		{"linkerd-trust ", []string{"bundle", "check", "completion", "inspect", "plan", "recover", "rotate", "takeover", "version", "wait", "help"}},
		{"linkerd-trust check --pr", []string{"--pre", "--previous-anchor-secret", "--proxy", "--proxy-injector-deployment"}},
		{"linkerd-trust --context prod -L mesh rotate --dry", []string{"--dry-run"}},
		{"linkerd-trust completion f", []string{"fish"}},
	} {
		words := strings.Fields(tc.words)
		if strings.HasSuffix(tc.words, " ") {
			words = append(words, "")
		}
		quoted := make([]string, len(words))
		for i, w := range words {
			quoted[i] = "'" + w + "'"
		}
		cmd := exec.Command("bash", "-c", `source "$1"; COMP_WORDS=(`+strings.Join(quoted, " ")+`); COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); _linkerd_trust; echo "${COMPREPLY[@]}"`, "bash", path)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("bash: %v\n%s", err, out)
		}
		got := strings.Fields(string(out))
		for _, w := range tc.want {
			if !strings.Contains(" "+strings.Join(got, " ")+" ", " "+w+" ") {
				t.Errorf("%q completes to %q, want %q among them", tc.words, got, w)
			}
		}
		if len(got) != len(tc.want) {
			t.Errorf("%q completes to %q, want %q", tc.words, got, tc.want)
		}
	}
}

// The zsh and fish scripts name every command and every flag, and parse in their shell where
// it is installed (zsh -n, fish --no-execute); an unknown shell is a usage error.
func TestZshAndFishCompletion(t *testing.T) {
	f := newFixture(t)
	for _, shell := range []string{"zsh", "fish"} {
		script, errOut, code := f.run("completion", shell)
		if code != ExitOK {
			t.Fatalf("completion %s: exit %d: %s", shell, code, errOut)
		}
		for _, w := range []string{"bundle", "check", "inspect", "plan", "recover", "rotate", "takeover", "wait", "version", "dry-run", "assume-anchor-renewed", "expiry-warning"} {
			if !strings.Contains(script, w) {
				t.Errorf("the %s script does not name %s", shell, w)
			}
		}
		bin, err := exec.LookPath(shell)
		if err != nil {
			t.Logf("%s is not installed: its script is not parsed", shell)
			continue
		}
		path := filepath.Join(t.TempDir(), "completion."+shell)
		if err := os.WriteFile(path, []byte(script), 0o644); err != nil {
			t.Fatal(err)
		}
		args := []string{"-n", path}
		if shell == "fish" {
			args = []string{"--no-execute", path}
		}
		if out, err := exec.Command(bin, args...).CombinedOutput(); err != nil {
			t.Errorf("%s does not parse its script: %v\n%s", shell, err, out)
		}
	}
	if _, _, code := f.run("completion", "powershell"); code != ExitUsage {
		t.Errorf("completion powershell: exit %d, want a usage error", code)
	}
}
