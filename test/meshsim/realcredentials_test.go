package meshsim

import (
	"bytes"
	"context"
	"os"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/linkerd/trust-rotation/test/cluster"
)

// TestPodCredentialsRefreshTheToken holds the credentials a Linkerd container of the
// real-Linkerd mode runs with to what a kubelet gives a pod: on the real apiserver, its
// kubeconfig authenticates as the pod's ServiceAccount with a token bound to the pod, and the
// token file is replaced at 80 % of the token's lifetime, not before, until the container stops.
func TestPodCredentialsRefreshTheToken(t *testing.T) {
	c := cluster.Shared(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	kube := c.Kube()
	const ns, sa = "pod-credentials", "linkerd-identity"
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = kube.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
	})
	if _, err := kube.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod, err := kube.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "linkerd-identity-0"},
		Spec:       corev1.PodSpec{ServiceAccountName: sa, Containers: []corev1.Container{{Name: "identity", Image: "identity"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	clk := testingclock.NewFakeClock(time.Now())
	m := &Mesh{cfg: Config{RESTConfig: c.RESTConfig()}, client: kube, clock: clk, ctx: ctx}
	creds, err := newRealLinkerd().podCredentials(m, PodRef{Namespace: ns, Name: pod.Name, UID: pod.UID}, sa)
	if err != nil {
		t.Fatal(err)
	}
	defer creds.close()

	whoAmI := func(when string) {
		t.Helper()
		rc, err := clientcmd.BuildConfigFromFlags("", creds.kubeconfig)
		if err != nil {
			t.Fatal(err)
		}
		review, err := kubernetes.NewForConfigOrDie(rc).AuthenticationV1().SelfSubjectReviews().
			Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("%s: the container's kubeconfig does not authenticate: %v", when, err)
		}
		u := review.Status.UserInfo
		if want := "system:serviceaccount:" + ns + ":" + sa; u.Username != want {
			t.Errorf("%s: the container authenticates as %q, want %q", when, u.Username, want)
		}
		if got := u.Extra["authentication.kubernetes.io/pod-name"]; len(got) != 1 || got[0] != pod.Name {
			t.Errorf("%s: the token is bound to pod %v, want %s", when, got, pod.Name)
		}
	}
	token := func() []byte {
		t.Helper()
		b, err := os.ReadFile(creds.tokenFile)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}

	whoAmI("at start")
	first := token()
	clk.Step(tokenLifetime*8/10 - time.Second)
	if !bytes.Equal(token(), first) {
		t.Fatal("the token was replaced before 80 % of its lifetime")
	}
	clk.Step(time.Second)
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return !bytes.Equal(token(), first), nil
	})
	if err != nil {
		t.Fatalf("the token was not replaced at 80 %% of its lifetime: %v", err)
	}
	whoAmI("after the refresh")
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return clk.HasWaiters(), nil
	})
	if err != nil {
		t.Fatal("no next refresh was scheduled after the first")
	}

	creds.close()
	if clk.HasWaiters() {
		t.Error("a refresh is still scheduled after the container stopped")
	}
	if _, err := os.Stat(creds.dir); !os.IsNotExist(err) {
		t.Errorf("the credentials' directory %s is left after the container stopped (stat: %v)", creds.dir, err)
	}
}
