package control_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/replan/replan/control"
	"github.com/replan/replan/fleet"
	"github.com/replan/replan/sched"
)

// rebootAgent does to a test host's agent what a reboot does: the agent
// is killed and its state directory removed (the binary and the
// directory stay, as on a server's disk); it returns when the agent was
// killed. Both at once, as a reboot
// does: the state directory is first renamed away (atomic), the agent
// killed right after, and the old directory removed later. (Removing it
// after the kill raced the daemon: it could redeploy the agent before
// the removal ended, which then took the new agent's state directory.)
func rebootAgent(t *testing.T, dir string) (killed time.Time) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "agent.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 1 {
		t.Fatalf("agent.pid %q: %v", b, err)
	}
	gone := filepath.Join(dir, fmt.Sprintf("agent.before-reboot-%d", time.Now().UnixNano()))
	if err := os.Rename(filepath.Join(dir, "agent"), gone); err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed = time.Now()
	for range 100 {
		if syscall.Kill(pid, 0) != nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := os.RemoveAll(gone); err != nil {
		t.Fatal(err)
	}
	return killed
}

// TestSSHRedeployBringsTheAgentBack: on real sshd test hosts, the SSH
// executor's Redeploy starts the agent of a server whose agent a reboot
// took (killed, state directory gone) through fleet.Deploy and passes
// the health check; an agent that runs but does not answer (SIGSTOP) is
// restarted with the flags it ran with (its fake GPUs), not with the
// daemon's; and a daemon on the SSH executor finds a server whose agent
// is gone, redeploys it by itself, records the downtime and returns it to
// service. (Three sshd hosts with agents; about half a minute.)
func TestSSHRedeployBringsTheAgentBack(t *testing.T) {
	c := newTestCluster(t)
	ctx := c.ctx
	opts := control.SSHOptions{Logger: c.log, KillGrace: 2 * time.Second, CallTimeout: 10 * time.Second, Poll: 50 * time.Millisecond, NoCPUBinding: true,
		Deploy: &fleet.DeployOptions{AgentBinary: c.agentBin, FakeGPUs: "8xA800", StopTimeout: time.Second}}
	ex, err := control.NewSSHExecutor(c.fl, c.inv.Servers, opts)
	if err != nil {
		t.Fatal(err)
	}
	dirOf := func(i int) string { return fleet.ExpandDir(c.remoteDir, c.inv.Servers[i].Name, "/") }

	// A rebooted server's agent is deployed again.
	name := c.inv.Servers[0].Name
	rebootAgent(t, dirOf(0))
	if err := ex.Check(ctx, name); err == nil {
		t.Fatal("the health check passes with the agent killed")
	}
	status, err := ex.Redeploy(ctx, name)
	if err != nil || status != fleet.StatusDeployed {
		t.Fatalf("redeploy of a rebooted server: %q, %v", status, err)
	}
	if err := ex.Check(ctx, name); err != nil {
		t.Fatalf("health check after the redeploy: %v", err)
	}
	// An agent that answers is left alone.
	if status, err := ex.Redeploy(ctx, name); err != nil || status != fleet.StatusUpToDate {
		t.Fatalf("redeploy of a server whose agent answers: %q, %v", status, err)
	}

	// An agent that runs but does not answer: restarted with its own
	// flags, even by an executor told other ones.
	other := opts
	other.Deploy = &fleet.DeployOptions{AgentBinary: c.agentBin, StopTimeout: time.Second} // no fake GPUs
	exOther, err := control.NewSSHExecutor(c.fl, c.inv.Servers, other)
	if err != nil {
		t.Fatal(err)
	}
	name1 := c.inv.Servers[1].Name
	b, err := os.ReadFile(filepath.Join(dirOf(1), "agent.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	status, err = exOther.Redeploy(ctx, name1)
	if err != nil || status != fleet.StatusRestarted {
		t.Fatalf("redeploy of a stopped agent: %q, %v", status, err)
	}
	ac, err := c.fl.AgentClient(ctx, c.inv.Servers[1])
	if err != nil {
		t.Fatal(err)
	}
	if st, err := ac.Status(ctx); err != nil || st.GPUCount != 8 || st.GPUBackend != "fake 8xA800" {
		t.Fatalf("the restarted agent: %+v, %v (want its fake 8xA800 GPUs kept)", st, err)
	}

	// A daemon brings a rebooted server back by itself.
	st, err := control.OpenSQLite(ctx, t.TempDir()+"/replan.db")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var servers []control.ServerInfo
	for _, s := range c.inv.Servers {
		servers = append(servers, control.ServerInfo{Name: s.Name, Address: s.Address, Rack: s.Rack, GPUs: s.GPUs, CPUs: s.CPUCores, MemGB: float64(s.HostMemoryGB)})
	}
	p, _ := sched.New("static")
	d, err := control.New(ctx, control.Config{Store: st, Exec: ex, Policy: p, Servers: servers, Redeploy: control.RedeployOptions{Tries: 3, Backoff: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Observe(ctx); err != nil {
		t.Fatal(err)
	}
	name2 := c.inv.Servers[2].Name
	rebootAgent(t, dirOf(2))
	lostAt := time.Now()
	var back control.Event
	poll(t, ctx, name2+" redeployed by the daemon and up", 30*time.Second, func() error {
		if err := d.Observe(ctx); err != nil {
			return err
		}
		evs, err := st.Events(ctx, 0, 1000)
		if err != nil {
			return err
		}
		for _, e := range evs {
			if e.Node == name2 && strings.HasPrefix(e.Kind, "redeploy") {
				back = e
			}
		}
		state := ""
		for _, n := range d.Nodes() {
			if n.Name == name2 {
				state = n.State + " " + n.DownWhy
			}
		}
		if back.Kind != "redeploy" || !strings.HasPrefix(state, "up") {
			return fmt.Errorf("%s is %s; last redeploy event %q: %s", name2, state, back.Kind, back.Msg)
		}
		return nil
	})
	if !strings.Contains(back.Msg, "deployed again after") || !strings.Contains(back.Msg, "health check passed") {
		t.Errorf("redeploy event: %s", back.Msg)
	}
	t.Logf("%s back %s after its agent was killed: %s", name2, time.Since(lostAt).Round(time.Millisecond), back.Msg)
}
