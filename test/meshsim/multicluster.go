package meshsim

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/linkerd/trust-rotation/test/internal/poll"
)

// Linkerd multicluster, as `linkerd multicluster install` and `linkerd multicluster link-gen` set it
// up (linkerd2 multicluster/charts/linkerd-multicluster and multicluster/cmd/link.go): in each
// cluster a meshed linkerd-gateway Deployment in the linkerd-multicluster namespace, and in the
// source cluster of a link a Link (links.multicluster.linkerd.io) naming the target cluster and
// a Secret cluster-credentials-<link> whose "kubeconfig" key reaches the target's apiserver as
// its remote-access ServiceAccount.
const (
	MulticlusterNamespace = "linkerd-multicluster"
	GatewayName           = "linkerd-gateway"
	LabelExtension        = "linkerd.io/extension"
	ExtensionMulticluster = "multicluster"
	// RemoteAccessServiceAccount is the linkerd-multicluster chart's default
	// remoteMirrorServiceAccountName.
	RemoteAccessServiceAccount = "linkerd-service-mirror-remote-access-default"
	LinkCredentialsPrefix      = "cluster-credentials-"
	LinkCredentialsKey         = "kubeconfig"
	LinkCredentialsType        = "mirror.linkerd.io/remote-kubeconfig"
)

// LinkGVR is the Link resource, at the version the test CRD serves (Linkerd 2.18 and later).
var LinkGVR = schema.GroupVersionResource{Group: "multicluster.linkerd.io", Version: "v1alpha3", Resource: "links"}

// IsGateway reports whether a pod is a Linkerd multicluster gateway.
func IsGateway(pod *corev1.Pod) bool {
	return pod.Namespace == MulticlusterNamespace && pod.Labels["app"] == GatewayName && pod.Labels[LabelExtension] == ExtensionMulticluster
}

// InstallGateway creates the linkerd-multicluster namespace, the gateway's ServiceAccount and
// its meshed Deployment (pod annotation linkerd.io/inject: enabled), as the linkerd-multicluster
// chart does. It does not wait for the rollout.
func InstallGateway(ctx context.Context, kube kubernetes.Interface) (Workload, error) {
	w := Workload{Namespace: MulticlusterNamespace, Name: GatewayName}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: MulticlusterNamespace, Labels: map[string]string{LabelExtension: ExtensionMulticluster}}}
	if _, err := kube.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return w, fmt.Errorf("creating namespace %s: %w", MulticlusterNamespace, err)
	}
	for _, sa := range []string{GatewayName, RemoteAccessServiceAccount} {
		obj := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa, Namespace: MulticlusterNamespace}}
		if _, err := kube.CoreV1().ServiceAccounts(MulticlusterNamespace).Create(ctx, obj, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return w, fmt.Errorf("creating ServiceAccount %s/%s: %w", MulticlusterNamespace, sa, err)
		}
	}
	labels := map[string]string{LabelExtension: ExtensionMulticluster, "app": GatewayName}
	one := int32(1)
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: GatewayName, Namespace: MulticlusterNamespace, Labels: map[string]string{
			LabelExtension: ExtensionMulticluster, "app": GatewayName, LabelControlPlaneComponent: "gateway"}},
		Spec: appsv1.DeploymentSpec{
			Replicas: &one,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: map[string]string{
					AnnotationInject: "enabled", "config.linkerd.io/enable-gateway": "true"}},
				Spec: corev1.PodSpec{ServiceAccountName: GatewayName, Containers: []corev1.Container{{Name: "pause", Image: "gcr.io/google_containers/pause"}}},
			},
		},
	}
	if _, err := kube.AppsV1().Deployments(MulticlusterNamespace).Create(ctx, d, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return w, fmt.Errorf("creating Deployment %s: %w", w, err)
	}
	return w, nil
}

// LinkOptions describe one link: in the source cluster, the target cluster's Link and
// credentials.
type LinkOptions struct {
	// Source reaches the source cluster's apiserver (as an admin).
	Source *rest.Config
	// Target is the target cluster's name: the Link's name and spec.targetClusterName.
	Target string
	// Kubeconfig reaches the target cluster's apiserver (as its remote-access ServiceAccount).
	Kubeconfig []byte
	// GatewayAddress is the target's gateway address, for the Link's spec.
	GatewayAddress string
}

