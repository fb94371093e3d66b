package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/steps/apply"
	"github.com/linkerd/trust-rotation/steps/kube/clientset"
	"github.com/linkerd/trust-rotation/steps/podindex"
	"github.com/linkerd/trust-rotation/steps/probe"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// RotationPatcher merge-patches a TrustAnchorRotation; *client.Client is one.
type RotationPatcher interface {
	MergePatch(ctx context.Context, name string, patch []byte, fieldManager string) (*v1alpha1.TrustAnchorRotation, error)
}

// patchRotation merge-patches the TrustAnchorRotation with the given spec fields and
// annotations, in one write.
func patchRotation(ctx context.Context, cl *Clients, name string, spec map[string]any, annotations map[string]string) error {
	patcher, ok := cl.Rotations.(RotationPatcher)
	if !ok {
		return fmt.Errorf("cannot change TrustAnchorRotation %s: this client only reads", name)
	}
	patch := map[string]any{}
	if len(spec) > 0 {
		patch["spec"] = spec
	}
	if len(annotations) > 0 {
		patch["metadata"] = map[string]any{"annotations": annotations}
	}
	body, err := json.Marshal(patch)
	if err != nil {
		return err
	}
	_, err = patcher.MergePatch(ctx, name, body, suspendFieldManager)
	return err
}

// recoverOptions are recover's flags that shape the recovery.
type recoverOptions struct {
	// maxConcurrent is the restart budget during the recovery, cluster-wide and per namespace;
	// 0: every meshed workload at once.
	maxConcurrent int32
	// crossSigned: recover from an expired anchor in the bridged order, switching the anchor's
	// Certificate to the CA issuer over its own Secret when it is not issued so (anchorSwitch,
	// found by findCrossSigner; nil when it already is).
	crossSigned  bool
	anchorSwitch *anchorIssuerSwitch
}

// anchorIssuerSwitch is what recover --cross-signed changes on the trust anchor's Certificate:
// its issuerRef, to the CA issuer over the anchor's own Secret, as
// manifests/cert-manager/linkerd-pki-cross-signed.yaml issues it. The change makes cert-manager
// re-issue the anchor at once, signed with the key of the anchor in that Secret — the expired
// one — which neither recover nor the operator reads.
type anchorIssuerSwitch struct {
	Certificate string                 `json:"certificate"`
	From        string                 `json:"from"`
	To          cmmeta.IssuerReference `json:"to"`
}

func (sw *anchorIssuerSwitch) to() string {
	return orDefault(sw.To.Kind, cmapi.IssuerKind) + " " + sw.To.Name
}

// findCrossSigner finds the CA issuer over the trust anchor's own Secret for recover
// --cross-signed: the issuer of the identity issuer's Certificate, which cert-manager's Linkerd
// setup makes a CA issuer over that Secret (linkerd-pki.yaml's ClusterIssuer). nil, no error,
// when the anchor's Certificate is issued so already.
func findCrossSigner(ctx context.Context, cl *Clients, cfg steps.Config) (*anchorIssuerSwitch, error) {
	certs := cl.CertManager.CertmanagerV1().Certificates
	anchor, err := certs(cfg.CertManagerNamespace).Get(ctx, cfg.AnchorCertificate, metav1.GetOptions{})
	if err != nil {
		return nil, notFound("Certificate", cfg.CertManagerNamespace+"/"+cfg.AnchorCertificate, err)
	}
	ref := anchor.Namespace + "/" + anchor.Name
	if pk := anchor.Spec.PrivateKey; pk != nil && pk.RotationPolicy == cmapi.RotationPolicyNever {
		return nil, fmt.Errorf("Certificate %s has spec.privateKey.rotationPolicy: Never: a renewal keeps the expired anchor's key and rotates nothing; set rotationPolicy: Always (%s)", ref, crossSignedManifest)
	}
	if ca, err := caIssuerOf(ctx, cl, anchor.Namespace, anchor.Spec.IssuerRef); err == nil && ca != nil && ca.SecretName == anchor.Spec.SecretName {
		return nil, nil
	}
	issuer, err := certs(cfg.LinkerdNamespace).Get(ctx, cfg.IssuerCertificate, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("%w: it names the CA issuer over the trust anchor's Secret that --cross-signed switches Certificate %s to", notFound("Certificate", cfg.LinkerdNamespace+"/"+cfg.IssuerCertificate, err), ref)
	}
	to := issuer.Spec.IssuerRef
	kind := orDefault(to.Kind, cmapi.IssuerKind)
	if kind == cmapi.IssuerKind && issuer.Namespace != anchor.Namespace {
		return nil, fmt.Errorf("the identity issuer's Certificate %s/%s is issued by Issuer %s/%s, which Certificate %s in namespace %s cannot use: create the CA issuer over Secret %s as %s does, and point the anchor's Certificate at it",
			issuer.Namespace, issuer.Name, issuer.Namespace, to.Name, ref, anchor.Namespace, anchor.Spec.SecretName, crossSignedManifest)
	}
	ca, err := caIssuerOf(ctx, cl, anchor.Namespace, to)
	if err != nil {
		return nil, err
	}
	if ca == nil || ca.SecretName != anchor.Spec.SecretName {
		return nil, fmt.Errorf("%s %s, the identity issuer's, is not a CA issuer over the trust anchor's Secret %s: no issuer to sign the renewed anchor with the expired one's key; create one as %s does",
			kind, to.Name, anchor.Spec.SecretName, crossSignedManifest)
	}
	return &anchorIssuerSwitch{Certificate: ref, From: orDefault(anchor.Spec.IssuerRef.Kind, cmapi.IssuerKind) + " " + anchor.Spec.IssuerRef.Name, To: to}, nil
}

