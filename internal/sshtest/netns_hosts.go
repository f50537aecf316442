package sshtest

import (
	"fmt"
	"os"
	"testing"
)

// Host is a named test server: an sshd, in its own network namespace when
// the test can create one.
type Host struct {
	Name string
	SSHD *Server
	NS   *NetNS // nil on loopback
}

// StartHosts starts n sshd servers sharing one client key, named h1..hn.
// Each runs in its own network namespace behind a veth pair (10.250.N.2,
// reached from 10.250.N.1) when the test can create namespaces, else (or
// with REPLAN_E2E_LOOPBACK=1) on loopback ports, and says so with t.Log.
// prefix names the namespaces (unique per test binary: the PID is added);
// seed picks the subnets so parallel test binaries do not collide.
func StartHosts(t testing.TB, n int, clientKey, prefix string, seed int) (hosts []Host, netns bool) {
	t.Helper()
	pid := os.Getpid()
	netns = true
	var spaces []*NetNS
	if os.Getenv("REPLAN_E2E_LOOPBACK") != "" {
		t.Logf("REPLAN_E2E_LOOPBACK set: %d sshd on loopback ports instead of network namespaces", n)
		netns = false
	}
	for i := range n {
		if !netns {
			break
		}
		sub, err := FreeSubnet(pid*n + i + seed)
		if err == nil {
			var ns *NetNS
			ns, err = NewNetNS(t, fmt.Sprintf("%s-%d-%d", prefix, pid, i+1), fmt.Sprintf("10.250.%d.1", sub), fmt.Sprintf("10.250.%d.2", sub))
			spaces = append(spaces, ns)
		}
		if err != nil {
			t.Logf("network namespaces unavailable (%v): falling back to %d sshd on loopback ports", err, n)
			netns = false
			break
		}
	}
	for i := range n {
		cfg := Config{ClientKey: clientKey}
		if netns {
			cfg.ListenAddr, cfg.Wrap = spaces[i].NSAddr, spaces[i].Wrap()
		}
		h := Host{Name: fmt.Sprintf("h%d", i+1), SSHD: Start(t, cfg)}
		if netns {
			h.NS = spaces[i]
		}
		hosts = append(hosts, h)
	}
	return hosts, netns
}

// Route lets hosts in network namespaces reach each other (what a job
// spanning servers needs: torchrun's rendezvous, gloo's connections):
// each namespace gets a default route through its veth's host side and
// the host forwards IPv4 (net.ipv4.ip_forward, restored at cleanup). On
// loopback hosts it does nothing.
func Route(t testing.TB, hosts []Host) error {
	t.Helper()
	if len(hosts) == 0 || hosts[0].NS == nil {
		return nil
	}
	const fwd = "/proc/sys/net/ipv4/ip_forward"
	old, err := os.ReadFile(fwd)
	if err != nil {
		return fmt.Errorf("read %s: %w", fwd, err)
	}
	if string(old) != "1\n" {
		if err := os.WriteFile(fwd, []byte("1\n"), 0o644); err != nil {
			return fmt.Errorf("enable IPv4 forwarding: %w", err)
		}
		t.Cleanup(func() { _ = os.WriteFile(fwd, old, 0o644) })
	}
	for _, h := range hosts {
		if h.NS == nil {
			continue
		}
		if err := ipCmd("-n", h.NS.Name, "route", "replace", "default", "via", h.NS.HostAddr); err != nil {
			return err
		}
	}
	return nil
}
