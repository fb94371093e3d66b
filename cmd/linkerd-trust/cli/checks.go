package cli

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/steps/kube/clientset"
	"github.com/linkerd/trust-rotation/steps/observe"
	"github.com/linkerd/trust-rotation/steps/podindex"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// Chart defaults of the operator.
const (
	DefaultOperatorDeployment = "trust-rotation-operator"
	DefaultOperatorLease      = "trust-rotation-operator"
)

// CertManagerControllerSelector selects cert-manager's controller Deployment as its Helm chart
// labels it, whatever the release is called.
const CertManagerControllerSelector = "app.kubernetes.io/name=cert-manager,app.kubernetes.io/component=controller"

// checkOptions are check's flags.
type checkOptions struct {
	kube   *KubeFlags
	output *outputFlag
	pre    bool

	expiryWarning duration
	failWithin    duration

	rootIssuer             string
	anchorCertificate      string
	identityClusterIssuer  string
	identityIssuerCert     string
	certManagerSelector    string
	operatorNamespace      string
	operatorDeployment     string
	operatorLease          string
	leaseStaleAfter        time.Duration
	blockedWarning         duration
	issuerRenewalTolerance time.Duration

	// Flags `linkerd check` passes to every extension.
	verbose   bool
	namespace string
	proxy     bool
	wait      time.Duration
}

func checkCommand(env *Env) *command {
	fs := newFlagSet("check")
	o := &checkOptions{expiryWarning: duration(30 * 24 * time.Hour), blockedWarning: duration(time.Hour)}
	o.output = addOutputFlag(fs, "table", "json")
	fs.BoolVar(&o.pre, "pre", false, "only check the prerequisites of the operator: cert-manager and the Linkerd PKI")
	fs.Var(&o.expiryWarning, "expiry-warning", "warn when the trust anchor expires, or the next rotation's deadline passes, within this duration (e.g. 30d, 72h)")
	fs.Var(&o.failWithin, "fail-within", "fail when the trust anchor expires, or the next rotation's deadline (status.nextRotation) passes, within this duration (e.g. 7d); off when 0")
	o.kube = addKubeFlags(fs)
	fs.StringVar(&o.rootIssuer, "trust-root-issuer", "linkerd-trust-root-issuer", "cert-manager Issuer (in the cert-manager namespace) that signs the trust anchor")
	fs.StringVar(&o.identityClusterIssuer, "identity-cluster-issuer", "linkerd-identity-issuer", "cert-manager ClusterIssuer that signs the identity issuer")
	fs.StringVar(&o.certManagerSelector, "cert-manager-controller-selector", CertManagerControllerSelector, "label selector of cert-manager's controller Deployment in the cert-manager namespace")
	fs.StringVar(&o.operatorNamespace, "operator-namespace", "", "namespace of the trust-rotation operator (default: the Linkerd namespace)")
	fs.StringVar(&o.operatorDeployment, "operator-deployment", DefaultOperatorDeployment, "Deployment of the trust-rotation operator")
	fs.StringVar(&o.operatorLease, "operator-lease", DefaultOperatorLease, "leader-election Lease of the trust-rotation operator (in the operator namespace)")
	fs.DurationVar(&o.leaseStaleAfter, "lease-stale-after", time.Minute, "fail when the operator's leader Lease was last renewed longer ago than this")
	fs.Var(&o.blockedWarning, "blocked-warning", "warn when the rotation has waited in one phase with a blocking message for longer than this")
	fs.DurationVar(&o.issuerRenewalTolerance, "issuer-renewal-tolerance", 10*time.Minute, "warn when cert-manager is this late renewing the identity issuer")
	fs.BoolVar(&o.verbose, "verbose", false, "accepted for linkerd check; the output is the same")
	fs.StringVarP(&o.namespace, "namespace", "n", "", "with --proxy, check the meshed pods of this namespace only (default: all)")
	fs.BoolVar(&o.proxy, "proxy", false, "also check that meshed pods were injected with the current trust bundle")
	fs.DurationVar(&o.wait, "wait", 5*time.Minute, "maximum time for all checks to run")
	c := &command{
		name:  "check",
		short: "Check cert-manager, the Linkerd PKI and the trust-rotation operator",
		long: `Check that cert-manager, the cert-manager-managed Linkerd PKI and the trust-rotation operator are
installed and healthy, as "linkerd check" does (which runs these checks too): each check passes
(√), warns (‼) or fails (×) with a hint, and the command exits 1 when one fails. --pre checks only
the operator's prerequisites; --proxy also the data plane. No private key is read.`,
		example: `  # Everything
  linkerd trust check

  # Only the prerequisites, before installing the operator
  linkerd trust check --pre

  # For automation, failing when the trust anchor expires within a week
  linkerd trust check -o json --fail-within 7d`,
		flags: fs,
	}
	c.run = func(ctx context.Context, args []string) error {
		if len(args) > 0 {
			return usagef("check takes no arguments, got %q", args)
		}
		if err := o.kube.validate(); err != nil {
			return err
		}
		o.anchorCertificate, o.identityIssuerCert = o.kube.Config.AnchorCertificate, o.kube.Config.IssuerCertificate
		if o.wait <= 0 {
			return usagef("--wait must be positive")
		}
		if o.operatorNamespace == "" {
			o.operatorNamespace = o.kube.Config.LinkerdNamespace
		}
		ctx, cancel := context.WithTimeout(ctx, o.wait)
		defer cancel()
		var cats []category
		if cl, err := env.clients(o.kube); err != nil {
			// Still answer in the format asked for: `linkerd check` shows this as a failed check.
			cats = []category{{name: categoryCertManager, checkers: []checker{{
				description: "can initialize the client", hint: "l5d-trust-k8s-api", fatal: true,
				check: func(context.Context) error { return err },
			}}}}
		} else {
			c := newChecks(o, cl, env)
			cats = c.categories()
			if !o.pre {
				var spec []v1alpha1.RemoteCluster
				if tar, err := c.rotation.get(ctx); err == nil {
					spec = tar.Spec.RemoteClusters
				}
				linked, linkErr := linkedClusters(ctx, cl, o.kube, spec, c.now)
				if cat, ok := c.multiclusterCategory(linked, linkErr); ok {
					cats = append(cats, cat)
				}
			}
		}
		var success bool
		if o.output.value == "json" {
			r := &jsonRenderer{w: env.Out}
			success = runChecks(ctx, cats, r.result)
			if err := r.finish(success); err != nil {
				return err
			}
		} else {
			r := &tableRenderer{w: env.Out}
			success = runChecks(ctx, cats, r.result)
			r.finish(success)
		}
		if !success {
			return errReported
		}
		return nil
	}
	return c
}

