package steps

import "testing"

// The bundle is rendered and hashed on every reconcile (State.DesiredBundle, then BundleHash to
// count the pods injected with it), so their cost is paid at the reconcile rate.

func BenchmarkRenderBundle(b *testing.B) {
	current, previous := anchorCA(b, "current").cert, anchorCA(b, "previous").cert
	b.ReportAllocs()
	for b.Loop() {
		_ = RenderBundle(current, previous)
	}
}

func BenchmarkBundleHash(b *testing.B) {
	bundle := RenderBundle(anchorCA(b, "current").cert, anchorCA(b, "previous").cert)
	b.SetBytes(int64(len(bundle)))
	b.ReportAllocs()
	for b.Loop() {
		_ = BundleHash(bundle)
	}
}
