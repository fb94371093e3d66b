package cli

import (
	"context"
	"fmt"
	"strings"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/steps/podindex"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

// The operator is granted least privilege: the chart renders the RBAC of an automation only when
// its values turn it on (templates/rbac-automation.yaml). A spec that recover or rotate
// --emergency sets turns automations on; before it does, the command asks the apiserver, with a
// SubjectAccessReview for the operator's ServiceAccount, whether the operator may do what they
// need, and where it may not, refuses with the helm upgrade that grants it: a spec the operator
// cannot act on would only stall.

// automationAccess is what an automation needs of the operator's RBAC.
type automationAccess struct {
	field  string // the spec field that turns it on
	chart  string // the chart value that grants its RBAC
	checks []authorizationv1.ResourceAttributes
}

// specAutomations lists what the spec fields a patch sets need, for the meshed workloads'
// namespaces.
func specAutomations(patch map[string]any, cfg steps.Config, pods []*podindex.Pod) []automationAccess {
	var out []automationAccess
	if _, ok := patch["identityIssuerRenewal"]; ok {
		out = append(out, automationAccess{field: "identityIssuerRenewal: Automatic", chart: "rotation.spec.identityIssuerRenewal=Automatic",
			checks: []authorizationv1.ResourceAttributes{{Namespace: cfg.LinkerdNamespace, Verb: "update", Group: "cert-manager.io", Resource: "certificates", Subresource: "status", Name: cfg.IssuerCertificate}}})
	}
	if r, ok := patch["dataPlaneRestart"].(map[string]any); ok && r["policy"] == v1alpha1.Automatic {
		namespaces := sets.New[string]()
		for _, p := range pods {
			if p.Meshed && p.Alive && p.Namespace != cfg.LinkerdNamespace {
				namespaces.Insert(p.Namespace)
			}
		}
		a := automationAccess{field: "dataPlaneRestart.policy: Automatic", chart: "rotation.spec.dataPlaneRestart.policy=Automatic"}
		for _, ns := range sets.List(namespaces) {
			a.checks = append(a.checks, authorizationv1.ResourceAttributes{Namespace: ns, Verb: "patch", Group: "apps", Resource: "deployments"})
		}
		out = append(out, a)
	}
	return out
}

// operatorServiceAccount is the ServiceAccount the operator's Deployment runs as, or "".
func operatorServiceAccount(ctx context.Context, cl *Clients, cfg steps.Config) string {
	d, err := cl.Kube.AppsV1().Deployments(cfg.LinkerdNamespace).Get(ctx, DefaultOperatorDeployment, metav1.GetOptions{})
	if err != nil {
		return ""
	}
	return orDefault(d.Spec.Template.Spec.ServiceAccountName, "default")
}

// checkOperatorAccess asks the apiserver whether the operator may do what the automations need,
// and returns an error naming what it may not and the helm upgrade that grants it. It checks
// nothing (and says so in the returned note) when it cannot tell: the operator's Deployment not
// found, or the user may not create SubjectAccessReviews.
func checkOperatorAccess(ctx context.Context, cl *Clients, tar *v1alpha1.TrustAnchorRotation, cfg steps.Config, needs []automationAccess) (note string, err error) {
	if len(needs) == 0 {
		return "", nil
	}
	sa := operatorServiceAccount(ctx, cl, cfg)
	if sa == "" {
		return fmt.Sprintf("Deployment %s/%s not found: not checked whether the operator may act on the spec set", cfg.LinkerdNamespace, DefaultOperatorDeployment), nil
	}
	user := fmt.Sprintf("system:serviceaccount:%s:%s", cfg.LinkerdNamespace, sa)
	var missing, values []string
	for _, a := range needs {
		var denied []string
		for _, attrs := range a.checks {
			review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User: user, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + cfg.LinkerdNamespace, "system:authenticated"},
				ResourceAttributes: &attrs}}
			got, err := cl.Kube.AuthorizationV1().SubjectAccessReviews().Create(ctx, review, metav1.CreateOptions{})
			if err != nil {
				return fmt.Sprintf("not checked whether the operator may act on the spec set: %v", err), nil
			}
			if !got.Status.Allowed {
				denied = append(denied, describeAttributes(attrs))
			}
		}
		if len(denied) > 0 {
			missing = append(missing, fmt.Sprintf("%s needs it to %s", a.field, strings.Join(denied, ", ")))
			values = append(values, "--set "+a.chart)
		}
	}
	if len(missing) == 0 {
		return "", nil
	}
	release, ns := tar.Annotations[steps.HelmReleaseNameAnnotation], tar.Annotations[steps.HelmReleaseNamespaceAnnotation]
	grant := "grant it (the chart does with " + strings.Join(values, " ") + ")"
	if release != "" {
		grant = fmt.Sprintf("grant it with the chart's values: helm upgrade -n %s %s <chart> --reuse-values %s, then run this again", orDefault(ns, cfg.LinkerdNamespace), release, strings.Join(values, " "))
	}
	return "", fmt.Errorf("the operator's ServiceAccount %s/%s may not act on the spec this would set: %s (its RBAC follows the chart's values); %s; nothing was changed",
		cfg.LinkerdNamespace, sa, strings.Join(missing, "; "), grant)
}

func describeAttributes(a authorizationv1.ResourceAttributes) string {
	res := a.Resource
	if a.Group != "" {
		res += "." + a.Group
	}
	if a.Subresource != "" {
		res += "/" + a.Subresource
	}
	s := a.Verb + " " + res
	if a.Name != "" {
		s += " " + a.Name
	}
	return s + " in namespace " + a.Namespace
}
