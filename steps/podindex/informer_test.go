package podindex

import (
	"context"
	"fmt"
	"net/http"
	goruntime "runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/linkerd/trust-rotation/steps"
)

// TestPodInformerFeedsTheIndex: the pods of the first list are in the index once the informer
// has synced; a watched pod's creation, change and deletion reach it; and a relist that no
// longer lists a pod the index holds deletes it from the index, telling the index's hook.
func TestPodInformerFeedsTheIndex(t *testing.T) {
	pod := func(name, rv, hash string) WirePod {
		p := injectedPod()
		p.Name, p.UID, p.ResourceVersion = name, types.UID("uid-"+name), rv
		p.Annotations[steps.TrustRootSHA256Annotation] = hash
		return WirePod{Pod: *p}
	}
	var mu sync.Mutex
	lists := []*WirePodList{
		{ListMeta: metav1.ListMeta{ResourceVersion: "10"}, Items: []WirePod{pod("a", "5", "old"), pod("b", "6", "old")}},
		{ListMeta: metav1.ListMeta{ResourceVersion: "20"}, Items: []WirePod{pod("a", "11", "new"), pod("d", "19", "new")}},
	}
	watches := make(chan *watch.FakeWatcher, 2)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(context.Context, metav1.ListOptions) (runtime.Object, error) {
			mu.Lock()
			defer mu.Unlock()
			l := lists[0]
			if len(lists) > 1 {
				lists = lists[1:]
			}
			return l, nil
		},
		WatchFuncWithContext: func(context.Context, metav1.ListOptions) (watch.Interface, error) {
			w := watch.NewFakeWithChanSize(10, false)
			watches <- w
			return w, nil
		},
	}
	var gone []string
	index := New(func(old, cur *Pod) {
		if cur == nil {
			mu.Lock()
			gone = append(gone, old.Name)
			mu.Unlock()
		}
	})
	ctx := t.Context()
	syncPodInformer(ctx, t, lw, index)
	hashes := func() map[string]string {
		out := map[string]string{}
		index.Each(func(p *Pod) { out[p.Name] = p.TrustRootHash })
		return out
	}
	if got := hashes(); len(got) != 2 || got["a"] != "old" || got["b"] != "old" {
		t.Fatalf("after the first list the index holds %v, want a and b", got)
	}
	waitFor := func(what string, want map[string]string) {
		t.Helper()
		err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			got := hashes()
			if len(got) != len(want) {
				return false, nil
			}
			for k, v := range want {
				if got[k] != v {
					return false, nil
				}
			}
			return true, nil
		})
		if err != nil {
			t.Fatalf("%s: the index holds %v, want %v", what, hashes(), want)
		}
	}

	w := <-watches
	c := pod("c", "12", "new")
	a := pod("a", "13", "new")
	b := pod("b", "14", "old")
	w.Add(&c)
	w.Modify(&a)
	w.Delete(&b)
	waitFor("after the watch events", map[string]string{"a": "new", "c": "new"})

	// The watch expires: the informer lists again, and c, deleted while it was not watching, is
	// not listed.
	w.Error(&metav1.Status{Status: metav1.StatusFailure, Code: http.StatusGone, Reason: metav1.StatusReasonExpired, Message: "too old resource version"})
	waitFor("after the relist", map[string]string{"a": "new", "d": "new"})
	mu.Lock()
	defer mu.Unlock()
	if len(gone) != 2 || gone[0] != "b" || gone[1] != "c" {
		t.Errorf("the index's hook saw %v deleted, want b (a watch event) then c (the relist)", gone)
	}
}

// syncPodInformer runs a PodInformer of lw into x until ctx ends, and waits until it has synced.
// The fake watches serve no watch-list (initial events ended by a bookmark): the informer lists.
func syncPodInformer(ctx context.Context, tb testing.TB, lw *cache.ListWatch, x *Index) {
	inf := NewPodInformer(cache.ToListWatcherWithWatchListSemantics(lw, listOnly{}), steps.DefaultConfig(), x, nil)
	go inf.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		tb.Fatal("the informer did not sync")
	}
}