// Check categories. --pre runs the first two.
const (
	categoryCertManager = "linkerd-trust-cert-manager"
	categoryPKI         = "linkerd-trust-pki"
	categoryOperator    = "linkerd-trust-operator"
	categoryDataPlane   = "linkerd-trust-data-plane"
)

// checks holds what the checkers share: the clients, the clock, and the objects several
// checkers read, each read at most once per run.
type checks struct {
	o   *checkOptions
	cfg steps.Config
	cl  *Clients
	now time.Time

	anchor, issuer *cached[steps.Source]
	bundle         *cached[steps.Bundle]
	rotation       *cached[*v1alpha1.TrustAnchorRotation]
}

// cached memoises one read.
type cached[T any] struct {
	done bool
	v    T
	err  error
	read func(ctx context.Context) (T, error)
}

func (c *cached[T]) get(ctx context.Context) (T, error) {
	if !c.done {
		c.v, c.err = c.read(ctx)
		c.done = true
	}
	return c.v, c.err
}

func newChecks(o *checkOptions, cl *Clients, env *Env) *checks {
	c := &checks{o: o, cfg: o.kube.Config, cl: cl, now: env.now()}
	cfg := c.cfg
	// No private key is read: see observe.PKIReader.
	pki := cl.pkiReader(cfg)
	c.anchor = &cached[steps.Source]{read: pki.Anchor}
	c.issuer = &cached[steps.Source]{read: pki.Issuer}
	c.bundle = &cached[steps.Bundle]{read: func(ctx context.Context) (steps.Bundle, error) {
		return observe.ReadBundle(ctx, clientset.Kube(cl.Kube), cfg)
	}}
	c.rotation = &cached[*v1alpha1.TrustAnchorRotation]{read: func(ctx context.Context) (*v1alpha1.TrustAnchorRotation, error) {
		return cl.Rotations.Get(ctx, o.kube.RotationName)
	}}
	return c
}

