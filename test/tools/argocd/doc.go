// Package argocd tests the Argo CD example in manifests/argocd (see health_test.go).
package argocd
