package control

import (
	"context"
	"fmt"
	"os/exec"
	"testing"
	"time"

	"github.com/replan/replan/cluster"
	"github.com/replan/replan/internal/waitfor"
)

// A server whose link is down drops what it is sent: every call to it
// waits out the call timeout. Once one poll of it has timed out, Observe
// reports it unreachable without waiting and asks it again beside the
// loop; when its link is back, a probe hears it and the next observations
// see it again. Before, every Observe waited the whole timeout for it (no
// probe was ever made: this test's probe hook was never entered).
func TestObserveAsksASilentServerBesideTheLoop(t *testing.T) {
	h := newAgentHost(t, "rp-sl", 43)
	if h.ns == nil {
		t.Skip("needs the network-namespace host (root, ip netns) to cut its link")
	}
	ex, err := NewSSHExecutor(h.fl, []cluster.Server{h.server}, SSHOptions{CallTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	reachable := func() (bool, string) {
		t.Helper()
		o, err := ex.Observe(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return o.Nodes[0].Reachable, o.Nodes[0].Err
	}
	if ok, why := reachable(); !ok {
		t.Fatalf("before the cut: unreachable: %s", why)
	}
	setLink(t, h.ns.HostIf, "down")
	linkUp := false
	t.Cleanup(func() {
		if !linkUp {
			setLink(t, h.ns.HostIf, "up")
		}
	})
	// The first poll after the cut waits out the timeout.
	if ok, _ := reachable(); ok {
		t.Fatal("link down: reachable")
	}
	entered, release := make(chan struct{}, 4), make(chan struct{})
	ex.probe = func(string) {
		entered <- struct{}{}
		<-release
	}
	// The next Observe answers while its probe of the server is held.
	ok, why := reachable()
	if ok || why == "" {
		t.Fatalf("link down, second observation: reachable %v, err %q", ok, why)
	}
	waitfor.T(t, ctx, "a probe of the silent server", waitfor.Options{Stall: 30 * time.Second}, func() error {
		select {
		case <-entered:
			return nil
		default:
			return fmt.Errorf("no probe yet")
		}
	})
	// One probe at a time: another Observe starts none while it runs.
	if ok, _ := reachable(); ok {
		t.Fatal("link down, third observation: reachable")
	}
	select {
	case <-entered:
		t.Fatal("a second probe started while the first ran")
	default:
	}
	setLink(t, h.ns.HostIf, "up")
	linkUp = true
	close(release)
	waitfor.T(t, ctx, "the server seen again after its link is back", waitfor.Options{Stall: 60 * time.Second}, func() error {
		if ok, why := reachable(); !ok {
			return fmt.Errorf("unreachable: %s", why)
		}
		return nil
	})
}

// setLink sets a network interface up or down.
func setLink(t *testing.T, dev, state string) {
	t.Helper()
	if out, err := exec.Command("ip", "link", "set", dev, state).CombinedOutput(); err != nil {
		t.Fatalf("ip link set %s %s: %v: %s", dev, state, err, out)
	}
}