// categories lists the checks to run, in order.
func (c *checks) categories() []category {
	cfg, o := c.cfg, c.o
	cats := []category{
		{name: categoryCertManager, checkers: []checker{
			{description: "can query the Kubernetes API", hint: "l5d-trust-k8s-api", fatal: true, check: c.apiReachable},
			{description: "cert-manager CRDs are installed", hint: "l5d-trust-cm-crds", fatal: true, check: c.certManagerCRDs},
			{description: "cert-manager controller is available", hint: "l5d-trust-cm-controller", check: c.certManagerController},
		}},
		{name: categoryPKI, checkers: []checker{
			{description: fmt.Sprintf("Issuer %s is Ready", o.rootIssuer), hint: "l5d-trust-root-issuer", check: c.rootIssuerReady},
			{description: fmt.Sprintf("Certificate %s is Ready", o.anchorCertificate), hint: "l5d-trust-anchor-certificate", check: c.anchorCertificateReady},
			{description: "trust anchor is a valid CA certificate", hint: "l5d-trust-anchor-ca", check: c.anchorIsCA},
			{description: "trust anchor renewal rotates its private key", hint: "l5d-trust-anchor-rotation-policy", warning: true, check: c.anchorRotationPolicy},
			{description: "trust anchor is not about to expire", hint: "l5d-trust-anchor-expiry", check: c.anchorExpiry},
			{description: fmt.Sprintf("ClusterIssuer %s is Ready", o.identityClusterIssuer), hint: "l5d-trust-identity-cluster-issuer", check: c.identityClusterIssuerReady},
			{description: fmt.Sprintf("Certificate %s is Ready", o.identityIssuerCert), hint: "l5d-trust-identity-issuer-certificate", check: c.identityIssuerReady},
			{description: "identity issuer is valid and renewed on time", hint: "l5d-trust-issuer-expiry", check: c.issuerValidity},
			{description: "identity issuer chains to an anchor in the trust bundle", hint: "l5d-trust-issuer-chain", check: c.issuerChains},
			{description: fmt.Sprintf("ConfigMap %s contains the current trust anchor", cfg.TrustRootsConfigMap), hint: "l5d-trust-bundle", check: c.bundleHasAnchor},
		}},
	}
	if o.pre {
		return cats
	}
	cats = append(cats, category{name: categoryOperator, checkers: []checker{
		{description: "TrustAnchorRotation CRD is installed", hint: "l5d-trust-operator-crd", fatal: true, check: c.rotationCRD},
		{description: fmt.Sprintf("TrustAnchorRotation %s exists", o.kube.RotationName), hint: "l5d-trust-operator-rotation", check: c.rotationExists},
		{description: "trust-rotation operator is available", hint: "l5d-trust-operator-deployment", check: c.operatorAvailable},
		{description: "trust-rotation operator renews its leader lease", hint: "l5d-trust-operator-lease", check: c.operatorLeaseFresh},
		{description: "trust-anchor rotation is not blocked", hint: "l5d-trust-operator-blocked", warning: true, check: c.rotationNotBlocked},
		{description: "the next rotation can still start in time", hint: "l5d-trust-operator-deadline", check: c.rotationDeadline},
		{description: "the trust anchor is issued as spec.strategy needs", hint: "l5d-trust-operator-strategy", check: c.strategyPrerequisites},
		{description: fmt.Sprintf("ConfigMap %s is written by the operator alone", cfg.TrustRootsConfigMap), hint: "l5d-trust-bundle-owner", warning: true, check: c.bundleOwnedByOperator},
	}})
	if o.proxy {
		cats = append(cats, category{name: categoryDataPlane, checkers: []checker{
			{description: "meshed pods were injected with the current trust bundle", hint: "l5d-trust-data-plane-bundle", warning: true, check: c.dataPlaneBundle},
		}})
	}
	return cats
}

// --- cert-manager ---------------------------------------------------------------------------

func (c *checks) apiReachable(ctx context.Context) error {
	if _, err := c.cl.Kube.Discovery().ServerVersion(); err != nil {
		return fmt.Errorf("querying the Kubernetes API: %w", err)
	}
	_, err := c.cl.Kube.CoreV1().Namespaces().Get(ctx, c.cfg.LinkerdNamespace, metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("reading namespace %s: %w", c.cfg.LinkerdNamespace, err)
	}
	return nil
}

