package pki

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	cmclient "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/test/internal/poll"
)

// Renew triggers a re-issuance of a Certificate exactly as `cmctl renew` does (cert-manager/cmctl
// pkg/renew): it sets, through the status subresource, the condition Issuing=True with reason
// ManuallyTriggered and message "Certificate re-issuance manually triggered". The trigger
// controller then issues a new certificate (with a new key under rotationPolicy Always). cmctl
// gives up on a write conflict; Renew re-reads and retries, which ends in the same state.
func Renew(ctx context.Context, cm cmclient.Interface, namespace, name string) error {
	certs := cm.CertmanagerV1().Certificates(namespace)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		crt, err := certs.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		setCondition(crt, cmapi.CertificateConditionIssuing, cmmeta.ConditionTrue,
			"ManuallyTriggered", "Certificate re-issuance manually triggered")
		_, err = certs.UpdateStatus(ctx, crt, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("failed to trigger issuance of Certificate %s/%s: %w", namespace, name, err)
	}
	return nil
}

// setCondition sets a Certificate condition the way cert-manager's apiutil.SetCertificateCondition
// (which cmctl calls) does: observedGeneration is the current generation, and lastTransitionTime
// changes only when the status does. That helper is not imported because its package drags
// Kubernetes' logging configuration into the module.
func setCondition(crt *cmapi.Certificate, typ cmapi.CertificateConditionType, status cmmeta.ConditionStatus, reason, message string) {
	now := metav1.Now()
	cond := cmapi.CertificateCondition{
		Type: typ, Status: status, Reason: reason, Message: message,
		LastTransitionTime: &now, ObservedGeneration: crt.Generation,
	}
	for i, c := range crt.Status.Conditions {
		if c.Type != typ {
			continue
		}
		if c.Status == status {
			cond.LastTransitionTime = c.LastTransitionTime
		}
		crt.Status.Conditions[i] = cond
		return
	}
	crt.Status.Conditions = append(crt.Status.Conditions, cond)
}

// WaitReady waits until the Certificate namespace/name is issued for its current spec and returns
// the fingerprint of the certificate in its Secret. See WaitRenewed for what "issued" means.
func WaitReady(ctx context.Context, kube kubernetes.Interface, cm cmclient.Interface, namespace, name string, timeout time.Duration) (string, error) {
	return waitIssued(ctx, kube, cm, namespace, name, "", timeout)
}

// WaitRenewed waits until the Certificate namespace/name has been re-issued: its Secret's
// tls.crt holds a certificate whose fingerprint differs from oldFingerprint, and the Certificate
// is Ready again for that certificate (Ready=True for the current generation, no Issuing=True
// left, status.notAfter equal to the new certificate's). It returns the new fingerprint.
func WaitRenewed(ctx context.Context, kube kubernetes.Interface, cm cmclient.Interface, namespace, name, oldFingerprint string, timeout time.Duration) (string, error) {
	if oldFingerprint == "" {
		return "", errors.New("WaitRenewed needs the fingerprint of the certificate being replaced")
	}
	return waitIssued(ctx, kube, cm, namespace, name, oldFingerprint, timeout)
}

func waitIssued(ctx context.Context, kube kubernetes.Interface, cm cmclient.Interface, namespace, name, oldFingerprint string, timeout time.Duration) (string, error) {
	what := fmt.Sprintf("Certificate %s/%s to be issued", namespace, name)
	if oldFingerprint != "" {
		what = fmt.Sprintf("Certificate %s/%s to be re-issued (replacing %.12s…)", namespace, name, oldFingerprint)
	}
	var fp string
	err := poll.Until(ctx, timeout, what, func(ctx context.Context) (bool, error) {
		crt, err := cm.CertmanagerV1().Certificates(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, poll.Pending("%v", err)
		}
		if err := issuedFor(crt); err != nil {
			return false, err
		}
		secret, err := kube.CoreV1().Secrets(namespace).Get(ctx, crt.Spec.SecretName, metav1.GetOptions{})
		if err != nil {
			return false, poll.Pending("%v", err)
		}
		cert, err := leaf(secret)
		if err != nil {
			return false, poll.Pending("%v", err)
		}
		fp = steps.Fingerprint(cert)
		if fp == oldFingerprint {
			return false, poll.Pending("secret %s still holds the old certificate", secret.Name)
		}
		// The readiness controller copies the validity of the Secret's certificate into the
		// status; a match means the Ready condition speaks about this certificate.
		if crt.Status.NotAfter == nil || !crt.Status.NotAfter.Time.Equal(cert.NotAfter.Truncate(time.Second)) {
			return false, poll.Pending("status.notAfter %v does not describe the certificate in secret %s yet", crt.Status.NotAfter, secret.Name)
		}
		return true, nil
	})
	return fp, err
}

// issuedFor returns a Pending error unless crt is Ready for its current generation and no
// issuance is in progress.
func issuedFor(crt *cmapi.Certificate) error {
	ready := false
	for _, c := range crt.Status.Conditions {
		switch {
		case c.Type == cmapi.CertificateConditionIssuing && c.Status == cmmeta.ConditionTrue:
			return poll.Pending("Issuing=True (%s)", c.Reason)
		case c.Type == cmapi.CertificateConditionReady:
			if c.Status != cmmeta.ConditionTrue || c.ObservedGeneration < crt.Generation {
				return poll.Pending("Ready=%s for generation %d of %d (%s: %s)", c.Status, c.ObservedGeneration, crt.Generation, c.Reason, c.Message)
			}
			ready = true
		}
	}
	if !ready {
		return poll.Pending("no Ready condition yet")
	}
	return nil
}

// leaf returns the first certificate of a TLS Secret's tls.crt.
func leaf(secret *corev1.Secret) (*x509.Certificate, error) {
	data := secret.Data[corev1.TLSCertKey]
	if len(data) == 0 {
		return nil, fmt.Errorf("secret %s/%s has no %s yet", secret.Namespace, secret.Name, corev1.TLSCertKey)
	}
	certs, err := steps.ParseCertificates(data)
	if err != nil {
		return nil, fmt.Errorf("secret %s/%s: %s: %w", secret.Namespace, secret.Name, corev1.TLSCertKey, err)
	}
	return certs[0], nil
}
