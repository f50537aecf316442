package control

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Issue 12: the TCP listener serves TLS only, with per-user tokens (the
// tokens file holds only their SHA-256): a self-signed pair is generated
// once and kept; a client pinning its fingerprint gets in with its token
// and is that user; a wrong pin, a wrong token or plain HTTP does not.
// /metrics has its own listener without auth.
func TestTLSListenerPerUserTokens(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	certF, keyF := filepath.Join(dir, "tls", "cert.pem"), filepath.Join(dir, "tls", "key.pem")
	cert, created, err := LoadOrCreateCert(certF, keyF, []string{"head.example"})
	if err != nil || !created {
		t.Fatalf("create: %v %v", created, err)
	}
	if fi, _ := os.Stat(keyF); fi.Mode().Perm() != 0o600 {
		t.Errorf("key mode %v", fi.Mode())
	}
	again, created, err := LoadOrCreateCert(certF, keyF, nil)
	if err != nil || created || Fingerprint(again.Certificate[0]) != Fingerprint(cert.Certificate[0]) {
		t.Fatalf("second start made a new certificate: %v %v", created, err)
	}
	fp := Fingerprint(cert.Certificate[0])

	sum := sha256.Sum256([]byte("alice-token"))
	tokFile := filepath.Join(dir, "tokens")
	os.WriteFile(tokFile, []byte(fmt.Sprintf("# user sha256\nalice %x\n", sum)), 0o600)
	toks, err := LoadTokens(tokFile)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "bad"), []byte("alice nothex\nbob\n"), 0o600)
	if _, err := LoadTokens(filepath.Join(dir, "bad")); err == nil || !strings.Contains(err.Error(), "bad:1: alice:") || !strings.Contains(err.Error(), "bad:2:") {
		t.Errorf("bad tokens file: %v", err)
	}

	_, d, _ := startAdmitAPI(t)
	acc := &Access{DaemonUID: os.Getuid(), Tokens: toks, Tenants: []TenantAccess{{Name: "research", Users: []string{"alice"}}}}
	api, addr := serveTLSAPI(t, d, acc, cert)
	ml, _ := net.Listen("tcp", "127.0.0.1:0")
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go Serve(sctx, ml, api.MetricsHandler())
	base := "https://" + addr

	good, err := NewTLSClient(base, "alice-token", strings.ToLower(strings.ReplaceAll(fp, ":", "")))
	if err != nil {
		t.Fatal(err)
	}
	w, err := good.WhoAmI(ctx)
	if err != nil || w.User != "alice" || w.Via != "token" || w.Role != "user" {
		t.Fatalf("whoami over TLS: %+v %v", w, err)
	}
	if _, err := good.NodeOp(ctx, "a", "drain"); !strings.Contains(fmt.Sprint(err), "rule admin") {
		t.Errorf("alice draining over TLS: %v", err)
	}
	wrongPin, _ := NewTLSClient(base, "alice-token", strings.Repeat("ab", 32))
	if _, err := wrongPin.Status(ctx); err == nil || !strings.Contains(err.Error(), "fingerprint") {
		t.Errorf("wrong pin: %v", err)
	}
	badTok, _ := NewTLSClient(base, "nope", fp)
	if _, err := badTok.Status(ctx); err == nil || !strings.Contains(err.Error(), "wrong bearer token") {
		t.Errorf("wrong token: %v", err)
	}
	noTok, _ := NewTLSClient(base, "", fp)
	if _, err := noTok.Status(ctx); err == nil || !strings.Contains(err.Error(), "missing bearer token") {
		t.Errorf("no token: %v", err)
	}
	plain, _ := http.NewRequest("GET", "http://"+addr+"/v1/status", nil)
	plain.Header.Set("Authorization", "Bearer alice-token")
	if resp, err := http.DefaultClient.Do(plain); err == nil && resp.StatusCode == 200 {
		t.Error("plain HTTP answered on the TLS listener")
	}
	resp, err := http.Get("http://" + ml.Addr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(b), "replan_gpus") {
		t.Errorf("metrics listener: %d %.200s", resp.StatusCode, b)
	}
	if resp, err := http.Get("http://" + ml.Addr().String() + "/v1/status"); err == nil && resp.StatusCode == 200 {
		t.Error("the metrics listener serves the API")
	}
}

// serveTLSAPI serves d's API with acc over TLS with cert on a loopback
// port until the test ends: the API and the listener's host:port.
func serveTLSAPI(t *testing.T, d *Daemon, acc *Access, cert tls.Certificate) (*API, string) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	api := &API{D: d, Version: "test", Access: acc}
	go Serve(ctx, tls.NewListener(l, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}), api.Handler())
	return api, l.Addr().String()
}