// servedResources reports which of the resources the API group version serves are missing.
func (c *checks) missingResources(groupVersion string, resources ...string) ([]string, error) {
	list, err := c.cl.Kube.Discovery().ServerResourcesForGroupVersion(groupVersion)
	if apierrors.IsNotFound(err) {
		return resources, nil
	}
	if err != nil {
		return nil, fmt.Errorf("discovering the API group %s: %w", groupVersion, err)
	}
	served := map[string]bool{}
	for _, r := range list.APIResources {
		served[r.Name] = true
	}
	var missing []string
	for _, r := range resources {
		if !served[r] {
			missing = append(missing, r)
		}
	}
	return missing, nil
}

func (c *checks) certManagerCRDs(context.Context) error {
	missing, err := c.missingResources("cert-manager.io/v1", "certificates", "issuers", "clusterissuers")
	if err != nil {
		return err
	}
	if len(missing) > 0 {
		names := make([]string, len(missing))
		for i, m := range missing {
			names[i] = m + ".cert-manager.io"
		}
		return fmt.Errorf("the API does not serve cert-manager.io/v1 %s: install cert-manager with its CRDs (CustomResourceDefinitions %s)",
			strings.Join(missing, ", "), strings.Join(names, ", "))
	}
	return nil
}

func (c *checks) certManagerController(ctx context.Context) error {
	ns := c.cfg.CertManagerNamespace
	list, err := c.cl.Kube.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{LabelSelector: c.o.certManagerSelector})
	if err != nil {
		return fmt.Errorf("listing Deployments %s in namespace %s: %w", c.o.certManagerSelector, ns, err)
	}
	if len(list.Items) == 0 {
		return fmt.Errorf("no cert-manager controller Deployment (labels %s) in namespace %s", c.o.certManagerSelector, ns)
	}
	for i := range list.Items {
		if ok, _ := deploymentAvailable(&list.Items[i]); ok {
			return nil
		}
	}
	_, why := deploymentAvailable(&list.Items[0])
	return fmt.Errorf("Deployment %s/%s is not available: %s", ns, list.Items[0].Name, why)
}

// deploymentAvailable reports whether a Deployment has an available replica, and why not.
func deploymentAvailable(d *appsv1.Deployment) (bool, string) {
	for _, cond := range d.Status.Conditions {
		if cond.Type == appsv1.DeploymentAvailable && cond.Status != "True" {
			return false, fmt.Sprintf("%s: %s", cond.Reason, cond.Message)
		}
	}
	if d.Status.AvailableReplicas == 0 {
		return false, fmt.Sprintf("0 of %d replicas available", replicas(d))
	}
	return true, ""
}

func replicas(d *appsv1.Deployment) int32 {
	if d.Spec.Replicas == nil {
		return 1
	}
	return *d.Spec.Replicas
}

// --- the Linkerd PKI --------------------------------------------------------------------------

// readyProblem says why a cert-manager Ready condition is not True for the object's generation.
func readyProblem(kind, ref string, generation int64, status cmmeta.ConditionStatus, observed int64, reason, message string, found bool) error {
	switch {
	case !found:
		return fmt.Errorf("%s %s has no Ready condition yet: is the cert-manager controller running?", kind, ref)
	case status != cmmeta.ConditionTrue:
		return fmt.Errorf("%s %s is not Ready: %s: %s", kind, ref, reason, message)
	case observed != 0 && observed < generation:
		return fmt.Errorf("%s %s: cert-manager has not observed generation %d yet", kind, ref, generation)
	}
	return nil
}

func notFound(kind, ref string, err error) error {
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("%s %s not found", kind, ref)
	}
	return fmt.Errorf("reading %s %s: %w", kind, ref, err)
}

func issuerReady(kind, ref string, generation int64, conds []cmapi.IssuerCondition) error {
	for _, cond := range conds {
		if cond.Type == cmapi.IssuerConditionReady {
			return readyProblem(kind, ref, generation, cond.Status, cond.ObservedGeneration, cond.Reason, cond.Message, true)
		}
	}
	return readyProblem(kind, ref, generation, "", 0, "", "", false)
}

func (c *checks) rootIssuerReady(ctx context.Context) error {
	ns := c.cfg.CertManagerNamespace
	ref := ns + "/" + c.o.rootIssuer
	iss, err := c.cl.CertManager.CertmanagerV1().Issuers(ns).Get(ctx, c.o.rootIssuer, metav1.GetOptions{})
	if err != nil {
		return notFound("Issuer", ref, err)
	}
	return issuerReady("Issuer", ref, iss.Generation, iss.Status.Conditions)
}

