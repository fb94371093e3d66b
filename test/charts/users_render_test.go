package charts

import (
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
)

// TestUserRolesRender renders the ClusterRoles for people: -view reads TrustAnchorRotations,
// -edit writes them, neither their status; they carry the user-facing roles' aggregation labels
// unless rbac.aggregateClusterRoles is false, and exist only with rbac.create.
func TestUserRolesRender(t *testing.T) {
	render := renderTRO(t)
	full := "tro-trust-rotation-operator"
	aggregatedInto := func(cr *rbacv1.ClusterRole) []string {
		var to []string
		for k, v := range cr.Labels {
			if role, ok := strings.CutPrefix(k, "rbac.authorization.k8s.io/aggregate-to-"); ok && v == "true" {
				to = append(to, role)
			}
		}
		slices.Sort(to)
		return to
	}
	grants := func(cr *rbacv1.ClusterRole) []string {
		var out []string
		for _, r := range cr.Rules {
			for _, g := range r.APIGroups {
				for _, res := range r.Resources {
					for _, v := range r.Verbs {
						out = append(out, v+" "+res+"."+g)
					}
				}
			}
		}
		slices.Sort(out)
		return out
	}

	objs := render()
	for _, tc := range []struct {
		name       string
		aggregated []string
		grants     []string
	}{
		{full + "-view", []string{"admin", "cluster-reader", "edit", "view"}, []string{
			"get trustanchorrotations.trust.linkerd.io", "list trustanchorrotations.trust.linkerd.io", "watch trustanchorrotations.trust.linkerd.io"}},
		{full + "-edit", []string{"admin", "edit"}, []string{
			"create trustanchorrotations.trust.linkerd.io", "delete trustanchorrotations.trust.linkerd.io", "deletecollection trustanchorrotations.trust.linkerd.io",
			"patch trustanchorrotations.trust.linkerd.io", "update trustanchorrotations.trust.linkerd.io"}},
	} {
		o := Find(objs, "ClusterRole", tc.name)
		if o == nil {
			t.Errorf("no ClusterRole %s", tc.name)
			continue
		}
		cr := toTyped[rbacv1.ClusterRole](t, o)
		if got := aggregatedInto(cr); !slices.Equal(got, tc.aggregated) {
			t.Errorf("%s aggregates into %v, want %v", tc.name, got, tc.aggregated)
		}
		if got := grants(cr); !slices.Equal(got, tc.grants) {
			t.Errorf("%s grants %v, want %v", tc.name, got, tc.grants)
		}
	}

	for _, name := range []string{full + "-view", full + "-edit"} {
		o := Find(render("rbac.aggregateClusterRoles=false"), "ClusterRole", name)
		if o == nil {
			t.Errorf("rbac.aggregateClusterRoles=false drops ClusterRole %s; it should only drop its labels", name)
		} else if got := aggregatedInto(toTyped[rbacv1.ClusterRole](t, o)); len(got) > 0 {
			t.Errorf("with rbac.aggregateClusterRoles=false, %s aggregates into %v", name, got)
		}
		if Find(render("rbac.create=false"), "ClusterRole", name) != nil {
			t.Errorf("rbac.create=false renders ClusterRole %s", name)
		}
	}
}
