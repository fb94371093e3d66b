package cli

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/steps/observe"
)

// Helm's ownership metadata (helm.sh/helm pkg/action/validate.go): a resource carrying them is
// one Helm adopts into the release they name; without them, a release that renders the object
// again fails ("invalid ownership metadata") instead of overwriting it.
const (
	helmReleaseNameAnnotation      = "meta.helm.sh/release-name"
	helmReleaseNamespaceAnnotation = "meta.helm.sh/release-namespace"
	helmResourcePolicyAnnotation   = "helm.sh/resource-policy"
	// trustManagerGroup is the API group of trust-manager's Bundle and ClusterBundle, which
	// own their target ConfigMaps by a controller ownerReference and label them with
	// trustManagerBundleLabel; trustManagerFieldManager is the field manager of its applies
	// (trust-manager pkg/bundle/internal/ssa_client).
	trustManagerGroup        = "trust.cert-manager.io"
	trustManagerBundleLabel  = "trust.cert-manager.io/bundle"
	trustManagerFieldManager = "trust-manager"
)

// adoptBundle hands the existing trust-roots ConfigMap over to the operator without changing
// its ca-bundle.crt: a server-side apply of the very bytes it holds makes the operator's field
// manager a co-owner (equal values never conflict), then an update of managedFields, guarded by
// the resourceVersion, drops the key from every other manager's set, and Helm's ownership
// annotations and trust-manager's ownerReference go. It refuses when the bundle's certificates
// are not the ones the operator would write (adopting would then change the trust roots at the
// operator's first write), and when Helm would delete the ConfigMap as soon as its release
// stops rendering it; it stops after the first write while trust-manager still writes the key
// (see docs/adopting.md).
func adoptBundle(ctx context.Context, cl *Clients, cfg steps.Config, want string, out io.Writer) error {
	ns, name := cfg.LinkerdNamespace, cfg.TrustRootsConfigMap
	ref := fmt.Sprintf("ConfigMap %s/%s", ns, name)
	cms := cl.Kube.CoreV1().ConfigMaps(ns)
	cm, err := cms.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("%s does not exist: there is nothing to adopt; create it with 'linkerd trust bundle'", ref)
	}
	if err != nil {
		return fmt.Errorf("reading %s: %w", ref, err)
	}
	have, ok := cm.Data[steps.TrustRootsKey]
	if !ok {
		return fmt.Errorf("%s has no key %s: there is no bundle to adopt; create it with 'linkerd trust bundle'", ref, steps.TrustRootsKey)
	}
	if err := sameAnchors(have, want); err != nil {
		return fmt.Errorf("%s: %w; adopting it would change the trust roots of every pod injected after the operator's first write. Make cert-manager's trust anchor the one the mesh trusts first (docs/adopting.md)", ref, err)
	}
	release := cm.Annotations[helmReleaseNameAnnotation]
	if release != "" && cm.Annotations[helmResourcePolicyAnnotation] != "keep" {
		return fmt.Errorf("%s belongs to Helm release %s/%s and is not annotated %s=keep: the upgrade that stops the chart rendering it (identity.externalCA=true) would delete it. Annotate it, upgrade the release, then adopt it (docs/adopting.md)",
			ref, cm.Annotations[helmReleaseNamespaceAnnotation], release, helmResourcePolicyAnnotation)
	}
	before := observe.BundleOwners(cm)

	// 1. Co-own the key, with the bytes it holds.
	apply := map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": name, "namespace": ns, "labels": map[string]string{steps.ManagedByLabel: steps.ManagedByValue}},
		"data":     map[string]string{steps.TrustRootsKey: have},
	}
	body, err := json.Marshal(apply)
	if err != nil {
		return err
	}
	if cm, err = cms.Patch(ctx, name, types.ApplyPatchType, body, metav1.PatchOptions{FieldManager: steps.FieldManager, Force: new(true)}); err != nil {
		return fmt.Errorf("applying %s as field manager %q: %w", ref, steps.FieldManager, err)
	}
	if owner := trustManagerOwner(cm); owner != "" && ownedBy(cm, trustManagerFieldManager) {
		fmt.Fprintf(out, "%s: key %s is now co-owned by field manager %q, its content unchanged (sha256 %s).\n", ref, steps.TrustRootsKey, steps.FieldManager, steps.BundleHash(have))
		fmt.Fprintf(out, "trust-manager's %s still controls it: remove the Bundle's ConfigMap target for namespace %s (spec.target), then run this again.\n", owner, ns)
		fmt.Fprintln(out, "Do not delete the Bundle before: the garbage collector would delete this ConfigMap with it.")
		return nil
	}

	// 2. Drop the key from every other manager, Helm's claim on the object and trust-manager's
	// (whose cleanup of a removed target keeps its ownerReference: deleting the Bundle would
	// then delete the ConfigMap).
	for _, k := range []string{helmReleaseNameAnnotation, helmReleaseNamespaceAnnotation} {
		delete(cm.Annotations, k)
	}
	delete(cm.Labels, trustManagerBundleLabel)
	cm.OwnerReferences = slices.DeleteFunc(cm.OwnerReferences, func(o metav1.OwnerReference) bool {
		return strings.HasPrefix(o.APIVersion, trustManagerGroup+"/")
	})
	kept := cm.ManagedFields[:0:0]
	for _, mf := range cm.ManagedFields {
		if mf.Manager != steps.FieldManager && mf.Subresource == "" && mf.FieldsV1 != nil {
			raw, empty, err := withoutDataKey(mf.FieldsV1.Raw, steps.TrustRootsKey)
			if err != nil {
				return fmt.Errorf("%s: managedFields of %q: %w", ref, mf.Manager, err)
			}
			if empty {
				continue
			}
			mf.FieldsV1 = &metav1.FieldsV1{Raw: raw}
		}
		kept = append(kept, mf)
	}
	cm.ManagedFields = kept
	if cm, err = cms.Update(ctx, cm, metav1.UpdateOptions{FieldManager: steps.FieldManager}); err != nil {
		if apierrors.IsConflict(err) {
			return fmt.Errorf("%s changed while it was adopted: run this again: %w", ref, err)
		}
		return fmt.Errorf("updating the managedFields of %s: %w", ref, err)
	}
	if got := cm.Data[steps.TrustRootsKey]; got != have {
		return fmt.Errorf("%s: key %s changed while it was adopted (sha256 %s, was %s): check who writes it", ref, steps.TrustRootsKey, steps.BundleHash(got), steps.BundleHash(have))
	}
	owners := observe.BundleOwners(cm)
	if others := (steps.Bundle{Owners: owners}).OtherOwners(); len(others) > 0 {
		return fmt.Errorf("%s: key %s is still owned by %s", ref, steps.TrustRootsKey, ownerList(others))
	}
	was := "nobody else"
	if others := (steps.Bundle{Owners: before}).OtherOwners(); len(others) > 0 {
		was = ownerList(others)
	}
	fmt.Fprintf(out, "%s adopted: key %s is owned by field manager %q alone (was also: %s), its content unchanged (sha256 %s).\n",
		ref, steps.TrustRootsKey, steps.FieldManager, was, steps.BundleHash(have))
	return nil
}

