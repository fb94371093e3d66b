package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/steps/apply"
	"github.com/linkerd/trust-rotation/steps/kube/clientset"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

func rotateCommand(env *Env) *command {
	fs := newFlagSet("rotate")
	o := &checkOptions{pre: true}
	o.kube = addKubeFlags(fs)
	fs.StringVar(&o.rootIssuer, "trust-root-issuer", "linkerd-trust-root-issuer", "cert-manager Issuer (in the cert-manager namespace) that signs the trust anchor")
	fs.StringVar(&o.identityClusterIssuer, "identity-cluster-issuer", "linkerd-identity-issuer", "cert-manager ClusterIssuer that signs the identity issuer")
	pf := addProbeFlags(fs)
	var suspend, resume, yes, dryRun, emergency bool
	fs.BoolVarP(&yes, "yes", "y", false, "renew without asking, even on a terminal (the plan is not printed)")
	fs.BoolVar(&dryRun, "dry-run", false, "run the checks and print the plan of the rotation, then stop: nothing is renewed")
	fs.BoolVar(&emergency, "emergency", false, "the trust anchor is compromised: lift every wait (restart budgets and windows, the proxies' refresh, the issuer's renewal) so that it leaves every pod's roots as fast as the restarts go; the plan says what that costs first")
	fs.BoolVar(&suspend, "suspend", false, "set the TrustAnchorRotation's spec.suspend: the operator acts on nothing until resumed (no renewal, no check)")
	fs.BoolVar(&resume, "resume", false, "clear the TrustAnchorRotation's spec.suspend: the operator acts again (no renewal, no check)")
	c := &command{
		name:  "rotate",
		short: "Start a trust-anchor rotation by renewing the anchor, once the checks say it is safe",
		long: `Start a trust-anchor rotation: renew the anchor's Certificate as "cmctl renew" does, only when the
TrustAnchorRotation is Synced and the prerequisite checks pass; otherwise exit 1, changing nothing.
On a terminal it prints the plan first and asks (--yes: renew without asking); --dry-run prints the
plan and stops; without a terminal (a script, the chart's CronJob) it renews without asking.
--suspend holds every act of the operator and --resume lets it go on; neither renews the anchor.`,
		example: `  # Rotate now, if it is safe to: prints the plan and asks first
  linkerd trust rotate

  # What a rotation would do, changing nothing
  linkerd trust rotate --dry-run

  # Then follow the rotation
  linkerd trust inspect --watch

  # Hold the operator's acts during an incident, then let it go on
  linkerd trust rotate --suspend
  linkerd trust rotate --resume`,
		flags: fs,
	}
	c.run = func(ctx context.Context, args []string) error {
		if len(args) > 0 {
			return usagef("rotate takes no arguments, got %q", args)
		}
		if err := o.kube.validate(); err != nil {
			return err
		}
		if suspend && resume {
			return usagef("--suspend and --resume are exclusive")
		}
		if (suspend || resume) && (yes || dryRun || emergency) || yes && dryRun {
			return usagef("--yes, --dry-run and --emergency go with a rotation alone, and --yes not with --dry-run")
		}
		if err := pf.validate(); err != nil {
			return err
		}
		if suspend || resume {
			cl, err := env.clients(o.kube)
			if err != nil {
				return err
			}
			return setSuspend(ctx, env, cl, o.kube.RotationName, suspend)
		}
		o.anchorCertificate, o.identityIssuerCert = o.kube.Config.AnchorCertificate, o.kube.Config.IssuerCertificate
		o.certManagerSelector = CertManagerControllerSelector
		cl, err := env.clients(o.kube)
		if err != nil {
			return err
		}
		preview := dryRun || !yes && env.inIsTerminal()
		return rotate(ctx, env, o, cl, rotatePreview{plan: preview, probes: pf, confirm: preview && !dryRun, emergency: emergency, dryRun: dryRun})
	}
	return c
}