func (c *checks) identityClusterIssuerReady(ctx context.Context) error {
	iss, err := c.cl.CertManager.CertmanagerV1().ClusterIssuers().Get(ctx, c.o.identityClusterIssuer, metav1.GetOptions{})
	if err != nil {
		return notFound("ClusterIssuer", c.o.identityClusterIssuer, err)
	}
	if iss.Spec.CA == nil {
		return fmt.Errorf("ClusterIssuer %s is not a CA issuer (spec.ca is not set)", iss.Name)
	}
	if iss.Spec.CA.SecretName != c.cfg.AnchorSecret {
		return fmt.Errorf("ClusterIssuer %s signs with Secret %s, not the trust anchor %s/%s",
			iss.Name, iss.Spec.CA.SecretName, c.cfg.CertManagerNamespace, c.cfg.AnchorSecret)
	}
	return issuerReady("ClusterIssuer", iss.Name, iss.Generation, iss.Status.Conditions)
}

func (c *checks) certificate(ctx context.Context, ns, name string) (*cmapi.Certificate, error) {
	crt, err := c.cl.CertManager.CertmanagerV1().Certificates(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, notFound("Certificate", ns+"/"+name, err)
	}
	return crt, nil
}

func certificateReady(crt *cmapi.Certificate) error {
	ref := crt.Namespace + "/" + crt.Name
	for _, cond := range crt.Status.Conditions {
		if cond.Type == cmapi.CertificateConditionReady {
			return readyProblem("Certificate", ref, crt.Generation, cond.Status, cond.ObservedGeneration, cond.Reason, cond.Message, true)
		}
	}
	return readyProblem("Certificate", ref, crt.Generation, "", 0, "", "", false)
}

func (c *checks) anchorCertificateReady(ctx context.Context) error {
	crt, err := c.certificate(ctx, c.cfg.CertManagerNamespace, c.o.anchorCertificate)
	if err != nil {
		return err
	}
	if !crt.Spec.IsCA {
		return fmt.Errorf("Certificate %s/%s does not set spec.isCA: true, so it cannot sign the identity issuer", crt.Namespace, crt.Name)
	}
	if crt.Spec.SecretName != c.cfg.AnchorSecret {
		return fmt.Errorf("Certificate %s/%s writes Secret %s, not %s (set --trust-anchor-secret)", crt.Namespace, crt.Name, crt.Spec.SecretName, c.cfg.AnchorSecret)
	}
	return certificateReady(crt)
}

