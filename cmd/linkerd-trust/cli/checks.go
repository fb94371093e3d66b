package cli

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"sigs.k8s.io/yaml"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/steps/kube/clientset"
	"github.com/linkerd/trust-rotation/steps/observe"
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
	o.output = addOutputFlag(fs, "table", "json", "yaml")
	fs.BoolVar(&o.pre, "pre", false, "only check the prerequisites of the operator: cert-manager and the Linkerd PKI")
	fs.Var(&o.expiryWarning, "expiry-warning", "warn when the trust anchor or a bridge certificate expires, or the next rotation's deadline passes, within this duration (e.g. 30d, 72h)")
	fs.Var(&o.failWithin, "fail-within", "fail when the trust anchor expires, or the next rotation's deadline (status.nextRotation) passes, within this duration (e.g. 7d); off when 0")
	o.kube = addKubeFlags(fs)
	fs.StringVar(&o.rootIssuer, "trust-root-issuer", "linkerd-trust-root-issuer", "cert-manager Issuer (in the cert-manager namespace) that signs the trust anchor")
	fs.StringVar(&o.identityClusterIssuer, "identity-cluster-issuer", "linkerd-identity-issuer", "cert-manager ClusterIssuer that signs the identity issuer")
	fs.StringVar(&o.certManagerSelector, "cert-manager-controller-selector", CertManagerControllerSelector,
		"label selector of cert-manager's controller Deployment in the cert-manager namespace; default: its Helm chart's, "+
			strings.ReplaceAll(CertManagerControllerSelector, ",", ", "))
	// The default is in the usage, where it wraps: as a (default "...") it is one long word.
	fs.Lookup("cert-manager-controller-selector").DefValue = ""
	fs.StringVar(&o.operatorNamespace, "operator-namespace", "", "namespace of the trust-rotation operator (default: the Linkerd namespace)")
	fs.StringVar(&o.operatorDeployment, "operator-deployment", DefaultOperatorDeployment, "Deployment of the trust-rotation operator")
	fs.StringVar(&o.operatorLease, "operator-lease", DefaultOperatorLease, "leader-election Lease of the trust-rotation operator (in the operator namespace)")
	durationVar(fs, &o.leaseStaleAfter, "lease-stale-after", time.Minute, "fail when the operator's leader Lease was last renewed longer ago than this")
	fs.Var(&o.blockedWarning, "blocked-warning", "warn when the rotation has waited in one phase with a blocking message for longer than this")
	durationVar(fs, &o.issuerRenewalTolerance, "issuer-renewal-tolerance", 10*time.Minute, "warn when cert-manager is this late renewing the identity issuer")
	fs.BoolVar(&o.verbose, "verbose", false, "accepted for linkerd check; the output is the same")
	fs.StringVarP(&o.namespace, "namespace", "n", "", "with --proxy, check the meshed pods of this namespace only (default: all)")
	fs.BoolVar(&o.proxy, "proxy", false, "also check that meshed pods were injected with the current trust bundle")
	durationVar(fs, &o.wait, "wait", 5*time.Minute, "maximum time for all checks to run")
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
			if !o.pre && c.notInstalled(ctx) {
				// `linkerd check` runs the extension on every cluster once it is on PATH: where
				// nobody installed it, that is no failure.
				cats = []category{{name: categoryExtension, checkers: []checker{{
					description: "the trust-rotation operator is not installed on this cluster (no TrustAnchorRotation CRD): nothing to check; " +
						binary + " check --pre checks its prerequisites",
					check: func(context.Context) error { return nil },
				}}}}
			} else if !o.pre {
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
		if o.output.value != "table" {
			// The document linkerd check reads, as JSON or as YAML.
			var doc bytes.Buffer
			r := &jsonRenderer{w: &doc}
			success = runChecks(ctx, cats, r.result)
			if err := r.finish(success); err != nil {
				return err
			}
			if err := writeDocument(env.Out, doc.Bytes(), o.output.value); err != nil {
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
	// categoryExtension holds the one line of a cluster the extension is not installed on.
	categoryExtension = "linkerd-trust"
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
		{description: fmt.Sprintf("TrustAnchorRotation %s has a spec the operator can use", o.kube.RotationName), hint: "l5d-trust-operator-spec", check: c.rotationSpecValid},
		{description: "trust-rotation operator is available", hint: "l5d-trust-operator-deployment", check: c.operatorAvailable},
		{description: "trust-rotation operator and CLI versions match", hint: "l5d-trust-operator-version", warning: true, check: c.operatorVersionMatches},
		{description: "trust-rotation operator renews its leader lease", hint: "l5d-trust-operator-lease", check: c.operatorLeaseFresh},
		{description: "trust-anchor rotation is not blocked", hint: "l5d-trust-operator-blocked", warning: true, check: c.rotationNotBlocked},
		{description: "linkerd-identity signs with the identity issuer in its Secret", hint: "l5d-trust-identity-issuer-stale", check: c.identityIssuerCurrent},
		{description: "meshed pods' proxies renew their certificates", hint: "l5d-trust-workload-certificates-expiring", check: c.workloadCertificatesRenewed},
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

// duration is a time.Duration flag that also accepts days ("30d", "1d12h"), as every duration
// flag of the CLI does (durationVar).
type duration time.Duration

// durationVar defines a duration flag that accepts days, with a default.
func durationVar(fs *pflag.FlagSet, p *time.Duration, name string, value time.Duration, usage string) {
	*p = value
	fs.Var((*duration)(p), name, usage)
}

var daysPrefix = regexp.MustCompile(`^(\d+)d`)

func (d *duration) Set(s string) error {
	invalid := func() error {
		return fmt.Errorf("invalid duration %q: a number and a unit (d, h, m, s, ms), such as 30d, 1d12h, 72h or 90s", s)
	}
	rest := s
	var days time.Duration
	if m := daysPrefix.FindStringSubmatch(rest); m != nil {
		n, err := strconv.ParseInt(m[1], 10, 64)
		if err != nil || n > int64(math.MaxInt64/(24*time.Hour)) {
			return invalid()
		}
		days = time.Duration(n) * 24 * time.Hour
		rest = rest[len(m[0]):]
	}
	var more time.Duration
	if rest != "" {
		var err error
		if more, err = time.ParseDuration(rest); err != nil || days > 0 && more < 0 || more > math.MaxInt64-days {
			return invalid()
		}
	}
	if days+more < 0 {
		return fmt.Errorf("duration %q must not be negative", s)
	}
	*d = duration(days + more)
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

// writeDocument writes a JSON document as JSON, or as YAML.
func writeDocument(w io.Writer, doc []byte, format string) error {
	if format == "yaml" {
		y, err := yaml.JSONToYAML(doc)
		if err != nil {
			return err
		}
		doc = y
	}
	_, err := w.Write(doc)
	return err
}
