package podindex

import (
	"testing"
	"time"
)

func TestOldestMeshed(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	pod := func(name string, age int, cp bool) *Pod {
		return &Pod{Namespace: "app", Name: name, UID: name, Workload: "app/Deployment/" + name, Meshed: true, Alive: true, ControlPlane: cp, Created: t0.AddDate(0, 0, age)}
	}
	x := New(nil)
	if got := x.OldestMeshed(); !got.IsZero() {
		t.Errorf("empty index: %s", got)
	}
	for _, p := range []*Pod{pod("b", 2, false), pod("a", 1, false), pod("c", 3, false), pod("identity", 0, true)} {
		x.Upsert(p)
	}
	if got := x.OldestMeshed(); !got.Equal(t0.AddDate(0, 0, 1)) {
		t.Errorf("oldest %s, want a's (control-plane pods apart)", got)
	}
	x.Delete("app/a")
	if got := x.OldestMeshed(); !got.Equal(t0.AddDate(0, 0, 2)) {
		t.Errorf("oldest %s after a's deletion, want b's", got)
	}
	x.Upsert(pod("z", 0, false))
	x.Delete("app/b")
	if got := x.OldestMeshed(); !got.Equal(t0) {
		t.Errorf("oldest %s, want z's", got)
	}
}
