package charts

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/test/cluster"
	"github.com/linkerd/trust-rotation/test/internal/poll"
	"github.com/linkerd/trust-rotation/workflow/client"
)

// The Argo CD example (manifests/argocd) syncs from a cluster with cert-manager alone to Healthy,
// and then rotates. Each child Application of apps/ is synced in the order of its sync wave by
// gitops-engine, the code Argo CD's application controller syncs with (test/tools/argocd's
// argocd-sync): its source rendered as Argo CD's repo server renders it (this repository's PKI
// manifest; the charts from the checkout with `helm template` and the Application's values), the
// chart's Helm hooks run as PreSync and PostSync hooks, and the sync done only once every
// resource is Healthy by Argo CD's health checks with argocd-cm.yaml's (the TrustAnchorRotation's
// among them). The operator's and the hooks' pods run from the image make image pushed; that
// image and the hooks' pod label are the only values the test adds.
//
// Linkerd's two Applications use Linkerd's charts from helm.linkerd.io, which no registry here
// serves: the mesh simulator stands in for the control plane, its Deployments held to what
// Linkerd edge-26.8.3 renders with the Application's values (identity.externalCA, the
// kubernetes.io/tls scheme; meshsim's TestControlPlaneMatchesLinkerd); Linkerd's CRDs are
// skipped, read by nothing in this install.
func TestArgoCDExampleSyncsAndRotates(t *testing.T) {
	c := cluster.Shared(t)
	if os.Geteuid() != 0 {
		t.Skip("skipping: running a pod's container needs root (mount, PID and network namespaces, a veth)")
	}
	cluster.DumpLogsOnFailure(t, c)
	ctx := testContext(t, 15*time.Minute)
	kube := c.Kube()
	root, err := cluster.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	tars, err := client.NewForConfig(c.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	helms, err := Helms(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	h := helms[0]
	readmeFreshCluster(t, ctx, c, h, tars)
	leaveNoUnownedCRD(t, ctx, c)

	bin := t.TempDir()
	build := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(bin, "argocd-sync"), "./cmd/argocd-sync")
	build.Dir = filepath.Join(root, "test", "tools", "argocd")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building gitops-engine's sync (test/tools/argocd/cmd/argocd-sync): %v\n%s", err, out)
	}
	trust := filepath.Join(bin, "linkerd-trust")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", trust, filepath.Join(root, "cmd", "linkerd-trust")).CombinedOutput(); err != nil {
		t.Fatalf("go build linkerd-trust: %v\n%s", err, out)
	}

	pub := publishOnce(t, ctx, c, h)
	img := pullImage(t, ctx, pub.Image)
	clusterIP, _ := kubernetesService(t, ctx, c)
	hooks := newHookRunner(t, ctx, kube, img, clusterIP, "linkerd")
	repo, digest, _ := strings.Cut(pub.Image, "@")

	apps := argoApplications(t, root)
	sources := []string{
		"--source", "https://github.com/linkerd/trust-rotation.git=" + root,
		"--source", "ghcr.io/linkerd/charts=" + filepath.Join(root, "charts"),
	}
	// sync starts syncing app; with cleanup, what it synced is deleted when the test ends (the PKI
	// is left, as README's test leaves it: later tests expect its Certificates and Secrets together).
	sync := func(app argoApp, cleanup bool, sets ...string) *argoSync {
		args := append([]string{"--kubeconfig", c.Kubeconfig(), "--argocd-cm", filepath.Join(root, "manifests", "argocd", "argocd-cm.yaml"),
			"--app", app.file, "--helm", h.Bin, "--timeout", "5m", "-v", "1"}, sources...)
		for _, s := range sets {
			args = append(args, "--set", s)
		}
		s := &argoSync{app: app.name, cmd: exec.CommandContext(ctx, filepath.Join(bin, "argocd-sync"), args...), done: make(chan struct{})}
		s.cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+filepath.Join(h.Home, "cache"), "HELM_CONFIG_HOME="+filepath.Join(h.Home, "config"), "HELM_DATA_HOME="+filepath.Join(h.Home, "data"))
		s.cmd.Stdout, s.cmd.Stderr = &s.out, &s.errOut
		if err := s.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { s.err = s.cmd.Wait(); close(s.done) }()
		if !cleanup {
			return s
		}
		t.Cleanup(func() {
			del := exec.Command(filepath.Join(bin, "argocd-sync"), append(append([]string{}, args...), "--delete")...)
			del.Env = s.cmd.Env
			if out, err := del.CombinedOutput(); err != nil {
				t.Logf("deleting what Application %s synced: %v\n%s", app.name, err, out)
			}
		})
		return s
	}

	var lease leaseConfig
	var running []*runningPod
	began := time.Now()
	for _, app := range apps {
		switch app.name {
		case "linkerd-crds":
			// Not served here; neither the operator (without multicluster) nor the simulated
			// control plane reads Linkerd's CRDs.
			t.Logf("wave %d: %s: Linkerd's chart is not served here; nothing in this install reads its CRDs", app.wave, app.name)
		case "linkerd-control-plane":
			// The stand-in must be what the Application asks of Linkerd's chart.
			var v struct {
				Identity struct {
					ExternalCA bool `json:"externalCA"`
					Issuer     struct {
						Scheme string `json:"scheme"`
					} `json:"issuer"`
				} `json:"identity"`
			}
			if err := yaml.Unmarshal(app.values, &v); err != nil {
				t.Fatal(err)
			}
			if !v.Identity.ExternalCA || v.Identity.Issuer.Scheme != "kubernetes.io/tls" {
				t.Fatalf("Application %s sets %+v: the simulated control plane runs Linkerd with identity.externalCA=true and issuer.scheme=kubernetes.io/tls", app.name, v.Identity)
			}
			t.Logf("wave %d: %s: the mesh simulator runs Linkerd's control plane as the chart renders it with %s", app.wave, app.name, strings.TrimSpace(string(app.values)))
		case "trust-rotation-operator":
			s := sync(app, true, "image.repository="+repo, "image.digest="+digest, hookPodLabel)
			// The operator's pods run from the image, on the pod network, as soon as they exist:
			// the PostSync hook waits for their leader.
			var dep *appsv1.Deployment
			err := poll.Until(ctx, 3*time.Minute, "gitops-engine to create the operator Deployment", func(ctx context.Context) (bool, error) {
				select {
				case <-s.done:
					return false, fmt.Errorf("the sync ended before the operator ran: %v\n%s%s", s.err, s.out.String(), s.errOut.String())
				default:
				}
				d, err := kube.AppsV1().Deployments("linkerd").Get(ctx, OperatorChart, metav1.GetOptions{})
				if err != nil {
					return false, poll.Pending("%v", err)
				}
				dep = d
				return true, nil
			})
			if err != nil {
				s.stop()
				t.Fatalf("%v\n%s%s", err, s.out.String(), s.errOut.String())
			}
			r := &podRunner{t: t, ctx: ctx, kubelet: hooks.kubelet, img: img, clusterIP: clusterIP, podNet: c.PodCIDR()}
			for _, p := range deploymentPods(t, ctx, kube, dep) {
				running = append(running, r.run(p))
			}
			lease = leaseOf(t, running[0].ctr.Args)
			s.wait(t)
			// The PreSync check passed on a cluster without the trust bundle yet, and the PostSync
			// wait saw the operator lead.
			if pre := hooks.only(t, OperatorChart+"-preflight-"); pre.exit != 0 {
				t.Fatalf("the PreSync hook exited %d:\n%s", pre.exit, pre.log)
			} else {
				t.Logf("the PreSync hook passed:\n%s", pre.log)
			}
			if wait := hooks.only(t, OperatorChart+"-wait-ready-"); wait.exit != 0 {
				t.Fatalf("the PostSync hook exited %d:\n%s", wait.exit, wait.log)
			}
			s.requireHealthy(t, "TrustAnchorRotation", steps.DefaultRotationName)
		default:
			sync(app, app.name != "linkerd-pki").wait(t)
		}
	}
	t.Logf("every Application synced and Healthy in %s", time.Since(began).Round(time.Second))

	mesh, workloads := readmeLinkerd(t, ctx, c)
	rotated := time.Now()
	out, err := exec.CommandContext(ctx, trust, "--kubeconfig", c.Kubeconfig(), "rotate").CombinedOutput()
	if err != nil {
		t.Fatalf("linkerd trust rotate: %v\n%s", err, out)
	}
	t.Logf("linkerd trust rotate:\n%s", out)
	readmeFollowRotation(t, ctx, c, tars, mesh, workloads, func(ctx context.Context) (string, error) {
		leader, err := readmeLeader(ctx, kube, lease, running)
		if err != nil {
			return "", err
		}
		return leader.identity(), nil
	})
	if err := mesh.Oracle().CheckNoViolationsSince(rotated); err != nil {
		t.Errorf("the mesh's oracle: %v", err)
	}
	t.Logf("the rotation completed with %d violations of the oracle over %d meshed pods", mesh.Oracle().ViolationCount(), len(mesh.Pods()))
}

