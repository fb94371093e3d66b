package observe

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/ecdh"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"net"
	"sync"
)

// This file reads the certificate chain a TLS 1.3 server presents, with the first half of a
// handshake (RFC 8446): a ClientHello, the ServerHello, the handshake keys, and the server's
// encrypted flight decrypted up to its Certificate message. It stops there, as ReadChain always
// has: what comes next (CertificateVerify, Finished) proves that the proxy holds the leaf's key
// and completes the handshake, and tells the convergence nothing.
//
// crypto/tls does the same work with its whole machinery around it, and each probe allocated
// about 40 KB: 48 % of what the operator allocated over a 10,000-pod rotation, and so much of its
// GC. This reader allocates the key exchange, the key schedule, the AEAD and the certificates,
// and borrows its buffers from a pool.
//
// It offers what linkerd2-proxy accepts: TLS 1.3 only; a P-256 key share, the cheapest
// exchange every proxy accepts (aws-lc-rs's default groups, which the proxy keeps, are X25519,
// secp256r1, secp384r1 and X25519MLKEM768; ring's were X25519, secp256r1 and secp384r1); and
// TLS_AES_128_GCM_SHA256 alone, which current proxies accept with or without FIPS
// (linkerd/meshtls/src/backend/aws_lc.rs). It offers no other suite: a server free to choose
// prefers ChaCha20-Poly1305 when its machine has no AES instructions (crypto/tls does), and
// decrypting that would take golang.org/x/crypto. A server that accepts none of what is offered
// answers handshake_failure, and ReadChain reads its chain with crypto/tls instead: proxies built
// on rustls with ring before they accepted AES offered ChaCha20-Poly1305 alone.

const (
	recordChangeCipherSpec = 20
	recordAlert            = 21
	recordHandshake        = 22
	recordApplicationData  = 23

	handshakeClientHello         = 1
	handshakeServerHello         = 2
	handshakeEncryptedExtensions = 8
	handshakeCertificate         = 11
	handshakeCertificateRequest  = 13

	extensionServerName          = 0
	extensionSupportedGroups     = 10
	extensionSignatureAlgorithms = 13
	extensionSupportedVersions   = 43
	extensionKeyShare            = 51

	versionTLS12            = 0x0303
	versionTLS13            = 0x0304
	suiteTLSAES128GCMSHA256 = 0x1301
	groupP256               = 0x0017

	recordHeaderLen = 5
	// maxCiphertext is the longest TLS 1.3 record body (RFC 8446 §5.2).
	maxCiphertext = 1<<14 + 256
	// maxHandshakeMessage bounds a handshake message, as crypto/tls does: a chain is a few KB.
	maxHandshakeMessage = 1 << 16
)

// signatureSchemes are the signature algorithms the ClientHello offers: the ones crypto/tls
// offers. The probe never checks the server's signature; a server must still find one it can use.
var signatureSchemes = []uint16{
	0x0403, 0x0503, 0x0603, // ecdsa_secp256r1_sha256, ecdsa_secp384r1_sha384, ecdsa_secp521r1_sha512
	0x0807,                 // ed25519
	0x0804, 0x0805, 0x0806, // rsa_pss_rsae_sha256, _sha384, _sha512
	0x0401, 0x0501, 0x0601, // rsa_pkcs1_sha256, _sha384, _sha512 (certificates only)
}

// helloRetryRandom is the ServerHello.random of a HelloRetryRequest (RFC 8446 §4.1.3).
var helloRetryRandom = [32]byte{
	0xcf, 0x21, 0xad, 0x74, 0xe5, 0x9a, 0x61, 0x11, 0xbe, 0x1d, 0x8c, 0x02, 0x1e, 0x65, 0xb8, 0x91,
	0xc2, 0xa2, 0x11, 0x16, 0x7a, 0xbb, 0x8c, 0x5e, 0x07, 0x9e, 0x09, 0xe2, 0xc8, 0xa8, 0x33, 0x9c,
}

// derivedSecret is Derive-Secret(Early Secret, "derived", "") without a PSK: the salt of every
// handshake secret, the same for every connection (RFC 8446 §7.1).
var derivedSecret = sync.OnceValue(func() []byte {
	early, err := hkdf.Extract(sha256.New, make([]byte, sha256.Size), nil)
	if err != nil {
		panic(err)
	}
	empty := sha256.Sum256(nil)
	return expandLabel(early, "derived", empty[:], sha256.Size)
})

