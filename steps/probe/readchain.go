package probe

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/linkerd/trust-rotation/steps"
	"github.com/linkerd/trust-rotation/steps/kube"
	"github.com/linkerd/trust-rotation/steps/podindex"
)

// DialFunc opens a connection to a pod's address; the CLI swaps in a port-forward.
type DialFunc = kube.DialFunc

// ReadChain reads the certificate chain a proxy presents on its admin port, the way
// `linkerd identity` does: a TLS handshake with ServerName set to the pod's identity name and no
// client certificate. The chain counts only if the proxy is that identity's: its leaf names the
// identity (a DNS SAN), and the server proved it holds the leaf's key — the handshake completed,
// so crypto/tls checked the server's CertificateVerify signature with the leaf's public key, and
// its Finished. A chain that fails either is a *ChainRejectedError. The chain is not verified to
// any root here: the caller judges it against the rotation's (CertificateCheck, CertTracker).
func ReadChain(ctx context.Context, dial DialFunc, addr, identity string, timeout time.Duration) ([]*x509.Certificate, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	raw, err := dial(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	defer raw.Close()
	// The probe ends with its context, timed out or cancelled, by closing the connection, as
	// crypto/tls's HandshakeContext does: a port-forwarded connection has no deadlines.
	stop := context.AfterFunc(ctx, func() { _ = raw.Close() })
	defer stop()
	var chain []*x509.Certificate
	cfg := probeTLSConfig(identity, func(cs tls.ConnectionState) error {
		// crypto/tls calls this once it has parsed the server's Certificate message, before it
		// checks the CertificateVerify that follows (Conn.verifyServerCertificate): a leaf that
		// names another identity ends the handshake here, proof or not.
		if len(cs.PeerCertificates) == 0 {
			return errors.New("no certificate presented")
		}
		if names := cs.PeerCertificates[0].DNSNames; !namesIdentity(names, identity) {
			return &ChainRejectedError{Expected: identity, Presented: names}
		}
		chain = cs.PeerCertificates
		return nil
	})
	err = tls.Client(raw, cfg).Handshake() // ends when the context closes raw
	var rejected *ChainRejectedError
	switch {
	case err == nil:
		return chain, nil
	case errors.As(err, &rejected):
		return nil, rejected
	case ctx.Err() != nil:
		err = ctx.Err()
	case chain != nil:
		// The leaf names the pod's identity, and the handshake failed after it: the server did
		// not sign the handshake with the leaf's key, or did not finish.
		return nil, &ChainRejectedError{Expected: identity, Presented: chain[0].DNSNames, Proof: err}
	}
	return nil, fmt.Errorf("TLS handshake with SNI %s: %w", identity, err)
}

// probeTLSConfig is the TLS client configuration of a probe with SNI identity. It offers what
// linkerd2-proxy accepts on its admin port (linkerd2-proxy, release/v2.366.0):
//
//   - TLS 1.3 only: the proxy's client and server configurations are built with
//     linkerd_rustls::TLS_VERSIONS, TLS 1.3 alone (linkerd/rustls/src/crypto.rs, used by
//     linkerd/meshtls/src/creds/store.rs).
//   - P-256 alone as the key exchange: the proxy's groups are X25519MLKEM768, X25519, secp256r1 and
//     secp384r1 with aws-lc-rs, secp256r1 and secp384r1 with its FIPS build (kx_groups in
//     crypto.rs): P-256 is in both, and allowed under GODEBUG=fips140=only. crypto/tls orders the
//     groups it offers itself, the post-quantum hybrid and X25519 first, and sends its key shares
//     for the first of them: a probe keeps no secret, and X25519 costs 1.6 times a P-256 share
//     with Go's assembly, the hybrid far more (docs/performance-log.md).
//   - The cipher suites crypto/tls offers for TLS 1.3, which cannot be configured: AES-128-GCM,
//     AES-256-GCM and ChaCha20-Poly1305, only the AES-GCM ones under fips140=only. The proxy
//     accepts all three, and both AES-GCM suites in its FIPS build (TLS_SUPPORTED_CIPHERSUITES).
//   - No ALPN: the admin server terminates TLS with the identity's plain server configuration
//     (linkerd/app/admin/src/stack.rs, tls::NewDetectTls); only the inbound's direct port sets
//     protocols (meshtls server.rs spawn_with_alpn).
//   - The pod's identity as SNI: the proxy terminates TLS only for a ClientHello whose SNI is its
//     own identity name (linkerd/tls/src/server.rs: `Some(sni) if sni == local_server_name`) and
//     presents the certificate it was issued for that name, which it validated for the name
//     itself (creds/store.rs Store::validate, verifier::verify_id).
//   - No client certificate: the proxy asks for one and accepts a client without
//     (WebPkiClientVerifier ... allow_unauthenticated in store.rs server_config).
//
// The chain is not verified to the system's roots (InsecureSkipVerify): the rotation judges it
// against its own root. crypto/tls checks the CertificateVerify signature whatever that setting,
// with the leaf's public key, and the probe completes the handshake so that it does.
func probeTLSConfig(identity string, verify func(tls.ConnectionState) error) *tls.Config {
	return &tls.Config{
		ServerName:         identity,
		MinVersion:         tls.VersionTLS13,
		CurvePreferences:   []tls.CurveID{tls.CurveP256},
		InsecureSkipVerify: true, //nolint:gosec // the caller verifies the chain to the rotation's root
		VerifyConnection:   verify,
	}
}

// namesIdentity reports whether a leaf's DNS names include identity. DNS names compare without
// regard to case, as linkerd_dns_name does.
func namesIdentity(names []string, identity string) bool {
	for _, n := range names {
		if strings.EqualFold(n, identity) {
			return true
		}
	}
	return false
}

// ChainRejectedError is a probe that read a chain the pod's proxy cannot have presented: its leaf
// names another identity than the pod's, or the server did not prove it holds the leaf's key.
// Whatever answers on the pod's address, it is not that pod's proxy with its certificate, and
// the pod is never counted converged on it.
type ChainRejectedError struct {
	// Expected is the pod's identity name, the probe's SNI.
	Expected string
	// Presented are the leaf's DNS names.
	Presented []string
	// Proof is why the handshake failed after a leaf that names the pod's identity (its
	// CertificateVerify did not verify with the leaf's key...); nil when the leaf names another
	// identity.
	Proof error
}

func (e *ChainRejectedError) Error() string {
	switch {
	case e.Proof != nil:
		return fmt.Sprintf("presents a certificate for %s without proving it holds its key (%v)", e.Expected, e.Proof)
	case len(e.Presented) == 0:
		return fmt.Sprintf("presents a certificate with no DNS name, expected identity %s", e.Expected)
	}
	return fmt.Sprintf("presents identity %s, expected %s", strings.Join(e.Presented, ", "), e.Expected)
}

// rejectedChain reports whether err is a probe that read a chain it rejected (ChainRejectedError).
func rejectedChain(err error) bool {
	var rejected *ChainRejectedError
	return errors.As(err, &rejected)
}

// probeProblem is how a failed probe names a pod's problem: a rejected chain as what it is, any
// other failure as "probe failed: ...". The wording is the operator's and the CLI's alike.
func probeProblem(err string, rejected bool) string {
	if rejected {
		return err
	}
	return "probe failed: " + err
}

// IssuerChain returns the part of a live chain above the leaf: the certificate of the chain that
// signed the leaf first, then the other certificates the proxy presented, in order. The
// convergence verifies it to the rotation's certificate root (steps.ChainsTo).
func IssuerChain(chain []*x509.Certificate) ([]*x509.Certificate, error) {
	for i, c := range chain[1:] {
		if steps.SignedBy(chain[0], c) {
			out := make([]*x509.Certificate, 0, len(chain)-1)
			out = append(out, c)
			out = append(out, chain[1:i+1]...)
			return append(out, chain[i+2:]...), nil
		}
	}
	return nil, errors.New("the leaf certificate is not signed by any certificate the proxy presents")
}

// ProbePod reads a pod's live certificate chain and returns its issuer chain (IssuerChain) and
// its leaf.
func ProbePod(ctx context.Context, dial DialFunc, p *podindex.Pod, timeout time.Duration) (issuers []*x509.Certificate, leaf *x509.Certificate, err error) {
	if !p.Running {
		return nil, nil, errors.New("pod is not running")
	}
	addr := net.JoinHostPort(p.IP, strconv.Itoa(int(p.AdminPort)))
	chain, err := ReadChain(ctx, dial, addr, p.Identity, timeout)
	if err != nil {
		return nil, nil, err
	}
	issuers, err = IssuerChain(chain)
	return issuers, chain[0], err
}
