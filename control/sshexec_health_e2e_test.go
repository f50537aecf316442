package control_test

import (
	"strings"
	"testing"
	"time"

	"github.com/replan/replan/control"
	"github.com/replan/replan/sched"
)

// TestSSHHealthCheckClearsSuspect: the SSH executor's health check runs
// `true` over SSH and through the agent and counts the agent's GPUs on a
// real test host. It passes on a healthy server and leaves no process
// record there; it fails, saying why, where the inventory promises more
// GPUs than the agent sees and for an unknown server. A daemon on the SSH
// executor clears a server stored suspect once it passes, with an event.
// (Three sshd hosts with agents; a few seconds.)
func TestSSHHealthCheckClearsSuspect(t *testing.T) {
	c := newTestCluster(t)
	ctx := c.ctx
	opts := control.SSHOptions{Logger: c.log, KillGrace: 2 * time.Second, CallTimeout: 30 * time.Second, Poll: 50 * time.Millisecond, NoCPUBinding: true}
	ex, err := control.NewSSHExecutor(c.fl, c.inv.Servers, opts)
	if err != nil {
		t.Fatal(err)
	}
	name := c.inv.Servers[0].Name
	if err := ex.Check(ctx, name); err != nil {
		t.Fatalf("health check of a healthy server: %v", err)
	}
	ac, err := c.fl.AgentClient(ctx, c.inv.Servers[0])
	if err != nil {
		t.Fatal(err)
	}
	procs, err := ac.Processes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range procs {
		if strings.HasPrefix(p.Spec.ID, "replan-health-") {
			t.Errorf("the health check left its trial process %s (%s)", p.Spec.ID, p.State)
		}
	}
	if err := ex.Check(ctx, "nowhere"); err == nil || !strings.Contains(err.Error(), "nowhere") {
		t.Errorf("health check of a server not in the inventory: %v", err)
	}
	more := append(c.inv.Servers[:0:0], c.inv.Servers...)
	more[0].GPUs = 16 // the fake agent has 8
	exMore, err := control.NewSSHExecutor(c.fl, more, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := exMore.Check(ctx, name); err == nil || !strings.Contains(err.Error(), "8 of the inventory's 16 GPUs visible") {
		t.Errorf("health check where GPUs are missing: %v", err)
	}

	// A daemon finds the server stored suspect and clears it at its first
	// observation, since the check passes.
	st, err := control.OpenSQLite(ctx, t.TempDir()+"/replan.db")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.Commit(ctx, control.Batch{Nodes: []control.NodeRecord{{Name: name, Reachable: true, Suspect: true, SuspectWhy: "launches of 3 jobs failed", UpdatedAt: time.Now().UTC()}}}); err != nil {
		t.Fatal(err)
	}
	var servers []control.ServerInfo
	for _, s := range c.inv.Servers {
		servers = append(servers, control.ServerInfo{Name: s.Name, Address: s.Address, Rack: s.Rack, GPUs: s.GPUs, CPUs: s.CPUCores, MemGB: float64(s.HostMemoryGB)})
	}
	p, _ := sched.New("static")
	d, err := control.New(ctx, control.Config{Store: st, Exec: ex, Policy: p, Servers: servers})
	if err != nil {
		t.Fatal(err)
	}
	suspect := func() string {
		for _, n := range d.Nodes() {
			if n.Name == name {
				return n.State
			}
		}
		return "missing"
	}
	if s := suspect(); s != "suspect" {
		t.Fatalf("%s recovered as %q, want suspect", name, s)
	}
	if err := d.Observe(ctx); err != nil {
		t.Fatal(err)
	}
	if s := suspect(); s != "up" {
		t.Errorf("after a passing health check %s is %q", name, s)
	}
	evs, err := st.Events(ctx, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, e := range evs {
		if e.Kind == "unsuspect" && e.Node == name && strings.Contains(e.Msg, "health check passed") {
			found = true
		}
	}
	if !found {
		t.Errorf("no unsuspect event for %s: %+v", name, evs)
	}
	nodes, err := st.Nodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		if n.Name == name && n.Suspect {
			t.Errorf("%s still stored suspect", name)
		}
	}
}