// recoveryCase is what RecoveryCase found, and whether recover renews the anchor.
type recoveryCase struct {
	name, what  string
	renewAnchor bool
}

// recoveryView is the facts a recovery's plan prints first, in plain numbers, and what
// recover changes.
type recoveryView struct {
	Case    string `json:"case"`
	Summary string `json:"summary"`
	// ProbedPods are the meshed pods whose live certificate was read; UnprobedPods the others
	// (not running, or the probe failed).
	ProbedPods   int `json:"probedPods"`
	UnprobedPods int `json:"unprobedPods,omitempty"`
	// WithoutCertificate are the pods presenting no valid certificate now, Expiring the others,
	// each with when what it presents expires (the leaf, or an issuer above it), soonest first.
	WithoutCertificate []podDeadline `json:"withoutCertificate,omitempty"`
	Expiring           []podDeadline `json:"expiring,omitempty"`
	// Workloads is how many meshed workloads the recovery restarts.
	Workloads int `json:"workloads"`
	// Order is what the recovery does, in order; Restarts what it restarts.
	Order    []string `json:"order"`
	Restarts string   `json:"restarts"`
	// HowLong says how long the pods without a valid certificate, or refusing each other, stay
	// so once the recovery runs, from what this cluster's own history measured.
	HowLong string `json:"howLong"`
	// RenewAnchor: recover renews the trust anchor first, as cmctl renew does.
	RenewAnchor bool `json:"renewAnchor,omitempty"`
	// SwitchAnchorIssuer is the change of the anchor Certificate's issuer recover
	// --cross-signed makes, which re-issues it (RenewAnchor is then false).
	SwitchAnchorIssuer *anchorIssuerSwitch `json:"switchAnchorIssuer,omitempty"`
	// WithoutOutage says how the recovery would break no pair, when it breaks some.
	WithoutOutage string `json:"withoutOutage,omitempty"`
	// Refused says why recover does not recover as asked; nothing is changed.
	Refused string `json:"refused,omitempty"`
	// Sets says what recover sets in the spec; Restore how to put the values before back.
	Sets    []string `json:"sets"`
	Restore string   `json:"restore,omitempty"`

	patch map[string]any
}

// podDeadline is a pod and when its certificate expires (or expired).
type podDeadline struct {
	Pod     string `json:"pod"`
	Expires string `json:"expires"`
	at      time.Time
}

