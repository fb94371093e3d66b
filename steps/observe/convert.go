package observe

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/linkerd/trust-rotation/steps"
)

// SourceFromSecret reads the certificate of a Secret's tls.crt. secret is nil when the Secret
// does not exist. For an issuer, the first certificate is the issuer; any others are its chain.
func SourceFromSecret(namespace, name string, secret *corev1.Secret) steps.Source {
	return SourceFromSecretKey(namespace, name, secret, steps.CertificateKey)
}

// SourceFromSecretKey is SourceFromSecret reading the certificates of key: crt.pem for the
// issuer Linkerd's chart renders (steps.IssuerKey).
func SourceFromSecretKey(namespace, name string, secret *corev1.Secret, key string) steps.Source {
	src := steps.Source{Namespace: namespace, Name: name, Found: secret != nil}
	if secret == nil {
		return src
	}
	src.Helm = steps.HelmRenderFrom(secret.Annotations)
	_, src.ChartIssuer = secret.Data[steps.ChartIssuerKey]
	data, ok := secret.Data[key]
	if !ok || len(data) == 0 {
		src.Err = fmt.Errorf("no %s key", key)
		return src
	}
	certs, err := steps.ParseCertificates(data)
	if err != nil {
		src.Err = fmt.Errorf("%s: %w", key, err)
		return src
	}
	src.Cert, src.Chain = certs[0], certs[1:]
	return src
}

// BundleFromConfigMap reads the trust bundle. cm is nil when the ConfigMap does not exist.
func BundleFromConfigMap(cm *corev1.ConfigMap) steps.Bundle {
	if cm == nil {
		return steps.Bundle{}
	}
	b := steps.Bundle{Found: true, Data: cm.Data[steps.TrustRootsKey], Owners: BundleOwners(cm), Helm: steps.HelmRenderFrom(cm.Annotations)}
	b.Certs, _ = steps.ParseCertificates([]byte(b.Data))
	return b
}

// BundleOwners returns the field managers that own the ConfigMap's data[ca-bundle.crt], the
// latest first: the managedFields entries of the main resource (not a subresource) whose
// fieldsV1 hold f:data.f:ca-bundle.crt.
func BundleOwners(cm *corev1.ConfigMap) []steps.FieldOwner {
	var out []steps.FieldOwner
	for _, mf := range cm.ManagedFields {
		if mf.Subresource != "" || mf.FieldsV1 == nil || !ownsDataKey(mf.FieldsV1.Raw, steps.TrustRootsKey) {
			continue
		}
		o := steps.FieldOwner{Manager: mf.Manager, Operation: string(mf.Operation)}
		if mf.Time != nil {
			o.Time = mf.Time.Time
		}
		out = append(out, o)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Time.After(out[j].Time) })
	return out
}

// ownsDataKey reports whether a managedFields entry's fieldsV1 holds f:data.f:<key>.
func ownsDataKey(raw []byte, key string) bool {
	var fields struct {
		Data map[string]json.RawMessage `json:"f:data"`
	}
	if err := json.Unmarshal(raw, &fields); err != nil {
		return false
	}
	_, ok := fields.Data["f:"+key]
	return ok
}

// DeploymentFrom reads what the steps need of a Deployment; d is nil when it does not exist.
// Rolled out uses the test of `kubectl rollout status`.
func DeploymentFrom(namespace, name string, d *appsv1.Deployment) steps.Deployment {
	out := steps.Deployment{Namespace: namespace, Name: name, Found: d != nil}
	if d == nil {
		return out
	}
	out.RestartedAt = d.Spec.Template.Annotations[steps.RestartedAtAnnotation]
	out.IssuerScheme = issuerScheme(d.Spec.Template.Spec.Containers)
	want := int32(1)
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	out.Replicas = want
	st := d.Status
	switch {
	case d.Generation > st.ObservedGeneration:
		out.Progress = "waiting for the deployment spec update to be observed"
	case st.UpdatedReplicas < want:
		out.Progress = fmt.Sprintf("%d of %d new replicas have been updated", st.UpdatedReplicas, want)
	case st.Replicas > st.UpdatedReplicas:
		out.Progress = fmt.Sprintf("%d old replicas are pending termination", st.Replicas-st.UpdatedReplicas)
	case st.AvailableReplicas < st.UpdatedReplicas:
		out.Progress = fmt.Sprintf("%d of %d updated replicas are available", st.AvailableReplicas, st.UpdatedReplicas)
	case st.TerminatingReplicas != nil && *st.TerminatingReplicas > 0:
		out.Progress = fmt.Sprintf("%d old replicas are terminating", *st.TerminatingReplicas)
	default:
		out.RolledOut = true
	}
	return out
}

// issuerScheme is the -identity-scheme argument of the containers, "" when none has it.
func issuerScheme(containers []corev1.Container) string {
	for _, c := range containers {
		for _, a := range c.Args {
			if v, ok := strings.CutPrefix(a, steps.IdentitySchemeArg); ok {
				return v
			}
		}
	}
	return ""
}
