package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/replan/replan/internal/sshtest"
)

// Issue 28: `trust` took one server per call. Now it takes several, or
// --all of the inventory's, against real sshd servers: each new key is
// written, a known one is said so, and one server that does not answer
// fails the command by name without stopping the others.
func TestTrustSeveralServers(t *testing.T) {
	if ok, why := sshtest.Available(); !ok {
		t.Skip(why)
	}
	a := sshtest.Start(t, sshtest.Config{})
	b := sshtest.Start(t, sshtest.Config{})
	tmp := t.TempDir()
	kh := filepath.Join(tmp, "known_hosts")
	inv := filepath.Join(tmp, "inventory.yaml")
	dead := sshtest.FreePort(t, "127.0.0.1")
	data := fmt.Sprintf("version: 1\ndefaults: {user: %s, identity_file: %s, gpus: 4, gpu_memory_gb: 80, cpu_cores: 2, host_memory_gb: 8, nvlink_gbps: 400, nic_gbps: 25}\n"+
		"racks: [{name: r1, spine_gbps: 50}]\nservers:\n  - {name: a, address: %s, port: %d, rack: r1}\n  - {name: b, address: %s, port: %d, rack: r1}\n  - {name: c, address: 127.0.0.1, port: %d, rack: r1}\nssh: {known_hosts: %s}\n",
		a.User, a.ClientKey, a.Host, a.Port, b.Host, b.Port, dead, kh)
	if err := os.WriteFile(inv, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	out, errOut, err := runSplit(t, "trust", "a", "b", "--yes", "--inventory", inv, "--timeout", "20s")
	if err != nil || strings.Count(out, "added ") != 2 {
		t.Fatalf("trust a b: %v\n%s%s", err, out, errOut)
	}
	khData, _ := os.ReadFile(kh)
	if n := strings.Count(string(khData), "\n"); n != 2 {
		t.Errorf("known_hosts has %d lines, want 2:\n%s", n, khData)
	}
	out, errOut, err = runSplit(t, "trust", "--all", "--yes", "--json", "--inventory", inv, "--timeout", "20s")
	if err == nil || !strings.Contains(err.Error(), "1 of 3 servers failed: c") {
		t.Errorf("trust --all with c down: %v\n%s", err, errOut)
	}
	var res []trustJSON
	if err := json.Unmarshal([]byte(out), &res); err != nil || len(res) != 2 {
		t.Fatalf("trust --all --json: %v\n%s", err, out)
	}
	for _, r := range res {
		if r.Status != "known" || r.Written {
			t.Errorf("second trust of %s: %+v", r.Server, r)
		}
	}
	// Confirmation is asked per key, from one stdin.
	os.Remove(kh)
	var stdout, stderr strings.Builder
	cmd := newRootCmd(&stdout, &stderr)
	cmd.SetArgs([]string{"trust", "a", "b", "--inventory", inv})
	cmd.SetIn(strings.NewReader("y\nn\n"))
	err = cmd.Execute()
	if err == nil || !strings.Contains(err.Error(), "1 of 2 servers failed: b") || strings.Count(stdout.String(), "Add it to") != 2 {
		t.Errorf("y then n: %v\n%s%s", err, stdout.String(), stderr.String())
	}
	if khData, _ := os.ReadFile(kh); strings.Count(string(khData), "\n") != 1 {
		t.Errorf("after y then n, known_hosts:\n%s", khData)
	}
}
