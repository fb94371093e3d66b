package argocd

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	lua "github.com/yuin/gopher-lua"
	"sigs.k8s.io/yaml"
)

const healthKey = "resource.customizations.health.trust.linkerd.io_TrustAnchorRotation"

// healthScript reads the TrustAnchorRotation health check from manifests/argocd/argocd-cm.yaml.
func healthScript(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "..", "manifests", "argocd", "argocd-cm.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cm struct {
		Data map[string]string `json:"data"`
	}
	if err := yaml.Unmarshal(data, &cm); err != nil {
		t.Fatal(err)
	}
	script := cm.Data[healthKey]
	if script == "" {
		t.Fatalf("argocd-cm.yaml has no %s", healthKey)
	}
	return script
}

// run evaluates a health script on obj as Argo CD does: the object is the global obj, and only
// the safe part of the os library (time, date) is there.
func run(t *testing.T, script string, obj map[string]any) (status, message string) {
	t.Helper()
	L := lua.NewState(lua.Options{SkipOpenLibs: true})
	defer L.Close()
	for _, lib := range []struct {
		name string
		open lua.LGFunction
	}{{lua.LoadLibName, lua.OpenPackage}, {lua.BaseLibName, lua.OpenBase}, {lua.TabLibName, lua.OpenTable},
		{lua.StringLibName, lua.OpenString}, {lua.MathLibName, lua.OpenMath}} {
		L.Push(L.NewFunction(lib.open))
		L.Push(lua.LString(lib.name))
		L.Call(1, 0)
	}
	osTable := L.NewTable()
	osTable.RawSetString("time", L.NewFunction(func(L *lua.LState) int {
		if L.GetTop() != 0 {
			L.RaiseError("the health check must not call os.time with a table: Argo CD reads it in local time")
		}
		L.Push(lua.LNumber(time.Now().Unix()))
		return 1
	}))
	L.SetGlobal("os", osTable)
	L.SetGlobal("obj", toLua(L, obj))
	if err := L.DoString(script); err != nil {
		t.Fatalf("health check failed: %v", err)
	}
	hs, ok := L.Get(-1).(*lua.LTable)
	if !ok {
		t.Fatalf("health check returned %v, want a table", L.Get(-1))
	}
	return hs.RawGetString("status").String(), hs.RawGetString("message").String()
}

func toLua(L *lua.LState, v any) lua.LValue {
	switch v := v.(type) {
	case map[string]any:
		t := L.NewTable()
		for k, e := range v {
			t.RawSetString(k, toLua(L, e))
		}
		return t
	case []any:
		t := L.NewTable()
		for _, e := range v {
			t.Append(toLua(L, e))
		}
		return t
	case string:
		return lua.LString(v)
	case bool:
		return lua.LBool(v)
	case float64:
		return lua.LNumber(v)
	case int64:
		return lua.LNumber(v)
	case nil:
		return lua.LNil
	}
	panic("unexpected value")
}

func tar(status map[string]any) map[string]any {
	obj := map[string]any{
		"apiVersion": "trust.linkerd.io/v1alpha1", "kind": "TrustAnchorRotation",
		"metadata": map[string]any{"name": "cluster"},
		"spec":     map[string]any{"workloadCertificateRefreshInterval": "5m"},
	}
	if status != nil {
		obj["status"] = status
	}
	return obj
}

func ago(d time.Duration) string { return time.Now().Add(-d).UTC().Format(time.RFC3339) }

func TestTrustAnchorRotationHealth(t *testing.T) {
	script := healthScript(t)
	// The time arithmetic must not depend on the controller's time zone.
	for _, tz := range []string{"UTC", "America/Los_Angeles", "Asia/Kolkata"} {
		loc, err := time.LoadLocation(tz)
		if err != nil {
			t.Skipf("time zone %s: %v", tz, err)
		}
		time.Local = loc
		for name, tc := range map[string]struct {
			status      map[string]any
			want, inMsg string
		}{
			"no status yet is progressing": {nil, "Progressing", "operator"},
			"synced after bootstrap is healthy": {map[string]any{"phase": "Synced", "lastPhaseTransitionTime": ago(1000 * time.Hour),
				"checkpoint": map[string]any{"step": "detect-anchor-rotation"}}, "Healthy", "Synced"},
			"synced while bootstrapping is progressing": {map[string]any{"phase": "Synced", "lastPhaseTransitionTime": ago(time.Minute),
				"checkpoint": map[string]any{"step": "bootstrap"}}, "Progressing", "Bootstrapping"},
			"synced but blocked is progressing": {map[string]any{"phase": "Synced", "blockingMessage": "trust anchor Secret cert-manager/linkerd-trust-anchor is missing",
				"checkpoint": map[string]any{"step": "detect-anchor-rotation"}}, "Progressing", "is missing"},
			"a rotation under way is progressing": {map[string]any{"phase": "PropagatingTrustRoots", "lastPhaseTransitionTime": ago(59 * time.Minute),
				"blockingMessage": "Waiting for 2 pod(s)"}, "Progressing", "Waiting for 2 pod(s)"},
			"a phase beyond its threshold is degraded": {map[string]any{"phase": "PropagatingTrustRoots", "lastPhaseTransitionTime": ago(61 * time.Minute),
				"blockingMessage": "Waiting for 2 pod(s)"}, "Degraded", "Blocked in PropagatingTrustRoots for 61m"},
			"waiting for the issuer renewal for hours is progressing": {map[string]any{"phase": "WaitingForIdentityRotation", "lastPhaseTransitionTime": ago(23 * time.Hour)},
				"Progressing", "WaitingForIdentityRotation"},
			"waiting for the issuer renewal for days is degraded": {map[string]any{"phase": "WaitingForIdentityRotation", "lastPhaseTransitionTime": ago(25 * time.Hour)},
				"Degraded", "WaitingForIdentityRotation"},
			"a transition time with fractional seconds still parses": {map[string]any{"phase": "RemovingOldTrustRoots",
				"lastPhaseTransitionTime": time.Now().Add(-2 * time.Hour).UTC().Format(time.RFC3339Nano)}, "Degraded", "RemovingOldTrustRoots"},
		} {
			t.Run(tz+"/"+name, func(t *testing.T) {
				status, msg := run(t, script, tar(tc.status))
				if status != tc.want || !strings.Contains(msg, tc.inMsg) {
					t.Errorf("health %s %q, want %s with %q", status, msg, tc.want, tc.inMsg)
				}
			})
		}
	}
	time.Local = time.UTC
}