// expandLabel is HKDF-Expand-Label with SHA-256 (RFC 8446 §7.1).
func expandLabel(secret []byte, label string, context []byte, length int) []byte {
	info := make([]byte, 0, 4+len("tls13 ")+len(label)+len(context))
	info = binary.BigEndian.AppendUint16(info, uint16(length))
	info = append(info, byte(len("tls13 ")+len(label)))
	info = append(append(info, "tls13 "...), label...)
	info = append(info, byte(len(context)))
	info = append(info, context...)
	out, err := hkdf.Expand(sha256.New, secret, string(info), length)
	if err != nil {
		panic(err) // only for a length past 255 hashes
	}
	return out
}

// chainBuffers are one probe's buffers: a record, and the handshake bytes not yet parsed.
type chainBuffers struct {
	record    [recordHeaderLen + maxCiphertext]byte
	handshake []byte
}

var chainBufferPool = sync.Pool{New: func() any { return &chainBuffers{handshake: make([]byte, 0, 4096)} }}

// chainReader is one probe's side of the handshake.
type chainReader struct {
	conn net.Conn
	*chainBuffers
	// buffered is record[start:end]: bytes read from conn, not yet consumed.
	start, end int
	// aead, iv and seq decrypt the server's handshake records once the keys are known.
	aead cipher.AEAD
	iv   [12]byte
	seq  uint64
	// returned is the length of the handshake message returned last, at the start of handshake.
	returned int
}

// readChainTLS13 sends a ClientHello with serverName as its SNI on conn and returns the chain the
// server presents in its Certificate message, the leaf first. It honours conn's deadline.
func readChainTLS13(conn net.Conn, serverName string) ([]*x509.Certificate, error) {
	bufs := chainBufferPool.Get().(*chainBuffers)
	defer func() {
		bufs.handshake = bufs.handshake[:0]
		chainBufferPool.Put(bufs)
	}()
	r := &chainReader{conn: conn, chainBuffers: bufs}

	key, err := ecdh.P256().GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	transcript := sha256.New()
	hello := clientHello(r.record[:0], serverName, key.PublicKey().Bytes())
	transcript.Write(hello[recordHeaderLen:])
	if _, err := conn.Write(hello); err != nil {
		return nil, err
	}

	msg, err := r.handshakeMessage()
	if err != nil {
		return nil, err
	}
	if msg[0] != handshakeServerHello {
		return nil, fmt.Errorf("expected a ServerHello, got handshake message %d", msg[0])
	}
	serverShare, err := parseServerHello(msg[4:])
	if err != nil {
		return nil, err
	}
	transcript.Write(msg)
	if err := r.setHandshakeKeys(key, serverShare, transcript); err != nil {
		return nil, err
	}
	for {
		msg, err := r.handshakeMessage()
		if err != nil {
			return nil, err
		}
		switch msg[0] {
		case handshakeEncryptedExtensions, handshakeCertificateRequest:
			continue
		case handshakeCertificate:
			return parseCertificateMessage(msg[4:])
		default:
			return nil, errors.New("no certificate presented")
		}
	}
}