// argoApp is one child Application of manifests/argocd/apps.
type argoApp struct {
	name, file string
	wave       int
	values     []byte // spec.source.helm.valuesObject
}

// argoApplications reads manifests/argocd/apps in the order Argo CD syncs them: by sync wave,
// then by name.
func argoApplications(t *testing.T, root string) []argoApp {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(root, "manifests", "argocd", "apps", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no Applications in manifests/argocd/apps: %v", err)
	}
	var apps []argoApp
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var app struct {
			Metadata struct {
				Name        string            `json:"name"`
				Annotations map[string]string `json:"annotations"`
			} `json:"metadata"`
			Spec struct {
				Source struct {
					Helm struct {
						ValuesObject json.RawMessage `json:"valuesObject"`
					} `json:"helm"`
				} `json:"source"`
			} `json:"spec"`
		}
		if err := yaml.Unmarshal(data, &app); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		wave := 0
		if w, ok := app.Metadata.Annotations["argocd.argoproj.io/sync-wave"]; ok {
			if wave, err = strconv.Atoi(w); err != nil {
				t.Fatalf("%s: sync wave %q: %v", f, w, err)
			}
		}
		values, _ := yaml.JSONToYAML(app.Spec.Source.Helm.ValuesObject)
		apps = append(apps, argoApp{name: app.Metadata.Name, file: f, wave: wave, values: values})
	}
	sort.SliceStable(apps, func(i, j int) bool {
		if apps[i].wave != apps[j].wave {
			return apps[i].wave < apps[j].wave
		}
		return apps[i].name < apps[j].name
	})
	return apps
}

