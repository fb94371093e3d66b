package app

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestRequestKind(t *testing.T) {
	cases := map[string]struct {
		method, url    string
		verb, resource string
	}{
		"a list of pods in every namespace":    {"GET", "/api/v1/pods?labelSelector=x", "list", "pods"},
		"a watch of pods":                      {"GET", "/api/v1/pods?watch=true&labelSelector=x", "watch", "pods"},
		"a get of a named secret":              {"GET", "/api/v1/namespaces/linkerd/secrets/issuer", "get", "secrets"},
		"a list of secrets in a namespace":     {"GET", "/api/v1/namespaces/linkerd/secrets?fieldSelector=a", "list", "secrets"},
		"a status update of a custom resource": {"PUT", "/apis/trust.linkerd.io/v1alpha1/trustanchorrotations/r/status", "update", "trustanchorrotations/status"},
		"a lease update":                       {"PUT", "/apis/coordination.k8s.io/v1/namespaces/linkerd/leases/l", "update", "leases"},
		"a deployment patch":                   {"PATCH", "/apis/apps/v1/namespaces/linkerd/deployments/d", "patch", "deployments"},
		"an event creation":                    {"POST", "/api/v1/namespaces/linkerd/events", "create", "events"},
		"a namespace get":                      {"GET", "/api/v1/namespaces/linkerd", "get", "namespaces"},
		"discovery":                            {"GET", "/apis/apps/v1", "get", "discovery"},
		"a non-resource path":                  {"GET", "/version", "get", "nonresource"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			verb, resource := requestKind(httptest.NewRequest(c.method, c.url, http.NoBody))
			if verb != c.verb || resource != c.resource {
				t.Errorf("requestKind(%s %s) = %s %s, want %s %s", c.method, c.url, verb, resource, c.verb, c.resource)
			}
		})
	}
}