// recoveryFacts reads, from the probes, which pods have no valid certificate now and when each
// of the others loses its own, and says what the recovery does and sets.
func recoveryFacts(rc recoveryCase, s *steps.State, tar *v1alpha1.TrustAnchorRotation, pods []*podindex.Pod, results map[string]probe.ProbeResult, opts recoverOptions) *recoveryView {
	spec := tar.Spec
	v := &recoveryView{Case: rc.name, Summary: rc.what, RenewAnchor: rc.renewAnchor}
	workloads := map[string]bool{}
	for _, p := range pods {
		if !p.Meshed || !p.Alive {
			continue
		}
		if p.Workload != "" && !isControlPlane(s, p) {
			workloads[p.Workload] = true
		}
		r, ok := results[p.Key()]
		if !ok || r.Err != nil || r.LeafNotAfter.IsZero() {
			v.UnprobedPods++
			continue
		}
		v.ProbedPods++
		at := r.LeafNotAfter
		for _, c := range r.Chain {
			if c.NotAfter.Before(at) {
				at = c.NotAfter
			}
		}
		d := podDeadline{Pod: p.Key(), Expires: at.UTC().Format(time.RFC3339), at: at}
		if s.Now.After(at) {
			v.WithoutCertificate = append(v.WithoutCertificate, d)
		} else {
			v.Expiring = append(v.Expiring, d)
		}
	}
	bySoonest := func(a, b podDeadline) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return strings.Compare(a.Pod, b.Pod)
	}
	slices.SortFunc(v.WithoutCertificate, bySoonest)
	slices.SortFunc(v.Expiring, bySoonest)
	v.Workloads = len(workloads)

	cfg := s.Config
	issuerRef := cfg.LinkerdNamespace + "/" + cfg.IssuerCertificate
	v.patch = map[string]any{}
	if spec.IdentityIssuerRenewal != v1alpha1.Automatic {
		v.patch["identityIssuerRenewal"] = v1alpha1.Automatic
		v.Sets = append(v.Sets, "identityIssuerRenewal: Automatic")
	}
	switch rc.name {
	case steps.RecoveryIdentityIssuerExpired:
		if opts.crossSigned {
			v.Refused = fmt.Sprintf("--cross-signed is the way out of an expired trust anchor; here the identity issuer expired under a valid one, and its recovery restarts nothing: %s recover without --cross-signed", binary)
		}
		v.Order = []string{
			fmt.Sprintf("the operator triggers the renewal of Certificate %s, as cmctl renew does (detect-anchor-rotation)", issuerRef),
			"linkerd-identity reloads the renewed issuer by itself (its roots are valid); the operator reports it if it does not, and restarts it under spec.staleIssuerRestart: Automatic",
			"each proxy without a valid certificate asks identity again every 10s (its minimum refresh) and gets one from the renewed issuer",
		}
		v.Restarts = "nothing: no pod restarts"
		v.HowLong = "each proxy without a valid certificate gets one within its minimum refresh (10s) of identity loading the renewed issuer; cert-manager issues it in seconds, and identity loads it once the kubelet refreshes its volume (within about a minute)"
	case steps.RecoveryTrustAnchorExpired:
		if opts.crossSigned {
			switch {
			case !rc.renewAnchor && !steps.SignedBy(s.Anchor.Cert, s.Previous.Cert):
				v.Refused = fmt.Sprintf("--cross-signed: cert-manager already renewed the trust anchor to %s, which the expired anchor did not sign: the recovery runs in the standard order (%s recover without --cross-signed)",
					steps.ShortFingerprint(s.Anchor.Fingerprint()), binary)
			case spec.Strategy != v1alpha1.StrategyCrossSigned:
				v.patch["strategy"] = v1alpha1.StrategyCrossSigned
				v.Sets = append(v.Sets, "strategy: CrossSigned")
			}
			if sw := opts.anchorSwitch; sw != nil && rc.renewAnchor {
				v.SwitchAnchorIssuer = sw
				rc.renewAnchor = false
				v.RenewAnchor = false
			}
		}
		if opts.crossSigned && v.Refused == "" || bridgedRecovery(s, rc.renewAnchor) {
			bridgedRecoveryFacts(v, rc, s, spec, opts)
			break
		}
		if rc.renewAnchor && !opts.crossSigned {
			v.WithoutOutage = fmt.Sprintf("%s recover --cross-signed: cert-manager signs the renewed anchor with the expired one's key (the anchor's Certificate switched to the CA issuer over its own Secret, spec.strategy CrossSigned), and the recovery restarts no workload before the reduction and breaks no pair", binary)
		}
		budget := opts.maxConcurrent
		if budget <= 0 {
			budget = int32(min(max(v.Workloads, 1), 10000))
		}
		r := spec.DataPlaneRestart
		if r.Policy != v1alpha1.Automatic || r.MaxConcurrent != budget || r.MaxConcurrentPerNamespace != budget {
			v.patch["dataPlaneRestart"] = map[string]any{"policy": v1alpha1.Automatic, "maxConcurrent": budget, "maxConcurrentPerNamespace": budget}
			v.Sets = append(v.Sets, fmt.Sprintf("dataPlaneRestart: policy Automatic, maxConcurrent %d, maxConcurrentPerNamespace %d", budget, budget))
			v.Restore = fmt.Sprintf(`kubectl patch trustanchorrotation %%s --type=merge -p '{"spec":{"dataPlaneRestart":{"policy":%q,"maxConcurrent":%s,"maxConcurrentPerNamespace":%s}}}'`,
				orDefault(string(r.Policy), string(v1alpha1.Manual)), orNull(r.MaxConcurrent), orNull(r.MaxConcurrentPerNamespace))
		}
		if len(r.MaintenanceWindows) > 0 {
			v.Sets = append(v.Sets, fmt.Sprintf("(spec.dataPlaneRestart.maintenanceWindows, %d, are kept: restarts wait for them; remove them to restart now)", len(r.MaintenanceWindows)))
		}
		if rc.renewAnchor {
			v.Order = append(v.Order, fmt.Sprintf("%s recover renews the trust anchor, Certificate %s/%s, as cmctl renew does", binary, cfg.CertManagerNamespace, cfg.AnchorCertificate))
		}
		v.Order = append(v.Order,
			fmt.Sprintf("the operator renews the identity issuer, Certificate %s, from the new anchor (%s)", issuerRef, steps.StepRenewIssuerFirst),
			fmt.Sprintf("it writes the trust bundle [new anchor, expired anchor] (%s)", steps.StepExpandTrustBundle),
			fmt.Sprintf("it restarts linkerd-identity onto both, before any other pod: identity signs again (%s)", steps.StepRestartIdentityFirst),
			fmt.Sprintf("it restarts linkerd-destination and linkerd-proxy-injector, then every meshed workload, %d at a time (%s, %s): each restarted pod gets a certificate of the new issuer at once, and until a pod restarts it refuses the certificates of the pods restarted before it",
				budget, steps.StepRefreshControlPlane, steps.StepPropagateTrustRoots),
			"it ends as a rotation does: identity and the control plane restarted onto the new issuer, the expired anchor retired, the bundle reduced to the new anchor, the control plane and every workload restarted once more")
		v.Restarts = fmt.Sprintf("linkerd-identity 3 times, linkerd-destination and linkerd-proxy-injector 3 times each, every meshed workload (%d) twice", v.Workloads)
		v.HowLong = "pods restarted and pods not restarted yet refuse each other until every meshed workload has restarted: one rollout of the mesh. " + meshRollout(tar.Status.History)
	}
	return v
}

