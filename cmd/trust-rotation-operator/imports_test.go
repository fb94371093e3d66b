package main

import (
	"os/exec"
	"strings"
	"testing"
)

// The operator builds its clients from package kube alone: each of these packages registers or
// parses every API group at start (client-go's Clientset and informers, its apply
// configurations and discovery, cert-manager's Clientset), which was about 7.5 MiB of the operator's
// resident memory before it read an object (docs/performance-log.md). A new import of one of them,
// however indirect, fails here.
func TestOperatorImportsNoGeneratedClientset(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	banned := []string{
		"k8s.io/client-go/kubernetes",
		"k8s.io/client-go/informers",
		"k8s.io/client-go/discovery",
		"k8s.io/client-go/applyconfigurations/core/v1",
		"github.com/cert-manager/cert-manager/pkg/client/clientset/versioned",
		// client-go's fakes, which gentype imports: they bring the managed-fields machinery.
		"k8s.io/client-go/testing",
		"k8s.io/client-go/gentype",
		// client-go's event recorder, whose strategic merge patches bring the OpenAPI machinery.
		"k8s.io/client-go/tools/record",
		"k8s.io/apimachinery/pkg/util/strategicpatch",
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, b := range banned {
			if dep == b || strings.HasPrefix(dep, b+"/") {
				t.Errorf("the operator imports %s", dep)
			}
		}
	}
}
