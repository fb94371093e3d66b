// Command argocd-sync syncs one Argo CD Application of manifests/argocd into a cluster with
// gitops-engine, the code Argo CD's application controller syncs with, and waits until every
// resource is Healthy by Argo CD's health assessment with argocd-cm.yaml's health checks: what
// Argo CD does for one child of the example's app of apps, without Argo CD's servers.
//
//	argocd-sync --kubeconfig K --argocd-cm manifests/argocd/argocd-cm.yaml \
//	  --app manifests/argocd/apps/trust-rotation-operator.yaml \
//	  --source ghcr.io/linkerd/charts=charts --helm /path/to/helm [--set k=v ...]
//
// Sources are rendered as Argo CD's repo server renders them: a Helm chart with `helm template
// <Application name> <chart> --namespace <destination> --include-crds` and the Application's
// valuesObject; a directory with the files its directory.include names. --source maps a
// repoURL to a local directory that holds what the repository would serve (a chart in
// <dir>/<chart>, a Git path in <dir>/<path>). --set adds values of the caller's own (the test
// bed's image), which the output names.
//
// With --delete it deletes what the Application renders instead, CustomResourceDefinitions
// excepted (the example never prunes them): a test's cleanup.
//
// It prints one JSON object per line: each resource and hook as the sync left it, then each
// resource's health as it became Healthy. It exits 1 when the sync fails or a resource is not
// Healthy within --timeout.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/argoproj/argo-cd/gitops-engine/pkg/cache"
	"github.com/argoproj/argo-cd/gitops-engine/pkg/health"
	"github.com/argoproj/argo-cd/gitops-engine/pkg/sync"
	"github.com/argoproj/argo-cd/gitops-engine/pkg/sync/common"
	"github.com/argoproj/argo-cd/gitops-engine/pkg/sync/hook"
	"github.com/argoproj/argo-cd/gitops-engine/pkg/utils/kube"
	"github.com/argoproj/argo-cd/gitops-engine/pkg/utils/tracing"
	appv1 "github.com/argoproj/argo-cd/v3/pkg/apis/application/v1alpha1"
	"github.com/argoproj/argo-cd/v3/util/lua"
	"github.com/argoproj/argo-cd/v3/util/settings"
	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2/textlogger"
	"sigs.k8s.io/yaml"
)

// log is gitops-engine's logger.
var log logr.Logger

type multi []string

func (m *multi) String() string     { return strings.Join(*m, ",") }
func (m *multi) Set(v string) error { *m = append(*m, v); return nil }

