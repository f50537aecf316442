package sshtest

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// NetNS is a network namespace joined to the host's namespace by a veth
// pair: HostAddr on the host side, NSAddr inside (both in one /24).
type NetNS struct {
	Name     string // namespace name (ip netns)
	HostIf   string // host side of the veth pair
	NSIf     string // namespace side
	HostAddr string
	NSAddr   string
}

var (
	vethSeq atomic.Int32
	claimMu sync.Mutex
)

// Wrap is the command prefix that runs a command inside the namespace, for
// Config.Wrap.
func (n *NetNS) Wrap() []string { return []string{"ip", "netns", "exec", n.Name} }

// NewNetNS creates namespace name with a veth pair, hostAddr/24 on the
// host side and nsAddr/24 (and loopback) up inside, and deletes it all with
// t.Cleanup. It returns an error instead of skipping, so that a test can
// fall back to loopback where it is not root or `ip netns` is missing. The
// caller chooses names unique to its run and addresses nobody else uses.
func NewNetNS(t testing.TB, name, hostAddr, nsAddr string) (*NetNS, error) {
	t.Helper()
	seq := vethSeq.Add(1)
	n := &NetNS{
		Name:     name,
		HostIf:   fmt.Sprintf("rp%dh%d", os.Getpid(), seq),
		NSIf:     fmt.Sprintf("rp%dn%d", os.Getpid(), seq),
		HostAddr: hostAddr,
		NSAddr:   nsAddr,
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return nil, fmt.Errorf("ip (iproute2) not installed: %w", err)
	}
	if err := ipCmd("netns", "add", name); err != nil {
		return nil, err
	}
	t.Cleanup(func() {
		_ = ipCmd("link", "del", n.HostIf) // usually gone with the namespace
		_ = ipCmd("netns", "del", name)
	})
	steps := [][]string{
		{"link", "add", n.HostIf, "type", "veth", "peer", "name", n.NSIf},
		{"link", "set", n.NSIf, "netns", name},
		{"addr", "add", hostAddr + "/24", "dev", n.HostIf},
		{"link", "set", n.HostIf, "up"},
		{"-n", name, "addr", "add", nsAddr + "/24", "dev", n.NSIf},
		{"-n", name, "link", "set", n.NSIf, "up"},
		{"-n", name, "link", "set", "lo", "up"},
	}
	for _, s := range steps {
		if err := ipCmd(s...); err != nil {
			return nil, err
		}
	}
	// `ip netns exec` also needs a private mount namespace and a sysfs
	// mount, which some containers refuse: find out now, not in sshd.
	if err := ipCmd("netns", "exec", name, "true"); err != nil {
		return nil, err
	}
	return n, nil
}

func ipCmd(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// FreeSubnet returns an N in 1..250 such that no interface of the host's
// namespace has an address in 10.250.N.0/24, trying from seed on (callers
// pass something run-specific, e.g. their PID). Test hosts then use
// 10.250.N.1 (host side) and 10.250.N.2 (namespace side).
func FreeSubnet(seed int) (int, error) {
	out, err := exec.Command("ip", "-o", "-4", "addr", "show").Output()
	if err != nil {
		return 0, fmt.Errorf("ip addr show: %w", err)
	}
	for i := range 250 {
		n := (seed+i)%250 + 1
		if !strings.Contains(string(out), fmt.Sprintf(" 10.250.%d.", n)) && !claimed(n) {
			return n, nil
		}
	}
	return 0, fmt.Errorf("no free 10.250.N.0/24 subnet")
}

var claimedSubnets = map[int]bool{}

// claimed records n as taken by this process, so that two calls made
// before either subnet is configured do not return the same one.
func claimed(n int) bool {
	claimMu.Lock()
	defer claimMu.Unlock()
	if claimedSubnets[n] {
		return true
	}
	claimedSubnets[n] = true
	return false
}