func (c *checks) identityIssuerReady(ctx context.Context) error {
	crt, err := c.certificate(ctx, c.cfg.LinkerdNamespace, c.o.identityIssuerCert)
	if err != nil {
		return err
	}
	if crt.Spec.IssuerRef.Name != c.o.identityClusterIssuer || crt.Spec.IssuerRef.Kind != cmapi.ClusterIssuerKind {
		return fmt.Errorf("Certificate %s/%s is issued by %s %s, not ClusterIssuer %s",
			crt.Namespace, crt.Name, orDefault(crt.Spec.IssuerRef.Kind, cmapi.IssuerKind), crt.Spec.IssuerRef.Name, c.o.identityClusterIssuer)
	}
	if crt.Spec.SecretName != c.cfg.IssuerSecret {
		return fmt.Errorf("Certificate %s/%s writes Secret %s, not %s (set --identity-issuer-secret)", crt.Namespace, crt.Name, crt.Spec.SecretName, c.cfg.IssuerSecret)
	}
	return certificateReady(crt)
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// usableAnchor returns the anchor, or an error naming the Secret and what is wrong with it.
func (c *checks) usableAnchor(ctx context.Context) (steps.Source, error) {
	a, err := c.anchor.get(ctx)
	if err != nil {
		return a, err
	}
	if !a.Usable() {
		return a, unusable(a, "trust-anchor Secret")
	}
	return a, nil
}

// unusable is the failure of a check that needs an unusable source: a warning when the user may
// not read its Secret and nothing else holds its certificate, an error otherwise.
func unusable(s steps.Source, kind string) error {
	err := errors.New(s.Problem(kind))
	if observe.Forbidden(s) {
		return warn(err)
	}
	return err
}

func (c *checks) anchorIsCA(ctx context.Context) error {
	a, err := c.usableAnchor(ctx)
	if err != nil {
		return err
	}
	if err := steps.CheckAnchor(a.Cert, c.now); err != nil {
		return fmt.Errorf("trust-anchor Secret %s: %w", a.Ref(), err)
	}
	return nil
}

func (c *checks) anchorRotationPolicy(ctx context.Context) error {
	crt, err := c.certificate(ctx, c.cfg.CertManagerNamespace, c.o.anchorCertificate)
	if err != nil {
		return err
	}
	if crt.Spec.PrivateKey != nil && crt.Spec.PrivateKey.RotationPolicy == cmapi.RotationPolicyNever {
		return fmt.Errorf("Certificate %s/%s has spec.privateKey.rotationPolicy: Never: a renewal keeps the old key, so it extends the anchor instead of rotating it; set rotationPolicy: Always",
			crt.Namespace, crt.Name)
	}
	return nil
}

func (c *checks) anchorExpiry(ctx context.Context) error {
	a, err := c.usableAnchor(ctx)
	if err != nil {
		return err
	}
	left := a.Cert.NotAfter.Sub(c.now)
	when := a.Cert.NotAfter.UTC().Format(time.RFC3339)
	switch {
	case left <= 0:
		return fmt.Errorf("trust anchor in Secret %s expired at %s", a.Ref(), when)
	case c.o.failWithin > 0 && left < time.Duration(c.o.failWithin):
		return fmt.Errorf("trust anchor in Secret %s expires at %s, in %s (less than --fail-within %s): rotate it now", a.Ref(), when, age(left), &c.o.failWithin)
	case left < time.Duration(c.o.expiryWarning):
		return warnf("trust anchor in Secret %s expires at %s, in %s (less than --expiry-warning %s): rotate it soon", a.Ref(), when, age(left), &c.o.expiryWarning)
	}
	return nil
}

func (c *checks) issuerValidity(ctx context.Context) error {
	iss, err := c.issuer.get(ctx)
	if err != nil {
		return err
	}
	if !iss.Usable() {
		return unusable(iss, "identity-issuer Secret")
	}
	if c.now.After(iss.Cert.NotAfter) {
		return fmt.Errorf("identity issuer in Secret %s expired at %s", iss.Ref(), iss.Cert.NotAfter.UTC().Format(time.RFC3339))
	}
	if c.now.Before(iss.Cert.NotBefore) {
		return fmt.Errorf("identity issuer in Secret %s is not valid before %s", iss.Ref(), iss.Cert.NotBefore.UTC().Format(time.RFC3339))
	}
	if !iss.Cert.IsCA {
		return fmt.Errorf("identity issuer in Secret %s is not a CA certificate: it cannot sign workload certificates", iss.Ref())
	}
	crt, err := c.cl.CertManager.CertmanagerV1().Certificates(c.cfg.LinkerdNamespace).Get(ctx, c.o.identityIssuerCert, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil // the Certificate's own check reports it
	}
	if err != nil {
		return notFound("Certificate", c.cfg.LinkerdNamespace+"/"+c.o.identityIssuerCert, err)
	}
	if rt := crt.Status.RenewalTime; rt != nil && c.now.Sub(rt.Time) > c.o.issuerRenewalTolerance {
		return warnf("cert-manager should have renewed Certificate %s/%s at %s (%s ago); it expires at %s",
			crt.Namespace, crt.Name, rt.UTC().Format(time.RFC3339), age(c.now.Sub(rt.Time)), iss.Cert.NotAfter.UTC().Format(time.RFC3339))
	}
	return nil
}

func (c *checks) issuerChains(ctx context.Context) error {
	iss, err := c.issuer.get(ctx)
	if err != nil {
		return err
	}
	if !iss.Usable() {
		return unusable(iss, "identity-issuer Secret")
	}
	b, err := c.bundle.get(ctx)
	if err != nil {
		return err
	}
	if !b.Found {
		return fmt.Errorf("ConfigMap %s/%s not found", c.cfg.LinkerdNamespace, c.cfg.TrustRootsConfigMap)
	}
	for _, root := range b.Certs {
		if steps.SignedBy(iss.Cert, root) {
			return nil
		}
	}
	return fmt.Errorf("identity issuer %s in Secret %s is signed by none of the %d anchor(s) in ConfigMap %s/%s: proxies would reject its certificates",
		steps.ShortFingerprint(steps.Fingerprint(iss.Cert)), iss.Ref(), len(b.Certs), c.cfg.LinkerdNamespace, c.cfg.TrustRootsConfigMap)
}

func (c *checks) bundleHasAnchor(ctx context.Context) error {
	a, err := c.usableAnchor(ctx)
	if err != nil {
		return err
	}
	b, err := c.bundle.get(ctx)
	if err != nil {
		return err
	}
	ref := c.cfg.LinkerdNamespace + "/" + c.cfg.TrustRootsConfigMap
	if !b.Found {
		return fmt.Errorf("ConfigMap %s not found: create it with `linkerd trust bundle | kubectl apply -f -`", ref)
	}
	if len(b.Certs) == 0 {
		return fmt.Errorf("ConfigMap %s: key %s holds no PEM certificate", ref, steps.TrustRootsKey)
	}
	fp := a.Fingerprint()
	for _, root := range b.Certs {
		if steps.Fingerprint(root) == fp {
			return nil
		}
	}
	return fmt.Errorf("ConfigMap %s does not contain the trust anchor %s of Secret %s (it holds %s)", ref, steps.ShortFingerprint(fp), a.Ref(), shortFingerprints(b))
}

func shortFingerprints(b steps.Bundle) string {
	fps := make([]string, len(b.Certs))
	for i, c := range b.Certs {
		fps[i] = steps.ShortFingerprint(steps.Fingerprint(c))
	}
	return strings.Join(fps, ", ")
}

// --- the operator ----------------------------------------------------------------------------

func (c *checks) rotationCRD(context.Context) error {
	missing, err := c.missingResources(v1alpha1.SchemeGroupVersion.String(), v1alpha1.Resource)
	if err != nil {
		return err
	}
	if len(missing) > 0 {
		return fmt.Errorf("the API does not serve %s %s: install the trust-rotation-operator-crds chart (CustomResourceDefinition %s.%s)",
			v1alpha1.SchemeGroupVersion, v1alpha1.Resource, v1alpha1.Resource, v1alpha1.GroupName)
	}
	return nil
}

func (c *checks) rotationExists(ctx context.Context) error {
	_, err := c.rotation.get(ctx)
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("TrustAnchorRotation %s not found: the operator chart creates it, and the operator creates it at start-up", c.o.kube.RotationName)
	}
	if err != nil {
		return fmt.Errorf("reading TrustAnchorRotation %s: %w", c.o.kube.RotationName, err)
	}
	return nil
}

