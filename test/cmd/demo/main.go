// Command demo runs the product end to end on an embedded local cluster, as a user of the guide
// would: it starts a real cluster (etcd, kube-apiserver, controller-manager, scheduler, kwok and
// the real cert-manager), installs Linkerd's PKI, installs both charts with helm, runs the
// operator under the chart's ServiceAccount, simulates a Linkerd mesh with a few meshed
// workloads, and performs a full trust-anchor rotation — renewing the anchor, restarting the
// workloads when asked, renewing the issuer, restarting when asked — printing each phase as it
// passes, then `linkerd trust check` and `linkerd trust inspect`. The mTLS oracle watches every
// pod pair throughout. It stops everything it started.
//
// Run it with `make demo`; `make demo-multicluster` (-clusters 2) rotates two linked clusters
// (see multicluster.go).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/test/charts"
	"github.com/linkerd/trust-rotation/test/cluster"
	"github.com/linkerd/trust-rotation/test/internal/poll"
	"github.com/linkerd/trust-rotation/test/internal/proc"
	"github.com/linkerd/trust-rotation/test/meshsim"
	"github.com/linkerd/trust-rotation/test/pki"
	"github.com/linkerd/trust-rotation/test/reallinkerd"
	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
	"github.com/linkerd/trust-rotation/workflow/client"
)

func main() {
	namespaces := flag.Int("namespaces", 2, "namespaces of meshed workloads")
	deployments := flag.Int("deployments", 4, "meshed Deployments, spread over the namespaces")
	replicas := flag.Int("replicas", 2, "replicas per Deployment")
	keep := flag.String("work-dir", "", "keep the cluster's files and logs here (default: a temp dir, removed)")
	clusters := flag.Int("clusters", 1, "1: one cluster; 2: two linked clusters, west and east, rotated each at its own pace (see multicluster.go)")
	klog.InitFlags(nil)
	_ = flag.Set("v", "0")
	_ = flag.Set("logtostderr", "false")
	_ = flag.Set("stderrthreshold", "FATAL")
	flag.Parse()

	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	var result string
	play := run
	switch *clusters {
	case 1:
	case 2:
		play = runMulticluster
	default:
		fmt.Fprintln(os.Stderr, "demo: -clusters must be 1 or 2")
		os.Exit(2)
	}
	fmt.Println(reallinkerd.FromEnv().Mode(ctx))
	if err := play(ctx, *namespaces, *deployments, int32(*replicas), *keep, &result); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
	// The result is the last line, printed once the cluster has stopped.
	fmt.Println(result)
}

// say prints a line of the demo's story, stamped with the time since the demo began.
var began = time.Now()

func say(format string, args ...any) {
	fmt.Printf("[%6.1fs] %s\n", time.Since(began).Seconds(), fmt.Sprintf(format, args...))
}