func main() {
	var sources, sets multi
	kubeconfig := flag.String("kubeconfig", "", "the cluster's kubeconfig")
	argocdCM := flag.String("argocd-cm", "", "the argocd-cm ConfigMap whose health checks to use")
	appFile := flag.String("app", "", "the Application to sync")
	helmBin := flag.String("helm", "helm", "helm, to render Helm sources")
	timeout := flag.Duration("timeout", 5*time.Minute, "how long the sync and the wait for health may take")
	verbosity := flag.Int("v", 0, "gitops-engine's log verbosity, on stderr")
	del := flag.Bool("delete", false, "delete what the Application renders (CRDs excepted) instead of syncing it")
	flag.Var(&sources, "source", "repoURL=dir: where the repository's charts or paths are (repeatable)")
	flag.Var(&sets, "set", "a Helm value of the caller's own, added to the Application's (repeatable)")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	log = textlogger.NewLogger(textlogger.NewConfig(textlogger.Verbosity(*verbosity), textlogger.Output(os.Stderr)))
	if err := run(ctx, *kubeconfig, *argocdCM, *appFile, *helmBin, sources, sets, *del); err != nil {
		fmt.Fprintln(os.Stderr, "argocd-sync:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, kubeconfig, argocdCM, appFile, helmBin string, sources, sets []string, del bool) error {
	app := &appv1.Application{}
	if err := readStrict(appFile, app); err != nil {
		return err
	}
	dirs := map[string]string{}
	for _, s := range sources {
		url, dir, ok := strings.Cut(s, "=")
		if !ok {
			return fmt.Errorf("--source %q: want repoURL=dir", s)
		}
		dirs[url] = dir
	}
	objs, err := render(ctx, app, dirs, helmBin, sets)
	if err != nil {
		return fmt.Errorf("Application %s: %w", app.Name, err)
	}
	config, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	if del {
		return deleteAll(ctx, config, app.Spec.Destination.Namespace, objs)
	}
	overrides, err := resourceOverrides(ctx, argocdCM)
	if err != nil {
		return err
	}
	healthOverride := lua.ResourceHealthOverrides(overrides)
	clusterCache := cache.NewClusterCache(config, cache.SetLogr(log))
	if err := clusterCache.EnsureSynced(); err != nil {
		return err
	}
	defer clusterCache.Invalidate()

	// The resources this sync manages are the ones it renders, hooks included (Argo CD finds them
	// by its tracking label; this is a first sync, so the rendered keys are enough).
	ns := app.Spec.Destination.Namespace
	managed := map[kube.ResourceKey]bool{}
	for _, o := range objs {
		key := kube.GetResourceKey(o)
		if key.Namespace == "" {
			if namespaced, err := clusterCache.IsNamespaced(o.GroupVersionKind().GroupKind()); err != nil || namespaced {
				key.Namespace = ns
			}
		}
		managed[key] = true
	}
	isManaged := func(r *cache.Resource) bool { return managed[r.ResourceKey()] }

	var syncOptions appv1.SyncOptions
	prune := false
	if p := app.Spec.SyncPolicy; p != nil {
		syncOptions = p.SyncOptions
		prune = p.Automated != nil && p.Automated.Prune != nil && *p.Automated.Prune
	}
	foreground := metav1.DeletePropagationForeground
	// The options Argo CD's application controller syncs with (controller/sync.go), for the sync
	// options the example's Applications use.
	opts := []sync.SyncOpt{
		sync.WithLogr(log),
		sync.WithHealthOverride(healthOverride),
		sync.WithOperationSettings(false, prune, false, false),
		sync.WithManifestValidation(true),
		sync.WithPrunePropagationPolicy(&foreground),
		sync.WithServerSideApply(syncOptions.HasOption("ServerSideApply=true")),
		sync.WithServerSideApplyManager("argocd-controller"),
		sync.WithClientSideApplyMigration(true, common.DefaultClientSideApplyMigrationManager),
		sync.WithSkipDryRunOnMissingResource(syncOptions.HasOption("SkipDryRunOnMissingResource=true")),
	}
	if syncOptions.HasOption("CreateNamespace=true") {
		// As Argo CD's syncNamespace without managed namespace metadata: create it when missing.
		opts = append(opts, sync.WithNamespaceModifier(func(_, live *unstructured.Unstructured) (bool, error) { return live == nil, nil }))
	}
	kubectl := &kube.KubectlCmd{Log: log, Tracer: tracing.NopTracer{}}

	// As the application controller does: each round reads the managed live objects again
	// (hooks created by the last round among them), builds a sync context from the operation's
	// state so far, and runs one step of it, until the operation completes.
	var (
		phase   common.OperationPhase
		message string
		results []common.ResourceSyncResult
		started = metav1.Now()
	)
	for {
		live, err := clusterCache.GetManagedLiveObjs(objs, isManaged)
		if err != nil {
			return err
		}
		result := sync.Reconcile(objs, live, ns, clusterCache)
		syncCtx, cleanup, err := sync.NewSyncContext("v0", result, config, config, kubectl, ns,
			append(opts, sync.WithInitialState(phase, message, results, started))...)
		if err != nil {
			return err
		}
		syncCtx.Sync()
		phase, message, results = syncCtx.GetState()
		cleanup()
		if phase.Completed() {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("sync of Application %s: %s: %w", app.Name, message, ctx.Err())
		case <-time.After(time.Second):
		}
	}
	out := json.NewEncoder(os.Stdout)
	for _, r := range results {
		_ = out.Encode(map[string]any{"app": app.Name, "kind": r.ResourceKey.Kind, "namespace": r.ResourceKey.Namespace, "name": r.ResourceKey.Name,
			"syncPhase": r.SyncPhase, "hookType": r.HookType, "hookPhase": r.HookPhase, "status": r.Status, "message": r.Message})
	}
	if !phase.Successful() {
		return fmt.Errorf("sync of Application %s: %s: %s", app.Name, phase, message)
	}
	return waitHealthy(ctx, clusterCache, app, objs, healthOverride, out)
}

// waitHealthy waits until every resource of the sync is Healthy in the cluster cache, as the
// application controller assesses an Application's health.
func waitHealthy(ctx context.Context, c cache.ClusterCache, app *appv1.Application, objs []*unstructured.Unstructured, override health.HealthOverride, out *json.Encoder) error {
	// Hooks are no part of an Application's health (and those of the chart are deleted once
	// they succeed).
	pending := map[kube.ResourceKey]bool{}
	for _, o := range objs {
		if !hook.IsHook(o) {
			pending[kube.GetResourceKey(o)] = true
		}
	}
	last := map[kube.ResourceKey]string{}
	for {
		live, err := c.GetManagedLiveObjs(objs, func(r *cache.Resource) bool { return pending[r.ResourceKey()] })
		if err != nil {
			return err
		}
		for key := range pending {
			obj := live[key]
			if obj == nil {
				last[key] = "not in the cluster"
				continue
			}
			hs, err := health.GetResourceHealth(obj, override)
			if err != nil {
				return fmt.Errorf("health of %s %s/%s: %w", key.Kind, key.Namespace, key.Name, err)
			}
			if hs == nil || hs.Status == health.HealthStatusHealthy {
				status, message := "Healthy", ""
				if hs == nil {
					status = "no health check"
				} else {
					message = hs.Message
				}
				_ = out.Encode(map[string]any{"app": app.Name, "kind": key.Kind, "namespace": key.Namespace, "name": key.Name, "health": status, "message": message})
				delete(pending, key)
				continue
			}
			last[key] = string(hs.Status) + ": " + hs.Message
		}
		if len(pending) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			var msgs []string
			for key := range pending {
				msgs = append(msgs, fmt.Sprintf("%s %s/%s: %s", key.Kind, key.Namespace, key.Name, last[key]))
			}
			return fmt.Errorf("Application %s is not Healthy: %s", app.Name, strings.Join(msgs, "; "))
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// deleteAll deletes objs, CRDs excepted, in the foreground; objects already gone are fine.
func deleteAll(ctx context.Context, config *rest.Config, namespace string, objs []*unstructured.Unstructured) error {
	dc, err := discovery.NewDiscoveryClientForConfig(config)
	if err != nil {
		return err
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	dyn, err := dynamic.NewForConfig(config)
	if err != nil {
		return err
	}
	var errs []error
	for _, o := range objs {
		gvk := o.GroupVersionKind()
		if gvk.Kind == "CustomResourceDefinition" {
			continue
		}
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		ri := dyn.Resource(m.Resource)
		var r dynamic.ResourceInterface = ri
		if m.Scope.Name() == meta.RESTScopeNameNamespace {
			ns := o.GetNamespace()
			if ns == "" {
				ns = namespace
			}
			r = ri.Namespace(ns)
		}
		policy := metav1.DeletePropagationForeground
		if err := r.Delete(ctx, o.GetName(), metav1.DeleteOptions{PropagationPolicy: &policy}); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// render renders the Application's source as Argo CD's repo server does.
func render(ctx context.Context, app *appv1.Application, dirs map[string]string, helmBin string, sets []string) ([]*unstructured.Unstructured, error) {
	src := app.Spec.GetSource()
	root, ok := dirs[src.RepoURL]
	if !ok {
		return nil, fmt.Errorf("no --source for repoURL %s", src.RepoURL)
	}
	if src.Chart != "" {
		args := []string{"template", app.Name, filepath.Join(root, src.Chart), "--namespace", app.Spec.Destination.Namespace, "--include-crds"}
		if src.Helm != nil && src.Helm.ValuesObject != nil {
			f, err := os.CreateTemp("", "values-*.yaml")
			if err != nil {
				return nil, err
			}
			defer os.Remove(f.Name())
			if _, err := f.Write(src.Helm.ValuesObject.Raw); err != nil {
				return nil, err
			}
			f.Close()
			args = append(args, "--values", f.Name())
		}
		for _, s := range sets {
			args = append(args, "--set", s)
		}
		cmd := exec.CommandContext(ctx, helmBin, args...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			return nil, fmt.Errorf("helm template: %v: %s", err, stderr.String())
		}
		return decode(&stdout)
	}
	include := "*"
	if src.Directory != nil && src.Directory.Include != "" {
		include = src.Directory.Include
	}
	files, err := filepath.Glob(filepath.Join(root, src.Path, include))
	if err != nil || len(files) == 0 {
		return nil, fmt.Errorf("path %s include %s: no files (%v)", src.Path, include, err)
	}
	var objs []*unstructured.Unstructured
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		o, err := decode(bytes.NewReader(data))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		objs = append(objs, o...)
	}
	return objs, nil
}

func decode(r io.Reader) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(r, 4096)
	var objs []*unstructured.Unstructured
	for {
		obj := map[string]any{}
		if err := dec.Decode(&obj); err != nil {
			if errors.Is(err, io.EOF) {
				return objs, nil
			}
			return nil, err
		}
		if len(obj) > 0 {
			objs = append(objs, &unstructured.Unstructured{Object: obj})
		}
	}
}

// resourceOverrides reads argocd-cm as Argo CD's settings manager does.
func resourceOverrides(ctx context.Context, path string) (map[string]appv1.ResourceOverride, error) {
	cm := &corev1.ConfigMap{}
	if err := readStrict(path, cm); err != nil {
		return nil, err
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "argocd-secret", Namespace: cm.Namespace,
		Labels: map[string]string{"app.kubernetes.io/part-of": "argocd"}}}
	return settings.NewSettingsManager(ctx, fake.NewClientset(cm, secret), cm.Namespace).GetResourceOverrides()
}

func readStrict(path string, into any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := yaml.UnmarshalStrict(data, into); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}
