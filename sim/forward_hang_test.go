package sim

import (
	"context"
	"testing"
	"time"

	"github.com/replan/replan/perf"
	"github.com/replan/replan/sched"
)

// TestForwardEnds: a state seen in the demo (two 32-GPU jobs running, one
// restarting; three waiting) must simulate to an end quickly.
func TestForwardEnds(t *testing.T) {
	llama, bert := fwdModel(t, "llama7b"), fwdModel(t, "bert")
	plan := func(s string) perf.Plan {
		p, err := perf.ParsePlanSpec(s)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	var srv []sched.Server
	for i := range 8 {
		srv = append(srv, sched.Server{ID: "s" + string(rune('0'+i)), Rack: []string{"ra", "rb"}[i/4], GPUs: 8, CPUs: 96, MemGB: 1600})
	}
	now := 1e9
	run := func(id string, servers []int, done, total float64) sched.Job {
		j := sched.Job{ID: id, Tenant: "B", Model: llama, ReqGPUs: 16, ReqCPUs: 128, ReqPlan: plan("dp=2,tp=8,pp=1,mb=4,ga=1"), Plan: plan("dp=2,tp=4,pp=4,mb=1,ga=4"),
			Submit: now - 1400, ItersDone: done, ItersTotal: total, LastChange: now - 1394, LastRun: now}
		for _, s := range servers {
			j.Alloc = append(j.Alloc, sched.Alloc{Server: s, GPUs: 8, CPUs: 64})
		}
		return j
	}
	snap := sched.Snapshot{Now: now, Servers: srv, Tenants: []sched.Tenant{{Name: "A", QuotaGPUs: 64}, {Name: "B"}}, Jobs: []sched.Job{
		run("j43", []int{4, 5, 6, 7}, 1434, 5359),
		run("j47", []int{0, 1, 2, 3}, 0, 289),
		{ID: "j48", Tenant: "B", Model: llama, ReqGPUs: 8, ReqCPUs: 64, ReqPlan: plan("dp=8,tp=1,pp=1,mb=1,ga=1,zero=2,offload=true"), Submit: now - 151, ItersTotal: 1},
		{ID: "j49", Tenant: "B", Model: llama, ReqGPUs: 32, ReqCPUs: 256, ReqPlan: plan("dp=4,tp=4,pp=2,mb=2,ga=1"), Submit: now - 31, ItersTotal: 21},
		{ID: "j50", Tenant: "B", Model: bert, ReqGPUs: 8, ReqCPUs: 64, ReqPlan: plan("dp=8,tp=1,pp=1,mb=4,ga=1,zero=2"), Submit: now - 1, ItersTotal: 496},
	}}
	snap.FillFree()
	p, err := sched.NewWithRestartCost("replan", 260)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := Forward(ctx, snap, p, nil, map[string]ForwardJob{"j43": {Rate: 1.28}, "j47": {RestartLeft: 58}}, ForwardConfig{RestartCost: 260, RoundEvery: 30})
	if err != nil {
		t.Fatalf("%v after %d rounds: %+v", err, res.Rounds, res)
	}
	t.Logf("%+v", res)
}

// wakeful asks to be woken up 10 s after every round and places nothing
// until its third round.
type wakeful struct{ rounds int }

func (w *wakeful) Name() string { return "wakeful" }
func (w *wakeful) Schedule(s sched.Snapshot) sched.Decisions {
	w.rounds++
	d := sched.Decisions{WakeAt: s.Now + 10}
	if w.rounds < 3 {
		return d
	}
	for i, j := range s.Jobs {
		if len(j.Alloc) == 0 && s.Servers[0].FreeGPUs >= j.ReqGPUs {
			d.Actions = append(d.Actions, sched.Decision{Job: j.ID, Index: i, Kind: sched.Start, Plan: j.ReqPlan, Alloc: []sched.Alloc{{Server: 0, GPUs: j.ReqGPUs, CPUs: j.ReqCPUs}}})
			break
		}
	}
	return d
}

// TestWakeWhileARoundIsDue: with rounds every 30 s, a policy's wake-up
// that comes while a round is already due must not stop time (the loop
// went back to the stale wake-up time forever).
func TestWakeWhileARoundIsDue(t *testing.T) {
	m := fwdModel(t, "bert")
	plan := perf.Plan{DP: 8, TP: 1, PP: 1, MicroBatch: 4, GA: 1}
	srv := []sched.Server{{ID: "s0", Rack: "r0", GPUs: 8, CPUs: 96, MemGB: 1600}}
	now := 3000.0 // a round boundary: the first round runs at once
	snap := sched.Snapshot{Now: now, Servers: srv, Jobs: []sched.Job{
		{ID: "w", Tenant: "B", Model: m, ReqGPUs: 8, ReqCPUs: 64, ReqPlan: plan, Submit: 1, ItersTotal: 50},
	}}
	snap.FillFree()
	arr := []sched.Job{{ID: "x", Tenant: "B", Model: m, ReqGPUs: 8, ReqCPUs: 64, ReqPlan: plan, Submit: now + 5, ItersTotal: 50}}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	res, err := Forward(ctx, snap, &wakeful{}, DefaultModels(perf.A800), nil, ForwardConfig{RoundEvery: 30, Arrivals: arr, RestartCost: -1})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := res.Start["w"]; !ok {
		t.Fatalf("w never started (the loop stalled): %+v", res)
	}
}
