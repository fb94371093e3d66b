package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// KeyMaterial finds private keys of the cluster's Secrets in what a component wrote: an operator
// log, Events, a status, metrics, a command's output. A key is found as the base64 of the whole
// tls.key (how a Secret travels in JSON), as any line of its PEM body (how a decoded key would be
// printed), or as a PEM "PRIVATE KEY" header — in the text itself, and in the bytes of any hex
// dump in it (client-go logs a protobuf body, where a Secret's key is its raw PEM, as a hex dump).
// Keys change with every renewal, so Collect the Secrets whenever a rotation may have replaced
// them; what was collected stays.
//
// A finding names the Secret and the source, never the key.
type KeyMaterial struct {
	mu sync.Mutex
	// needles maps each needle to the Secret it comes from (namespace/name).
	needles map[string]string
}

// chartIssuerKeyFile is the issuer key's name in the Secret Linkerd's chart renders under the
// scheme linkerd.io/tls (linkerd2 pkg/k8s IdentityIssuerKeyName).
const chartIssuerKeyFile = "key.pem"

// Collect adds the needles of every private key of every Secret of the cluster, read as the
// admin: tls.key, and key.pem, where Linkerd's chart puts the issuer's key under its scheme
// linkerd.io/tls.
func (k *KeyMaterial) Collect(ctx context.Context, admin kubernetes.Interface) error {
	list, err := admin.CoreV1().Secrets(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing Secrets for their private keys: %w", err)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.needles == nil {
		k.needles = map[string]string{}
	}
	for _, sec := range list.Items {
		for _, name := range []string{corev1.TLSPrivateKeyKey, chartIssuerKeyFile} {
			key := sec.Data[name]
			if len(key) == 0 {
				continue
			}
			from := sec.Namespace + "/" + sec.Name
			k.needles[base64.StdEncoding.EncodeToString(key)] = from
			for _, line := range strings.Split(string(key), "\n") {
				if line = strings.TrimSpace(line); len(line) >= 40 && !strings.HasPrefix(line, "-----") {
					k.needles[line] = from
				}
			}
		}
	}
	return nil
}

// Keys is the number of needles collected; a scan with none proves nothing.
func (k *KeyMaterial) Keys() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.needles)
}

// Find returns what in data looks like key material, as sentences naming its Secret (or a PEM
// header) and the source; nothing when data holds none.
func (k *KeyMaterial) Find(source string, data []byte) []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	var out []string
	for _, text := range []struct {
		how  string
		data []byte
	}{{"", data}, {" (in a hex dump)", undump(data)}} {
		if bytes.Contains(text.data, []byte("PRIVATE KEY")) {
			out = append(out, source+" holds a PEM PRIVATE KEY header"+text.how)
		}
		seen := map[string]bool{}
		for needle, from := range k.needles {
			if !seen[from] && bytes.Contains(text.data, []byte(needle)) {
				seen[from] = true
				out = append(out, fmt.Sprintf("%s holds private-key material of Secret %s%s", source, from, text.how))
			}
		}
	}
	slices.Sort(out)
	return out
}

// hexDumpLine is a line of encoding/hex.Dump: an offset, up to 16 bytes in hex, their text.
var hexDumpLine = regexp.MustCompile(`(?m)^\s*[0-9a-f]{8}((?:\s{1,2}[0-9a-f]{2}){1,16})\s+\|`)

// undump returns the bytes of the hex dumps in data, each dump's lines joined, dumps separated
// by a newline.
func undump(data []byte) []byte {
	var out []byte
	last := -1
	for _, m := range hexDumpLine.FindAllSubmatchIndex(data, -1) {
		if last >= 0 && bytes.Count(data[last:m[0]], []byte("\n")) > 1 {
			out = append(out, '\n') // not the next line: another dump
		}
		last = m[1]
		b, err := hex.DecodeString(strings.Join(strings.Fields(string(data[m[2]:m[3]])), ""))
		if err == nil {
			out = append(out, b...)
		}
	}
	return out
}