// clientHello appends the ClientHello record to b.
func clientHello(b []byte, serverName string, share []byte) []byte {
	b = append(b, recordHandshake, 0x03, 0x01, 0, 0) // record length at 3
	b = append(b, handshakeClientHello, 0, 0, 0)     // message length at 6
	b = binary.BigEndian.AppendUint16(b, versionTLS12)
	b = b[:len(b)+32]
	_, _ = rand.Read(b[len(b)-32:])
	b = append(b, 0) // no legacy session id
	b = append(b, 0, 2, suiteTLSAES128GCMSHA256>>8, suiteTLSAES128GCMSHA256&0xff)
	b = append(b, 1, 0) // the null compression method
	extensions := len(b)
	b = append(b, 0, 0)
	if serverName != "" {
		b = binary.BigEndian.AppendUint16(b, extensionServerName)
		b = binary.BigEndian.AppendUint16(b, uint16(len(serverName)+5))
		b = binary.BigEndian.AppendUint16(b, uint16(len(serverName)+3))
		b = append(b, 0) // host_name
		b = binary.BigEndian.AppendUint16(b, uint16(len(serverName)))
		b = append(b, serverName...)
	}
	b = binary.BigEndian.AppendUint16(b, extensionSupportedGroups)
	b = append(b, 0, 4, 0, 2, groupP256>>8, groupP256&0xff)
	b = binary.BigEndian.AppendUint16(b, extensionSignatureAlgorithms)
	b = binary.BigEndian.AppendUint16(b, uint16(2*len(signatureSchemes)+2))
	b = binary.BigEndian.AppendUint16(b, uint16(2*len(signatureSchemes)))
	for _, s := range signatureSchemes {
		b = binary.BigEndian.AppendUint16(b, s)
	}
	b = binary.BigEndian.AppendUint16(b, extensionSupportedVersions)
	b = append(b, 0, 3, 2, versionTLS13>>8, versionTLS13&0xff)
	b = binary.BigEndian.AppendUint16(b, extensionKeyShare)
	b = binary.BigEndian.AppendUint16(b, uint16(len(share)+6))
	b = binary.BigEndian.AppendUint16(b, uint16(len(share)+4))
	b = append(b, groupP256>>8, groupP256&0xff)
	b = binary.BigEndian.AppendUint16(b, uint16(len(share)))
	b = append(b, share...)

	binary.BigEndian.PutUint16(b[extensions:], uint16(len(b)-extensions-2))
	n := len(b) - 9
	b[6], b[7], b[8] = byte(n>>16), byte(n>>8), byte(n)
	binary.BigEndian.PutUint16(b[3:], uint16(len(b)-recordHeaderLen))
	return b
}

// parseServerHello checks that body, a ServerHello's, chose TLS 1.3, TLS_AES_128_GCM_SHA256 and a
// P-256 share, and returns the server's share.
func parseServerHello(body []byte) ([]byte, error) {
	s := tlsBytes(body)
	version, _ := s.uint16()
	random := s.next(32)
	session, _ := s.vector8()
	suite, _ := s.uint16()
	compression := s.next(1)
	exts, ok := s.vector16()
	if !ok || len(random) != 32 || len(compression) != 1 || len(s) != 0 || len(session) != 0 {
		return nil, errors.New("malformed ServerHello")
	}
	if [32]byte(random) == helloRetryRandom {
		return nil, errors.New("the server asked for another key share (HelloRetryRequest); the probe offers P-256 only")
	}
	var share []byte
	for len(exts) > 0 {
		typ, _ := exts.uint16()
		data, ok := exts.vector16()
		if !ok {
			return nil, errors.New("malformed ServerHello extensions")
		}
		switch typ {
		case extensionSupportedVersions:
			if v, _ := data.uint16(); len(data) != 0 || v != versionTLS13 {
				return nil, fmt.Errorf("the server chose TLS version %#04x; the probe speaks TLS 1.3 only", v)
			}
			version = versionTLS13
		case extensionKeyShare:
			group, _ := data.uint16()
			key, ok := data.vector16()
			if !ok || len(data) != 0 || group != groupP256 {
				return nil, fmt.Errorf("the server's key share is not a P-256 one (group %#04x)", group)
			}
			share = key
		}
	}
	switch {
	case version != versionTLS13:
		return nil, fmt.Errorf("the server chose TLS version %#04x; the probe speaks TLS 1.3 only", version)
	case suite != suiteTLSAES128GCMSHA256:
		return nil, fmt.Errorf("the server chose cipher suite %#04x, which was not offered", suite)
	case compression[0] != 0:
		return nil, errors.New("the server chose a compression method")
	case share == nil:
		return nil, errors.New("the ServerHello has no key share")
	}
	return share, nil
}

