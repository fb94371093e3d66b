package charts

import (
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
)

// TestMulticlusterIsOptIn: by default the chart grants nothing multicluster and the operator's
// --multicluster-namespace is empty (rotations wait for no linked cluster). multicluster.enabled
// adds a Role in the multicluster namespace that reads Links and gets Secrets (no list, no
// watch) and passes the namespace; multicluster.remoteAccess.enabled lets the remote-access
// ServiceAccounts get and watch the one TrustAnchorRotation, by name, and nothing else.
func TestMulticlusterIsOptIn(t *testing.T) {
	render := renderTRO(t)
	full := "tro-trust-rotation-operator"
	operatorArgs := func(set ...string) ([]string, []*rbacv1.Role, []*rbacv1.ClusterRole) {
		t.Helper()
		objs := render(set...)
		d := toTyped[appsv1.Deployment](t, Find(objs, "Deployment", full))
		var roles []*rbacv1.Role
		var croles []*rbacv1.ClusterRole
		for _, o := range objs {
			if strings.Contains(o.GetName(), "multicluster") && o.GetKind() == "Role" {
				roles = append(roles, toTyped[rbacv1.Role](t, o))
			}
			if strings.Contains(o.GetName(), "remote-access") && o.GetKind() == "ClusterRole" {
				croles = append(croles, toTyped[rbacv1.ClusterRole](t, o))
			}
		}
		return d.Spec.Template.Spec.Containers[0].Args, roles, croles
	}

	a, roles, croles := operatorArgs()
	if !slices.Contains(a, "--multicluster-namespace=") || len(roles) != 0 || len(croles) != 0 {
		t.Fatalf("defaults: args %v, roles %d, cluster roles %d; want an empty --multicluster-namespace and no multicluster RBAC", a, len(roles), len(croles))
	}

	a, roles, croles = operatorArgs("multicluster.enabled=true", "multicluster.namespace=mc", "multicluster.remoteAccess.enabled=true",
		"multicluster.remoteAccess.serviceAccounts={east-access,west-access}", "rotation.name=mesh")
	if !slices.Contains(a, "--multicluster-namespace=mc") || !slices.Contains(a, "--remote-stale-after=3m") {
		t.Errorf("args %v: want --multicluster-namespace=mc and --remote-stale-after=3m", a)
	}
	if len(roles) != 1 || roles[0].Namespace != "mc" {
		t.Fatalf("roles %+v: want one Role in namespace mc", roles)
	}
	var got []string
	for _, r := range roles[0].Rules {
		for _, res := range r.Resources {
			for _, v := range r.Verbs {
				got = append(got, v+" "+res)
			}
		}
		if len(r.ResourceNames) != 0 {
			t.Errorf("rule %+v names resources the chart cannot know", r)
		}
	}
	slices.Sort(got)
	if want := []string{"get links", "get secrets", "list links", "watch links"}; !slices.Equal(got, want) {
		t.Errorf("the multicluster Role grants %v, want %v", got, want)
	}
	if len(croles) != 1 || len(croles[0].Rules) != 1 {
		t.Fatalf("remote-access ClusterRoles %+v: want one with one rule", croles)
	}
	rule := croles[0].Rules[0]
	if !slices.Equal(rule.Resources, []string{"trustanchorrotations"}) || !slices.Equal(rule.ResourceNames, []string{"mesh"}) ||
		!slices.Equal(rule.Verbs, []string{"get", "watch"}) {
		t.Errorf("remote access rule %+v: want get and watch of trustanchorrotations/mesh only", rule)
	}
	crb := toTyped[rbacv1.ClusterRoleBinding](t, Find(render("multicluster.remoteAccess.enabled=true", "multicluster.namespace=mc",
		"multicluster.remoteAccess.serviceAccounts={east-access,west-access}"), "ClusterRoleBinding", full+"-remote-access"))
	var subjects []string
	for _, s := range crb.Subjects {
		subjects = append(subjects, s.Namespace+"/"+s.Name)
	}
	if !slices.Equal(subjects, []string{"mc/east-access", "mc/west-access"}) {
		t.Errorf("remote access is bound to %v", subjects)
	}
}
