// Package argocd tests the Argo CD example in manifests/argocd with Argo CD's own code (see
// health_test.go). Its command cmd/argocd-sync syncs one of the example's Applications into a
// cluster with gitops-engine, for test/charts' TestArgoCDExampleSyncsAndRotates.
package argocd
