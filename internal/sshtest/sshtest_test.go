package sshtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestOpenSSHClientLogsIn checks the helper with OpenSSH's own client, so
// that a failure here points at the helper and not at replan's ssh code.
func TestOpenSSHClientLogsIn(t *testing.T) {
	if _, err := exec.LookPath("ssh"); err != nil {
		t.Skip("ssh client not installed")
	}
	s := Start(t, Config{HostKeyTypes: []string{"ed25519", "rsa"}})
	kh := filepath.Join(t.TempDir(), "known_hosts")
	s.AppendKnownHosts(kh)
	out, err := exec.Command("ssh", "-F", "none", "-i", s.ClientKey, "-p", strconv.Itoa(s.Port),
		"-o", "UserKnownHostsFile="+kh, "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes",
		"-l", s.User, s.Host, "echo", "hello").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "hello" {
		t.Fatalf("ssh: %v\n%s\nsshd log:\n%s", err, out, s.Logs())
	}
	pid := s.PID()
	s.Restart()
	if s.PID() == pid || s.PID() == 0 {
		t.Errorf("restart kept pid %d", pid)
	}
	s.Stop()
	if s.PID() != 0 {
		t.Error("stopped server has a pid")
	}
	if _, err := os.Stat(s.ConfigFile); err != nil {
		t.Errorf("config gone before cleanup: %v", err)
	}
}

// TestNetNSServer runs sshd inside a network namespace (where root and
// `ip netns` allow) and logs in with OpenSSH's client through the veth.
func TestNetNSServer(t *testing.T) {
	if _, err := exec.LookPath("ssh"); err != nil {
		t.Skip("ssh client not installed")
	}
	if ok, why := Available(); !ok {
		t.Skip(why)
	}
	n, err := FreeSubnet(os.Getpid())
	if err != nil {
		t.Skip(err)
	}
	ns, err := NewNetNS(t, "rp-sshtest-"+strconv.Itoa(os.Getpid()), "10.250."+strconv.Itoa(n)+".1", "10.250."+strconv.Itoa(n)+".2")
	if err != nil {
		t.Skipf("no network namespaces here (not root, or ip netns unavailable): %v", err)
	}
	s := Start(t, Config{ListenAddr: ns.NSAddr, Wrap: ns.Wrap()})
	if comm, _ := os.ReadFile("/proc/" + strconv.Itoa(s.PID()) + "/comm"); strings.TrimSpace(string(comm)) != "sshd" {
		t.Errorf("PID %d is %q, want sshd itself", s.PID(), comm)
	}
	kh := filepath.Join(t.TempDir(), "known_hosts")
	s.AppendKnownHosts(kh)
	out, err := exec.Command("ssh", "-F", "none", "-i", s.ClientKey, "-p", strconv.Itoa(s.Port),
		"-o", "UserKnownHostsFile="+kh, "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes",
		"-l", s.User, s.Host, "cat", "/proc/net/dev").CombinedOutput()
	if err != nil || !strings.Contains(string(out), ns.NSIf) {
		t.Fatalf("ssh into the namespace: %v\n%s\nsshd log:\n%s", err, out, s.Logs())
	}
}
