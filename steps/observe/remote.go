package observe

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/steps/kube"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
	"github.com/linkerd/trust-rotation/workflow/client"
)

// Linkerd multicluster's contract (linkerd2 multicluster/, controller/gen/apis/link): `linkerd
// multicluster link` creates, in the multicluster namespace of the source cluster, a Link
// (links.multicluster.linkerd.io) whose spec names the target cluster (targetClusterName) and the
// Secret holding a kubeconfig for it (clusterCredentialsSecret, cluster-credentials-<link>), under
// the data key "kubeconfig".
const (
	DefaultMulticlusterNamespace = "linkerd-multicluster"
	LinkGroup                    = "multicluster.linkerd.io"
	LinkResource                 = "links"
	LinkCredentialsKey           = "kubeconfig"
	LinkCredentialsPrefix        = "cluster-credentials-"
	// SourceSpec is the source of a remote named in spec.remoteClusters.
	SourceSpec = "spec.remoteClusters"
)

// RemoteTarget is how to read one linked cluster: its name, where it was found, the Secret (in
// the multicluster namespace) and key of its kubeconfig, and its TrustAnchorRotation's name.
type RemoteTarget struct {
	Name, Source, Secret, Key, Rotation string
}

// LinkTarget is the linked cluster a Link names.
func LinkTarget(u *unstructured.Unstructured) RemoteTarget {
	name, _, _ := unstructured.NestedString(u.Object, "spec", "targetClusterName")
	secret, _, _ := unstructured.NestedString(u.Object, "spec", "clusterCredentialsSecret")
	if name == "" {
		name = u.GetName()
	}
	if secret == "" {
		secret = LinkCredentialsPrefix + u.GetName()
	}
	return RemoteTarget{Name: name, Source: fmt.Sprintf("Link %s/%s", u.GetNamespace(), u.GetName()),
		Secret: secret, Key: LinkCredentialsKey, Rotation: steps.DefaultRotationName}
}

// RemoteTargets are the linked clusters of the Links and of spec.remoteClusters, which win over
// a Link to a cluster of the same name, in name order.
func RemoteTargets(links []RemoteTarget, spec []v1alpha1.RemoteCluster) []RemoteTarget {
	byName := map[string]RemoteTarget{}
	for _, t := range links {
		byName[t.Name] = t
	}
	for _, rc := range spec {
		t := RemoteTarget{Name: rc.Name, Source: SourceSpec, Secret: rc.KubeconfigSecret.Name, Key: rc.KubeconfigSecret.Key, Rotation: rc.RotationName}
		if t.Key == "" {
			t.Key = LinkCredentialsKey
		}
		if t.Rotation == "" {
			t.Rotation = steps.DefaultRotationName
		}
		byName[rc.Name] = t
	}
	out := make([]RemoteTarget, 0, len(byName))
	for _, t := range byName {
		out = append(out, t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// GroupLister lists the API groups an apiserver serves: a discovery client, or kube.Clients.
type GroupLister interface {
	ServerGroups() (*metav1.APIGroupList, error)
}

// LinkVersion is the served version of the Link API the apiserver prefers, "" when Linkerd
// multicluster is not installed.
func LinkVersion(disco GroupLister) (string, error) {
	groups, err := disco.ServerGroups()
	if err != nil {
		return "", fmt.Errorf("discovering the %s API: %w", LinkGroup, err)
	}
	for _, g := range groups.Groups {
		if g.Name == LinkGroup {
			return g.PreferredVersion.Version, nil
		}
	}
	return "", nil
}

// LinkGVR is the Link resource at version.
func LinkGVR(version string) schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: LinkGroup, Version: version, Resource: LinkResource}
}

// ListLinkTargets lists the Links of namespace once (for a CLI; the operator watches them):
// none when the apiserver serves no Link API.
func ListLinkTargets(ctx context.Context, dyn dynamic.Interface, disco GroupLister, namespace string) ([]RemoteTarget, error) {
	version, err := LinkVersion(disco)
	if err != nil || version == "" {
		return nil, err
	}
	list, err := dyn.Resource(LinkGVR(version)).Namespace(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing the Links of namespace %s: %w", namespace, err)
	}
	out := make([]RemoteTarget, 0, len(list.Items))
	for i := range list.Items {
		out = append(out, LinkTarget(&list.Items[i]))
	}
	return out, nil
}

// RemoteClient builds a client for the linked cluster from the kubeconfig in its credentials
// Secret, in namespace.
func RemoteClient(ctx context.Context, kube kube.Interface, namespace string, t RemoteTarget, userAgent string) (*client.Client, error) {
	if namespace == "" {
		return nil, fmt.Errorf("no multicluster namespace to read credentials Secret %s from", t.Secret)
	}
	ref := namespace + "/" + t.Secret
	sec, err := kube.CoreV1().Secrets(namespace).Get(ctx, t.Secret, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil, fmt.Errorf("credentials Secret %s not found", ref)
	case err != nil:
		return nil, fmt.Errorf("reading credentials Secret %s: %w", ref, err)
	}
	data, ok := sec.Data[t.Key]
	if !ok || len(data) == 0 {
		return nil, fmt.Errorf("credentials Secret %s has no key %q (keys: %s)", ref, t.Key, strings.Join(secretKeys(sec), ", "))
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(data)
	if err != nil {
		return nil, fmt.Errorf("credentials Secret %s, key %q: not a usable kubeconfig: %w", ref, t.Key, err)
	}
	cfg.UserAgent = userAgent
	cfg.QPS, cfg.Burst = 5, 10
	return client.NewForConfig(cfg)
}

func secretKeys(sec *corev1.Secret) []string {
	var keys []string
	for k := range sec.Data {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// RotationGetter reads TrustAnchorRotations; *client.Client is one.
type RotationGetter interface {
	Get(ctx context.Context, name string) (*v1alpha1.TrustAnchorRotation, error)
}

// ReadRemote reads the linked cluster's TrustAnchorRotation once through tars, a client made
// with its credentials (a CLI's read; the operator watches it): Problem says why it cannot be
// read, connErr (the client could not be made) included.
func ReadRemote(ctx context.Context, t RemoteTarget, tars RotationGetter, connErr error, now time.Time) steps.Remote {
	r := steps.Remote{Name: t.Name, Source: t.Source, RotationName: t.Rotation}
	if connErr != nil {
		r.Problem = connErr.Error()
		return r
	}
	getCtx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	obj, err := tars.Get(getCtx, t.Rotation)
	switch {
	case apierrors.IsNotFound(err):
		r.LastObserved = now
	case err != nil:
		r.Problem = fmt.Sprintf("reading TrustAnchorRotation %s: %v", t.Rotation, err)
	default:
		r.Found, r.Generation, r.Status, r.LastObserved = true, obj.Generation, obj.Status, now
	}
	return r
}
