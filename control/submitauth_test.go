package control

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
)

// Issue 24: a submit was validated (the whole spec, env checks included:
// seconds of CPU for 1 MiB) before the daemon asked whether the caller may
// submit under the spec's tenant. Now the tenant is read as soon as the
// YAML is decoded and a caller outside it is refused first: a broken spec
// under someone else's tenant is answered 403, not 400 with its problems,
// and a valid one is refused the same way. The callers are token users
// over the TLS listener, as a remote user submits.
func TestSubmitAuthorizesBeforeValidating(t *testing.T) {
	ctx := context.Background()
	_, d, st := startAdmitAPI(t)
	toks := map[string][sha256.Size]byte{"alice": sha256.Sum256([]byte("alice-token")), "bob": sha256.Sum256([]byte("bob-token"))}
	acc := &Access{DaemonUID: os.Getuid(), Tokens: toks, Tenants: []TenantAccess{
		{Name: "research", Users: []string{"alice"}},
		{Name: "small", Users: []string{"bob"}},
	}}
	cert, _, err := LoadOrCreateCert(t.TempDir()+"/cert.pem", t.TempDir()+"/key.pem", []string{"head.example"})
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go Serve(sctx, tls.NewListener(l, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}), (&API{D: d, Version: "test", Access: acc}).Handler())
	fp := strings.ToLower(strings.ReplaceAll(Fingerprint(cert.Certificate[0]), ":", ""))
	alice, _ := NewTLSClient("https://"+l.Addr().String(), "alice-token", fp)
	bob, _ := NewTLSClient("https://"+l.Addr().String(), "bob-token", fp)

	status := func(err error) int {
		var re *RemoteError
		if errors.As(err, &re) {
			return re.Status
		}
		return 0
	}
	// Broken (unknown class, unknown model, a bad env name, a plan that
	// does not fit) under tenant research.
	broken := admitSpec(map[string]string{"class": "vip", "model": "nope", "request": `{gpus: 4, plan: "dp=3"}`}) + "env: {\"1BAD\": x}\n"
	_, err = bob.Submit(ctx, "broken.yaml", []byte(broken))
	if status(err) != 403 || !strings.Contains(err.Error(), "rule submit") || strings.Contains(err.Error(), "broken.yaml:") {
		t.Errorf("bob submitting a broken spec under research: %v (want 403 by rule submit, before its problems)", err)
	}
	// Alice may submit under research: she gets the problems.
	_, err = alice.Submit(ctx, "broken.yaml", []byte(broken))
	if status(err) != 400 || !strings.Contains(err.Error(), "broken.yaml:") {
		t.Errorf("alice submitting the broken spec: %v (want 400 with its problems)", err)
	}
	// A large spec with many env keys: refused the same way.
	var big strings.Builder
	big.WriteString(admitSpec(nil) + "env:\n")
	for i := range 40000 {
		fmt.Fprintf(&big, "  K%06d: v\n", i)
	}
	_, err = bob.Submit(ctx, "big.yaml", []byte(big.String()))
	if status(err) != 403 {
		t.Errorf("bob submitting %d bytes under research: %v (want 403)", big.Len(), err)
	}
	// A valid spec: bob refused, alice accepted; a spec without a tenant
	// is a bad spec for everyone.
	if _, err := bob.Submit(ctx, "ok.yaml", []byte(admitSpec(nil))); status(err) != 403 {
		t.Errorf("bob submitting a valid spec under research: %v", err)
	}
	if _, err := alice.Submit(ctx, "ok.yaml", []byte(admitSpec(nil))); err != nil {
		t.Errorf("alice submitting under research: %v", err)
	}
	noTenant := strings.Replace(admitSpec(nil), "tenant: research\n", "", 1)
	if _, err := bob.Submit(ctx, "nt.yaml", []byte(noTenant)); status(err) != 400 || !strings.Contains(err.Error(), "tenant") {
		t.Errorf("bob submitting a spec without a tenant: %v (want 400 naming it)", err)
	}
	jobs, err := st.ListJobs(ctx, JobFilter{})
	if err != nil || len(jobs) != 1 {
		t.Errorf("stored %d jobs, want alice's one: %v", len(jobs), err)
	}
}
