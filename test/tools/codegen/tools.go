//go:build tools

// Package tools pins the code generators used by make generate.
package tools

import _ "sigs.k8s.io/controller-tools/cmd/controller-gen"
