package cli

import (
	"context"
	"encoding/json"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/yaml"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/steps/kube/clientset"
	"github.com/linkerd/trust-rotation/steps/observe"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

func bundleCommand(env *Env) *command {
	fs := newFlagSet("bundle")
	out := addOutputFlag(fs, "yaml", "json")
	adopt := fs.Bool("adopt", false, "take the existing ConfigMap over from Helm, kubectl or trust-manager: the operator's field manager alone owns ca-bundle.crt, its content unchanged (docs/adopting.md)")
	kf := addKubeFlags(fs)
	c := &command{
		name:  "bundle",
		short: "Print the linkerd-identity-trust-roots ConfigMap, rendered from cert-manager's anchor",
		long: `Print the linkerd-identity-trust-roots ConfigMap that Linkerd reads its trust roots from,
rendered from cert-manager's trust anchor (and the operator-managed previous anchor, if any) with
exactly the bytes the operator writes. No private key is read. It fails, printing nothing, when
the anchor is missing or is not a valid CA certificate. --adopt takes an existing ConfigMap over
instead, on a running mesh, without changing its content.`,
		example: `  # Seed the trust bundle before installing Linkerd, owned by the operator's field manager
  ` + ApplyBundleCommand + `

  # On a running mesh, take the ConfigMap over from the Helm release that rendered it
  linkerd trust bundle --adopt

  # As JSON, with non-default object names
  linkerd trust bundle -o json --cert-manager-namespace pki --trust-anchor-secret root-ca`,
		flags: fs,
	}
	c.run = func(ctx context.Context, args []string) error {
		if len(args) > 0 {
			return usagef("bundle takes no arguments, got %q", args)
		}
		if err := kf.validate(); err != nil {
			return err
		}
		cl, err := env.clients(kf)
		if err != nil {
			return err
		}
		bundle, err := renderBundle(ctx, cl, kf.Config, kf.RotationName, env, func(msg string) {
			fmt.Fprintf(env.Err, "Warning: %s\n", msg)
		})
		if err != nil {
			return err
		}
		if *adopt {
			return adoptBundle(ctx, cl, kf.Config, bundle, env.Out)
		}
		doc, err := bundleManifest(kf.Config, bundle, out.value)
		if err != nil {
			return err
		}
		_, err = env.Out.Write(doc)
		return err
	}
	return c
}

// ApplyBundleCommand seeds the trust bundle as the operator owns it: server-side, under the
// operator's field manager, so that `linkerd trust check` finds no other writer. Every hint and
// example that tells a user to apply the bundle names this one command.
const ApplyBundleCommand = "linkerd trust bundle | kubectl apply --server-side --field-manager=" + steps.FieldManager + " -f -"

// renderBundle reads the anchor and the previous anchor and returns the bundle the operator
// would write (steps.State.DesiredBundle), or an error that names the object and what is wrong.
// It reads no private key (see observe.PKIReader); warn reports a Secret it was forbidden to
// read where nothing else holds the certificate.
func renderBundle(ctx context.Context, cl *Clients, cfg steps.Config, rotation string, env *Env, warn func(string)) (string, error) {
	s := &steps.State{Config: cfg, Now: env.now()}
	r := cl.pkiReader(cfg)
	// Mid-rotation, the operator also keeps the anchors of a superseded rotation: render them
	// too, or applying this output would drop an anchor live certificates may chain to. Before
	// the operator is installed there is no TrustAnchorRotation (or no CRD): nothing in flight.
	var status *v1alpha1.TrustAnchorRotationStatus
	if tar, err := cl.Rotations.Get(ctx, rotation); err == nil {
		status = &tar.Status
		if s.InFlight, err = steps.ParseInFlight(tar.Status.InFlightAnchors); err != nil {
			return "", fmt.Errorf("TrustAnchorRotation %s: %w", tar.Name, err)
		}
		s.Retiring = steps.RetiringTo(steps.Facts(), tar.Status.Checkpoint)
	}
	var err error
	if s.Anchor, err = r.Anchor(ctx); err != nil {
		return "", err
	}
	if !s.Anchor.Usable() {
		problem := s.Anchor.Problem("trust-anchor Secret")
		if !s.Anchor.Found {
			problem += fmt.Sprintf(" (cert-manager writes it when it issues the Certificate %s/%s)", cfg.CertManagerNamespace, cfg.AnchorCertificate)
		}
		return "", fmt.Errorf("%s", problem)
	}
	if err := steps.CheckAnchor(s.Anchor.Cert, s.Now); err != nil {
		return "", fmt.Errorf("trust-anchor Secret %s: %w", s.Anchor.Ref(), err)
	}
	// The trust bundle only serves to find the previous anchor in: one you may not read is one
	// without it, and the previous-anchor Secret is read instead.
	bundle, err := observe.ReadBundle(ctx, clientset.Kube(cl.Kube), cfg)
	if err != nil && !apierrors.IsForbidden(err) {
		return "", err
	}
	if s.Previous, err = r.Previous(ctx, bundle, status); err != nil {
		return "", err
	}
	switch {
	case observe.Forbidden(s.Previous):
		warn(s.Previous.Problem("previous-anchor Secret") + ": the bundle holds the current trust anchor alone, which is right unless a rotation is under way")
		s.Previous = steps.Source{}
	case s.Previous.Found && !s.Previous.Usable():
		return "", fmt.Errorf("%s; fix or delete it", s.Previous.Problem("previous-anchor Secret"))
	}
	return s.DesiredBundle(), nil
}

// configMapManifest is the ConfigMap as kubectl applies it: only the fields that matter, in
// kubectl's order, without the empty metadata a typed object would print.
type configMapManifest struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   manifestMetadata  `json:"metadata"`
	Data       map[string]string `json:"data"`
}

type manifestMetadata struct {
	Name      string            `json:"name"`
	Namespace string            `json:"namespace"`
	Labels    map[string]string `json:"labels,omitempty"`
}

// bundleManifest renders the ConfigMap the operator writes (same name, namespace, label and
// data) as YAML or JSON.
func bundleManifest(cfg steps.Config, bundle, format string) ([]byte, error) {
	m := configMapManifest{
		APIVersion: "v1",
		Kind:       "ConfigMap",
		Metadata: manifestMetadata{
			Name:      cfg.TrustRootsConfigMap,
			Namespace: cfg.LinkerdNamespace,
			Labels:    map[string]string{steps.ManagedByLabel: steps.ManagedByValue},
		},
		Data: map[string]string{steps.TrustRootsKey: bundle},
	}
	if format == "json" {
		b, err := json.MarshalIndent(m, "", "  ")
		if err != nil {
			return nil, err
		}
		return append(b, '\n'), nil
	}
	return yaml.Marshal(m)
}
