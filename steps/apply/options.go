package apply

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

func applyOptions() metav1.ApplyOptions {
	return metav1.ApplyOptions{FieldManager: FieldManager, Force: true}
}

func patchOptions() metav1.PatchOptions { return metav1.PatchOptions{FieldManager: FieldManager} }