// bridgedRecovery reports whether the rotation away from the expired anchor takes the
// cross-signed order (steps.State.BridgedRecovery): it does, or, the anchor not renewed yet
// (notRenewed: the State's anchor is a plan's stand-in), spec.strategy is CrossSigned, whose
// cert-manager setup signs the renewed anchor with the expired one's key (check verifies the
// setup; without it, the rotation takes the standard recovery, and the plan of the renewed
// anchor says so).
func bridgedRecovery(s *steps.State, notRenewed bool) bool {
	if notRenewed {
		return steps.StrategyOf(s.Spec) == v1alpha1.StrategyCrossSigned
	}
	return s.BridgedRecovery()
}

// bridgedRecoveryFacts is the expired anchor's recovery in the cross-signed order: no workload
// restarts until the reduction, so recover lifts no restart budget unless --max-concurrent says
// so (docs/design/recovery.md, case 3).
func bridgedRecoveryFacts(v *recoveryView, rc recoveryCase, s *steps.State, spec v1alpha1.TrustAnchorRotationSpec, opts recoverOptions) {
	cfg := s.Config
	r := spec.DataPlaneRestart
	if opts.maxConcurrent > 0 && (r.Policy != v1alpha1.Automatic || r.MaxConcurrent != opts.maxConcurrent || r.MaxConcurrentPerNamespace != opts.maxConcurrent) {
		v.patch["dataPlaneRestart"] = map[string]any{"policy": v1alpha1.Automatic, "maxConcurrent": opts.maxConcurrent, "maxConcurrentPerNamespace": opts.maxConcurrent}
		v.Sets = append(v.Sets, fmt.Sprintf("dataPlaneRestart: policy Automatic, maxConcurrent %d, maxConcurrentPerNamespace %d", opts.maxConcurrent, opts.maxConcurrent))
		v.Restore = fmt.Sprintf(`kubectl patch trustanchorrotation %%s --type=merge -p '{"spec":{"dataPlaneRestart":{"policy":%q,"maxConcurrent":%s,"maxConcurrentPerNamespace":%s}}}'`,
			orDefault(string(r.Policy), string(v1alpha1.Manual)), orNull(r.MaxConcurrent), orNull(r.MaxConcurrentPerNamespace))
	}
	switch {
	case v.SwitchAnchorIssuer != nil:
		sw := v.SwitchAnchorIssuer
		v.Order = append(v.Order, fmt.Sprintf("%s recover points Certificate %s at %s, the CA issuer over its own Secret (was %s), as %s issues it: cert-manager re-issues the trust anchor at once, signed with the expired one's key, which nothing else reads",
			binary, sw.Certificate, sw.to(), sw.From, crossSignedManifest))
	case rc.renewAnchor:
		v.Order = append(v.Order, fmt.Sprintf("%s recover renews the trust anchor, Certificate %s/%s, as cmctl renew does: under spec.strategy CrossSigned cert-manager signs the new anchor with the expired one's key (without that setup the rotation takes the standard recovery, which restarts every workload twice)",
			binary, cfg.CertManagerNamespace, cfg.AnchorCertificate))
	}
	v.Order = append(v.Order,
		fmt.Sprintf("the operator renews the identity issuer, Certificate %s/%s, from the new anchor (%s): its chain carries the new anchor, signed by the expired one", cfg.LinkerdNamespace, cfg.IssuerCertificate, steps.StepRenewIssuerFirst),
		fmt.Sprintf("it writes the trust bundle [new anchor, expired anchor] (%s)", steps.StepExpandTrustBundle),
		fmt.Sprintf("it restarts linkerd-identity onto both, before any other pod: identity signs again (%s)", steps.StepRestartIdentityFirst),
		"each proxy gets a certificate of the new issuer at its refresh, within 10s where its certificate has expired; every pod verifies it through the new anchor signed by the expired one (rustls-webpki ignores a trust anchor's validity): no workload restarts for it",
		"it ends as a cross-signed rotation does: the expired anchor retired, the bundle reduced to the new anchor, the control plane restarted, and every meshed workload restarted once onto the new anchor alone, under spec.dataPlaneRestart")
	v.Restarts = fmt.Sprintf("linkerd-identity 3 times, linkerd-destination and linkerd-proxy-injector twice each, every meshed workload (%d) once, after the reduction", v.Workloads)
	v.HowLong = "no pair that verifies now breaks; a pod without a valid certificate gets one within 10s (its proxy's minimum refresh) of identity's restart, the others at their certificate's refresh"
}

