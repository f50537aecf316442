package sim

import (
	"context"
	"maps"
	"math"
	"slices"
	"strconv"
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

// spy starts the waiting jobs on server 1 at its request, one per round
// while it has room, and records what each round shows it of each job.
type spy struct{ seen []sched.Job }

func (s *spy) Name() string { return "spy" }
func (s *spy) Schedule(snap sched.Snapshot) sched.Decisions {
	s.seen = append(s.seen, snap.Jobs...)
	d := sched.Decisions{WakeAt: snap.Now + 60}
	for i, j := range snap.Jobs {
		if len(j.Alloc) == 0 && snap.Servers[1].FreeGPUs >= j.ReqGPUs && snap.Servers[1].FreeCPUs >= j.ReqCPUs {
			d.Actions = append(d.Actions, sched.Decision{Job: j.ID, Index: i, Kind: sched.Start, Plan: j.ReqPlan, Alloc: []sched.Alloc{{Server: 1, GPUs: j.ReqGPUs, CPUs: j.ReqCPUs}}})
			break
		}
	}
	return d
}

// TestForwardShowsThePolicyTheCallersInputs: the policy's rounds in a
// forward simulation see each job as the control plane's rounds do: its
// requested cores as requested (not rounded to a multiple of its GPUs, not
// lowered to the cores a running job was given) and no IdealSeconds when
// the control plane keeps none (Nw_sens is then estimated from progress
// in both; accumulated from the forward simulation's start it would
// collapse towards 0 for a job that ran before).
func TestForwardShowsThePolicyTheCallersInputs(t *testing.T) {
	m := fwdModel(t, "bert")
	plan := perf.Plan{DP: 8, TP: 1, PP: 1, MicroBatch: 4, GA: 1}
	srv := []sched.Server{{ID: "s0", Rack: "r0", GPUs: 8, CPUs: 96, MemGB: 1600}, {ID: "s1", Rack: "r0", GPUs: 8, CPUs: 96, MemGB: 1600}}
	now := 5000.0
	snap := sched.Snapshot{Now: now, Servers: srv, Tenants: []sched.Tenant{{Name: "B"}}, Jobs: []sched.Job{
		{ID: "run", Tenant: "B", Model: m, ReqGPUs: 8, ReqCPUs: 64, ReqPlan: plan, Plan: plan, Alloc: []sched.Alloc{{Server: 0, GPUs: 8, CPUs: 32}},
			Submit: 0, ItersDone: 900, ItersTotal: 100000, LastChange: 100, LastRun: now, RunSeconds: 4900},
		{ID: "odd", Tenant: "B", Model: m, ReqGPUs: 8, ReqCPUs: 20, ReqPlan: plan, Submit: 4000, ItersTotal: 5000, RunSeconds: 300, ItersDone: 10, LastRun: 4500},
		// never fits: the simulation goes on to its horizon
		{ID: "big", Tenant: "B", Model: m, ReqGPUs: 16, ReqCPUs: 128, ReqPlan: perf.Plan{DP: 16, TP: 1, PP: 1, MicroBatch: 2, GA: 1}, Submit: 4100, ItersTotal: 50},
	}}
	snap.FillFree()
	p := &spy{}
	if _, err := Forward(context.Background(), snap, p, DefaultModels(perf.A800), map[string]ForwardJob{"run": {Rate: 1}}, ForwardConfig{RestartCost: -1, Horizon: 600}); err != nil {
		t.Fatal(err)
	}
	if len(p.seen) == 0 {
		t.Fatal("no round")
	}
	for _, j := range p.seen {
		want := map[string]int{"run": 64, "odd": 20, "big": 128}[j.ID]
		if j.ReqCPUs != want {
			t.Errorf("at a round %s asks for %d cores, the snapshot said %d", j.ID, j.ReqCPUs, want)
		}
		if j.IdealSeconds != 0 {
			t.Errorf("at a round %s has IdealSeconds %.0f; the caller keeps none", j.ID, j.IdealSeconds)
		}
	}
}

// TestForwardIsDeterministic: the same state gives the same estimates,
// whatever order simultaneous expected arrivals come in and whether the
// policy instance is fresh or was used before (the estimator keeps one).
func TestForwardIsDeterministic(t *testing.T) {
	m := fwdModel(t, "bert")
	plan := func(g int) perf.Plan { return perf.Plan{DP: g, TP: 1, PP: 1, MicroBatch: max(32/g, 1), GA: 1} }
	var srv []sched.Server
	for i := range 4 {
		srv = append(srv, sched.Server{ID: "s" + strconv.Itoa(i), Rack: "r" + strconv.Itoa(i/2), GPUs: 8, CPUs: 96, MemGB: 1600})
	}
	now := 10000.0
	snap := sched.Snapshot{Now: now, Servers: srv, Tenants: []sched.Tenant{{Name: "B"}}}
	for i := range 4 {
		snap.Jobs = append(snap.Jobs, sched.Job{ID: "run" + strconv.Itoa(i), Tenant: "B", Model: m, ReqGPUs: 8, ReqCPUs: 64, ReqPlan: plan(8), Plan: plan(8),
			Alloc: []sched.Alloc{{Server: i, GPUs: 8, CPUs: 64}}, Submit: float64(i), ItersDone: 100, ItersTotal: float64(2000 + 500*i), LastChange: 5000, LastRun: now, RunSeconds: 5000})
	}
	for i, g := range []int{1, 2, 4, 8, 16, 2, 1} {
		snap.Jobs = append(snap.Jobs, sched.Job{ID: "w" + strconv.Itoa(i), Tenant: "B", Model: m, ReqGPUs: g, ReqCPUs: 8 * g, ReqPlan: plan(g), Submit: now - 100 + float64(i), ItersTotal: 3000})
	}
	snap.FillFree()
	var arr []sched.Job
	for i, g := range []int{4, 1, 8, 2, 2, 16} {
		arr = append(arr, sched.Job{ID: "x" + strconv.Itoa(i), Tenant: "B", Model: m, ReqGPUs: g, ReqCPUs: 8 * g, ReqPlan: plan(g), Submit: now + 15, ItersTotal: 2000})
	}
	extra := map[string]ForwardJob{"run0": {Rate: 1}, "run1": {Rate: 0.5}, "run2": {RestartLeft: 100}}
	run := func(p sched.Policy, arr []sched.Job) map[string]float64 {
		res, err := Forward(context.Background(), snap, p, nil, extra, ForwardConfig{RestartCost: 260, RoundEvery: 30, Arrivals: arr})
		if err != nil {
			t.Fatal(err)
		}
		return res.Start
	}
	for _, name := range []string{"replan", "morphling"} {
		fresh := func() sched.Policy { p, _ := sched.NewWithRestartCost(name, 260); return p }
		want := run(fresh(), arr)
		if len(want) != 7 {
			t.Fatalf("%s: %d of 7 waiting jobs started: %v", name, len(want), want)
		}
		rev := slices.Clone(arr)
		slices.Reverse(rev)
		used := fresh()
		other := snap
		other.Jobs = snap.Jobs[:6]
		if _, err := Forward(context.Background(), other, used, nil, nil, ForwardConfig{RestartCost: 260, RoundEvery: 30}); err != nil {
			t.Fatal(err)
		}
		for k, got := range []map[string]float64{run(fresh(), arr), run(fresh(), rev), run(used, rev)} {
			if !maps.Equal(got, want) {
				t.Errorf("%s: run %d: %v, want %v", name, k, got, want)
			}
		}
	}
}

// TestForwardCountsUnobservedProgress: a running job whose restart ended
// 50 s ago, not measured yet (RestartLeft −50, no Rate), has progressed
// 50 s at its priced rate: the job waiting for it starts 50 s sooner than
// behind one whose restart just ended.
func TestForwardCountsUnobservedProgress(t *testing.T) {
	m := fwdModel(t, "bert")
	plan := perf.Plan{DP: 8, TP: 1, PP: 1, MicroBatch: 4, GA: 1}
	srv := []sched.Server{{ID: "s0", Rack: "r0", GPUs: 8, CPUs: 96, MemGB: 1600}}
	now := 5000.0
	snap := sched.Snapshot{Now: now, Servers: srv, Tenants: []sched.Tenant{{Name: "B"}}, Jobs: []sched.Job{
		{ID: "run", Tenant: "B", Model: m, ReqGPUs: 8, ReqCPUs: 64, ReqPlan: plan, Plan: plan, Alloc: []sched.Alloc{{Server: 0, GPUs: 8, CPUs: 64}},
			Submit: 0, ItersDone: 0, ItersTotal: 100000, LastChange: 4000, LastRun: now},
		{ID: "w", Tenant: "B", Model: m, ReqGPUs: 8, ReqCPUs: 64, ReqPlan: plan, Submit: 4000, ItersTotal: 50},
	}}
	snap.FillFree()
	start := func(left float64) float64 {
		res, err := Forward(context.Background(), snap, sched.NewStatic(), DefaultModels(perf.A800), map[string]ForwardJob{"run": {RestartLeft: left}}, ForwardConfig{RestartCost: -1})
		if err != nil {
			t.Fatal(err)
		}
		return res.Start["w"]
	}
	if a, b := start(0), start(-50); math.Abs(a-b-50) > 1e-6 {
		t.Errorf("w starts at %.1f behind a job whose restart just ended, at %.1f behind one that ended 50 s ago: want 50 s sooner", a, b)
	}
}
