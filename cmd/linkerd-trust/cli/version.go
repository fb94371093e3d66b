package cli

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/linkerd/trust-rotation/cmd/internal/version"
)

func versionCommand(env *Env) *command {
	fs := newFlagSet("version")
	shortOut := fs.Bool("short", false, "print the client's version only, alone")
	clientOnly := fs.Bool("client", false, "print the client's version only: do not read the cluster")
	kf := addKubeFlags(fs)
	var operatorNamespace, operatorDeployment string
	fs.StringVar(&operatorNamespace, "operator-namespace", "", "namespace of the trust-rotation operator (default: the Linkerd namespace)")
	fs.StringVar(&operatorDeployment, "operator-deployment", DefaultOperatorDeployment, "Deployment of the trust-rotation operator")
	c := &command{
		name:  "version",
		short: "Print the version of linkerd-trust, and of the operator when the cluster is reachable",
		long: `Print the version of linkerd-trust and, as linkerd version does for its control plane, the
version of the trust-rotation operator installed on the cluster (its Deployment's
app.kubernetes.io/version label, which the chart sets), or why it is unavailable. check warns
when the two differ.`,
		example: "  linkerd trust version\n  linkerd trust version --client --short",
		flags:   fs,
	}
	c.run = func(ctx context.Context, args []string) error {
		if len(args) > 0 {
			return usagef("version takes no arguments, got %q", args)
		}
		if *shortOut {
			fmt.Fprintln(env.Out, version.String())
			return nil
		}
		fmt.Fprintf(env.Out, "%s version: %s\n", binary, version.String())
		if *clientOnly {
			return nil
		}
		if err := kf.validate(); err != nil {
			return err
		}
		if operatorNamespace == "" {
			operatorNamespace = kf.Config.LinkerdNamespace
		}
		v, err := operatorVersion(ctx, env, kf, operatorNamespace, operatorDeployment)
		if err != nil {
			v = "unavailable (" + err.Error() + ")"
		}
		fmt.Fprintf(env.Out, "trust-rotation operator version: %s\n", v)
		return nil
	}
	return c
}

// operatorVersion reads the version of the operator Deployment ns/name: its
// app.kubernetes.io/version label, the chart's appVersion.
func operatorVersion(ctx context.Context, env *Env, kf *KubeFlags, ns, name string) (string, error) {
	cl, err := env.clients(kf)
	if err != nil {
		return "", err
	}
	d, err := cl.Kube.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", notFound("Deployment", ns+"/"+name, err)
	}
	v := d.Labels[versionLabel]
	if v == "" {
		return "", fmt.Errorf("Deployment %s/%s has no %s label", ns, name, versionLabel)
	}
	return v, nil
}

// versionLabel is the label the chart sets to its appVersion, the operator's version.
const versionLabel = "app.kubernetes.io/version"

// metadataCommand answers Linkerd's extension discovery: `linkerd check` runs the checks of an
// extension whose metadata says "checks": "always", even when no namespace carries its label.
func metadataCommand(env *Env) *command {
	fs := newFlagSet("_extension-metadata")
	c := &command{
		name:   "_extension-metadata",
		short:  "Print the Linkerd extension metadata",
		long:   "Print the metadata linkerd reads to discover this extension: its name, and that\nlinkerd check always runs its checks.",
		hidden: true,
		flags:  fs,
	}
	c.run = func(_ context.Context, args []string) error {
		if len(args) > 0 {
			return usagef("_extension-metadata takes no arguments, got %q", args)
		}
		_, err := fmt.Fprintln(env.Out, `{"name":"linkerd-trust","checks":"always"}`)
		return err
	}
	return c
}
