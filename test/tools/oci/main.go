// Command oci is the project's image tooling, on go-containerregistry:
//
//	oci build    assemble the operator image from its two static binaries into an OCI layout,
//	             with an SPDX SBOM attached to each platform's image (make image)
//	oci push     push an OCI layout's image and its SBOMs to a registry; print the digest
//	oci registry serve a registry on the loopback (the test bed's registry)
//	oci export   write an image's flattened filesystem as a tar to stdout, and its config
//
// Why not ko, which operator users know: ko builds one Go binary per image (at /ko-app/<name>),
// and this image holds two, the operator and the linkerd-trust CLI that the chart's hook Jobs
// run; ko takes its base only from a registry or a Docker daemon (ko.local), so an offline build
// would need a registry running first; and ko's dependencies (cosign, the cloud credential
// helpers, kind) make a cold build of the tool many times longer than this one's. This tool uses
// the library ko itself assembles images with (go-containerregistry's mutate, layout and remote
// packages), produces the same shape (a static binary on a distroless-like base, nonroot, an SPDX
// SBOM from the binaries' build information, reproducible times), and is small.
package main

import (
	"fmt"
	"os"
)

func main() {
	cmds := map[string]func([]string) error{
		"build":    build,
		"push":     push,
		"registry": serve,
		"export":   export,
	}
	if len(os.Args) < 2 || cmds[os.Args[1]] == nil {
		fmt.Fprintln(os.Stderr, "usage: oci build|push|registry|export [flags] (oci <command> -h for its flags)")
		os.Exit(2)
	}
	if err := cmds[os.Args[1]](os.Args[2:]); err != nil {
		fmt.Fprintf(os.Stderr, "oci %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}