func (c *checks) operatorAvailable(ctx context.Context) error {
	ns, name := c.o.operatorNamespace, c.o.operatorDeployment
	d, err := c.cl.Kube.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return notFound("Deployment", ns+"/"+name, err)
	}
	if ok, why := deploymentAvailable(d); !ok {
		return fmt.Errorf("Deployment %s/%s is not available: %s", ns, name, why)
	}
	return nil
}

func (c *checks) operatorLeaseFresh(ctx context.Context) error {
	ns, name := c.o.operatorNamespace, c.o.operatorLease
	l, err := c.cl.Kube.CoordinationV1().Leases(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return notFound("Lease", ns+"/"+name, err)
	}
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" {
		return fmt.Errorf("Lease %s/%s has no holder: no operator replica leads", ns, name)
	}
	if l.Spec.RenewTime == nil {
		return fmt.Errorf("Lease %s/%s held by %s was never renewed", ns, name, *l.Spec.HolderIdentity)
	}
	if since := c.now.Sub(l.Spec.RenewTime.Time); since > c.o.leaseStaleAfter {
		return fmt.Errorf("Lease %s/%s held by %s was last renewed %s ago (more than --lease-stale-after %s): the leader is stuck or gone",
			ns, name, *l.Spec.HolderIdentity, age(since), c.o.leaseStaleAfter)
	}
	return nil
}

func (c *checks) rotationNotBlocked(ctx context.Context) error {
	tar, err := c.rotation.get(ctx)
	if err != nil {
		return fmt.Errorf("reading TrustAnchorRotation %s: %w", c.o.kube.RotationName, err)
	}
	st := tar.Status
	if st.BlockingMessage == "" || st.LastPhaseTransitionTime == nil {
		return nil
	}
	since := c.now.Sub(st.LastPhaseTransitionTime.Time)
	if since <= time.Duration(c.o.blockedWarning) {
		return nil
	}
	return fmt.Errorf("TrustAnchorRotation %s has been in phase %s for %s (more than --blocked-warning %s): %s",
		tar.Name, orDefault(string(st.Phase), string(v1alpha1.PhaseSynced)), age(since), &c.o.blockedWarning, st.BlockingMessage)
}

