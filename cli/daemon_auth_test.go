package cli

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/replan/replan/control"
	"github.com/replan/replan/internal/sshtest"
)

// Issue 12: `replan daemon` with users in the inventory opens its socket
// to local users, serves --listen over TLS only with per-user tokens
// (printing the certificate's fingerprint for clients to pin) and
// /metrics on --metrics-listen without auth.
func TestDaemonTLSListenerTokensAndMetrics(t *testing.T) {
	dir := t.TempDir()
	inv := strings.Replace(smokeInventory, "tenants: [{name: research, gpu_quota: 16}]", "tenants: [{name: research, gpu_quota: 16, users: [alice]}]\nadmins: [ops]", 1)
	os.WriteFile(filepath.Join(dir, "inv.yaml"), []byte(inv), 0o644)
	sum := sha256.Sum256([]byte("alice-secret"))
	os.WriteFile(filepath.Join(dir, "tokens"), []byte(fmt.Sprintf("alice %x\n", sum)), 0o600)
	listen := fmt.Sprintf("127.0.0.1:%d", sshtest.FreePort(t, "127.0.0.1"))
	metrics := fmt.Sprintf("127.0.0.1:%d", sshtest.FreePort(t, "127.0.0.1"))
	args := []string{"daemon", "--inventory", filepath.Join(dir, "inv.yaml"), "--db", filepath.Join(dir, "r.db"), "--socket", filepath.Join(dir, "s.sock"),
		"--tick", "100ms", "--data", "", "--listen", listen, "--tokens", filepath.Join(dir, "tokens"), "--metrics-listen", metrics}
	cmd := exec.Command(os.Args[0], "-test.run", "^$")
	cmd.Env = append(os.Environ(), "REPLAN_TEST_RUN="+strings.Join(args, "\x1f"))
	logf := filepath.Join(dir, "daemon.log")
	log, _ := os.Create(logf)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	fpRE := regexp.MustCompile(`fingerprint ([0-9A-F:]{95})`)
	var fp string
	deadline := time.Now().Add(20 * time.Second)
	for fp == "" {
		b, _ := os.ReadFile(logf)
		if m := fpRE.FindSubmatch(b); m != nil && strings.Contains(string(b), "replan daemon") {
			fp = string(m[1])
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no fingerprint printed:\n%s", b)
		}
		time.Sleep(50 * time.Millisecond)
	}
	ctx := context.Background()
	c, err := control.NewTLSClient("https://"+listen, "alice-secret", fp)
	if err != nil {
		t.Fatal(err)
	}
	var w control.WhoAmI
	for {
		if w, err = c.WhoAmI(ctx); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil || w.User != "alice" || w.Role != "user" || w.SingleUser {
		t.Fatalf("whoami over TLS: %+v %v", w, err)
	}
	// Several members named (an HA control plane): the first cannot be
	// reached, the second answers; each member's certificate pinned.
	os.WriteFile(filepath.Join(dir, "alice.token"), []byte("alice-secret\n"), 0o600)
	dead := fmt.Sprintf("https://127.0.0.1:%d", sshtest.FreePort(t, "127.0.0.1"))
	out, err := runCLI(t, "whoami", "--json", "--server", dead+",https://"+listen, "--token-file", filepath.Join(dir, "alice.token"),
		"--tls-fingerprint", strings.Repeat("AB:", 31)+"AB,"+fp)
	if err != nil || !strings.Contains(out, `"user": "alice"`) && !strings.Contains(out, `"user":"alice"`) {
		t.Fatalf("whoami through the second of two members: %v\n%s", err, out)
	}
	if out, err := runCLI(t, "whoami", "--server", dead+",http://"+listen, "--token-file", filepath.Join(dir, "alice.token")); err == nil || !strings.Contains(err.Error(), "https://") {
		t.Fatalf("a token to a plain http:// member: %v\n%s", err, out)
	}
	if fi, err := os.Stat(filepath.Join(dir, "s.sock")); err != nil || fi.Mode().Perm() != 0o666 {
		t.Errorf("multi-user socket mode %v %v", fi.Mode(), err)
	}
	b, _ := os.ReadFile(logf)
	if !strings.Contains(string(b), "multi-user") {
		t.Errorf("the daemon did not say it is multi-user:\n%s", b)
	}
	resp, err := http.Get("http://" + metrics + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), "replan_gpus") {
		t.Errorf("metrics: %d %.200s", resp.StatusCode, body)
	}
	// The fingerprint is kept across restarts (the pair is reused).
	if _, err := os.Stat(filepath.Join(dir, "tls", "key.pem")); err != nil {
		t.Errorf("no key kept next to the db: %v", err)
	}
}
