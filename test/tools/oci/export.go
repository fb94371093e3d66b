package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// export pulls an image as a container runtime does — the reference (best by digest), the
// platform's image of an index — and writes its flattened filesystem (every layer applied, as
// `crane export` does) as a tar to stdout and its configuration to --config: what the test
// bed's pod runner unpacks and runs.
func export(args []string) error {
	fs := flag.NewFlagSet("export", flag.ContinueOnError)
	config := fs.String("config", "", "write the image's configuration (JSON) to this file")
	platform := fs.String("platform", "linux/amd64", "the platform of an index to pull")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return fmt.Errorf("usage: oci export [--config FILE] [--platform os/arch] IMAGE > rootfs.tar")
	}
	ref, err := name.ParseReference(fs.Arg(0))
	if err != nil {
		return err
	}
	plat, err := v1.ParsePlatform(*platform)
	if err != nil {
		return err
	}
	img, err := remote.Image(ref, remote.WithPlatform(*plat))
	if err != nil {
		return fmt.Errorf("pulling %s: %w", ref, err)
	}
	if *config != "" {
		cf, err := img.ConfigFile()
		if err != nil {
			return err
		}
		b, err := json.MarshalIndent(cf, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(*config, b, 0o644); err != nil {
			return err
		}
	}
	rc := mutate.Extract(img)
	defer rc.Close()
	_, err = io.Copy(os.Stdout, rc)
	return err
}