// rotatePrerequisites are the checks rotate runs: cert-manager's API and the PKI's issuers and
// Certificates, the operator's CRD. They read no Secret.
func (c *checks) rotatePrerequisites(emergency bool) []category {
	o := c.o
	synced := checker{description: fmt.Sprintf("TrustAnchorRotation %s is Synced", o.kube.RotationName), hint: "l5d-trust-operator-blocked", fatal: true, check: c.rotationSynced}
	if emergency {
		// An emergency while a rotation is in progress speeds that rotation up: the anchor it
		// moves away from is the one to retire (rotationInProgress).
		synced = checker{description: fmt.Sprintf("TrustAnchorRotation %s is Synced or rotating", o.kube.RotationName), hint: "l5d-trust-operator-blocked", fatal: true, check: c.rotationSyncedOrRotating}
	}
	return []category{
		{name: categoryCertManager, checkers: []checker{
			{description: "cert-manager CRDs are installed", hint: "l5d-trust-cm-crds", fatal: true, check: c.certManagerCRDs},
		}},
		{name: categoryPKI, checkers: []checker{
			{description: fmt.Sprintf("Issuer %s is Ready", o.rootIssuer), hint: "l5d-trust-root-issuer", check: c.rootIssuerReady},
			{description: fmt.Sprintf("Certificate %s is Ready", o.anchorCertificate), hint: "l5d-trust-anchor-certificate", check: c.anchorCertificateReady},
			{description: "trust anchor renewal rotates its private key", hint: "l5d-trust-anchor-rotation-policy", check: c.anchorRotationPolicy},
			{description: fmt.Sprintf("ClusterIssuer %s is Ready", o.identityClusterIssuer), hint: "l5d-trust-identity-cluster-issuer", check: c.identityClusterIssuerReady},
			{description: fmt.Sprintf("Certificate %s is Ready", o.identityIssuerCert), hint: "l5d-trust-identity-issuer-certificate", check: c.identityIssuerReady},
		}},
		{name: categoryOperator, checkers: []checker{
			{description: "TrustAnchorRotation CRD is installed", hint: "l5d-trust-operator-crd", fatal: true, check: c.rotationCRD},
			synced,
		}},
	}
}

// rotationSyncedOrRotating is rotationSynced for rotate --emergency, which also takes a rotation
// in progress, whatever blocks it: it lifts that rotation's waits.
func (c *checks) rotationSyncedOrRotating(ctx context.Context) error {
	tar, err := c.rotation.get(ctx)
	if err != nil {
		return fmt.Errorf("reading TrustAnchorRotation %s: %w", c.o.kube.RotationName, err)
	}
	if rotationInProgress(tar) != "" {
		return c.drivable(tar)
	}
	return c.rotationSynced(ctx)
}

// rotationInProgress is "phase P, step S" while a rotation is in progress, "" otherwise.
func rotationInProgress(tar *v1alpha1.TrustAnchorRotation) string {
	st := tar.Status
	step := ""
	if st.Checkpoint != nil {
		step = st.Checkpoint.Step
	}
	phase := orDefault(string(st.Phase), string(v1alpha1.PhaseSynced))
	if phase == string(v1alpha1.PhaseSynced) && steps.Watching(step) {
		return ""
	}
	return fmt.Sprintf("phase %s, step %s", phase, orDefault(step, "none yet"))
}

// drivable fails when the operator would act on nothing: the object is not the one it drives,
// it is suspended, or its spec cannot be used.
func (c *checks) drivable(tar *v1alpha1.TrustAnchorRotation) error {
	if cond := meta.FindStatusCondition(tar.Status.Conditions, v1alpha1.ConditionIgnored); cond != nil && cond.Status == metav1.ConditionTrue {
		return fmt.Errorf("TrustAnchorRotation %s is not driven by the operator: %s", tar.Name, cond.Message)
	}
	if tar.Spec.Suspend {
		return fmt.Errorf("TrustAnchorRotation %s is suspended (spec.suspend): resume it first with %s rotate --resume", tar.Name, binary)
	}
	if errs := steps.SpecErrors(tar); len(errs) > 0 {
		return fmt.Errorf("TrustAnchorRotation %s: %s; the operator would act on nothing: fix it first (kubectl edit tar %s)", tar.Name, steps.SpecErrorsMessage(errs), tar.Name)
	}
	return nil
}

