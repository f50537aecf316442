package control

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/replan/replan/agent"
	"github.com/replan/replan/jobspec"
)

// TestNodesShowTelemetry: GET /v1/nodes is the daemon's view of every
// server: its state, each GPU's figures and who holds it; a GPU held by a
// job that is still restarting is flagged idle, a busy one is not.
func TestNodesShowTelemetry(t *testing.T) {
	st, _ := openTest(t)
	c := &clock{t: time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)}
	ex := NewSimExecutor(c.now, []string{"a", "b"}, nil, nil, time.Minute)
	d, _ := newDaemonWith(t, st, ex, "static", c)
	ctx := context.Background()
	d.Submit(ctx, spec(t, "x", 4, jobspec.BestEffort))
	d.Round(ctx)
	d.Observe(ctx)
	nodes := getNodes(t, d)
	k := 0 // the server holding the job
	if len(nodes[1].Jobs) > 0 {
		k = 1
	}
	a := nodes[k]
	if a.AsOf.IsZero() {
		t.Error("the node view does not say when it was taken (as_of)")
	}
	if a.State != "up" || len(a.GPUStats) != 8 {
		t.Fatalf("server a: state %q, %d GPU figures", a.State, len(a.GPUStats))
	}
	if len(a.IdleHeld) != 4 {
		t.Errorf("while the job restarts its 4 GPUs are held but idle; flagged %v", a.IdleHeld)
	}
	c.advance(5 * time.Minute)
	d.Observe(ctx)
	d.Drain(ctx, nodes[1-k].Name)
	nodes = getNodes(t, d)
	a = nodes[k]
	busy, idle := 0, 0
	for _, g := range a.GPUStats {
		if a.GPUOwners[g.Index] != "" && g.UtilPct > 30 && g.MemUsedGB > 10 && g.PowerW > 150 {
			busy++
		}
		if a.GPUOwners[g.Index] == "" && g.UtilPct < IdleUtilPct {
			idle++
		}
		if g.TempC < 20 || g.TempC > 95 || g.MemTotalGB != 80 {
			t.Errorf("implausible GPU %+v", g)
		}
	}
	if busy != 4 || idle != 4 || len(a.IdleHeld) != 0 {
		t.Errorf("after the restart: %d busy held GPUs, %d idle free ones, idle held %v: %+v", busy, idle, a.IdleHeld, a.GPUStats)
	}
	if nodes[1-k].State != "drained" {
		t.Errorf("server %s: state %q, want drained", nodes[1-k].Name, nodes[1-k].State)
	}
}

func getNodes(t *testing.T, d *Daemon) []NodeView {
	t.Helper()
	rr := httptest.NewRecorder()
	(&API{D: d}).Handler().ServeHTTP(rr, httptest.NewRequest(http.MethodGet, "/v1/nodes", nil))
	var ns []NodeView
	if err := json.Unmarshal(rr.Body.Bytes(), &ns); err != nil || len(ns) != 2 {
		t.Fatalf("GET /v1/nodes: %v %s", err, rr.Body)
	}
	return ns
}

// TestAgentGPUStats: an agent's GPU snapshot becomes the daemon's figures,
// with its Xid and ECC events counted per GPU.
func TestAgentGPUStats(t *testing.T) {
	snap := agent.GPUSnapshot{GPUs: []agent.GPU{
		{Index: 0, MemoryUsedBytes: 40 << 30, MemoryTotalBytes: 80 << 30, UtilizationPct: 97, TemperatureC: 71, PowerW: 390,
			Processes: []agent.GPUProcess{{PID: 4242, UsedMemoryBytes: 30 << 30}, {PID: 4243, UsedMemoryBytes: 10 << 30}}},
		{Index: 1, MemoryTotalBytes: 80 << 30, TemperatureC: 35, PowerW: 60},
	}, Health: []agent.HealthEvent{{GPUIndex: 1, Kind: agent.HealthXid, Xid: 79}, {GPUIndex: 1, Kind: agent.HealthECCDBE}, {GPUIndex: 9, Kind: agent.HealthXid}}}
	got := gpuStats(snap)
	if len(got) != 2 || got[0].UtilPct != 97 || got[0].MemUsedGB != 40 || got[0].MemTotalGB != 80 || got[0].TempC != 71 || got[0].PowerW != 390 {
		t.Fatalf("figures %+v", got)
	}
	if got[1].XidErrors != 1 || got[1].ECCErrors != 1 || got[0].XidErrors != 0 {
		t.Errorf("errors %+v", got)
	}
	// the processes on each GPU with their memory (issue 28: the TUI
	// shows PIDs and per-process memory)
	if p := got[0].Processes; len(p) != 2 || p[0] != (GPUProcess{PID: 4242, MemUsedGB: 30}) || p[1] != (GPUProcess{PID: 4243, MemUsedGB: 10}) || got[1].Processes != nil {
		t.Errorf("processes %+v / %+v", got[0].Processes, got[1].Processes)
	}
	if b, _ := json.Marshal(got[1]); strings.Contains(string(b), "processes") {
		t.Errorf("a GPU without processes says so: %s", b)
	}
}