// run plays the demo and sets result to its closing line.
func run(ctx context.Context, namespaces, deployments int, replicas int32, workDir string, result *string) error {
	bin, cleanup, err := buildBinaries(ctx)
	if err != nil {
		return err
	}
	defer cleanup()

	say("starting the local cluster (etcd, kube-apiserver, controller-manager, scheduler, kwok, cert-manager)")
	c, err := cluster.Start(ctx, cluster.Options{WorkDir: workDir})
	if err != nil {
		return err
	}
	defer func() {
		say("stopping the cluster")
		if err := c.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "demo: stopping the cluster:", err)
		}
	}()
	kube := c.Kube()

	say("installing Linkerd's PKI with cert-manager (trust anchor and identity issuer)")
	if _, err := pki.Install(ctx, kube, c.CertManager(), pki.Options{}); err != nil {
		return err
	}
	say("helm install trust-rotation-operator-crds and trust-rotation-operator")
	rel, err := charts.Install(ctx, c, charts.InstallOptions{})
	if err != nil {
		return err
	}
	adminAddr, err := proc.FreeAddr()
	if err != nil {
		return err
	}
	say("running the operator under the chart's ServiceAccount %s", rel.User)
	opLog := filepath.Join(os.TempDir(), fmt.Sprintf("trust-rotation-demo-operator-%d.log", os.Getpid()))
	op, err := proc.Start(filepath.Join(bin, "trust-rotation-operator"),
		append([]string{"--kubeconfig", rel.Kubeconfig, "--admin-addr", adminAddr}, rel.OperatorArgs...),
		[]string{"POD_NAMESPACE=" + rel.Namespace}, opLog)
	if err != nil {
		return err
	}
	defer op.Stop(10 * time.Second)

	tars, err := client.NewForConfig(c.RESTConfig())
	if err != nil {
		return err
	}
	if err := waitFor(ctx, tars, "the operator to bootstrap linkerd-identity-trust-roots", func(t *v1alpha1.TrustAnchorRotation) bool {
		return t.Status.Checkpoint != nil && t.Status.Checkpoint.Step == steps.StepDetectAnchorRotation
	}); err != nil {
		return fmt.Errorf("%w (operator log: %s)", err, opLog)
	}
	say("bootstrapped: linkerd-previous-anchor and linkerd-identity-trust-roots exist; phase Synced")

	say("starting the Linkerd mesh simulator: control plane and %d meshed Deployments x %d replicas", deployments, replicas)
	mesh, err := meshsim.Start(ctx, meshsim.Config{RESTConfig: c.RESTConfig(), VolumeRefreshDelay: meshsim.Never,
		Registerer: prometheus.NewRegistry(), Linkerd: reallinkerd.FromEnv()})
	if err != nil {
		return err
	}
	defer mesh.Stop()
	if err := meshsim.InstallControlPlane(ctx, kube, meshsim.ControlPlaneOptions{}); err != nil {
		return err
	}
	if err := meshsim.WaitForRollouts(ctx, kube, mesh.ControlPlane()); err != nil {
		return err
	}
	apps, err := meshsim.CreateMeshedWorkloads(ctx, kube, meshsim.WorkloadSpec{Prefix: "emojivoto", Namespaces: namespaces, Deployments: deployments, Replicas: replicas})
	if err != nil {
		return err
	}
	restart := func() error {
		say("kubectl rollout restart of every meshed workload")
		if err := mesh.RolloutRestartAll(ctx, apps); err != nil {
			return err
		}
		if err := meshsim.WaitForRollouts(ctx, kube, apps); err != nil {
			return err
		}
		return mesh.WaitForCertificates(ctx, 0, nil)
	}
	if err := meshsim.WaitForRollouts(ctx, kube, apps); err != nil {
		return err
	}
	if err := mesh.WaitForCertificates(ctx, 0, nil); err != nil {
		return err
	}
	say("%d meshed pods run with certificates; mTLS oracle watching", len(mesh.Pods()))

	watch := newPhaseWatch(tars)
	go watch.run(ctx)
	start := time.Now()

	say("STEP 1: cmctl renew -n cert-manager linkerd-trust-anchor")
	if err := renew(ctx, c, "cert-manager", "linkerd-trust-anchor"); err != nil {
		return err
	}
	if err := waitPhase(ctx, tars, v1alpha1.PhasePropagatingTrustRoots); err != nil {
		return err
	}
	say("STEP 2: restart the data plane, as the blocking message asks")
	if err := restart(); err != nil {
		return err
	}
	if err := waitPhase(ctx, tars, v1alpha1.PhaseWaitingForIdentityRotation); err != nil {
		return err
	}
	say("STEP 3: cmctl renew -n linkerd linkerd-identity-issuer")
	if err := renew(ctx, c, "linkerd", "linkerd-identity-issuer"); err != nil {
		return err
	}
	if err := waitPhase(ctx, tars, v1alpha1.PhaseRenewingWorkloadCerts); err != nil {
		return err
	}
	say("        restart the data plane so proxies get certificates from the new issuer")
	if err := restart(); err != nil {
		return err
	}
	if err := waitPhase(ctx, tars, v1alpha1.PhaseRemovingOldTrustRoots); err != nil {
		return err
	}
	say("STEP 4: the final data-plane restart onto the reduced bundle")
	if err := restart(); err != nil {
		return err
	}
	if err := waitPhase(ctx, tars, v1alpha1.PhaseSynced); err != nil {
		return err
	}
	took := time.Since(start)
	watch.stop()
	// Synced comes once the reduced bundle is in every pod; the certificates of the pods the
	// final restart started are read after it. Wait for the status to count them, so that the
	// closing inspect shows one set of numbers.
	say("        the operator reads the certificates of the pods the final restart started")
	if err := waitFor(ctx, tars, "every meshed pod's certificate read and converged", func(t *v1alpha1.TrustAnchorRotation) bool {
		wc := t.Status.WorkloadCertificates
		return wc != nil && wc.Status == v1alpha1.Converged && wc.NotProbedPods == 0 && wc.ConvergedPods == wc.TargetPods
	}); err != nil {
		return err
	}

	adminKubeconfig := c.Kubeconfig()
	for _, args := range [][]string{{"check"}, {"inspect"}} {
		fmt.Printf("\n$ linkerd trust %s\n", strings.Join(args, " "))
		cmd := exec.CommandContext(ctx, filepath.Join(bin, "linkerd-trust"), append(args, "--kubeconfig", adminKubeconfig)...)
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stdout
		if err := cmd.Run(); err != nil {
			fmt.Printf("(linkerd trust %s: %v)\n", args[0], err)
		}
	}
	violations := mesh.Oracle().ViolationCount()
	fmt.Println()
	op.Stop(10 * time.Second)
	mesh.Stop()
	*result = fmt.Sprintf("demo: rotation complete in %s, %d mTLS violations", took.Round(100*time.Millisecond), violations)
	if r := mesh.Oracle().VerifierReport(); r != "" {
		*result += "; " + r
	}
	return nil
}

