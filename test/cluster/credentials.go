package cluster

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// credentials are the files that make up the cluster's identity: the CA that signs the
// apiserver's serving certificate (and that every kubeconfig trusts), the service-account
// signing key pair, and the static bearer tokens of every user.
type credentials struct {
	dir        string
	caFile     string // CA certificate, also the controller-manager's --root-ca-file
	certFile   string // apiserver serving certificate
	keyFile    string
	saKeyFile  string // RSA private key signing service-account tokens
	saPubFile  string
	tokensFile string            // --token-auth-file
	tokens     map[string]string // user name -> bearer token
	caPEM      []byte
}

// componentUsers are the identities the components authenticate as. The controller-manager and
// scheduler use the names Kubernetes' bootstrap RBAC policy grants their permissions to. kwok
// (which plays the kubelet of every fake node) and cert-manager have no bootstrap roles; they run
// as system:masters, as cluster-admin-bound deployments of them would.
var componentUsers = []User{
	{Name: AdminUser, Groups: []string{"system:masters"}},
	{Name: UnprivilegedUser},
	{Name: "system:kube-controller-manager"},
	{Name: "system:kube-scheduler"},
	{Name: "trust-rotation:kwok", Groups: []string{"system:masters"}},
	{Name: "trust-rotation:cert-manager", Groups: []string{"system:masters"}},
}

// newCredentials writes a fresh CA, serving certificate and service-account keys into dir and a
// token file for the component users plus extra. The serving certificate names every address a
// client may use: 127.0.0.1 (where the apiserver listens), the advertise address, and the
// in-cluster names and first service IP of the `kubernetes` Service.
func newCredentials(dir string, advertise net.IP, serviceIP net.IP, extra []User) (*credentials, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating the credentials directory: %w", err)
	}
	c := &credentials{
		dir:        dir,
		caFile:     filepath.Join(dir, "ca.crt"),
		certFile:   filepath.Join(dir, "apiserver.crt"),
		keyFile:    filepath.Join(dir, "apiserver.key"),
		saKeyFile:  filepath.Join(dir, "sa.key"),
		saPubFile:  filepath.Join(dir, "sa.pub"),
		tokensFile: filepath.Join(dir, "tokens.csv"),
		tokens:     map[string]string{},
	}

	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating the cluster CA key: %w", err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "trust-rotation-test-cluster-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("signing the cluster CA: %w", err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	c.caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})

	srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating the apiserver serving key: %w", err)
	}
	srvTmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: "kube-apiserver"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames: []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
			"kubernetes.default.svc.cluster.local"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), advertise, serviceIP},
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, caCert, &srvKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("signing the apiserver serving certificate: %w", err)
	}
	srvKeyDER, err := x509.MarshalECPrivateKey(srvKey)
	if err != nil {
		return nil, fmt.Errorf("encoding the apiserver serving key: %w", err)
	}

	// Kubernetes accepts only RSA and ECDSA service-account keys; RSA is what kubeadm uses.
	saKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, fmt.Errorf("generating the service-account signing key: %w", err)
	}
	saPubDER, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return nil, fmt.Errorf("encoding the service-account public key: %w", err)
	}

	files := map[string][]byte{
		c.caFile:    c.caPEM,
		c.certFile:  pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srvDER}),
		c.keyFile:   pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: srvKeyDER}),
		c.saKeyFile: pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(saKey)}),
		c.saPubFile: pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: saPubDER}),
	}

	// Token file lines: token,user,uid,"group1,group2".
	var tokens strings.Builder
	for _, u := range append(append([]User{}, componentUsers...), extra...) {
		if _, dup := c.tokens[u.Name]; dup {
			return nil, fmt.Errorf("static user %q is defined twice", u.Name)
		}
		tok := randomHex(24)
		c.tokens[u.Name] = tok
		fmt.Fprintf(&tokens, "%s,%s,%s,%q\n", tok, u.Name, u.Name, strings.Join(u.Groups, ","))
	}
	files[c.tokensFile] = []byte(tokens.String())

	for path, data := range files {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			return nil, fmt.Errorf("writing %s: %w", path, err)
		}
	}
	return c, nil
}

// kubeconfig builds a kubeconfig for server that authenticates with the static token of user
// and, when impersonate is non-empty, impersonates that user and those groups.
func (c *credentials) kubeconfig(server, user, impersonate string, groups []string) (*clientcmdapi.Config, error) {
	tok, ok := c.tokens[user]
	if !ok {
		return nil, fmt.Errorf("no static token for user %q", user)
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["trust-rotation"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: c.caPEM}
	cfg.AuthInfos["user"] = &clientcmdapi.AuthInfo{Token: tok, Impersonate: impersonate, ImpersonateGroups: groups}
	cfg.Contexts["trust-rotation"] = &clientcmdapi.Context{Cluster: "trust-rotation", AuthInfo: "user"}
	cfg.CurrentContext = "trust-rotation"
	return cfg, nil
}

// writeKubeconfig writes kubeconfig(…) to path.
func (c *credentials) writeKubeconfig(path, server, user, impersonate string, groups []string) error {
	cfg, err := c.kubeconfig(server, user, impersonate, groups)
	if err != nil {
		return err
	}
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("writing kubeconfig %s: %w", path, err)
	}
	return nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	return n
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
