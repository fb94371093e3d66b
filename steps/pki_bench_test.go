package steps

import "testing"

// The bundle is rendered and hashed on every reconcile (State.DesiredBundle, then BundleHash to
// count the pods injected with it), so their cost is paid at the reconcile rate.

// BenchmarkRenderBundle renders the same two anchors again and again, as the reconciles of a
// rotation do ("same"), and two bundles in turn, each rendered anew ("alternating").
func BenchmarkRenderBundle(b *testing.B) {
	current, previous := anchorCA(b, "current").cert, anchorCA(b, "previous").cert
	b.Run("same", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = RenderBundle(current, previous)
		}
	})
	b.Run("alternating", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if i++; i%2 == 0 {
				_ = RenderBundle(current, previous)
			} else {
				_ = RenderBundle(previous, current)
			}
		}
	})
}

func BenchmarkBundleHash(b *testing.B) {
	bundle := RenderBundle(anchorCA(b, "current").cert, anchorCA(b, "previous").cert)
	b.SetBytes(int64(len(bundle)))
	b.ReportAllocs()
	for b.Loop() {
		_ = BundleHash(bundle)
	}
}