// sameAnchors says how the bundle have differs from want, as sets of certificates: the bytes may
// differ (Helm's chart trims the final newline) where the roots do not.
func sameAnchors(have, want string) error {
	h, err := steps.ParseCertificates([]byte(have))
	if err != nil {
		return fmt.Errorf("key %s is not a PEM bundle: %w", steps.TrustRootsKey, err)
	}
	w, err := steps.ParseCertificates([]byte(want))
	if err != nil {
		return err
	}
	prints := func(cs []*x509.Certificate) []string {
		out := make([]string, len(cs))
		for i, c := range cs {
			out[i] = steps.ShortFingerprint(steps.Fingerprint(c))
		}
		slices.Sort(out)
		return slices.Compact(out)
	}
	if hp, wp := prints(h), prints(w); !slices.Equal(hp, wp) {
		return fmt.Errorf("it trusts %s, the operator would write %s", strings.Join(hp, ", "), strings.Join(wp, ", "))
	}
	return nil
}

func ownerList(owners []steps.FieldOwner) string {
	names := make([]string, len(owners))
	for i, o := range owners {
		names[i] = o.String()
	}
	return strings.Join(names, ", ")
}

// trustManagerOwner names the trust-manager Bundle or ClusterBundle that controls cm, if any.
func trustManagerOwner(cm *corev1.ConfigMap) string {
	for _, o := range cm.OwnerReferences {
		if strings.HasPrefix(o.APIVersion, trustManagerGroup+"/") && o.Controller != nil && *o.Controller {
			return o.Kind + " " + o.Name
		}
	}
	return ""
}

// ownedBy reports whether field manager owns cm's trust bundle key.
func ownedBy(cm *corev1.ConfigMap, manager string) bool {
	return slices.ContainsFunc(observe.BundleOwners(cm), func(o steps.FieldOwner) bool { return o.Manager == manager })
}

// withoutDataKey removes f:data.f:<key> from a managedFields entry's fieldsV1; empty is true
// when nothing is left for the entry to own.
func withoutDataKey(raw []byte, key string) (out []byte, empty bool, err error) {
	var fields map[string]any
	if err := json.Unmarshal(raw, &fields); err != nil {
		return nil, false, err
	}
	if data, ok := fields["f:data"].(map[string]any); ok {
		delete(data, "f:"+key)
		if _, self := data["."]; len(data) == 0 || self && len(data) == 1 {
			delete(fields, "f:data")
		}
	}
	if len(fields) == 0 {
		return nil, true, nil
	}
	out, err = json.Marshal(fields)
	return out, false, err
}