// bundleOwnedByOperator warns when a field manager other than the operator owns the bundle's
// ca-bundle.crt (managedFields): a Helm release, an Argo CD application or trust-manager that
// writes it again — an upgrade, a self-heal — reverts the bundle under a rotation.
func (c *checks) bundleOwnedByOperator(ctx context.Context) error {
	b, err := c.bundle.get(ctx)
	if err != nil {
		return err
	}
	if !b.Found {
		return nil // bundleHasAnchor says so
	}
	others := b.OtherOwners()
	if len(others) == 0 {
		return nil
	}
	names := make([]string, len(others))
	for i, o := range others {
		names[i] = o.String()
	}
	return fmt.Errorf("ConfigMap %s/%s: key %s is also owned by field manager(s) %s: a later write of theirs (a Helm upgrade, an Argo CD sync or self-heal, trust-manager) reverts the trust bundle, mid-rotation too; stop them writing it, then hand it to %q with 'linkerd trust bundle --adopt'",
		c.cfg.LinkerdNamespace, c.cfg.TrustRootsConfigMap, steps.TrustRootsKey, strings.Join(names, ", "), steps.FieldManager)
}

// --- the data plane ----------------------------------------------------------------------------

func (c *checks) dataPlaneBundle(ctx context.Context) error {
	var status *v1alpha1.TrustAnchorRotationStatus
	if tar, err := c.rotation.get(ctx); err == nil {
		status = &tar.Status
	}
	reading, err := observe.Read(ctx, c.cl.pkiReader(c.cfg), status, c.now)
	if err != nil {
		return err
	}
	if status != nil {
		if err := reading.SetInFlight(status.InFlightAnchors); err != nil {
			return fmt.Errorf("TrustAnchorRotation %s: %w", c.o.kube.RotationName, err)
		}
	}
	if unreadable := reading.Unreadable(); len(unreadable) > 0 {
		return warnf("cannot tell which trust bundle meshed pods must carry: %s", strings.Join(unreadable, "; "))
	}
	desired := reading.State.DesiredBundle()
	if desired == "" {
		return errors.New(reading.State.Anchor.Problem("trust-anchor Secret"))
	}
	hash := steps.BundleHash(desired)
	var behind []string
	total := 0
	for _, p := range reading.Pods {
		if !p.Meshed || !p.Alive || p.ControlPlane || (c.o.namespace != "" && p.Namespace != c.o.namespace) {
			continue
		}
		total++
		if why := podindex.BundleProblem(p, hash); why != "" {
			behind = append(behind, fmt.Sprintf("pod %s: %s", p.Key(), why))
		}
	}
	if len(behind) == 0 {
		return nil
	}
	const limit = 10
	more, n := "", len(behind)
	if n > limit {
		more = fmt.Sprintf("\n... and %d more", n-limit)
		behind = behind[:limit]
	}
	// The population is the trust-bundle count's (status.trustBundle, inspect): meshed pods the
	// proxy injector injected, the control plane apart.
	return fmt.Errorf("%d of %d injected pod(s) (meshed, control plane apart) run with another trust bundle; restart them:\n%s%s", n, total, strings.Join(behind, "\n"), more)
}

// duration is a time.Duration flag that also accepts days ("30d", "1d12h").
type duration time.Duration

var daysPrefix = regexp.MustCompile(`^(\d+)d`)

func (d *duration) Set(s string) error {
	var days time.Duration
	if m := daysPrefix.FindStringSubmatch(s); m != nil {
		n, err := strconv.Atoi(m[1])
		if err != nil {
			return fmt.Errorf("invalid duration %q", s)
		}
		days = time.Duration(n) * 24 * time.Hour
		s = s[len(m[0]):]
	}
	var rest time.Duration
	if s != "" {
		var err error
		if rest, err = time.ParseDuration(s); err != nil {
			return fmt.Errorf("invalid duration %q: use e.g. 30d, 72h or 90m", s)
		}
	}
	if days+rest < 0 {
		return fmt.Errorf("duration %q must not be negative", s)
	}
	*d = duration(days + rest)
	return nil
}

func (d *duration) Type() string { return "duration" }

func (d *duration) String() string {
	v := time.Duration(*d)
	if v == 0 {
		return "0"
	}
	if v > 0 && v%(24*time.Hour) == 0 {
		return fmt.Sprintf("%dd", v/(24*time.Hour))
	}
	return steps.CompactDuration(v)
}
