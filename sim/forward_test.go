package sim

import (
	"context"
	"math"
	"testing"

	"github.com/replan/replan/perf"
	"github.com/replan/replan/sched"
)

func fwdModel(t *testing.T, name string) *perf.Model {
	t.Helper()
	a, ok := perf.Builtin(name)
	if !ok {
		t.Fatalf("no model %s", name)
	}
	m := perf.DefaultModel(a, perf.A800)
	return &m
}

// TestForwardStartsWhenTheRunningJobEnds: one server, full; the running
// job has 100 iterations left at its measured 1 it/s, so a waiting job of
// the whole server starts 100 s from now (plus nothing: restarts are free
// here), and a job behind it when that one ends.
func TestForwardStartsWhenTheRunningJobEnds(t *testing.T) {
	m := fwdModel(t, "bert")
	plan := perf.Plan{DP: 8, TP: 1, PP: 1, MicroBatch: 4, GA: 1}
	srv := []sched.Server{{ID: "s0", Rack: "r0", GPUs: 8, CPUs: 96, MemGB: 1600}}
	now := 5000.0
	snap := sched.Snapshot{Now: now, Servers: srv, Tenants: []sched.Tenant{{Name: "B"}}, Jobs: []sched.Job{
		{ID: "run", Tenant: "B", Model: m, ReqGPUs: 8, ReqCPUs: 64, ReqPlan: plan, Plan: plan, Alloc: []sched.Alloc{{Server: 0, GPUs: 8, CPUs: 64}},
			Submit: 0, ItersDone: 900, ItersTotal: 1000, LastChange: 100, LastRun: now},
		{ID: "w1", Tenant: "B", Model: m, ReqGPUs: 8, ReqCPUs: 64, ReqPlan: plan, Submit: 4000, ItersTotal: 50},
		{ID: "w2", Tenant: "B", Model: m, ReqGPUs: 8, ReqCPUs: 64, ReqPlan: plan, Submit: 4100, ItersTotal: 50},
	}}
	snap.FillFree()
	res, err := Forward(context.Background(), snap, sched.NewStatic(), DefaultModels(perf.A800), map[string]ForwardJob{"run": {Rate: 1}}, ForwardConfig{RestartCost: -1})
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Start["w1"]; math.Abs(got-(now+100)) > 1e-6 {
		t.Errorf("w1 starts at %.1f, want %.1f (when run ends); result %+v", got, now+100, res)
	}
	w2, ok := res.Start["w2"]
	if !ok || w2 <= res.Start["w1"] {
		t.Errorf("w2 starts at %.1f (ok %v), want after w1 (%.1f)", w2, ok, res.Start["w1"])
	}
	// The restart still to pay delays the running job's end.
	res, err = Forward(context.Background(), snap, sched.NewStatic(), DefaultModels(perf.A800), map[string]ForwardJob{"run": {Rate: 1, RestartLeft: 60}}, ForwardConfig{RestartCost: -1})
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Start["w1"]; math.Abs(got-(now+160)) > 1e-6 {
		t.Errorf("with 60 s of restart left w1 starts at %.1f, want %.1f", got, now+160)
	}
}

// TestForwardNoStartHasAReason: a job that can never fit gets no start
// and the policy's reason.
func TestForwardNoStartHasAReason(t *testing.T) {
	m := fwdModel(t, "bert")
	plan := perf.Plan{DP: 8, TP: 1, PP: 1, MicroBatch: 4, GA: 1}
	srv := []sched.Server{{ID: "s0", Rack: "r0", GPUs: 8, CPUs: 96, MemGB: 1600}}
	snap := sched.Snapshot{Now: 10, Servers: srv, Jobs: []sched.Job{
		{ID: "huge", Tenant: "B", Model: m, ReqGPUs: 16, ReqCPUs: 128, ReqPlan: perf.Plan{DP: 16, TP: 1, PP: 1, MicroBatch: 2, GA: 1}, Submit: 1, ItersTotal: 50},
		{ID: "ok", Tenant: "B", Model: m, ReqGPUs: 8, ReqCPUs: 64, ReqPlan: plan, Submit: 2, ItersTotal: 50},
	}}
	snap.FillFree()
	res, err := Forward(context.Background(), snap, sched.NewStatic(), DefaultModels(perf.A800), nil, ForwardConfig{Horizon: 3600})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := res.Start["huge"]; ok {
		t.Errorf("huge got a start: %+v", res)
	}
	if res.NoStart["huge"] == "" {
		t.Errorf("huge: no reason: %+v", res)
	}
	t.Logf("%+v", res)
}