// buildBinaries builds the operator and the CLI of this checkout into a temporary directory,
// which cleanup removes.
func buildBinaries(ctx context.Context) (bin string, cleanup func(), err error) {
	root, err := cluster.ModuleRoot()
	if err != nil {
		return "", nil, err
	}
	if bin, err = os.MkdirTemp("", "trust-rotation-demo-bin-"); err != nil {
		return "", nil, err
	}
	cleanup = func() { os.RemoveAll(bin) }
	say("building trust-rotation-operator and linkerd-trust")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin+"/", "./cmd/trust-rotation-operator", "./cmd/linkerd-trust")
	build.Dir, build.Stdout, build.Stderr = root, os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		cleanup()
		return "", nil, fmt.Errorf("building: %w", err)
	}
	return bin, cleanup, nil
}

func renew(ctx context.Context, c *cluster.Cluster, ns, name string) error {
	sec, err := c.Kube().CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	certs, err := steps.ParseCertificates(sec.Data["tls.crt"])
	if err != nil {
		return err
	}
	if err := pki.Renew(ctx, c.CertManager(), ns, name); err != nil {
		return err
	}
	fp, err := pki.WaitRenewed(ctx, c.Kube(), c.CertManager(), ns, name, steps.Fingerprint(certs[0]), 2*time.Minute)
	if err != nil {
		return err
	}
	say("        cert-manager issued %s/%s %.12s (new key)", ns, name, fp)
	return nil
}

func waitPhase(ctx context.Context, tars *client.Client, phase v1alpha1.Phase) error {
	return waitFor(ctx, tars, "phase "+string(phase), func(t *v1alpha1.TrustAnchorRotation) bool { return t.Status.Phase == phase })
}

func waitFor(ctx context.Context, tars *client.Client, what string, cond func(*v1alpha1.TrustAnchorRotation) bool) error {
	return poll.Until(ctx, 3*time.Minute, what, func(ctx context.Context) (bool, error) {
		t, err := tars.Get(ctx, steps.DefaultRotationName)
		if err != nil {
			return false, poll.Pending("%v", err)
		}
		if cond(t) {
			return true, nil
		}
		return false, poll.Pending("phase %s: %s", t.Status.Phase, t.Status.BlockingMessage)
	})
}

// phaseWatch prints every phase the rotation enters, with how long the previous one lasted
// and what it waits for.
type phaseWatch struct {
	tars *client.Client
	// prefix starts every line (the cluster's name, with two clusters).
	prefix string
	done   chan struct{}
	quit   chan struct{}
}

func newPhaseWatch(tars *client.Client) *phaseWatch {
	return &phaseWatch{tars: tars, done: make(chan struct{}), quit: make(chan struct{})}
}

func (w *phaseWatch) run(ctx context.Context) {
	defer close(w.done)
	var phase v1alpha1.Phase = v1alpha1.PhaseSynced
	var since = time.Now()
	var message string
	ticker := time.NewTicker(50 * time.Millisecond)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.quit:
			return
		case <-ticker.C:
		}
		t, err := w.tars.Get(ctx, steps.DefaultRotationName)
		if err != nil {
			continue
		}
		if t.Status.Phase != phase {
			say("  %sphase %-26s (%s in %s)", w.prefix, t.Status.Phase, time.Since(since).Round(10*time.Millisecond), phase)
			phase, since, message = t.Status.Phase, time.Now(), ""
		}
		if m := t.Status.BlockingMessage; m != "" && m != message {
			say("    %swaiting: %s", w.prefix, m)
			message = m
		}
	}
}

func (w *phaseWatch) stop() {
	select {
	case <-w.quit:
	default:
		close(w.quit)
	}
	<-w.done
}
