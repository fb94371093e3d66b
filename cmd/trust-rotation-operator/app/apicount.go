package app

import (
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"
)

// CountAPIRequests makes every request sent through cfg count in
// trust_rotation_apiserver_requests_total{verb,resource}, with the verbs of the apiserver's own
// apiserver_request_total (get, list, watch, create, update, patch, delete). The apiserver's
// metric cannot tell one client from another, so the benchmark (test/cmd/bench) counts the
// operator's load here instead; the operator turns it on only with --count-api-requests.
func (m *Metrics) CountAPIRequests(cfg *rest.Config) {
	requests := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "trust_rotation_apiserver_requests_total",
		Help: "Requests the operator sent to the apiserver, by verb and resource (with --count-api-requests).",
	}, []string{"verb", "resource"})
	m.Registry.MustRegister(requests)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
			verb, resource := requestKind(req)
			requests.WithLabelValues(verb, resource).Inc()
			return rt.RoundTrip(req)
		})
	})
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// requestKind names a request's verb and resource from its URL, as the apiserver's RequestInfo
// does for the paths a client-go client sends: /api/v1/... and /apis/<group>/<version>/...,
// optionally under namespaces/<ns>/, then <resource>[/<name>[/<subresource>]].
func requestKind(req *http.Request) (verb, resource string) {
	parts := strings.Split(strings.Trim(req.URL.Path, "/"), "/")
	switch {
	case len(parts) >= 2 && parts[0] == "api":
		parts = parts[2:]
	case len(parts) >= 3 && parts[0] == "apis":
		parts = parts[3:]
	default:
		return strings.ToLower(req.Method), "nonresource"
	}
	if len(parts) >= 3 && parts[0] == "namespaces" {
		parts = parts[2:]
	}
	if len(parts) == 0 {
		return strings.ToLower(req.Method), "discovery"
	}
	resource = parts[0]
	named := len(parts) >= 2
	if len(parts) >= 3 {
		resource += "/" + parts[2]
	}
	switch req.Method {
	case http.MethodGet:
		switch {
		case req.URL.Query().Get("watch") == "true" || req.URL.Query().Get("watch") == "1":
			return "watch", resource
		case named:
			return "get", resource
		}
		return "list", resource
	case http.MethodPost:
		return "create", resource
	case http.MethodPut:
		return "update", resource
	case http.MethodPatch:
		return "patch", resource
	case http.MethodDelete:
		if named {
			return "delete", resource
		}
		return "deletecollection", resource
	}
	return strings.ToLower(req.Method), resource
}
