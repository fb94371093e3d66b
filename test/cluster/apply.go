package cluster

import "context"

// ApplyCRDs server-side applies every CustomResourceDefinition in the YAML files of dir (for
// example the project's manifests/crds) and waits until each is Established.
func (c *Cluster) ApplyCRDs(ctx context.Context, dir string) error { return c.applyCRDs(ctx, dir) }
