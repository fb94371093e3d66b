package reallinkerd_test

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/linkerd/trust-rotation/test/cluster"
	"github.com/linkerd/trust-rotation/test/internal/poll"
	"github.com/linkerd/trust-rotation/test/reallinkerd"
)

// identityRecording is where the identity controller's verdicts are recorded;
// TestIdentityMatchesLinkerd (test/meshsim) replays them against the simulator.
var identityRecording = filepath.Join("..", "meshsim", "testdata", "linkerd-identity", "issuers.json")

// TestLinkerdIdentityJudgesIssuers records, with -update, LINKERD_CONTROLLER_BIN and root, what
// the real identity controller does with each issuer of reallinkerd.IssuerCases: started with
// it (does it serve, or exit, and with what message), and hot-reloaded to it from one that
// verifies (IssuerUpdated, or IssuerUpdateSkipped and the message). It runs `controller
// identity` with the arguments the recorded `linkerd install` rendered for the identity
// container, plus -kubeconfig (it runs beside the bed, not in a pod) and loopback addresses. The
// controller reads its trust roots from a fixed path, /var/run/linkerd/identity/trust-roots, so
// it runs in a private mount namespace with a tmpfs on /run, its files laid out as a kubelet
// lays out a Secret volume, and a reload swaps the ..data link as a kubelet does.
func TestLinkerdIdentityJudgesIssuers(t *testing.T) {
	bins := recordingBinaries(t, "TestIdentityMatchesLinkerd (test/meshsim)", recorder{what: "the real identity controller", controller: true, root: true})
	c := cluster.Shared(t)
	rootsPEM, cases, err := reallinkerd.IssuerCases()
	if err != nil {
		t.Fatal(err)
	}
	args := renderedIdentityArgs(t)
	rec := identityRecordingFile{Comment: "Recorded by TestLinkerdIdentityJudgesIssuers -update (test/reallinkerd) from the real identity controller (LINKERD_CONTROLLER_BIN); do not edit, record again. The issuers are reallinkerd.IssuerCases."}
	good := cases[0]
	for _, ic := range cases {
		id := startIdentity(t, bins.Controller, args, c.Kubeconfig(), rootsPEM, ic)
		outcome := id.await(t, "started", "exited")
		rec.Linkerd = id.version()
		rec.Cases = append(rec.Cases, identityVerdict{Issuer: ic.Name, At: "start", Accepted: outcome == "started", Message: id.lastMessage()})
		id.stop()

		id = startIdentity(t, bins.Controller, args, c.Kubeconfig(), rootsPEM, good)
		if id.await(t, "started", "exited") != "started" {
			t.Fatalf("identity did not start with the issuer %q: %s", good.Name, id.log())
		}
		id.reload(t, ic)
		outcome = id.await(t, "updated", "skipped")
		rec.Cases = append(rec.Cases, identityVerdict{Issuer: ic.Name, At: "reload", Accepted: outcome == "updated", Message: id.lastMessage()})
		id.stop()
	}
	rec.Certify = recordCertify(t, c, bins.Controller, args, rootsPEM, cases[1])
	writeJSON(t, identityRecording, rec)
}

// recordCertify starts identity with ic and asks it for a workload certificate as a proxy does
// (test/tools/identityclient: Certify with a ServiceAccount token for identity.l5d.io and a CSR),
// and records the chain it returned in terms of ic's tls.crt.
func recordCertify(t *testing.T, c *cluster.Cluster, bin string, args []string, rootsPEM []byte, ic reallinkerd.IssuerCase) *certifyRecord {
	t.Helper()
	ctx := t.Context()
	id := startIdentity(t, bin, args, c.Kubeconfig(), rootsPEM, ic)
	defer id.stop()
	if id.await(t, "started", "exited") != "started" {
		t.Fatalf("identity did not start with the issuer %q: %s", ic.Name, id.log())
	}
	kube := c.Kube()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"}}
	if _, err := kube.CoreV1().ServiceAccounts("default").Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	tok, err := kube.CoreV1().ServiceAccounts("default").CreateToken(ctx, "web", &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{Audiences: []string{"identity.l5d.io"}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(tok.Status.Token), 0o600); err != nil {
		t.Fatal(err)
	}
	const name = "web.default.serviceaccount.identity.linkerd.cluster.local"
	cmd := exec.CommandContext(ctx, "go", "run", ".", "-addr", id.addr, "-token-file", tokenFile, "-identity", name)
	cmd.Dir = filepath.Join("..", "tools", "identityclient")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("identityclient: %v\n%s\nidentity log:\n%s", err, stderr.String(), id.log())
	}
	var rsp struct {
		Leaf          string    `json:"leaf"`
		Intermediates []string  `json:"intermediates"`
		ValidUntil    time.Time `json:"validUntil"`
	}
	if err := json.Unmarshal(out, &rsp); err != nil {
		t.Fatalf("identityclient printed %s: %v", out, err)
	}
	leaf := parsePEM(t, []byte(rsp.Leaf))[0]
	tlsCrt := parsePEM(t, ic.Crt)
	r := &certifyRecord{Issuer: ic.Name, Identity: name, LeafDNSNames: leaf.DNSNames, LeafCommonName: leaf.Subject.CommonName,
		Validity: leaf.NotAfter.Sub(leaf.NotBefore).String(), ValidUntilIsLeafNotAfter: rsp.ValidUntil.Equal(leaf.NotAfter),
		KeyUsage: int(leaf.KeyUsage), ExtKeyUsage: fmt.Sprint(leaf.ExtKeyUsage)}
	for _, p := range rsp.Intermediates {
		cert := parsePEM(t, []byte(p))[0]
		where := "not in tls.crt"
		for i, c := range tlsCrt {
			if c.Equal(cert) {
				where = fmt.Sprintf("tls.crt[%d]", i)
			}
		}
		r.Intermediates = append(r.Intermediates, where)
	}
	return r
}

