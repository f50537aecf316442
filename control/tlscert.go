package control

// The TCP listener serves TLS only: with the operator's certificate and
// key, or with a self-signed pair the daemon generates at first start and
// keeps; clients pin its SHA-256 fingerprint.

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// LoadOrCreateCert loads the certificate and key at certFile and keyFile;
// when neither exists it generates a self-signed ECDSA P-256 pair for
// hosts (names or IPs; localhost always) valid for ten years and writes
// both (mode 0600). created reports that it did.
func LoadOrCreateCert(certFile, keyFile string, hosts []string) (cert tls.Certificate, created bool, err error) {
	_, cerr := os.Stat(certFile)
	_, kerr := os.Stat(keyFile)
	if cerr == nil || kerr == nil {
		cert, err = tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return cert, false, fmt.Errorf("TLS certificate %s, key %s: %w", certFile, keyFile, err)
		}
		return cert, false, nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return cert, false, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return cert, false, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: "replan daemon"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().AddDate(10, 0, 0),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if h != "" {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return cert, false, err
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return cert, false, err
	}
	for _, f := range []string{certFile, keyFile} {
		if err := os.MkdirAll(filepath.Dir(f), 0o700); err != nil {
			return cert, false, err
		}
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		return cert, false, err
	}
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		return cert, false, err
	}
	cert, err = tls.LoadX509KeyPair(certFile, keyFile)
	return cert, true, err
}

// Fingerprint is the SHA-256 of a certificate's DER, as colon-separated
// upper-case hex (what `openssl x509 -fingerprint -sha256` prints).
func Fingerprint(der []byte) string {
	sum := sha256.Sum256(der)
	h := strings.ToUpper(hex.EncodeToString(sum[:]))
	var b strings.Builder
	for i := 0; i < len(h); i += 2 {
		if i > 0 {
			b.WriteByte(':')
		}
		b.WriteString(h[i : i+2])
	}
	return b.String()
}

func normFingerprint(s string) string {
	return strings.ToLower(strings.NewReplacer(":", "", " ", "", "SHA256", "", "sha256", "").Replace(s))
}

// NewTLSClient is a client of the daemon's TLS listener
// (https://HOST:PORT) with a bearer token. A fingerprint (as Fingerprint
// prints it; colons and case do not matter) pins the daemon's certificate
// instead of verifying it against the system's CAs; several, separated by
// commas, pin a certificate that is any of them (one per member of a
// highly available control plane).
func NewTLSClient(base, token, fingerprint string) (*Client, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if fingerprint != "" {
		// Several, comma-separated: the members of a highly available
		// control plane each have their own certificate (docs/ha.md).
		want := map[string]bool{}
		for _, f := range strings.Split(fingerprint, ",") {
			w := normFingerprint(f)
			if len(w) != 64 {
				return nil, fmt.Errorf("TLS fingerprint %q: want the 32-byte SHA-256 in hex", strings.TrimSpace(f))
			}
			want[w] = true
		}
		cfg.InsecureSkipVerify = true // replaced by the pin below
		cfg.VerifyConnection = func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("daemon sent no certificate")
			}
			if got := Fingerprint(cs.PeerCertificates[0].Raw); !want[normFingerprint(got)] {
				return fmt.Errorf("daemon's TLS certificate has fingerprint %s, pinned %s", got, fingerprint)
			}
			return nil
		}
	}
	return &Client{HTTP: &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}}, Base: strings.TrimSuffix(base, "/"), Token: token}, nil
}

// LoadTokens reads a tokens file: one "USER SHA256HEX" per line (the
// SHA-256 of the user's token, `printf %s TOKEN | sha256sum`), # comments.
// Problems name the file and line.
func LoadTokens(path string) (map[string][sha256.Size]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tokens file: %w", err)
	}
	out := map[string][sha256.Size]byte{}
	var errs []error
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		var sum [sha256.Size]byte
		b, herr := hex.DecodeString(strings.ToLower(f[len(f)-1]))
		switch {
		case len(f) != 2:
			errs = append(errs, fmt.Errorf("%s:%d: want \"USER SHA256HEX\", got %d fields", path, i+1, len(f)))
			continue
		case herr != nil || len(b) != sha256.Size:
			errs = append(errs, fmt.Errorf("%s:%d: %s: want the token's SHA-256 as 64 hex digits", path, i+1, f[0]))
			continue
		case out[f[0]] != sum:
			errs = append(errs, fmt.Errorf("%s:%d: %s: listed twice", path, i+1, f[0]))
			continue
		}
		copy(sum[:], b)
		out[f[0]] = sum
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}
