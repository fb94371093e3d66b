// Command identityclient asks a Linkerd identity controller for a workload certificate as a
// proxy does — linkerd2-proxy-api's Identity.Certify, with a ServiceAccount token and a CSR for
// the identity name from a fresh ECDSA P-256 key — and prints the response: the leaf, the
// intermediates and validUntil, as JSON with PEM certificates. The bed uses it to record what
// the real identity controller (LINKERD_CONTROLLER_BIN) returns. A module of its own, so that
// the product's module does not depend on gRPC.
package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	pb "github.com/linkerd/linkerd2-proxy-api/go/identity"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// response is what Certify returned.
type response struct {
	Leaf          string    `json:"leaf"`
	Intermediates []string  `json:"intermediates"`
	ValidUntil    time.Time `json:"validUntil"`
}

func main() {
	addr := flag.String("addr", "", "address of the identity controller's gRPC server (its -addr)")
	tokenFile := flag.String("token-file", "", "file holding the ServiceAccount token (audience identity.l5d.io)")
	name := flag.String("identity", "", "identity to ask for: <sa>.<ns>.serviceaccount.identity.<linkerd-ns>.<trust-domain>")
	flag.Parse()
	if err := run(*addr, *tokenFile, *name); err != nil {
		fmt.Fprintf(os.Stderr, "identityclient: %v\n", err)
		os.Exit(1)
	}
}

func run(addr, tokenFile, name string) error {
	if addr == "" || tokenFile == "" || name == "" {
		return fmt.Errorf("-addr, -token-file and -identity are required")
	}
	tok, err := os.ReadFile(tokenFile)
	if err != nil {
		return err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	csr, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: name}, DNSNames: []string{name},
	}, key)
	if err != nil {
		return err
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rsp, err := pb.NewIdentityClient(conn).Certify(ctx, &pb.CertifyRequest{
		Identity: name, Token: []byte(strings.TrimSpace(string(tok))), CertificateSigningRequest: csr,
	})
	if err != nil {
		return fmt.Errorf("Certify: %w", err)
	}
	enc := func(der []byte) string {
		return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	}
	out := response{Leaf: enc(rsp.GetLeafCertificate()), ValidUntil: rsp.GetValidUntil().AsTime()}
	for _, der := range rsp.GetIntermediateCertificates() {
		out.Intermediates = append(out.Intermediates, enc(der))
	}
	e := json.NewEncoder(os.Stdout)
	e.SetIndent("", "  ")
	return e.Encode(out)
}
