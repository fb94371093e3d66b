// The checks of category linkerd-trust-data-plane (check --proxy): whether the meshed pods were
// injected with the trust bundle the rotation wants.

package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/linkerd/trust-rotation/steps/observe"
	"github.com/linkerd/trust-rotation/steps/podindex"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

func (c *checks) dataPlaneBundle(ctx context.Context) error {
	var status *v1alpha1.TrustAnchorRotationStatus
	if tar, err := c.rotation.get(ctx); err == nil {
		status = &tar.Status
	}
	reading, err := observe.Read(ctx, c.cl.pkiReader(c.cfg), status, c.now)
	if err != nil {
		return err
	}
	if status != nil {
		if err := reading.SetInFlight(status.InFlightAnchors); err != nil {
			return fmt.Errorf("TrustAnchorRotation %s: %w", c.o.kube.RotationName, err)
		}
	}
	if unreadable := reading.Unreadable(); len(unreadable) > 0 {
		return warnf("cannot tell which trust bundle meshed pods must carry: %s", strings.Join(unreadable, "; "))
	}
	desired := reading.State.DesiredBundle()
	if desired == "" {
		return errors.New(reading.State.Anchor.Problem("trust-anchor Secret"))
	}
	hashes := reading.State.BundleHashes()
	var behind []string
	total := 0
	for _, p := range reading.Pods {
		if !p.Meshed || !p.Alive || p.ControlPlane || (c.o.namespace != "" && p.Namespace != c.o.namespace) {
			continue
		}
		total++
		if why := podindex.BundleProblem(p, hashes...); why != "" {
			behind = append(behind, fmt.Sprintf("pod %s: %s", p.Key(), why))
		}
	}
	if len(behind) == 0 {
		return nil
	}
	const limit = 10
	more, n := "", len(behind)
	if n > limit {
		more = fmt.Sprintf("\n... and %d more", n-limit)
		behind = behind[:limit]
	}
	// The population is the trust-bundle count's (status.trustBundle, inspect): meshed pods the
	// proxy injector injected, the control plane apart.
	return fmt.Errorf("%d of %d injected pod(s) (meshed, control plane apart) run with another trust bundle; restart them:\n%s%s", n, total, strings.Join(behind, "\n"), more)
}
