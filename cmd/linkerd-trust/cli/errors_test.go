package cli

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// runReal runs the CLI with real clients (client-go's, over a kubeconfig) and returns its
// combined output and exit code.
func runReal(args ...string) (string, int) {
	var out bytes.Buffer
	code := Main(context.Background(), args, &Env{Out: &out, Err: &out, IsTerminal: func() bool { return false }})
	return out.String(), code
}

// kubeconfigFor writes a kubeconfig for the apiserver at url.
func kubeconfigFor(t *testing.T, url string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: %q}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`, url)
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// An apiserver that refuses GET /version (403, as the real one answers it, with a Status, which
// client-go's discovery client reads as "unknown") is named as such, with what grants it.
func TestCheckNamesAForbiddenVersion(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusForbidden)
		fmt.Fprintf(w, `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"forbidden: User \"alice\" cannot get path \"%s\"","reason":"Forbidden","details":{},"code":403}`, r.URL.Path)
	}))
	defer srv.Close()
	out, code := runReal("check", "--pre", "--kubeconfig", kubeconfigFor(t, srv.URL))
	for _, want := range []string{"GET /version", "403 Forbidden", "system:discovery"} {
		if !strings.Contains(out, want) {
			t.Errorf("check --pre against a 403 on /version: exit %d, output lacks %q:\n%s", code, want, out)
		}
	}
	if code == ExitOK || strings.Contains(out, "unknown") {
		t.Errorf("exit %d, or a bare unknown:\n%s", code, out)
	}
}

// check --wait bounds the discovery reads too: against an apiserver that never answers, the
// first check fails on the deadline --wait set, not on client-go's discovery timeout (32s).
func TestCheckWaitBoundsAHungAPIServer(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer srv.Close()
	defer close(release)
	out, code := runReal("check", "--pre", "--wait", "1s", "--kubeconfig", kubeconfigFor(t, srv.URL))
	if code == ExitOK || !strings.Contains(out, "GET /version") || !strings.Contains(out, "context deadline exceeded") || strings.Contains(out, "Client.Timeout") {
		t.Errorf("check --wait 1s against a hung apiserver: exit %d, want the first check to fail on the deadline:\n%s", code, out)
	}
}

// A KUBECONFIG that names no file is said, with the path: client-go skips it without a word.
func TestMissingKubeconfigIsNamed(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nonexistent")
	t.Setenv("KUBECONFIG", missing)
	t.Setenv("HOME", t.TempDir())
	out, code := runReal("check", "--pre")
	if code == ExitOK || !strings.Contains(out, "KUBECONFIG="+missing) || !strings.Contains(out, missing+" does not exist") {
		t.Errorf("check with KUBECONFIG=%s: exit %d, want the path named:\n%s", missing, code, out)
	}
}

// wait fails at once when the apiserver refuses a read, naming the permission: waiting does not
// grant it.
func TestWaitFailsAtOnceWhenForbidden(t *testing.T) {
	f := newFixture(t)
	f.forbid = []string{"leases"}
	out, errOut, code := f.run("wait", "--timeout", "10m")
	all := out + errOut
	if code != ExitFailure || !strings.Contains(all, `cannot get resource "leases"`) || !strings.Contains(all, "needs get on Leases in namespace linkerd") {
		t.Errorf("wait with leases forbidden: exit %d, want a failure naming the permission:\n%s", code, all)
	}
	if strings.Contains(all, "gave up after") {
		t.Errorf("wait waited for its timeout:\n%s", all)
	}
}