// Link does what `linkerd multicluster link-gen --cluster-name <target>` applied to the source
// cluster does: the Link CRD (when missing), the credentials Secrets and the Link of
// LinkObjects.
func Link(ctx context.Context, opts LinkOptions) error {
	kube, err := kubernetes.NewForConfig(opts.Source)
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(opts.Source)
	if err != nil {
		return err
	}
	if err := ensureLinkCRD(ctx, dyn); err != nil {
		return err
	}
	secrets, link := LinkObjects(opts)
	for _, secret := range secrets {
		api := kube.CoreV1().Secrets(secret.Namespace)
		if _, err := api.Create(ctx, secret, metav1.CreateOptions{}); apierrors.IsAlreadyExists(err) {
			if _, err := api.Update(ctx, secret, metav1.UpdateOptions{}); err != nil {
				return fmt.Errorf("updating Secret %s/%s: %w", secret.Namespace, secret.Name, err)
			}
		} else if err != nil {
			return fmt.Errorf("creating Secret %s/%s: %w", secret.Namespace, secret.Name, err)
		}
	}
	if _, err := dyn.Resource(LinkGVR).Namespace(MulticlusterNamespace).Create(ctx, link, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating Link %s/%s: %w", MulticlusterNamespace, opts.Target, err)
	}
	return nil
}

// LinkObjects are the objects `linkerd multicluster link-gen --cluster-name <target>` renders
// for the source cluster (linkerd2 multicluster/cmd/link-gen.go; recorded from edge-26.8.3 in
// testdata/linkerd-multicluster): the credentials Secret cluster-credentials-<target> twice, in
// the multicluster namespace (read by the service mirror and by this project's operator) and,
// labelled with the cluster's name and annotated with its trust and cluster domains, in the
// control plane's namespace; and the Link, which names the Secret, the target cluster and its
// gateway (address, port, identity, probe) and the selectors of the services to mirror.
func LinkObjects(opts LinkOptions) ([]*corev1.Secret, *unstructured.Unstructured) {
	name := LinkCredentialsPrefix + opts.Target
	data := map[string][]byte{LinkCredentialsKey: opts.Kubeconfig}
	secrets := []*corev1.Secret{
		{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: MulticlusterNamespace}, Type: LinkCredentialsType, Data: data},
		{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: DefaultLinkerdNamespace,
			Labels: map[string]string{"multicluster.linkerd.io/cluster-name": opts.Target},
			Annotations: map[string]string{
				"multicluster.linkerd.io/trust-domain":   DefaultTrustDomain,
				"multicluster.linkerd.io/cluster-domain": DefaultTrustDomain,
			}}, Type: LinkCredentialsType, Data: data},
	}
	matchLabels := func(k, v string) map[string]any { return map[string]any{"matchLabels": map[string]any{k: v}} }
	link := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": LinkGVR.GroupVersion().String(), "kind": "Link",
		"metadata": map[string]any{"name": opts.Target, "namespace": MulticlusterNamespace},
		"spec": map[string]any{
			"targetClusterName":             opts.Target,
			"targetClusterDomain":           DefaultTrustDomain,
			"targetClusterLinkerdNamespace": DefaultLinkerdNamespace,
			"clusterCredentialsSecret":      name,
			"gatewayAddress":                opts.GatewayAddress,
			"gatewayPort":                   "4143",
			"gatewayIdentity":               fmt.Sprintf("%s.%s.serviceaccount.identity.%s.%s", GatewayName, MulticlusterNamespace, DefaultLinkerdNamespace, DefaultTrustDomain),
			"probeSpec":                     map[string]any{"path": "/ready", "period": "3s", "port": "4191"},
			"selector":                      matchLabels("mirror.linkerd.io/exported", "true"),
			"remoteDiscoverySelector":       matchLabels("mirror.linkerd.io/exported", "remote-discovery"),
			"federatedServiceSelector":      matchLabels("mirror.linkerd.io/federated", "member"),
		},
	}}
	return secrets, link
}

// Unlink deletes the Link and its credentials Secrets from the source cluster, as `linkerd
// multicluster unlink` does.
func Unlink(ctx context.Context, source *rest.Config, target string) error {
	kube, err := kubernetes.NewForConfig(source)
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(source)
	if err != nil {
		return err
	}
	if err := dyn.Resource(LinkGVR).Namespace(MulticlusterNamespace).Delete(ctx, target, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting Link %s/%s: %w", MulticlusterNamespace, target, err)
	}
	secrets, _ := LinkObjects(LinkOptions{Target: target})
	for _, s := range secrets {
		err = kube.CoreV1().Secrets(s.Namespace).Delete(ctx, s.Name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting Secret %s/%s: %w", s.Namespace, s.Name, err)
		}
	}
	return nil
}

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// InstallLinkCRD creates the Link CRD in a cluster, as `linkerd multicluster install` does, and
// waits until it is served.
func InstallLinkCRD(ctx context.Context, cfg *rest.Config) error {
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	return ensureLinkCRD(ctx, dyn)
}