// setHandshakeKeys derives the server's handshake traffic key from the key exchange and the
// transcript of ClientHello and ServerHello (RFC 8446 §7.1, §7.3).
func (r *chainReader) setHandshakeKeys(key *ecdh.PrivateKey, serverShare []byte, transcript hash.Hash) error {
	// The keys change after the ServerHello: a record must not carry more (RFC 8446 §5.1).
	if r.dropReturned(); len(r.handshake) != 0 {
		return errors.New("handshake data after the ServerHello in the same plaintext record")
	}
	peer, err := ecdh.P256().NewPublicKey(serverShare)
	if err != nil {
		return fmt.Errorf("the server's key share: %w", err)
	}
	shared, err := key.ECDH(peer)
	if err != nil {
		return err
	}
	secret, err := hkdf.Extract(sha256.New, shared, derivedSecret())
	if err != nil {
		return err
	}
	traffic := expandLabel(secret, "s hs traffic", transcript.Sum(nil), sha256.Size)
	block, err := aes.NewCipher(expandLabel(traffic, "key", nil, 16))
	if err != nil {
		return err
	}
	if r.aead, err = cipher.NewGCM(block); err != nil {
		return err
	}
	copy(r.iv[:], expandLabel(traffic, "iv", nil, len(r.iv)))
	return nil
}

// handshakeMessage returns the next handshake message, its 4-byte header included, reading and
// decrypting records as it needs. The message is valid until the next call.
func (r *chainReader) handshakeMessage() ([]byte, error) {
	r.dropReturned()
	for len(r.handshake) < 4 || 4+messageLen(r.handshake) > len(r.handshake) {
		if len(r.handshake) >= 4 && messageLen(r.handshake) > maxHandshakeMessage {
			return nil, fmt.Errorf("handshake message of %d bytes", messageLen(r.handshake))
		}
		if err := r.readRecord(); err != nil {
			return nil, err
		}
	}
	r.returned = 4 + messageLen(r.handshake)
	return r.handshake[:r.returned], nil
}

// dropReturned forgets the handshake message returned last.
func (r *chainReader) dropReturned() {
	r.handshake = r.handshake[:copy(r.handshake, r.handshake[r.returned:])]
	r.returned = 0
}

func messageLen(b []byte) int { return int(b[1])<<16 | int(b[2])<<8 | int(b[3]) }

// readRecord reads one record and appends the handshake bytes it carries to r.handshake.
func (r *chainReader) readRecord() error {
	header, err := r.read(recordHeaderLen)
	if err != nil {
		return err
	}
	var aad [recordHeaderLen]byte // read may move the header
	copy(aad[:], header)
	typ, n := aad[0], int(binary.BigEndian.Uint16(aad[3:]))
	switch {
	case typ < recordChangeCipherSpec || typ > recordApplicationData || aad[1] != 3:
		return errors.New("the server's answer is not TLS")
	case n > maxCiphertext:
		return fmt.Errorf("record of %d bytes", n)
	}
	body, err := r.read(n)
	if err != nil {
		return err
	}
	switch {
	case typ == recordAlert && len(body) == 2:
		return alertError(body[1])
	case typ == recordHandshake && r.aead == nil:
		r.handshake = append(r.handshake, body...)
		return nil
	case typ == recordChangeCipherSpec && len(body) == 1 && body[0] == 1:
		return nil // sent for middleboxes, and ignored (RFC 8446 §5)
	case typ != recordApplicationData || r.aead == nil:
		return fmt.Errorf("unexpected record of type %d", typ)
	}
	var nonce [12]byte
	binary.BigEndian.PutUint64(nonce[4:], r.seq)
	for i := range nonce {
		nonce[i] ^= r.iv[i]
	}
	r.seq++
	plain, err := r.aead.Open(body[:0], nonce[:], body, aad[:])
	if err != nil {
		return errors.New("a record does not decrypt with the handshake key")
	}
	// The inner content type is the last byte that is not padding.
	i := len(plain) - 1
	for i >= 0 && plain[i] == 0 {
		i--
	}
	if i < 0 {
		return errors.New("a record without a content type")
	}
	switch plain[i] {
	case recordHandshake:
		r.handshake = append(r.handshake, plain[:i]...)
		return nil
	case recordAlert:
		if i == 2 {
			return alertError(plain[1])
		}
	}
	return fmt.Errorf("unexpected encrypted record of type %d", plain[i])
}

