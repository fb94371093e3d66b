//go:build !crashpoints

package main

// crashAt is the end-to-end tests' fault hook, which an operator built without -tags
// crashpoints — every build users run: make image, make release-binaries, go install — never
// reads: no environment variable can make it kill itself.
func crashAt() string { return "" }