// numberedWirePods are n meshed pods of five service accounts, each of its own name and UID.
func numberedWirePods(n int) []WirePod {
	out := make([]WirePod, n)
	for i := range out {
		p := injectedPod()
		p.Name, p.UID = fmt.Sprintf("web-6d4cf56db6-%05d", i), types.UID(fmt.Sprintf("uid-%05d", i))
		p.Spec.ServiceAccountName = fmt.Sprintf("web-%d", i%5)
		out[i].Pod = *p
	}
	return out
}

// listOnly is a client that does not serve watch-lists (watchlist.DoesClientNotSupportWatchListSemantics).
type listOnly struct{}

func (listOnly) IsWatchListSemanticsUnSupported() bool { return true }

// BenchmarkPodInformerRetained is the heap the operator keeps per meshed pod once synced: the
// pods upserted into an Index by hand (the floor), and listed through the PodInformer into one.
// The informer's store is the index, so the two are the same but for the queue's leftovers.
func BenchmarkPodInformerRetained(b *testing.B) {
	const pods = 10000
	cfg := steps.DefaultConfig()
	list := &WirePodList{ListMeta: metav1.ListMeta{ResourceVersion: "1"}, Items: numberedWirePods(pods)}
	for _, bc := range []struct {
		name string
		fill func(*testing.B, *Index)
	}{
		{"PodIndex", func(_ *testing.B, x *Index) {
			for i := range list.Items {
				x.Upsert(SlimPod(cfg, &list.Items[i].Pod))
			}
		}},
		{"PodInformer+PodIndex", func(b *testing.B, x *Index) {
			lw := &cache.ListWatch{
				ListWithContextFunc: func(context.Context, metav1.ListOptions) (runtime.Object, error) { return list, nil },
				WatchFuncWithContext: func(context.Context, metav1.ListOptions) (watch.Interface, error) {
					return watch.NewFake(), nil
				},
			}
			ctx, cancel := context.WithCancel(b.Context())
			defer cancel()
			syncPodInformer(ctx, b, lw, x)
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var perPod float64
			for b.Loop() {
				goruntime.GC()
				var before, after goruntime.MemStats
				goruntime.ReadMemStats(&before)
				x := New(nil)
				bc.fill(b, x)
				goruntime.GC()
				goruntime.ReadMemStats(&after)
				if n := x.MeshedPods(); n != pods {
					b.Fatalf("%d meshed pods in the index, want %d", n, pods)
				}
				perPod = float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / pods
				goruntime.KeepAlive(x)
			}
			b.ReportMetric(perPod, "retained-B/pod")
		})
	}
}

// BenchmarkPodInformerEvent is the cost of one watched pod update, from the watch's event to the
// index's hook: the transform (SlimPod), the queue and the index.
func BenchmarkPodInformerEvent(b *testing.B) {
	const pods = 1000
	updates := numberedWirePods(pods)
	seen := make(chan struct{}, 1)
	x := New(func(_, _ *Pod) {
		select {
		case seen <- struct{}{}:
		default:
		}
	})
	watches := make(chan *watch.FakeWatcher, 1)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(context.Context, metav1.ListOptions) (runtime.Object, error) {
			return &WirePodList{ListMeta: metav1.ListMeta{ResourceVersion: "1"}}, nil
		},
		WatchFuncWithContext: func(context.Context, metav1.ListOptions) (watch.Interface, error) {
			w := watch.NewFake()
			watches <- w
			return w, nil
		},
	}
	syncPodInformer(b.Context(), b, lw, x)
	w := <-watches
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		p := updates[i%pods]
		p.ResourceVersion = strconv.Itoa(i + 2)
		w.Modify(&p)
		<-seen
		i++
	}
}
