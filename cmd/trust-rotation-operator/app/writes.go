package app

import (
	"context"
	"crypto/x509"

	"github.com/linkerd/trust-rotation/steps"
)

// writeObserver calls after once every write of the Writer returned, with whether it changed
// the cluster (no error; for EvictPods, a pod evicted): every method of steps.Writer is wrapped
// (TestWriteObserverCoversEveryWriterMethod).
// The crash hook's "write" point and the count of the acts' writes that succeeded
// (Controller.countWrite) are its two uses.
type writeObserver struct {
	steps.Writer
	after func(wrote bool)
}

var _ steps.Writer = writeObserver{}

func observeWrites(w steps.Writer, after func(wrote bool)) steps.Writer {
	return writeObserver{Writer: w, after: after}
}

func (o writeObserver) wrote(err error) error {
	o.after(err == nil)
	return err
}

func (o writeObserver) WritePreviousAnchor(ctx context.Context, cert *x509.Certificate) error {
	return o.wrote(o.Writer.WritePreviousAnchor(ctx, cert))
}

func (o writeObserver) WriteTrustRoots(ctx context.Context, bundle string) error {
	return o.wrote(o.Writer.WriteTrustRoots(ctx, bundle))
}

func (o writeObserver) RestartDeployment(ctx context.Context, namespace, name, token string) error {
	return o.wrote(o.Writer.RestartDeployment(ctx, namespace, name, token))
}

func (o writeObserver) DeletePods(ctx context.Context, namespace string, names []string) error {
	return o.wrote(o.Writer.DeletePods(ctx, namespace, names))
}

func (o writeObserver) ScaleDeployment(ctx context.Context, namespace, name string, replicas int32) error {
	return o.wrote(o.Writer.ScaleDeployment(ctx, namespace, name, replicas))
}

func (o writeObserver) RestartWorkload(ctx context.Context, w steps.WorkloadRef, token string, annotations map[string]*string) error {
	return o.wrote(o.Writer.RestartWorkload(ctx, w, token, annotations))
}

func (o writeObserver) AnnotateWorkload(ctx context.Context, w steps.WorkloadRef, annotations map[string]string) error {
	return o.wrote(o.Writer.AnnotateWorkload(ctx, w, annotations))
}

func (o writeObserver) EvictPods(ctx context.Context, w steps.WorkloadRef, names []string) (int, error) {
	n, err := o.Writer.EvictPods(ctx, w, names)
	o.after(n > 0)
	return n, err
}

func (o writeObserver) RenewCertificate(ctx context.Context, namespace, name string) error {
	return o.wrote(o.Writer.RenewCertificate(ctx, namespace, name))
}