// meshRollout says how long one restart of the whole data plane took in this cluster: the time
// the latest completed rotation in the history (status.history, the latest first) spent in PropagatingTrustRoots, waiting for every
// meshed pod to restart onto the expanded bundle (under the restart budget of then, or the
// user's restarts: with every workload at once it takes about as long as the slowest
// workload's rollout, at most that).
func meshRollout(history []v1alpha1.RotationRecord) string {
	for _, r := range history { // the latest first
		if r.Outcome != v1alpha1.RotationCompleted || r.FinishTime == nil {
			continue
		}
		var d time.Duration
		visited := false
		for _, ph := range r.Phases {
			if ph.Phase == v1alpha1.PhasePropagatingTrustRoots {
				d += ph.Duration.Duration
				visited = true
			}
		}
		if !visited {
			continue
		}
		// The history's times have a second's grain: a phase entered and left within one
		// second records 0s.
		spent := "under a second"
		if d >= time.Second {
			spent = steps.CompactDuration(d.Round(time.Second))
		}
		return fmt.Sprintf("This cluster's last completed rotation (to anchor %s, finished %s) spent %s in %s restarting the data plane; every workload at once takes about as long as the slowest workload's rollout, at most that",
			steps.ShortFingerprint(r.Rotation), r.FinishTime.UTC().Format(time.RFC3339), spent, v1alpha1.PhasePropagatingTrustRoots)
	}
	return "No completed rotation in status.history measured this cluster's rollout of the mesh: it takes about as long as the slowest workload's rollout"
}

// isControlPlane reports whether the pod is one of Linkerd's control plane's.
func isControlPlane(s *steps.State, p *podindex.Pod) bool {
	if p.Namespace != s.Config.LinkerdNamespace {
		return false
	}
	for _, name := range s.Config.ControlPlane() {
		if strings.HasSuffix(p.Workload, "/"+name) {
			return true
		}
	}
	return false
}