// rotationSynced passes when no rotation is in progress and nothing blocks the operator.
func (c *checks) rotationSynced(ctx context.Context) error {
	tar, err := c.rotation.get(ctx)
	if err != nil {
		return fmt.Errorf("reading TrustAnchorRotation %s: %w", c.o.kube.RotationName, err)
	}
	st := tar.Status
	if err := c.drivable(tar); err != nil {
		return err
	}
	switch progress := rotationInProgress(tar); {
	case progress != "":
		msg := fmt.Sprintf("a rotation is in progress (%s); it is left alone", progress)
		if st.BlockingMessage != "" {
			msg += ": " + st.BlockingMessage
		}
		return errors.New(msg)
	case st.BlockingMessage != "":
		return fmt.Errorf("the operator is blocked: %s", st.BlockingMessage)
	case st.ObservedGeneration != tar.Generation:
		return fmt.Errorf("the operator has not acted on the latest spec of TrustAnchorRotation %s yet (generation %d, observed %d)", tar.Name, tar.Generation, st.ObservedGeneration)
	}
	return nil
}

// rotatePreview says what rotate shows before it renews: the plan of the rotation, and whether
// it then asks the user to confirm.
type rotatePreview struct {
	plan, confirm bool
	probes        *probeFlags
	// emergency: rotate --emergency, which always plans (its costs are printed before
	// anything is written) and sets the spec that lifts every wait before it renews.
	emergency, dryRun bool
}

func rotate(ctx context.Context, env *Env, o *checkOptions, cl *Clients, preview rotatePreview) error {
	c := newChecks(o, cl, env)
	r := &tableRenderer{w: env.Out}
	ok := runChecks(ctx, c.rotatePrerequisites(preview.emergency), r.result)
	fmt.Fprintln(env.Out)
	if !ok {
		fmt.Fprintln(env.Out, "Not rotating: a prerequisite check failed (above). Nothing was changed.")
		return errReported
	}
	// An emergency during a rotation lifts that rotation's waits and renews nothing: the rotation
	// already moves away from the anchor it retires.
	inProgress := ""
	if preview.emergency {
		if tar, err := c.rotation.get(ctx); err == nil {
			inProgress = rotationInProgress(tar)
		}
	}
	var p *plan
	if preview.plan || preview.emergency {
		var err error
		p, err = buildPlan(ctx, env, cl, o.kube, preview.probes, planOptions{assumeRenewed: inProgress == "", emergency: preview.emergency})
		if err != nil {
			return fmt.Errorf("planning the rotation: %w", err)
		}
		if preview.plan {
			if err := renderPlan(env.Out, p, "table"); err != nil {
				return err
			}
		} else {
			renderEmergency(env.Out, o.kube.RotationName, p.Emergency)
		}
		fmt.Fprintln(env.Out)
		note, refused := checkOperatorAccess(ctx, cl, p.tar, o.kube.Config, p.automations)
		if note != "" {
			fmt.Fprintf(env.Out, "Note: %s\n", note)
		}
		if refused != nil {
			if preview.dryRun {
				fmt.Fprintf(env.Out, "This emergency rotation would be refused: %v\n", refused)
				return nil
			}
			return refused
		}
	}
	if preview.plan {
		if !preview.confirm {
			if inProgress != "" {
				fmt.Fprintln(env.Out, "Dry run: the rotation in progress would go on under the spec above. Nothing was changed.")
				return nil
			}
			fmt.Fprintln(env.Out, "Dry run: the rotation above would start with the renewal of the trust anchor. Nothing was changed.")
			return nil
		}
		question := fmt.Sprintf("Renew Certificate %s/%s now and start this rotation? [y/N] ", o.kube.Config.CertManagerNamespace, o.anchorCertificate)
		if preview.emergency {
			question = fmt.Sprintf("Set %s on TrustAnchorRotation %s, renew Certificate %s/%s now and start this emergency rotation? [y/N] ",
				orNone(strings.Join(p.Emergency.Sets, "; ")), o.kube.RotationName, o.kube.Config.CertManagerNamespace, o.anchorCertificate)
			if inProgress != "" {
				question = fmt.Sprintf("Set %s on TrustAnchorRotation %s and speed up the rotation in progress? [y/N] ", orNone(strings.Join(p.Emergency.Sets, "; ")), o.kube.RotationName)
			}
		}
		if !confirmed(env, question) {
			fmt.Fprintln(env.Out, "Not rotating: not confirmed. Nothing was changed.")
			return errReported
		}
	}
	if inProgress != "" {
		if p.Emergency.Compromised == "" {
			return fmt.Errorf("a rotation is in progress (%s) but the previous-anchor Secret names no anchor it moves away from: nothing was changed; let it reach a phase past its expansion, or wait for Synced", inProgress)
		}
		return emergencyInProgress(ctx, env, o, cl, p.Emergency, inProgress)
	}
	ns, name := o.kube.Config.CertManagerNamespace, o.anchorCertificate
	crt, err := cl.CertManager.CertmanagerV1().Certificates(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading Certificate %s/%s: %w", ns, name, err)
	}
	for _, cond := range crt.Status.Conditions {
		if cond.Type == cmapi.CertificateConditionIssuing && cond.Status == cmmeta.ConditionTrue {
			fmt.Fprintf(env.Out, "Not rotating: Certificate %s/%s is already being re-issued (%s). Nothing was changed.\n", ns, name, cond.Reason)
			return errReported
		}
	}
	if preview.emergency {
		req, err := json.Marshal(emergencyRequest{Compromised: p.Emergency.Compromised, RequestedAt: env.now().UTC().Truncate(time.Second)})
		if err != nil {
			return err
		}
		if err := patchRotation(ctx, cl, o.kube.RotationName, p.Emergency.patch, map[string]string{EmergencyAnnotation: string(req)}); err != nil {
			return fmt.Errorf("setting the emergency rotation's spec on TrustAnchorRotation %s: %w; nothing was renewed", o.kube.RotationName, err)
		}
		if len(p.Emergency.Sets) > 0 {
			fmt.Fprintf(env.Out, "Set on TrustAnchorRotation %s: %s.\n", o.kube.RotationName, strings.Join(p.Emergency.Sets, "; "))
		}
	}
	if err := apply.RenewCertificate(ctx, clientset.CertManager(cl.CertManager), ns, name); err != nil {
		return err
	}
	if preview.emergency {
		fmt.Fprintf(env.Out, "Once it is Synced: %s inspect --history prints the post-incident summary", binary)
		if p.Emergency.Restore != "" {
			fmt.Fprintf(env.Out, ", and this puts the spec back: %s", fmt.Sprintf(p.Emergency.Restore, o.kube.RotationName))
		}
		fmt.Fprintln(env.Out)
	}
	fmt.Fprintf(env.Out, "Triggered the renewal of Certificate %s/%s (as cmctl renew does): cert-manager issues a new trust anchor and the operator rotates onto it.\nFollow it with: %s inspect --watch\n", ns, name, binary)
	return nil
}

