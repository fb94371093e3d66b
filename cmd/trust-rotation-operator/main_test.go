package main

import (
	"flag"
	"testing"

	"k8s.io/klog/v2"
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