func orNull(n int32) string {
	if n == 0 {
		return "null"
	}
	return fmt.Sprint(n)
}

// applyTo returns spec with what recover sets.
func (v *recoveryView) applyTo(spec v1alpha1.TrustAnchorRotationSpec) v1alpha1.TrustAnchorRotationSpec {
	if _, ok := v.patch["identityIssuerRenewal"]; ok {
		spec.IdentityIssuerRenewal = v1alpha1.Automatic
	}
	if _, ok := v.patch["strategy"]; ok {
		spec.Strategy = v1alpha1.StrategyCrossSigned
	}
	if r, ok := v.patch["dataPlaneRestart"].(map[string]any); ok {
		spec.DataPlaneRestart.Policy = v1alpha1.Automatic
		spec.DataPlaneRestart.MaxConcurrent = r["maxConcurrent"].(int32)
		spec.DataPlaneRestart.MaxConcurrentPerNamespace = r["maxConcurrentPerNamespace"].(int32)
	}
	return spec
}

// maxListed is how many pods a recovery's facts name per list; the JSON output has them all.
const maxListed = 10

// renderRecovery prints the recovery's facts, in plain numbers, before the steps.
func renderRecovery(w io.Writer, rotation string, v *recoveryView) {
	fmt.Fprintf(w, "\nRecovery (%s): %s\n", v.Case, v.Summary)
	fmt.Fprintf(w, "  meshed pods read: %d", v.ProbedPods)
	if v.UnprobedPods > 0 {
		fmt.Fprintf(w, " (%d more not read: not running, or their proxy did not answer)", v.UnprobedPods)
	}
	fmt.Fprintln(w)
	list := func(title string, pods []podDeadline) {
		fmt.Fprintf(w, "  %s: %d pod(s)\n", title, len(pods))
		for i, p := range pods {
			if i == maxListed {
				fmt.Fprintf(w, "    … and %d more, the last at %s\n", len(pods)-maxListed, pods[len(pods)-1].Expires)
				break
			}
			fmt.Fprintf(w, "    %s  %s\n", p.Expires, p.Pod)
		}
	}
	list("without a valid certificate now (expired at)", v.WithoutCertificate)
	list("with one until (soonest first)", v.Expiring)
	fmt.Fprintln(w, "  The recovery, in order:")
	for i, o := range v.Order {
		fmt.Fprintf(w, "    %d. %s\n", i+1, o)
	}
	fmt.Fprintf(w, "  It restarts: %s\n", v.Restarts)
	fmt.Fprintf(w, "  How long: %s\n", v.HowLong)
	if v.WithoutOutage != "" {
		fmt.Fprintf(w, "  Without an outage: %s\n", v.WithoutOutage)
	}
	if sw := v.SwitchAnchorIssuer; sw != nil {
		fmt.Fprintf(w, "  It points Certificate %s at %s (was %s)\n", sw.Certificate, sw.to(), sw.From)
	}
	if v.Refused != "" {
		fmt.Fprintf(w, "  Refused: %s\n", v.Refused)
	}
	if len(v.Sets) > 0 {
		fmt.Fprintf(w, "  It sets on TrustAnchorRotation %s: %s\n", rotation, strings.Join(v.Sets, "; "))
	}
}

