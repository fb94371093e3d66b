// Command bedfigures measures the test bed and prints (never asserts) its figures: cluster
// start-up time, Linkerd PKI issuance time, the time to bring N kwok pods to Running, and the
// memory of the whole bed (the sum over its processes of VmHWM, their peak resident set, and of
// VmRSS now). scripts/bed-figures.sh runs it after timing the tools build.
//
// Each figure is a function in figures; meshFigure brings meshed pods to Running with a
// certificate each under the mesh simulator.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/linkerd/trust-rotation/test/cluster"
	"github.com/linkerd/trust-rotation/test/internal/poll"
	"github.com/linkerd/trust-rotation/test/meshsim"
	"github.com/linkerd/trust-rotation/test/pki"
)

// bed is the state the figures share.
type bed struct {
	cluster *cluster.Cluster
	pods    int
	deploys int
}

// A figure measures one thing on the running bed and prints it with b.print.
type figure func(ctx context.Context, b *bed) error

var figures = []figure{pkiFigure, podsFigure, meshFigure}

func main() {
	klog.InitFlags(nil)
	pods := flag.Int("pods", 1000, "number of kwok pods to bring to Running")
	deploys := flag.Int("deployments", 10, "number of Deployments the pods are spread over")
	flag.Parse()

	ctx := context.Background()
	b := &bed{pods: *pods, deploys: *deploys}
	began := time.Now()
	c, err := cluster.Start(ctx, cluster.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "bedfigures:", err)
		os.Exit(1)
	}
	b.cluster = c
	b.print("cluster start-up (to ready, with cert-manager)", time.Since(began).Round(10*time.Millisecond).String())
	b.print("bed RSS when idle (sum of VmRSS)", gib(sumStatus(c, "VmRSS")))

	failed := false
	for _, f := range figures {
		if err := f(ctx, b); err != nil {
			fmt.Fprintln(os.Stderr, "bedfigures:", err)
			failed = true
			break
		}
	}
	b.print("peak RSS of the bed (sum of VmHWM)", gib(sumStatus(c, "VmHWM")))
	b.print("peak RSS of the mesh simulator (this process)", gib(selfStatus("VmHWM")))
	b.print("bed RSS now (sum of VmRSS)", gib(sumStatus(c, "VmRSS")))
	if err := c.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "bedfigures: stopping the cluster:", err)
		failed = true
	}
	if failed {
		os.Exit(1)
	}
}

func (b *bed) print(name, value string) {
	fmt.Printf("%-50s %s\n", name, value) // the same layout as scripts/bed-figures.sh
}

func pkiFigure(ctx context.Context, b *bed) error {
	began := time.Now()
	c := b.cluster
	if _, err := pki.Install(ctx, c.Kube(), c.CertManager(), pki.Options{}); err != nil {
		return err
	}
	b.print("Linkerd PKI issued (anchor + identity issuer)", time.Since(began).Round(10*time.Millisecond).String())
	return nil
}

// podsFigure creates b.pods pods over b.deploys Deployments and waits until all are Running.
func podsFigure(ctx context.Context, b *bed) error {
	c := b.cluster
	ns := "figures"
	if _, err := c.Kube().CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating namespace %s: %w", ns, err)
	}
	err := poll.Until(ctx, time.Minute, "the default ServiceAccount of "+ns, func(ctx context.Context) (bool, error) {
		_, err := c.Kube().CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
	if err != nil {
		return err
	}
	began := time.Now()
	for i := range b.deploys {
		replicas := int32(b.pods / b.deploys)
		if i < b.pods%b.deploys {
			replicas++
		}
		labels := map[string]string{"app": "load-" + strconv.Itoa(i)}
		d := &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: labels["app"], Namespace: ns},
			Spec: appsv1.DeploymentSpec{
				Replicas: &replicas,
				Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "example.invalid/app:1"}}},
				},
			},
		}
		if _, err := c.Kube().AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating deployment %s/%s: %w", ns, d.Name, err)
		}
	}
	err = poll.Until(ctx, 10*time.Minute, fmt.Sprintf("%d pods to be Running", b.pods), func(ctx context.Context) (bool, error) {
		list, err := c.Kube().CoreV1().Pods(ns).List(ctx, metav1.ListOptions{ResourceVersion: "0"})
		if err != nil {
			return false, poll.Pending("%v", err)
		}
		running := 0
		for _, p := range list.Items {
			if p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "" {
				running++
			}
		}
		if running < b.pods {
			return false, poll.Pending("%d of %d pods Running", running, b.pods)
		}
		return true, nil
	})
	if err != nil {
		return err
	}
	b.print(fmt.Sprintf("%d pods to Running (%d Deployments)", b.pods, b.deploys), time.Since(began).Round(10*time.Millisecond).String())
	return nil
}

// meshFigure runs the mesh simulator and brings b.pods meshed pods, over 10 namespaces and
// b.deploys Deployments, to Running with a workload certificate each.
func meshFigure(ctx context.Context, b *bed) error {
	c := b.cluster
	if err := meshsim.SeedTrustBundle(ctx, c.Kube(), "linkerd", "cert-manager", "linkerd-trust-anchor"); err != nil {
		return err
	}
	mesh, err := meshsim.Start(ctx, meshsim.Config{RESTConfig: c.RESTConfig(), Registerer: prometheus.NewRegistry()})
	if err != nil {
		return err
	}
	defer mesh.Stop()
	if err := meshsim.InstallControlPlane(ctx, c.Kube(), meshsim.ControlPlaneOptions{}); err != nil {
		return err
	}
	if err := meshsim.WaitForRollouts(ctx, c.Kube(), mesh.ControlPlane()); err != nil {
		return err
	}
	began := time.Now()
	apps, err := meshsim.CreateMeshedWorkloads(ctx, c.Kube(), meshsim.WorkloadSpec{
		Prefix: "meshed", Namespaces: 10, Deployments: b.deploys, Replicas: int32(b.pods / b.deploys),
	})
	if err != nil {
		return err
	}
	if err := meshsim.WaitForRollouts(ctx, c.Kube(), apps); err != nil {
		return err
	}
	waitCtx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	if err := mesh.WaitForCertificates(waitCtx, b.pods+3, nil); err != nil {
		return err
	}
	b.print(fmt.Sprintf("%d meshed pods to Running with certificates", b.pods), time.Since(began).Round(10*time.Millisecond).String())
	st := mesh.Oracle().Check()
	b.print("oracle check over them", fmt.Sprintf("%d pods, %d root x %d chain classes, %d violations", st.Pods, st.RootClasses, st.ChainClasses, st.TotalViolations))
	return nil
}

// selfStatus reads a kB field of this process's /proc status.
func selfStatus(field string) int64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb * 1024
		}
	}
	return 0
}

// sumStatus sums a kB field of /proc/<pid>/status over the bed's processes.
func sumStatus(c *cluster.Cluster, field string) int64 {
	var total int64
	for _, p := range c.Processes() {
		data, err := os.ReadFile("/proc/" + strconv.Itoa(p.PID) + "/status")
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(data), "\n") {
			if v, ok := strings.CutPrefix(line, field+":"); ok {
				kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
				total += kb * 1024
			}
		}
	}
	return total
}

func gib(bytes int64) string {
	return fmt.Sprintf("%.2f GiB (%d MiB)", float64(bytes)/(1<<30), bytes>>20)
}
