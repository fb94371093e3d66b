package client

import (
	"context"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/client-go/rest"

	"github.com/linkerd/trust-rotation/workflow/api/v1alpha1"
)

const badChurn = `{"apiVersion":"trust.linkerd.io/v1alpha1","kind":"TrustAnchorRotation",
	"metadata":{"name":"other","resourceVersion":"7","generation":3},
	"spec":{"naturalChurnPeriod":"9999999999999h","historyLimit":5,
		"dataPlaneRestart":{"policy":"Automatic","maintenanceWindows":[{"start":"01:00","end":"02:00"},{"start":"03:00","end":"04:00","days":"Mon"}]}},
	"status":{"phase":"Synced","observedGeneration":2}}`

const good = `{"apiVersion":"trust.linkerd.io/v1alpha1","kind":"TrustAnchorRotation",
	"metadata":{"name":"cluster","resourceVersion":"8","generation":1},
	"spec":{"naturalChurnPeriod":"168h"},"status":{"phase":"Synced"}}`

// An object with fields Go cannot hold decodes with those fields zero and named, and everything
// else as stored.
func TestDecodeRotationNamesTheFieldsThatDoNotDecode(t *testing.T) {
	tar, err := decodeRotation([]byte(badChurn))
	if err != nil {
		t.Fatal(err)
	}
	errs := DecodeErrors(tar)
	var got []string
	for _, e := range errs {
		got = append(got, e.Field+"="+e.BadValue.(string))
	}
	want := []string{"spec.dataPlaneRestart.maintenanceWindows[1].days=Mon", "spec.naturalChurnPeriod=9999999999999h"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("decode errors %v, want %v (%v)", got, want, errs)
	}
	if !strings.Contains(errs[1].Detail, "invalid duration") {
		t.Errorf("detail %q does not say why", errs[1].Detail)
	}
	if tar.Name != "other" || tar.Generation != 3 || *tar.Spec.HistoryLimit != 5 || tar.Spec.NaturalChurnPeriod != nil ||
		tar.Spec.DataPlaneRestart.Policy != v1alpha1.Automatic || len(tar.Spec.DataPlaneRestart.MaintenanceWindows) != 2 ||
		tar.Spec.DataPlaneRestart.MaintenanceWindows[1].Start != "03:00" || tar.Status.Phase != v1alpha1.PhaseSynced {
		t.Errorf("the fields that decode were not kept: %+v", tar)
	}
}

// A user's own value of the annotation never passes for the client's finding.
func TestDecodeRotationDropsAStoredAnnotation(t *testing.T) {
	data := strings.Replace(good, `"name":"cluster"`, `"name":"cluster","annotations":{"`+v1alpha1.AnnotationDecodeErrors+`":"[{\"field\":\"spec\"}]"}`, 1)
	tar, err := decodeRotation([]byte(data))
	if err != nil {
		t.Fatal(err)
	}
	if errs := DecodeErrors(tar); len(errs) != 0 {
		t.Fatalf("decode errors %v from a stored annotation", errs)
	}
}

// A list, and so an informer's list and watch, holds every object, the bad one with its errors:
// one object that does not decode blinds the client to none.
func TestListAndWatchKeepEveryObject(t *testing.T) {
	list := `{"apiVersion":"trust.linkerd.io/v1alpha1","kind":"TrustAnchorRotationList","metadata":{"resourceVersion":"9"},"items":[` + good + `,` + badChurn + `]}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Query().Get("watch") == "true" {
			flusher := w.(http.Flusher)
			_, _ = w.Write([]byte(`{"type":"MODIFIED","object":` + strings.ReplaceAll(badChurn, "\n", "") + "}\n"))
			flusher.Flush()
			return
		}
		_, _ = w.Write([]byte(list))
	}))
	defer srv.Close()
	c, err := NewForConfig(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	if len(got.Items) != 2 || got.Items[0].Name != "cluster" || got.Items[1].Name != "other" || got.ResourceVersion != "9" {
		t.Fatalf("list %+v", got)
	}
	if len(DecodeErrors(&got.Items[0])) != 0 || len(DecodeErrors(&got.Items[1])) != 2 {
		t.Fatalf("decode errors: cluster %v, other %v", DecodeErrors(&got.Items[0]), DecodeErrors(&got.Items[1]))
	}
	w, err := c.ListWatch(fields.Everything()).WatchFuncWithContext(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	ev := <-w.ResultChan()
	tar, ok := ev.Object.(*v1alpha1.TrustAnchorRotation)
	if !ok || tar.Name != "other" || len(DecodeErrors(tar)) != 2 {
		t.Fatalf("watch event %s %#v", ev.Type, ev.Object)
	}
}

// FuzzDecodeRotation holds the tolerant decoding to the codec's: where the strict decoding
// succeeds, the same object and no error; where it fails, either the metadata failed (the object
// cannot be named) or at least one field is named; never a panic.
func FuzzDecodeRotation(f *testing.F) {
	f.Add([]byte(good))
	f.Add([]byte(badChurn))
	f.Add([]byte(`{"kind":"TrustAnchorRotation","spec":{"remoteClusters":[{"name":"a"},{"name":7}]}}`))
	f.Add([]byte(`{"metadata":{"name":["x"]}}`))
	f.Add([]byte(`{"spec":{"historyLimit":99999999999,"stalledAfter":{"default":"1h","identityIssuerRenewal":null}}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		strict := &v1alpha1.TrustAnchorRotation{}
		strictErr := utiljson.Unmarshal(data, strict)
		tar, err := decodeRotation(data)
		switch {
		case strictErr == nil && err != nil:
			t.Fatalf("strict decoding succeeded, tolerant failed: %v", err)
		case strictErr == nil:
			if errs := DecodeErrors(tar); len(errs) != 0 {
				t.Fatalf("strict decoding succeeded, tolerant named %v", errs)
			}
			delete(strict.Annotations, v1alpha1.AnnotationDecodeErrors)
			if len(strict.Annotations) == 0 {
				strict.Annotations = nil
			}
			if len(tar.Annotations) == 0 {
				tar.Annotations = nil
			}
			if !equality.Semantic.DeepEqual(strict, tar) {
				t.Fatalf("decoded differently:\nstrict   %+v\ntolerant %+v", strict, tar)
			}
		case err == nil && len(DecodeErrors(tar)) == 0:
			t.Fatalf("strict decoding failed (%v), tolerant named no field", strictErr)
		}
	})
}