func recoverCommand(env *Env) *command {
	fs := newFlagSet("recover")
	kf := addKubeFlags(fs)
	pf := addProbeFlags(fs)
	var yes, dryRun bool
	var opts recoverOptions
	fs.BoolVarP(&yes, "yes", "y", false, "recover without asking, even on a terminal (the plan is not printed)")
	fs.BoolVar(&dryRun, "dry-run", false, "print what was found and the recovery's plan, then stop: nothing is changed")
	fs.Int32Var(&opts.maxConcurrent, "max-concurrent", 0, "workloads the operator may restart at once during the recovery, cluster-wide and per namespace (default: every meshed workload at once, the shortest outage)")
	fs.BoolVar(&opts.crossSigned, "cross-signed", false, "recover from an expired trust anchor without an outage: have cert-manager sign the renewed anchor with the expired one's key (the anchor's Certificate pointed at the CA issuer over its own Secret, spec.strategy CrossSigned)")
	c := &command{
		name:  "recover",
		short: "Bring mTLS back after the trust anchor or the identity issuer expired",
		long: `Recover after the identity issuer or the trust anchor expired: prints which pods have no
valid certificate now, when the others lose theirs, and the recovery's order (--dry-run: then
stops); renews an expired anchor cert-manager has not, and sets the spec the recovery runs under.`,
		example: `  # What is down and what the recovery would do, changing nothing
  linkerd trust recover --dry-run

  # Recover, then follow it
  linkerd trust recover
  linkerd trust inspect --watch

  # An expired anchor without an outage: cert-manager signs the renewed anchor with the expired one
  linkerd trust recover --cross-signed`,
		flags: fs,
	}
	c.run = func(ctx context.Context, args []string) error {
		if len(args) > 0 {
			return usagef("recover takes no arguments, got %q", args)
		}
		if err := kf.validate(); err != nil {
			return err
		}
		if err := pf.validate(); err != nil {
			return err
		}
		if yes && dryRun {
			return usagef("--yes and --dry-run are exclusive")
		}
		if opts.maxConcurrent < 0 || opts.maxConcurrent > 10000 {
			return usagef("--max-concurrent %d: want 1 to 10000, or 0 for every meshed workload at once", opts.maxConcurrent)
		}
		cl, err := env.clients(kf)
		if err != nil {
			return err
		}
		if opts.crossSigned {
			if opts.anchorSwitch, err = findCrossSigner(ctx, cl, kf.Config); err != nil {
				return fmt.Errorf("--cross-signed: %w; nothing was changed", err)
			}
		}
		return recoverPKI(ctx, env, cl, kf, pf, opts, dryRun || !yes && env.inIsTerminal(), !dryRun)
	}
	return c
}

// recoverPKI prints the recovery's plan when preview, and when request renews the anchor if it
// must and sets the spec (after asking, on a terminal).
func recoverPKI(ctx context.Context, env *Env, cl *Clients, kf *KubeFlags, pf *probeFlags, opts recoverOptions, preview, request bool) error {
	if _, err := cl.Rotations.Get(ctx, kf.RotationName); apierrors.IsNotFound(err) {
		return fmt.Errorf("TrustAnchorRotation %s not found: install the operator first (its chart creates it); nothing was changed", kf.RotationName)
	}
	p, err := buildPlan(ctx, env, cl, kf, pf, planOptions{recover: &opts})
	if err != nil {
		return err
	}
	if preview {
		if err := renderPlan(env.Out, p, "table"); err != nil {
			return err
		}
	} else {
		renderRecovery(env.Out, kf.RotationName, p.Recovery)
	}
	note, refused := checkOperatorAccess(ctx, cl, p.tar, kf.Config, p.automations)
	if note != "" {
		fmt.Fprintf(env.Out, "Note: %s\n", note)
	}
	if !request {
		if refused != nil {
			fmt.Fprintf(env.Out, "This would be refused: %v\n", refused)
		}
		return nil
	}
	if refused != nil {
		return refused
	}
	v := p.Recovery
	if v.Refused != "" {
		return fmt.Errorf("%s; nothing was changed", v.Refused)
	}
	if len(v.patch) == 0 && !v.RenewAnchor && v.SwitchAnchorIssuer == nil {
		fmt.Fprintf(env.Out, "TrustAnchorRotation %s already has the spec the recovery runs under: the operator recovers.\n", kf.RotationName)
		fmt.Fprintf(env.Out, "Follow it with: %s inspect --watch\n", binary)
		return nil
	}
	if preview && !confirmed(env, fmt.Sprintf("Recover: %s? [y/N] ", recoverQuestion(kf, v))) {
		fmt.Fprintln(env.Out, "Not recovering: not confirmed. Nothing was changed.")
		return nil
	}
	if len(v.patch) > 0 {
		if err := patchRotation(ctx, cl, kf.RotationName, v.patch, nil); err != nil {
			return fmt.Errorf("setting %s on TrustAnchorRotation %s: %w; nothing was changed", strings.Join(v.Sets, "; "), kf.RotationName, err)
		}
		fmt.Fprintf(env.Out, "Set on TrustAnchorRotation %s: %s.\n", kf.RotationName, strings.Join(v.Sets, "; "))
	}
	if sw := v.SwitchAnchorIssuer; sw != nil {
		cfg := kf.Config
		// The operator takes the strategy from the spec it has observed when it sees the renewed
		// anchor: a renewal seen before spec.strategy CrossSigned would start the standard order.
		if err := waitObserved(ctx, cl, kf.RotationName, observeTimeout); err != nil {
			return fmt.Errorf("%w: not pointing Certificate %s at %s yet (a renewal observed before spec.strategy CrossSigned would take the standard recovery); run %s recover --cross-signed again once the operator runs", err, sw.Certificate, sw.to(), binary)
		}
		patch, err := json.Marshal(map[string]any{"spec": map[string]any{"issuerRef": sw.To}})
		if err != nil {
			return err
		}
		if _, err := cl.CertManager.CertmanagerV1().Certificates(cfg.CertManagerNamespace).Patch(ctx, cfg.AnchorCertificate, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("pointing Certificate %s at %s: %w (the spec is set: apply %s yourself)", sw.Certificate, sw.to(), err, crossSignedManifest)
		}
		fmt.Fprintf(env.Out, "Pointed Certificate %s at %s: cert-manager re-issues the trust anchor, signed by the expired one.\n", sw.Certificate, sw.to())
	}
	if v.RenewAnchor {
		cfg := kf.Config
		if err := apply.RenewCertificate(ctx, clientset.CertManager(cl.CertManager), cfg.CertManagerNamespace, cfg.AnchorCertificate); err != nil {
			return fmt.Errorf("%w (the spec is set: renew it yourself, cmctl renew -n %s %s)", err, cfg.CertManagerNamespace, cfg.AnchorCertificate)
		}
		fmt.Fprintf(env.Out, "Triggered the renewal of Certificate %s/%s, as cmctl renew does.\n", cfg.CertManagerNamespace, cfg.AnchorCertificate)
	}
	fmt.Fprintf(env.Out, "The operator recovers now. Follow it with: %s inspect --watch\n", binary)
	if v.Restore != "" {
		fmt.Fprintf(env.Out, "Once it is Synced, put the restart budget back: %s\n", fmt.Sprintf(v.Restore, kf.RotationName))
	}
	return nil
}

