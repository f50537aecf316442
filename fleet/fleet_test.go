package fleet

import (
	"testing"
	"time"

	"github.com/replan/replan/agent"
)

func TestExpandDir(t *testing.T) {
	for _, tc := range []struct{ tmpl, want string }{
		{"~/.replan", "/home/u/.replan"},
		{"~", "/home/u"},
		{"/tmp/x/{server}", "/tmp/x/a800-01"},
		{"~/r/{server}/", "/home/u/r/a800-01"},
		{"rel/{server}", "/home/u/rel/a800-01"},
	} {
		if got := ExpandDir(tc.tmpl, "a800-01", "/home/u"); got != tc.want {
			t.Errorf("ExpandDir(%q) = %q, want %q", tc.tmpl, got, tc.want)
		}
	}
	if needsHome("/abs/{server}") || !needsHome("~/.replan") {
		t.Error("needsHome")
	}
	l := LayoutFor("/d")
	if l.Bin != "/d/bin/replan-agent" || l.Socket != "/d/agent.sock" || l.State != "/d/agent" || l.Log != "/d/agent.log" || l.PIDFile != "/d/agent.pid" {
		t.Errorf("layout: %+v", l)
	}
}

func TestSameFlags(t *testing.T) {
	want := agentFlags(LayoutFor("/d"), "8xA800")
	for _, tc := range []struct {
		argv []string
		same bool
	}{
		{append([]string{"/d/bin/replan-agent", "serve"}, want...), true},
		{append([]string{"/d/bin/replan-agent", "agent", "serve"}, want...), true},
		{[]string{"/d/bin/replan-agent", "serve", "--socket", "/d/agent.sock", "--state-dir", "/d/agent"}, false},
		{[]string{"/d/bin/replan-agent", "serve"}, false},
	} {
		if got := sameFlags(tc.argv, want); got != tc.same {
			t.Errorf("sameFlags(%q) = %v", tc.argv, got)
		}
	}
}

func TestSummarise(t *testing.T) {
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	snap := agent.GPUSnapshot{
		GPUs: []agent.GPU{
			{Index: 0, Name: "NVIDIA A800"},
			{Index: 1, MemoryUsedBytes: 100 << 20},                              // driver footprint: free
			{Index: 2, MemoryUsedBytes: 30 << 30},                               // memory in use
			{Index: 3, Processes: []agent.GPUProcess{{PID: 7}}},                 // a process
			{Index: 4, MemoryUsedBytes: UsedMemoryBytes + 1, UtilizationPct: 0}, // just above
		},
		Health: []agent.HealthEvent{
			{Time: now.Add(-2 * time.Hour), Kind: agent.HealthXid, Xid: 13},
			{Time: now.Add(-time.Minute), GPUIndex: 5, Kind: agent.HealthXid, Xid: 79},
		},
	}
	procs := []agent.ProcessInfo{
		{Spec: agent.ProcessSpec{ID: "a"}, State: agent.StateRunning},
		{Spec: agent.ProcessSpec{ID: "b"}, State: agent.StateExited},
	}
	var n Node
	summarise(&n, snap, procs, NodesOptions{Now: now, HealthWindow: time.Hour})
	if n.GPUs != 5 || n.GPUsUsed != 3 || n.GPUModel != "NVIDIA A800" {
		t.Errorf("gpus %d used %d model %q", n.GPUs, n.GPUsUsed, n.GPUModel)
	}
	if n.Healthy || len(n.Health) != 1 || n.Health[0].Xid != 79 {
		t.Errorf("health: %v %+v", n.Healthy, n.Health)
	}
	if n.ProcessesRunning != 1 || n.Processes[0] != "a" {
		t.Errorf("processes: %d %v", n.ProcessesRunning, n.Processes)
	}
	summarise(&n, agent.GPUSnapshot{}, nil, NodesOptions{Now: now, HealthWindow: time.Hour})
	if !n.Healthy || n.Health == nil || n.Processes == nil {
		t.Errorf("empty: %+v", n)
	}
}
