package observe

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/steps/kube"
	"github.com/linkerd/trust-rotation/steps/podindex"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// Reading is one round of reads of everything the rotation decides on: the State the operator
// would build from its informers at the same moment, and the meshed pods behind its counts.
type Reading struct {
	State *steps.State
	// Pods are the meshed pods (control plane included), in the order the apiserver listed them.
	Pods []*podindex.Pod
}

// Read builds a Reading with one GET per PKI object and control-plane Deployment and one LIST
// of meshed pods (label selector linkerd.io/control-plane-ns), through the same converters the
// operator's informers feed, so a CLI sees what the operator sees. The certificates come through
// r (see PKIReader: no private key is read); status is the TrustAnchorRotation's (nil when there
// is none), whose previousAnchorFingerprint names the previous anchor. The trust-bundle
// convergence is counted against the desired bundle, as the operator counts it;
// State.Certificates is left empty: it needs live probes (see probe.ProbeAll and
// probe.CertificateCheck).
//
// A missing object is not an error (the State says it is missing), nor is a Secret the user may
// not read (the Source says so, see Forbidden); any other failed read is.
func Read(ctx context.Context, r PKIReader, status *v1alpha1.TrustAnchorRotationStatus, now time.Time) (*Reading, error) {
	return ReadFeeding(ctx, r, status, now, nil)
}

// ReadFeeding is Read handing each page of meshed pods to feed (when not nil) as soon as it is
// listed: a command probes the first pods while the apiserver lists the rest (ten thousand pods
// take most of a second to list).
func ReadFeeding(ctx context.Context, r PKIReader, status *v1alpha1.TrustAnchorRotationStatus, now time.Time, feed func(page []*podindex.Pod)) (*Reading, error) {
	cfg, kube := r.Config, r.Kube
	s := &steps.State{Config: cfg, Now: now, ControlPlane: map[string]steps.Deployment{}}
	var err error
	if s.Anchor, err = r.Anchor(ctx); err != nil {
		return nil, err
	}
	if s.Issuer, err = r.Issuer(ctx); err != nil {
		return nil, err
	}
	if s.Bundle, err = ReadBundle(ctx, kube, cfg); err != nil {
		return nil, err
	}
	if s.Previous, err = r.Previous(ctx, s.Bundle, status); err != nil {
		return nil, err
	}
	if status != nil {
		s.Retiring = steps.RetiringTo(steps.Facts(), status.Checkpoint)
		if cp := status.Checkpoint; cp != nil {
			s.Rotation, s.Strategy = cp.Rotation, cp.Strategy
			if cp.StartTime != nil {
				s.RotationStart = cp.StartTime.Time
			}
		}
	}
	for _, name := range cfg.ControlPlane() {
		d, err := kube.AppsV1().Deployments(cfg.LinkerdNamespace).Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			d = nil
		case err != nil:
			return nil, fmt.Errorf("reading Deployment %s/%s: %w", cfg.LinkerdNamespace, name, err)
		}
		s.ControlPlane[name] = DeploymentFrom(cfg.LinkerdNamespace, name, d)
	}
	if key := steps.IssuerKey(s.IdentityScheme()); key != steps.CertificateKey {
		// Identity signs with the issuer Linkerd's chart rendered, which only its Secret holds;
		// cert-manager's is staged.
		s.StagedIssuer = s.Issuer
		if s.Issuer, err = r.SecretKey(ctx, cfg.LinkerdNamespace, cfg.IssuerSecret, key); err != nil {
			return nil, err
		}
	}
	pods, err := ListMeshedPods(ctx, kube, cfg, feed)
	if err != nil {
		return nil, err
	}
	reading := &Reading{State: s, Pods: pods}
	reading.Recount()
	return reading, nil
}

// Recount counts the trust-bundle convergence again against the State's desired bundle, after a
// caller changed the State (a plan that pretends the anchor was renewed, say).
func (s *Reading) Recount() {
	index := IndexOf(s.Pods)
	s.State.TrustBundle = index.TrustBundle(s.State.BundleHashes()...)
	index.FillControlPlane(s.State)
}

// ReadBundle reads the trust-roots ConfigMap; a missing one is a Bundle that is not Found.
func ReadBundle(ctx context.Context, kube kube.Interface, cfg steps.Config) (steps.Bundle, error) {
	cm, err := kube.CoreV1().ConfigMaps(cfg.LinkerdNamespace).Get(ctx, cfg.TrustRootsConfigMap, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return BundleFromConfigMap(nil), nil
	case err != nil:
		return steps.Bundle{}, fmt.Errorf("reading ConfigMap %s/%s: %w", cfg.LinkerdNamespace, cfg.TrustRootsConfigMap, err)
	}
	return BundleFromConfigMap(cm), nil
}

// Unreadable describes the PKI sources a Secret read was forbidden for, for a command to show
// as warnings.
func (s *Reading) Unreadable() []string {
	var out []string
	for _, src := range []struct {
		kind string
		s    steps.Source
	}{{"trust-anchor Secret", s.State.Anchor}, {"previous-anchor Secret", s.State.Previous}, {"identity-issuer Secret", s.State.Issuer}} {
		if Forbidden(src.s) {
			out = append(out, src.s.Problem(src.kind))
		}
	}
	return out
}

// ListMeshedPods lists the meshed pods of every namespace (label linkerd.io/control-plane-ns) in
// pages, in their slim form, handing each page to feed (when not nil) before asking for the next.
func ListMeshedPods(ctx context.Context, kube kube.Interface, cfg steps.Config, feed func(page []*podindex.Pod)) ([]*podindex.Pod, error) {
	lw, err := podindex.MeshedPodsListWatch(kube)
	if err != nil {
		return nil, err
	}
	var out []*podindex.Pod
	opts := metav1.ListOptions{Limit: 500}
	for {
		obj, err := lw.ListWithContext(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("listing meshed pods (label %s): %w", podindex.MeshedPodSelector, err)
		}
		list := obj.(*podindex.WirePodList)
		first := len(out)
		for i := range list.Items {
			out = append(out, podindex.SlimPod(cfg, &list.Items[i].Pod))
		}
		if feed != nil {
			feed(out[first:len(out):len(out)])
		}
		if list.Continue == "" {
			return out, nil
		}
		opts.Continue = list.Continue
	}
}

// IndexOf returns a podindex.Index holding pods.
func IndexOf(pods []*podindex.Pod) *podindex.Index {
	x := podindex.New(nil)
	for _, p := range pods {
		x.Upsert(p)
	}
	return x
}

// SetInFlight adds the anchors the TrustAnchorRotation keeps in flight (status.inFlightAnchors:
// a rotation superseded by another renewal of the anchor) to the State and counts again, so the
// desired bundle is the operator's, which keeps them until the previous anchor is retired.
func (s *Reading) SetInFlight(pems []string) error {
	inFlight, err := steps.ParseInFlight(pems)
	if err != nil {
		return err
	}
	s.State.InFlight = inFlight
	s.Recount()
	return nil
}
