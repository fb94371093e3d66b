package apply

import (
	"context"
	"fmt"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/linkerd/trust-rotation/steps/kube"
)

// The condition `cmctl renew` sets (cert-manager/cmctl pkg/renew).
const (
	ReasonManuallyTriggered  = "ManuallyTriggered"
	MessageManuallyTriggered = "Certificate re-issuance manually triggered"
)

// RenewCertificate triggers a re-issuance exactly as `cmctl renew` does: it sets, through the
// status subresource, the condition Issuing=True with reason ManuallyTriggered. cmctl gives up on
// a write conflict; this re-reads and retries (onTransient), which ends in the same state. Setting the
// condition again while it is already True changes nothing cert-manager acts on.
func RenewCertificate(ctx context.Context, cm kube.CertManager, namespace, name string) error {
	certs := cm.CertmanagerV1().Certificates(namespace)
	err := onTransient(func() error {
		crt, err := certs.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		SetIssuing(crt, metav1.Now())
		_, err = certs.UpdateStatus(ctx, crt, metav1.UpdateOptions{FieldManager: FieldManager})
		return err
	})
	if err != nil {
		return fmt.Errorf("triggering the renewal of Certificate %s/%s: %w", namespace, name, err)
	}
	return nil
}

// SetIssuing sets Issuing=True, ManuallyTriggered, on a Certificate the way cert-manager's
// apiutil.SetCertificateCondition does: observedGeneration is the current generation, and
// lastTransitionTime changes only when the status does. That package is not imported: through
// cert-manager's pkg/logs it brings component-base, zap, cobra and OpenTelemetry into the
// operator (44 packages) for these few lines; the e2e tests prove the real cert-manager
// controller re-issues on this condition.
func SetIssuing(crt *cmapi.Certificate, now metav1.Time) {
	cond := cmapi.CertificateCondition{
		Type: cmapi.CertificateConditionIssuing, Status: cmmeta.ConditionTrue,
		Reason: ReasonManuallyTriggered, Message: MessageManuallyTriggered,
		LastTransitionTime: &now, ObservedGeneration: crt.Generation,
	}
	for i, c := range crt.Status.Conditions {
		if c.Type != cond.Type {
			continue
		}
		if c.Status == cond.Status {
			cond.LastTransitionTime = c.LastTransitionTime
		}
		crt.Status.Conditions[i] = cond
		return
	}
	crt.Status.Conditions = append(crt.Status.Conditions, cond)
}
