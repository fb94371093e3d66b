package steps

import "github.com/linkerd/trust-rotation/workflow/api/v1alpha1"

// Assumption is what a plan that looks ahead takes to have happened for a step's wait to pass:
// a plan shows each later step observing the state the earlier steps' writes and these
// assumptions would leave, and marks them as assumed, never observed (see Step.Assumes and
// apply.Ahead, which makes them).
type Assumption int

const (
	// AssumeNothing: the step waits on nothing a plan can stand in for (a linked cluster, the
	// renewal of the trust anchor), or never waits.
	AssumeNothing Assumption = iota
	// AssumeControlPlaneRestarted: the control-plane Deployments restarted rolled out, every
	// pod replaced.
	AssumeControlPlaneRestarted
	// AssumeWorkloadsRestarted: every meshed pod was replaced by one injected with the trust
	// bundle the ConfigMap holds.
	AssumeWorkloadsRestarted
	// AssumeIssuerRenewed: the identity issuer was renewed onto the trust anchor.
	AssumeIssuerRenewed
	// AssumeCertificatesRenewed: every meshed pod presents a certificate from the identity
	// issuer.
	AssumeCertificatesRenewed
	// AssumeTakeoverHandedOver: on a mesh that runs on hand-made certificates, with the takeover
	// requested, Helm keeps what it renders (the moves of TakeoverHandoverPending were made).
	AssumeTakeoverHandedOver
)

// Describe says what is assumed, under the spec's automations: "assuming ...".
func (a Assumption) Describe(spec v1alpha1.TrustAnchorRotationSpec) string {
	automatic := spec.DataPlaneRestart.Policy == v1alpha1.Automatic
	switch a {
	case AssumeControlPlaneRestarted:
		return "assuming the control plane restarted: the Deployments rolled out, every pod replaced"
	case AssumeWorkloadsRestarted:
		if automatic {
			return "assuming the meshed pods the operator does not restart were replaced (restarted by you): every meshed pod injected with the bundle the ConfigMap holds"
		}
		return "assuming your workloads were restarted: every meshed pod injected with the bundle the ConfigMap holds"
	case AssumeIssuerRenewed:
		if spec.IdentityIssuerRenewal == v1alpha1.Automatic {
			return "assuming cert-manager re-issued the identity issuer from the new trust anchor"
		}
		return "assuming the issuer was renewed onto the new trust anchor (a stand-in made in memory)"
	case AssumeTakeoverHandedOver:
		return "assuming you annotated what Linkerd's chart renders " + HelmResourcePolicyAnnotation + "=" + HelmKeep + " and ran the helm upgrade with identity.externalCA=true"
	case AssumeCertificatesRenewed:
		if automatic {
			return "assuming every meshed pod presents a certificate from the new issuer, refreshed or restarted by the operator"
		}
		return "assuming every meshed pod presents a certificate from the new issuer (your workloads restarted, or their proxies refreshed)"
	}
	return ""
}
