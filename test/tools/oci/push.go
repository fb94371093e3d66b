package main

import (
	"flag"
	"fmt"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// push pushes what `oci build` wrote: the multi-platform index under its tag (the layout's
// org.opencontainers.image.ref.name), then each SBOM by digest, a referrer of its image. It
// prints <repository>@<digest> of the index: what a chart's image.digest pins.
func push(args []string) error {
	fs := flag.NewFlagSet("push", flag.ContinueOnError)
	dir := fs.String("layout", "", "the OCI layout oci build wrote")
	repo := fs.String("image", "", "the repository to push to, <registry>/<path> (IMAGE of make image)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dir == "" || *repo == "" {
		return fmt.Errorf("--layout and --image are required")
	}
	r, err := name.NewRepository(*repo)
	if err != nil {
		return err
	}
	// Credentials as docker and crane find them (~/.docker/config.json, DOCKER_CONFIG); none
	// for the test bed's loopback registry, which go-containerregistry reaches over plain HTTP.
	opts := []remote.Option{remote.WithAuthFromKeychain(authn.DefaultKeychain)}
	l, err := layout.FromPath(*dir)
	if err != nil {
		return err
	}
	top, err := l.ImageIndex()
	if err != nil {
		return err
	}
	im, err := top.IndexManifest()
	if err != nil {
		return err
	}
	var pushed string
	// The index first: a referrer's subject should exist when the referrer arrives.
	for _, d := range im.Manifests {
		if !d.MediaType.IsIndex() {
			continue
		}
		tag := d.Annotations["org.opencontainers.image.ref.name"]
		if tag == "" {
			return fmt.Errorf("the layout's index %s has no org.opencontainers.image.ref.name", d.Digest)
		}
		idx, err := top.ImageIndex(d.Digest)
		if err != nil {
			return err
		}
		if err := remote.WriteIndex(r.Tag(tag), idx, opts...); err != nil {
			return fmt.Errorf("pushing %s: %w", r.Tag(tag), err)
		}
		pushed = r.Digest(d.Digest.String()).String()
	}
	for _, d := range im.Manifests {
		if !d.MediaType.IsImage() {
			continue
		}
		img, err := top.Image(d.Digest)
		if err != nil {
			return err
		}
		if err := remote.Write(r.Digest(d.Digest.String()), img, opts...); err != nil {
			return fmt.Errorf("pushing %s: %w", r.Digest(d.Digest.String()), err)
		}
	}
	if pushed == "" {
		return fmt.Errorf("the layout %s holds no image index", *dir)
	}
	fmt.Println(pushed)
	return nil
}
