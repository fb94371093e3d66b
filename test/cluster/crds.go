package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"

	"github.com/linkerd/trust-rotation/test/internal/poll"
)

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// applyCRDs server-side applies every CustomResourceDefinition in the YAML files of dir and waits
// until each is Established. Server-side apply, because cert-manager's Issuer CRDs are larger than
// the annotation client-side apply would store.
func (c *Cluster) applyCRDs(ctx context.Context, dir string) error {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		return fmt.Errorf("no CRD manifests in %s", dir)
	}
	dyn, err := dynamic.NewForConfig(c.restConfig)
	if err != nil {
		return fmt.Errorf("creating a dynamic client: %w", err)
	}
	crds := dyn.Resource(crdGVR)
	var names []string
	for _, file := range files {
		objs, err := decodeManifests(file)
		if err != nil {
			return err
		}
		for _, obj := range objs {
			if obj.GetKind() != "CustomResourceDefinition" {
				continue
			}
			_, err := crds.Apply(ctx, obj.GetName(), obj, metav1.ApplyOptions{FieldManager: "trust-rotation-testbed", Force: true})
			if err != nil {
				return fmt.Errorf("applying CRD %s from %s: %w", obj.GetName(), file, err)
			}
			names = append(names, obj.GetName())
		}
	}
	for _, name := range names {
		err := c.until(ctx, "CRD "+name+" to be Established", func(ctx context.Context) (bool, error) {
			crd, err := crds.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, poll.Pending("%v", err)
			}
			conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
			for _, cond := range conds {
				m, _ := cond.(map[string]any)
				if m["type"] == "Established" && m["status"] == "True" {
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// decodeManifests reads every object of a multi-document YAML file.
func decodeManifests(file string) ([]*unstructured.Unstructured, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, fmt.Errorf("reading manifests: %w", err)
	}
	defer f.Close()
	dec := yaml.NewYAMLOrJSONDecoder(f, 4096)
	var objs []*unstructured.Unstructured
	for {
		obj := &unstructured.Unstructured{}
		if err := dec.Decode(&obj.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return objs, nil
			}
			return nil, fmt.Errorf("decoding %s: %w", file, err)
		}
		if len(obj.Object) > 0 {
			objs = append(objs, obj)
		}
	}
}
