// Command identityclient asks a Linkerd identity controller for a workload certificate as a
// proxy does — linkerd2-proxy-api's Identity.Certify, with a ServiceAccount token and a CSR for
// the identity name from a fresh ECDSA P-256 key — and prints the response: the leaf, the
// intermediates and validUntil, as JSON with PEM certificates. The bed uses it to record what
// the real identity controller (LINKERD_CONTROLLER_BIN) returns. A module of its own, so that
// the product's module does not depend on gRPC.
//
// With -serve it is the simulated proxies' gRPC client in the bed's real-Linkerd mode
// (meshsim.Config.Linkerd): it reads one JSON request a line on stdin (an id, the
// identity controller's address, the pod's token, the identity and the CSR the simulated proxy
// made from its own key), calls Certify for each, concurrently, and writes one JSON response a
// line on stdout, with the request's id.
package main

import (
	"bufio"
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
	"io"
	"os"
	"strings"
	"sync"
	"time"

	pb "github.com/linkerd/linkerd2-proxy-api/go/identity"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// response is what Certify returned.
type response struct {
	ID            uint64    `json:"id,omitempty"`
	Leaf          string    `json:"leaf,omitempty"`
	Intermediates []string  `json:"intermediates,omitempty"`
	ValidUntil    time.Time `json:"validUntil"`
	Error         string    `json:"error,omitempty"`
}

// request is one Certify call of -serve.
type request struct {
	ID       uint64 `json:"id"`
	Addr     string `json:"addr"`
	Token    string `json:"token"`
	Identity string `json:"identity"`
	CSR      []byte `json:"csr"` // DER
}

func main() {
	addr := flag.String("addr", "", "address of the identity controller's gRPC server (its -addr)")
	tokenFile := flag.String("token-file", "", "file holding the ServiceAccount token (audience identity.l5d.io)")
	name := flag.String("identity", "", "identity to ask for: <sa>.<ns>.serviceaccount.identity.<linkerd-ns>.<trust-domain>")
	serveMode := flag.Bool("serve", false, "answer Certify requests, one JSON object a line on stdin, until stdin closes")
	flag.Parse()
	if *serveMode {
		if err := serve(os.Stdin, os.Stdout); err != nil {
			fmt.Fprintf(os.Stderr, "identityclient: %v\n", err)
			os.Exit(1)
		}
		return
	}
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
	out, err := certify(ctx, conn, name, []byte(strings.TrimSpace(string(tok))), csr)
	if err != nil {
		return err
	}
	e := json.NewEncoder(os.Stdout)
	e.SetIndent("", "  ")
	return e.Encode(out)
}

func certify(ctx context.Context, conn *grpc.ClientConn, name string, token, csr []byte) (response, error) {
	rsp, err := pb.NewIdentityClient(conn).Certify(ctx, &pb.CertifyRequest{
		Identity: name, Token: token, CertificateSigningRequest: csr,
	})
	if err != nil {
		return response{}, fmt.Errorf("Certify: %w", err)
	}
	enc := func(der []byte) string {
		return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	}
	out := response{Leaf: enc(rsp.GetLeafCertificate()), ValidUntil: rsp.GetValidUntil().AsTime()}
	for _, der := range rsp.GetIntermediateCertificates() {
		out.Intermediates = append(out.Intermediates, enc(der))
	}
	return out, nil
}

// serve answers the requests read from in, each in a goroutine of its own, on one connection
// per address, as a proxy keeps one to its identity controller.
func serve(in io.Reader, out io.Writer) error {
	var mu sync.Mutex
	conns := map[string]*grpc.ClientConn{}
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	enc := json.NewEncoder(out)
	reply := func(r response) {
		mu.Lock()
		defer mu.Unlock()
		_ = enc.Encode(r)
	}
	var wg sync.WaitGroup
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var req request
		if err := json.Unmarshal(sc.Bytes(), &req); err != nil {
			return fmt.Errorf("reading a request: %w", err)
		}
		mu.Lock()
		conn := conns[req.Addr]
		if conn == nil {
			var err error
			if conn, err = grpc.NewClient(req.Addr, grpc.WithTransportCredentials(insecure.NewCredentials())); err != nil {
				mu.Unlock()
				reply(response{ID: req.ID, Error: err.Error()})
				continue
			}
			conns[req.Addr] = conn
		}
		mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			rsp, err := certify(ctx, conn, req.Identity, []byte(req.Token), req.CSR)
			if err != nil {
				rsp = response{Error: err.Error()}
				// A new identity pod may come up on the address of one that is gone: grpc-go
				// would retry the broken connection with its own back-off (up to 2 minutes),
				// failing every call meanwhile; the proxy reconnects far sooner. So the next call
				// dials afresh.
				mu.Lock()
				if conns[req.Addr] == conn {
					delete(conns, req.Addr)
					conn.Close()
				}
				mu.Unlock()
			}
			rsp.ID = req.ID
			reply(rsp)
		}()
	}
	wg.Wait()
	return sc.Err()
}