// certifyRecord is the chain identity returned to Certify, in terms of the issuer's tls.crt.
type certifyRecord struct {
	Issuer                   string   `json:"issuer"`
	Identity                 string   `json:"identity"`
	LeafDNSNames             []string `json:"leafDNSNames"`
	LeafCommonName           string   `json:"leafCommonName"`
	Validity                 string   `json:"validity"` // NotAfter - NotBefore
	ValidUntilIsLeafNotAfter bool     `json:"validUntilIsLeafNotAfter"`
	KeyUsage                 int      `json:"keyUsage"`
	ExtKeyUsage              string   `json:"extKeyUsage"`
	Intermediates            []string `json:"intermediates"`
}

func parsePEM(t *testing.T, b []byte) []*x509.Certificate {
	t.Helper()
	var out []*x509.Certificate
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			break
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		t.Fatal("no certificate")
	}
	return out
}

type identityRecordingFile struct {
	Comment string            `json:"comment"`
	Linkerd string            `json:"linkerd"`
	Cases   []identityVerdict `json:"cases"`
	Certify *certifyRecord    `json:"certify"`
}

type identityVerdict struct {
	Issuer   string `json:"issuer"`
	At       string `json:"at"` // start, or reload (from an issuer that verifies)
	Accepted bool   `json:"accepted"`
	Message  string `json:"message"` // the identity controller's log message
}

// renderedIdentityArgs are the identity container's args in the recorded `linkerd install`.
func renderedIdentityArgs(t *testing.T) []string {
	t.Helper()
	return renderedArgs(t, "identity")
}

// renderedArgs are the args of the control-plane container that runs the controller's
// subcommand in the recorded `linkerd install`.
func renderedArgs(t *testing.T, subcommand string) []string {
	t.Helper()
	b, err := os.ReadFile(controlPlaneRecording)
	if err != nil {
		t.Fatalf("%v (record it first: TestLinkerdInstallRendersTheControlPlane)", err)
	}
	m := regexp.MustCompile(`(?s)\n      - args:\n        - ` + regexp.QuoteMeta(subcommand) + `\n((?:        - [^\n]*\n)+)`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("%s: no %s container args", controlPlaneRecording, subcommand)
	}
	args := []string{subcommand}
	for _, l := range strings.Split(strings.TrimSpace(string(m[1])), "\n") {
		args = append(args, strings.TrimPrefix(strings.TrimSpace(l), "- "))
	}
	return args
}

// identityProc is one run of the real identity controller.
// identityProc is one run of the real identity controller.
type identityProc struct{ *controllerProc }

func startIdentity(t *testing.T, bin string, args []string, kubeconfig string, rootsPEM []byte, ic reallinkerd.IssuerCase) *identityProc {
	t.Helper()
	return &identityProc{startController(t, bin, args, kubeconfig, "-admin-addr", map[string][]byte{
		"identity/trust-roots/ca-bundle.crt": rootsPEM,
		"identity/issuer/tls.crt":            ic.Crt,
		"identity/issuer/tls.key":            ic.Key,
	})}
}

// await waits for one of the outcomes: started (serving gRPC), exited, updated (IssuerUpdated)
// or skipped (IssuerUpdateSkipped), as the controller's log and process say.
func (p *identityProc) await(t *testing.T, outcomes ...string) string {
	t.Helper()
	var got string
	err := poll.Until(context.Background(), time.Minute, "the identity controller to be "+strings.Join(outcomes, " or "), func(context.Context) (bool, error) {
		log := p.log()
		seen := map[string]bool{
			"started": strings.Contains(log, "starting gRPC server"),
			"updated": strings.Contains(log, "Updated identity issuer"),
			"skipped": strings.Contains(log, "Skipping issuer update"),
		}
		select {
		case <-p.done:
			seen["exited"] = true
		default:
		}
		for _, o := range outcomes {
			if seen[o] {
				got = o
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, p.log())
	}
	return got
}

var logMessage = regexp.MustCompile(`level=(?:fatal|warning|info) msg="((?:[^"\\]|\\.)*)"`)

// lastMessage is the last fatal, warning or info message about the issuer in the log.
func (p *identityProc) lastMessage() string {
	last := ""
	for _, m := range logMessage.FindAllStringSubmatch(p.log(), -1) {
		msg := strings.ReplaceAll(m[1], `\"`, `"`)
		if strings.Contains(msg, "issuer") || strings.Contains(msg, "Failed to initialize") {
			last = msg
		}
	}
	return last
}

// reload writes the issuer into the controller's Secret volume as a kubelet updates one: a new
// timestamped directory, then the ..data link renamed onto it.
func (p *identityProc) reload(t *testing.T, ic reallinkerd.IssuerCase) {
	t.Helper()
	p.refresh(t, "identity/issuer", map[string][]byte{"tls.crt": ic.Crt, "tls.key": ic.Key})
}