// read returns the next n bytes read from the connection, valid until the next read.
func (r *chainReader) read(n int) ([]byte, error) {
	if r.start+n > len(r.record) {
		r.end = copy(r.record[:], r.record[r.start:r.end])
		r.start = 0
	}
	for r.end-r.start < n {
		m, err := r.conn.Read(r.record[r.end:])
		r.end += m
		if r.end-r.start >= n {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	b := r.record[r.start : r.start+n]
	r.start += n
	return b, nil
}

// alertError names a TLS alert the server sent.
type alertError byte

// alertHandshakeFailure is the alert of a server that accepts none of the parameters offered
// (RFC 8446 §4.1.1): rustls, crypto/tls and OpenSSL send it when no cipher suite is shared.
const alertHandshakeFailure = 40

func (a alertError) Error() string {
	switch a {
	case alertHandshakeFailure:
		return "the server sent TLS alert handshake_failure"
	case 70:
		return "the server sent TLS alert protocol_version"
	case 112:
		return "the server sent TLS alert unrecognized_name"
	case 80:
		return "the server sent TLS alert internal_error"
	}
	return fmt.Sprintf("the server sent TLS alert %d", byte(a))
}

// parseCertificateMessage returns the certificates of a Certificate message's body (RFC 8446
// §4.4.2), the leaf first.
func parseCertificateMessage(body []byte) ([]*x509.Certificate, error) {
	s := tlsBytes(body)
	if context, ok := s.vector8(); !ok || len(context) != 0 {
		return nil, errors.New("malformed Certificate message")
	}
	list, ok := s.vector24()
	if !ok || len(s) != 0 {
		return nil, errors.New("malformed Certificate message")
	}
	var chain []*x509.Certificate
	for len(list) > 0 {
		der, ok := list.vector24()
		_, ok2 := list.vector16() // the entry's extensions
		if !ok || !ok2 || len(der) == 0 {
			return nil, errors.New("malformed Certificate message")
		}
		var cert *x509.Certificate
		var err error
		if len(chain) == 0 {
			cert, err = x509.ParseCertificate(bytes.Clone(der))
		} else {
			cert, err = presentedIssuers.parse(der)
		}
		if err != nil {
			return nil, fmt.Errorf("certificate %d of the chain: %w", len(chain), err)
		}
		chain = append(chain, cert)
	}
	if len(chain) == 0 {
		return nil, errors.New("no certificate presented")
	}
	return chain, nil
}

// issuerCache keeps the certificates last parsed above a leaf. Every proxy of a mesh presents
// the same one or two issuers, and parsing them again for each probe was a third of what
// crypto/tls allocated per probe. x509.Certificates are never modified once parsed, so the probes
// share them.
type issuerCache struct {
	mu    sync.Mutex
	certs [4]*x509.Certificate
	next  int
}

var presentedIssuers issuerCache

func (c *issuerCache) parse(der []byte) (*x509.Certificate, error) {
	c.mu.Lock()
	for _, cert := range c.certs {
		if cert != nil && bytes.Equal(cert.Raw, der) {
			c.mu.Unlock()
			return cert, nil
		}
	}
	c.mu.Unlock()
	cert, err := x509.ParseCertificate(bytes.Clone(der))
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.certs[c.next] = cert
	c.next = (c.next + 1) % len(c.certs)
	c.mu.Unlock()
	return cert, nil
}

// tlsBytes reads TLS's big-endian integers and length-prefixed vectors.
type tlsBytes []byte

func (s *tlsBytes) next(n int) []byte {
	if n > len(*s) {
		*s = nil
		return nil
	}
	b := (*s)[:n:n]
	*s = (*s)[n:]
	return b
}

func (s *tlsBytes) uint16() (uint16, bool) {
	b := s.next(2)
	if b == nil {
		return 0, false
	}
	return binary.BigEndian.Uint16(b), true
}

func (s *tlsBytes) vector8() (tlsBytes, bool) {
	n := s.next(1)
	if n == nil {
		return nil, false
	}
	return s.vector(int(n[0]))
}

func (s *tlsBytes) vector16() (tlsBytes, bool) {
	n, ok := s.uint16()
	if !ok {
		return nil, false
	}
	return s.vector(int(n))
}

func (s *tlsBytes) vector24() (tlsBytes, bool) {
	n := s.next(3)
	if n == nil {
		return nil, false
	}
	return s.vector(int(n[0])<<16 | int(n[1])<<8 | int(n[2]))
}

func (s *tlsBytes) vector(n int) (tlsBytes, bool) {
	if n > len(*s) {
		*s = nil
		return nil, false
	}
	return tlsBytes(s.next(n)), true
}