// ensureLinkCRD creates the Link CRD (the v1alpha3 version, its spec and status kept as given)
// and waits until the apiserver serves it.
func ensureLinkCRD(ctx context.Context, dyn dynamic.Interface) error {
	open := map[string]any{"type": "object", "x-kubernetes-preserve-unknown-fields": true}
	crd := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
		"metadata": map[string]any{"name": "links.multicluster.linkerd.io", "labels": map[string]any{LabelExtension: ExtensionMulticluster}},
		"spec": map[string]any{
			"group": LinkGVR.Group, "scope": "Namespaced",
			"names": map[string]any{"plural": "links", "singular": "link", "kind": "Link", "listKind": "LinkList"},
			"versions": []any{map[string]any{
				"name": LinkGVR.Version, "served": true, "storage": true,
				"schema": map[string]any{"openAPIV3Schema": map[string]any{
					"type": "object", "properties": map[string]any{"spec": open, "status": open},
				}},
			}},
		},
	}}
	if _, err := dyn.Resource(crdGVR).Create(ctx, crd, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating the Link CRD: %w", err)
	}
	return poll.Until(ctx, time.Minute, "the Link CRD to be served", func(ctx context.Context) (bool, error) {
		_, err := dyn.Resource(LinkGVR).Namespace(MulticlusterNamespace).List(ctx, metav1.ListOptions{Limit: 1})
		if err != nil {
			return false, poll.Pending("%v", err)
		}
		return true, nil
	})
}

// RemoteAccessKubeconfig is the kubeconfig `linkerd multicluster link-gen` puts in the
// credentials Secret for the target cluster: the target's server and CA, and the token of the
// remote-access ServiceAccount from its token Secret (which the linkerd-multicluster chart
// creates as <ServiceAccount>-token and the token controller fills in). It creates the
// ServiceAccount and its token Secret in the target when missing, and waits for the token.
func RemoteAccessKubeconfig(ctx context.Context, target *rest.Config) ([]byte, error) {
	kube, err := kubernetes.NewForConfig(target)
	if err != nil {
		return nil, err
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: RemoteAccessServiceAccount, Namespace: MulticlusterNamespace}}
	if _, err := kube.CoreV1().ServiceAccounts(MulticlusterNamespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("creating ServiceAccount %s/%s: %w", MulticlusterNamespace, sa.Name, err)
	}
	tokenSecret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: RemoteAccessServiceAccount + "-token", Namespace: MulticlusterNamespace,
		Labels:      map[string]string{LabelExtension: ExtensionMulticluster},
		Annotations: map[string]string{corev1.ServiceAccountNameKey: RemoteAccessServiceAccount}},
		Type: corev1.SecretTypeServiceAccountToken}
	if _, err := kube.CoreV1().Secrets(MulticlusterNamespace).Create(ctx, tokenSecret, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("creating Secret %s/%s: %w", MulticlusterNamespace, tokenSecret.Name, err)
	}
	var token []byte
	err = poll.Until(ctx, time.Minute, "the token controller to fill in Secret "+MulticlusterNamespace+"/"+tokenSecret.Name, func(ctx context.Context) (bool, error) {
		s, err := kube.CoreV1().Secrets(MulticlusterNamespace).Get(ctx, tokenSecret.Name, metav1.GetOptions{})
		if err != nil {
			return false, poll.Pending("%v", err)
		}
		token = s.Data[corev1.ServiceAccountTokenKey]
		return len(token) > 0, nil
	})
	if err != nil {
		return nil, err
	}
	tls := rest.CopyConfig(target)
	if err := rest.LoadTLSFiles(tls); err != nil {
		return nil, err
	}
	return LinkKubeconfig(target.Host, tls.CAData, string(token))
}

// LinkKubeconfig builds a kubeconfig as link-gen does (multicluster/cmd/link-gen.go
// getKubeconfig): one cluster (server, CA), one user named after the remote-access
// ServiceAccount authenticating with its token, one context, current.
func LinkKubeconfig(server string, caPEM []byte, token string) ([]byte, error) {
	const name = "target"
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[name] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caPEM}
	cfg.AuthInfos[RemoteAccessServiceAccount] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: RemoteAccessServiceAccount}
	cfg.CurrentContext = name
	return clientcmd.Write(*cfg)
}
