package meshsim

import (
	"bufio"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/linkerd/trust-rotation/test/reallinkerd"
)

// RealVerifier is the proxy's verifier run for real: rustls-webpki, as linkerd2-proxy calls it,
// in a long-running process named by WEBPKI_VERIFIER_BIN (reallinkerd.EnvVerifier). No registry
// serves crates here, so the project takes the verifier by path, as it takes Linkerd's binaries;
// the line protocol it speaks is a contract documented in docs/linkerd-versions.md:
//
//   - on start it writes one line: {"verifier":"rustls-webpki","version":"0.103.13"};
//   - then, for each request line {"roots":[…],"chain":[…],"time":<unix seconds>,
//     "usage":"server"|"client","name":""} (certificates as base64 DER; chain[0] the end entity,
//     the rest presented after it in order), one answer line {"ok":true} or
//     {"ok":false,"kind":"<webpki::Error variant>","error":"<its Debug>"}.
//
// The verification is linkerd2-proxy's (release/v2.366.0, linkerd/meshtls/src/creds/verify.rs
// AnySanVerifier and creds/store.rs): every root through webpki::anchor_from_trusted_cert, then
// EndEntityCert::verify_for_usage with the proxy's signature algorithms, the presented
// certificates as intermediates, the time given, KeyUsage::server_auth (the proxy as client) or
// client_auth (the proxy as server), no CRLs. The proxy checks the peer's identity itself after
// the handshake (linkerd/meshtls/verifier verify_id), not through webpki: the oracle sends no
// name.
type RealVerifier struct {
	path    string
	version string

	mu    sync.Mutex
	cmd   *exec.Cmd
	in    io.WriteCloser
	out   *bufio.Reader
	calls int
}

// Verdict is the verifier's answer: OK, or the rustls-webpki error's variant name (Kind) and its
// Debug rendering (Error).
type Verdict struct {
	OK    bool   `json:"ok"`
	Kind  string `json:"kind,omitempty"`
	Error string `json:"error,omitempty"`
}

func (v Verdict) String() string {
	if v.OK {
		return "accepted"
	}
	return "rejected: " + v.Kind
}

// StartVerifier starts the verifier at path and reads its version line.
func StartVerifier(path string) (*RealVerifier, error) {
	cmd := exec.Command(path)
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the verifier %s: %w", path, err)
	}
	v := &RealVerifier{path: path, cmd: cmd, in: in, out: bufio.NewReaderSize(stdout, 64<<10)}
	line, err := v.out.ReadBytes('\n')
	if err == nil {
		v.version, err = reallinkerd.ParseVerifierHello(line)
	}
	if err != nil {
		_ = v.Close()
		return nil, fmt.Errorf("starting the verifier %s: %w", path, err)
	}
	return v, nil
}

// Version is what the verifier said it is, e.g. "rustls-webpki 0.103.13".
func (v *RealVerifier) Version() string { return v.version }

// Calls is how many verifications the process has answered.
func (v *RealVerifier) Calls() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.calls
}

// VerifyRequest is one verification, as the protocol's request line carries it.
type VerifyRequest struct {
	Roots []string `json:"roots"`
	Chain []string `json:"chain"`
	Time  int64    `json:"time"`
	Usage string   `json:"usage"`
	Name  string   `json:"name"`
}

// NewVerifyRequest encodes a verification of chain (the end entity first, then the presented
// certificates in order) against roots at now (whole seconds, as rustls passes
// UnixTime::now()) for usage: server auth when the proxy is the client, client auth when it is
// the server.
func NewVerifyRequest(roots, chain []*x509.Certificate, now time.Time, usage x509.ExtKeyUsage) VerifyRequest {
	r := VerifyRequest{Time: now.Unix(), Usage: "server"}
	if usage == x509.ExtKeyUsageClientAuth {
		r.Usage = "client"
	}
	for _, c := range roots {
		r.Roots = append(r.Roots, base64.StdEncoding.EncodeToString(c.Raw))
	}
	for _, c := range chain {
		r.Chain = append(r.Chain, base64.StdEncoding.EncodeToString(c.Raw))
	}
	return r
}

// Verify asks the verifier one question.
func (v *RealVerifier) Verify(req VerifyRequest) (Verdict, error) {
	line, err := json.Marshal(req)
	if err != nil {
		return Verdict{}, err
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.cmd == nil {
		return Verdict{}, ErrVerifierClosed
	}
	if _, err := v.in.Write(append(line, '\n')); err != nil {
		return Verdict{}, fmt.Errorf("writing to the verifier %s: %w", v.path, err)
	}
	answer, err := v.out.ReadBytes('\n')
	if err != nil {
		return Verdict{}, fmt.Errorf("reading the verifier %s: %w", v.path, err)
	}
	v.calls++
	var out Verdict
	if err := json.Unmarshal(answer, &out); err != nil {
		return Verdict{}, fmt.Errorf("the verifier %s answered %q: %w", v.path, answer, err)
	}
	if !out.OK && (out.Kind == "" || out.Kind == "BadRequest" || out.Kind == "Panic") {
		return Verdict{}, fmt.Errorf("the verifier %s could not judge the request: %s %s", v.path, out.Kind, out.Error)
	}
	return out, nil
}

// ErrVerifierClosed is Verify's error once Close was called.
var ErrVerifierClosed = errors.New("the verifier was closed")

// Close stops the verifier: its input closed, it exits.
func (v *RealVerifier) Close() error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.cmd == nil {
		return nil
	}
	_ = v.in.Close()
	err := v.cmd.Wait()
	v.cmd = nil
	return err
}

// modelKind is the rustls-webpki error variant the oracle's model names in its error: the word
// before the first colon ("CertExpired: …").
func modelKind(err error) string {
	if err == nil {
		return ""
	}
	k, _, _ := strings.Cut(strings.TrimPrefix(err.Error(), "leaf: "), ":")
	k, _, _ = strings.Cut(k, " ")
	return k
}