// emergencyInProgress is rotate --emergency during a rotation: it sets the spec that lifts every
// wait and records the request, retiring the anchor the rotation moves away from; the anchor is
// not renewed again (that would supersede the rotation and start over from its expansion).
func emergencyInProgress(ctx context.Context, env *Env, o *checkOptions, cl *Clients, v *emergencyView, progress string) error {
	req, err := json.Marshal(emergencyRequest{Compromised: v.Compromised, RequestedAt: env.now().UTC().Truncate(time.Second), DuringRotation: true})
	if err != nil {
		return err
	}
	if err := patchRotation(ctx, cl, o.kube.RotationName, v.patch, map[string]string{EmergencyAnnotation: string(req)}); err != nil {
		return fmt.Errorf("setting the emergency rotation's spec on TrustAnchorRotation %s: %w; nothing was changed", o.kube.RotationName, err)
	}
	if len(v.Sets) > 0 {
		fmt.Fprintf(env.Out, "Set on TrustAnchorRotation %s: %s.\n", o.kube.RotationName, strings.Join(v.Sets, "; "))
	}
	fmt.Fprintf(env.Out, "The rotation in progress (%s) goes on with every wait lifted; the trust anchor was not renewed again.\n", progress)
	fmt.Fprintf(env.Out, "Once it is Synced: %s inspect --history prints the post-incident summary", binary)
	if v.Restore != "" {
		fmt.Fprintf(env.Out, ", and this puts the spec back: %s", fmt.Sprintf(v.Restore, o.kube.RotationName))
	}
	fmt.Fprintf(env.Out, "\nFollow it with: %s inspect --watch\n", binary)
	return nil
}

// confirmed asks question on Out and reads one line of In: yes only for y or yes.
func confirmed(env *Env, question string) bool {
	fmt.Fprint(env.Out, question)
	if env.In == nil {
		fmt.Fprintln(env.Out)
		return false
	}
	line, _ := bufio.NewReader(env.In).ReadString('\n')
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return true
	}
	return false
}
