package app

import (
	"context"
	"crypto/x509"
	"reflect"
	"slices"
	"testing"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/steps/apply"
)

// writerArg is an argument of the given type for a Writer method, or false for a type the test
// does not know (a new Writer method: give it one).
func writerArg(t reflect.Type) (reflect.Value, bool) {
	var v any
	switch t {
	case reflect.TypeFor[context.Context]():
		v = context.Background()
	case reflect.TypeFor[string]():
		v = "x"
	case reflect.TypeFor[[]string]():
		v = []string{"pod-1"}
	case reflect.TypeFor[int32]():
		v = int32(1)
	case reflect.TypeFor[*x509.Certificate]():
		v = &x509.Certificate{Raw: []byte("certificate")}
	case reflect.TypeFor[steps.WorkloadRef]():
		v = steps.WorkloadRef{Kind: "Deployment", Namespace: "app", Name: "web"}
	case reflect.TypeFor[map[string]*string](), reflect.TypeFor[map[string]string]():
		return reflect.MakeMap(t), true
	default:
		return reflect.Value{}, false
	}
	return reflect.ValueOf(v), true
}

// Every method of steps.Writer, the automations' included, passes the "write" crash point right
// after its write: a method the hook does not wrap would reach the embedded Writer unhooked.
func TestWriteObserverCoversEveryWriterMethod(t *testing.T) {
	iface := reflect.TypeFor[steps.Writer]()
	if iface.NumMethod() < 9 {
		t.Fatalf("steps.Writer has %d methods, want at least 9", iface.NumMethod())
	}
	for i := range iface.NumMethod() {
		m := iface.Method(i)
		t.Run(m.Name, func(t *testing.T) {
			dry := &apply.DryRun{Config: steps.DefaultConfig()}
			var crashes []int // the writes made when each crash happened
			hook := newCrashHook("write:"+steps.StepExpandTrustBundle, func() { crashes = append(crashes, len(dry.Writes())) })
			hook.point("save", steps.StepExpandTrustBundle, 1)
			w := hook.writer(dry)
			args := make([]reflect.Value, m.Type.NumIn())
			for j := range args {
				var ok bool
				if args[j], ok = writerArg(m.Type.In(j)); !ok {
					t.Fatalf("no test argument of type %s", m.Type.In(j))
				}
			}
			reflect.ValueOf(w).MethodByName(m.Name).Call(args)
			if !slices.Equal(crashes, []int{1}) {
				t.Errorf("crashes after %v write(s), want one crash right after the write", crashes)
			}
		})
	}
}

// The crash points fire at the point and step the hook names, and at the named act alone.
func TestCrashPoint(t *testing.T) {
	for _, tc := range []struct {
		at          string
		point, step string
		acts        int32
		want        bool
	}{
		{"save:restart-identity", "save", "restart-identity", 1, true},
		{"save:restart-identity", "save", "restart-identity", 2, true},
		{"save:restart-identity", "acted", "restart-identity", 1, false},
		{"save:restart-identity", "save", "expand-trust-bundle", 1, false},
		{"acted:restart-identity@2", "acted", "restart-identity", 2, true},
		{"acted:restart-identity@2", "acted", "restart-identity", 1, false},
		{"", "save", "restart-identity", 1, false},
	} {
		crashed := false
		newCrashHook(tc.at, func() { crashed = true }).point(tc.point, tc.step, tc.acts)
		if crashed != tc.want {
			t.Errorf("hook %q at %s:%s@%d: crashed %v, want %v", tc.at, tc.point, tc.step, tc.acts, crashed, tc.want)
		}
	}
}

// Without a "write" point the Writer is not wrapped; the write point names the step of the
// last checkpoint saved.
func TestWriteHookOnlyWhenAsked(t *testing.T) {
	dry := &apply.DryRun{Config: steps.DefaultConfig()}
	if w := newCrashHook("save:"+steps.StepExpandTrustBundle, nil).writer(dry); w != steps.Writer(dry) {
		t.Errorf("a save hook wrapped the Writer: %T", w)
	}
	crashed := false
	hook := newCrashHook("write:"+steps.StepRefreshControlPlane, func() { crashed = true })
	w := hook.writer(dry)
	hook.point("save", steps.StepExpandTrustBundle, 1)
	_ = w.WriteTrustRoots(context.Background(), "bundle")
	if crashed {
		t.Errorf("crashed writing for %s, hook names %s", steps.StepExpandTrustBundle, steps.StepRefreshControlPlane)
	}
	hook.point("save", steps.StepRefreshControlPlane, 1)
	_ = w.RestartDeployment(context.Background(), "linkerd", "linkerd-destination", "t")
	if !crashed {
		t.Errorf("did not crash writing for %s", steps.StepRefreshControlPlane)
	}
}