// observeTimeout is how long recover --cross-signed waits for the operator to observe the spec
// it set.
const observeTimeout = 30 * time.Second

// waitObserved waits until the operator has observed the TrustAnchorRotation's current
// generation (status.observedGeneration), at most timeout.
func waitObserved(ctx context.Context, cl *Clients, name string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(waitInterval)
	defer tick.Stop()
	var generation int64
	for {
		tar, err := cl.Rotations.Get(ctx, name)
		switch {
		case err == nil && tar.Status.ObservedGeneration >= tar.Generation:
			return nil
		case err == nil:
			generation = tar.Generation
		case ctx.Err() == nil:
			return fmt.Errorf("reading TrustAnchorRotation %s: %w", name, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the operator has not observed generation %d of TrustAnchorRotation %s within %s", generation, name, timeout)
		case <-tick.C:
		}
	}
}

func recoverQuestion(kf *KubeFlags, v *recoveryView) string {
	var what []string
	if sw := v.SwitchAnchorIssuer; sw != nil {
		what = append(what, fmt.Sprintf("point Certificate %s at %s", sw.Certificate, sw.to()))
	}
	if v.RenewAnchor {
		what = append(what, fmt.Sprintf("renew Certificate %s/%s", kf.Config.CertManagerNamespace, kf.Config.AnchorCertificate))
	}
	if len(v.Sets) > 0 {
		what = append(what, fmt.Sprintf("set %s on TrustAnchorRotation %s", strings.Join(v.Sets, "; "), kf.RotationName))
	}
	return strings.Join(what, " and ")
}

// nothingToRecover says why the mesh has nothing to recover from.
func nothingToRecover(s *steps.State) string {
	var parts []string
	if s.Previous.Usable() {
		parts = append(parts, fmt.Sprintf("the trust anchor the mesh trusts, %s, is valid until %s", steps.ShortFingerprint(s.Previous.Fingerprint()), s.Previous.Cert.NotAfter.UTC().Format(time.RFC3339)))
	} else {
		parts = append(parts, s.Previous.Problem("previous-anchor Secret"))
	}
	if s.Issuer.Usable() {
		parts = append(parts, fmt.Sprintf("the identity issuer %s until %s", steps.ShortFingerprint(s.Issuer.Fingerprint()), s.Issuer.Cert.NotAfter.UTC().Format(time.RFC3339)))
	} else {
		parts = append(parts, s.Issuer.Problem("identity issuer Secret"))
	}
	return strings.Join(parts, ", ") + " (a rotation, not a recovery: " + binary + " rotate)"
}
