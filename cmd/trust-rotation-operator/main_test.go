package main

import (
	"encoding/pem"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/linkerd/trust-rotation/cmd/trust-rotation-operator/app"
	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/steps/kube"
)

// --v and --vmodule above 7 are lowered to 7, where client-go logs no request or response body:
// klog then answers V(8) false, in this file too, and V(7) true.
func TestVerbosityIsCapped(t *testing.T) {
	for _, tc := range []struct {
		args          []string
		requested, vm string
	}{
		{[]string{"--v=10"}, "--v=10", ""},
		{[]string{"--v=0", "--vmodule=main_test=9,automation=3"}, "--vmodule=main_test=9,automation=3", "main_test=7,automation=3"},
		{[]string{"--v=7"}, "", ""},
	} {
		fs := flag.NewFlagSet("klog", flag.ContinueOnError)
		klog.InitFlags(fs)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		requested, err := capVerbosity(fs)
		if err != nil {
			t.Fatal(err)
		}
		if requested != tc.requested {
			t.Errorf("%v: lowered %q, want %q", tc.args, requested, tc.requested)
		}
		if got := fs.Lookup("vmodule").Value.String(); got != tc.vm {
			t.Errorf("%v: --vmodule is %q, want %q", tc.args, got, tc.vm)
		}
		if klog.V(8).Enabled() || !klog.V(7).Enabled() {
			t.Errorf("%v: V(8) enabled %v, V(7) enabled %v; want false, true", tc.args, klog.V(8).Enabled(), klog.V(7).Enabled())
		}
		_ = fs.Set("vmodule", "")
		_ = fs.Set("v", "0")
	}
}

// By default the operator's clients speak HTTP/1.1 to an apiserver that offers HTTP/2 too, and
// --kube-api-http2 lets them negotiate HTTP/2 as client-go does by default.
func TestClientsSpeakHTTP1UnlessHTTP2IsAsked(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"kind":"Namespace","apiVersion":"v1","metadata":{"name":%q}}`, r.Proto)
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	defer srv.Close()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	for _, http2 := range []bool{false, true} {
		cfg := &rest.Config{Host: srv.URL, TLSClientConfig: rest.TLSClientConfig{CAData: ca}}
		if !http2 {
			useHTTP1(cfg)
		}
		clients, err := kube.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		ns, err := clients.CoreV1().Namespaces().Get(t.Context(), "any", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		want := "HTTP/1.1"
		if http2 {
			want = "HTTP/2.0"
		}
		if ns.Name != want {
			t.Errorf("--kube-api-http2=%v: the apiserver saw %s, want %s", http2, ns.Name, want)
		}
	}
}

// The operator users run (built without -tags crashpoints, as this test is) ignores the fault
// hook's environment variable: nothing in its environment can make it kill itself.
func TestReleasedOperatorIgnoresTheCrashHook(t *testing.T) {
	t.Setenv(app.CrashEnv, "save:"+steps.StepExpandTrustBundle)
	if got := crashAt(); got != "" {
		t.Errorf("with %s set, the operator reads the crash point %q; only a -tags crashpoints build may", app.CrashEnv, got)
	}
}