// argoSync is one run of argocd-sync.
type argoSync struct {
	app         string
	cmd         *exec.Cmd
	out, errOut bytes.Buffer
	err         error
	done        chan struct{}
}

// stop ends the sync and waits for it.
func (s *argoSync) stop() {
	_ = s.cmd.Process.Kill()
	<-s.done
}

// wait waits for the sync to end and fails the test unless every resource synced and became
// Healthy; it logs what gitops-engine did.
func (s *argoSync) wait(t *testing.T) {
	t.Helper()
	<-s.done
	if s.err != nil {
		t.Fatalf("Application %s: %v\n%s%s", s.app, s.err, s.out.String(), s.errOut.String())
	}
	var hooks, healthy int
	sc := bufio.NewScanner(bytes.NewReader(s.out.Bytes()))
	for sc.Scan() {
		var line map[string]string
		if json.Unmarshal(sc.Bytes(), &line) != nil {
			continue
		}
		if line["hookType"] != "" {
			hooks++
		}
		if line["health"] != "" {
			healthy++
		}
	}
	if healthy == 0 {
		t.Fatalf("Application %s: the sync reported no resource Healthy:\n%s", s.app, s.out.String())
	}
	t.Logf("Application %s: synced by gitops-engine, %d hooks, %d resources Healthy", s.app, hooks, healthy)
}

// requireHealthy fails the test unless the sync reported kind/name Healthy.
func (s *argoSync) requireHealthy(t *testing.T, kind, name string) {
	t.Helper()
	sc := bufio.NewScanner(bytes.NewReader(s.out.Bytes()))
	for sc.Scan() {
		var line map[string]string
		if json.Unmarshal(sc.Bytes(), &line) == nil && line["kind"] == kind && line["name"] == name && line["health"] == "Healthy" {
			t.Logf("Application %s: %s %s is Healthy: %s", s.app, kind, name, line["message"])
			return
		}
	}
	t.Fatalf("Application %s: %s %s was not reported Healthy:\n%s", s.app, kind, name, s.out.String())
}

// leaveNoUnownedCRD removes, when the test ends, the TrustAnchorRotation CRD that the sync
// created if there was none before: the later tests of the shared cluster install the CRD chart
// with Helm, which refuses a CRD that no Helm release owns. (A CRD a release owned before keeps
// its ownership: Argo CD's apply leaves Helm's annotations alone.)
func leaveNoUnownedCRD(t *testing.T, ctx context.Context, c *cluster.Cluster) {
	t.Helper()
	dyn, err := dynamic.NewForConfig(c.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	crds := dyn.Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"})
	const name = "trustanchorrotations.trust.linkerd.io"
	if _, err := crds.Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		return
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := crds.Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting CRD %s: %v", name, err)
			return
		}
		err := poll.Until(ctx, 2*time.Minute, "CRD "+name+" to be deleted", func(ctx context.Context) (bool, error) {
			_, err := crds.Get(ctx, name, metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		})
		if err != nil {
			t.Error(err)
		}
	})
}
