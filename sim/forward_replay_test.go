package sim

import (
	"context"
	"math"
	"sort"
	"testing"
	"time"

	"github.com/replan/replan/dataset"
	"github.com/replan/replan/perf"
	"github.com/replan/replan/sched"
)

// replayCut runs trace under a fresh policy of name like Run, stops it at
// the first event after cut and returns the state at cut as a control
// plane sees it (the policy's snapshot, each running job's rate and
// restart left) plus the jobs submitted later, as expected arrivals.
func replayCut(t *testing.T, trace []dataset.WorkloadJob, models *Models, name string, cfg Config, cut float64) (sched.Snapshot, map[string]ForwardJob, []sched.Job) {
	t.Helper()
	p, err := sched.NewWithRestartCost(name, 260)
	if err != nil {
		t.Fatal(err)
	}
	cfg = cfg.withDefaults()
	s := &simulator{cfg: cfg, p: p, models: models, r: &rates{m: models, cache: map[rateKey]rateVal{}}}
	if err := s.init(trace); err != nil {
		t.Fatal(err)
	}
	// The forward hook stops the loop at the first event after cut (a
	// job that never starts keeps it from stopping earlier); its wake-up
	// at time 0 is a round with no jobs, which moves no later round.
	s.fwd = &forward{horizon: cut, rounds: math.MaxInt32, waiting: []*job{{}}}
	if err := s.loop(context.Background()); err != nil {
		t.Fatal(err)
	}
	return stateAt(s, cut)
}

// stateAt is the simulator's state at cut (its last event at or before
// cut) as a control plane sees it: the policy's snapshot, each running
// job's rate and restart left, and the jobs not submitted yet.
func stateAt(s *simulator, cut float64) (sched.Snapshot, map[string]ForwardJob, []sched.Job) {
	snap := sched.Snapshot{Now: cut, Servers: append([]sched.Server(nil), s.servers...), Tenants: s.tenants, History: sched.TimerHistory{Obs: append([]sched.TimerObs(nil), s.hist.Obs...)}}
	extra := map[string]ForwardJob{}
	var later []sched.Job
	for _, j := range s.jobs {
		tenant := "B"
		if j.class == sched.Guaranteed {
			tenant = "A"
		}
		sj := sched.Job{ID: j.w.Name, Tenant: tenant, Class: j.class, Model: j.m, ReqGPUs: j.w.GPUs, ReqCPUs: j.cpg * j.w.GPUs, ReqPlan: j.reqPlan,
			Promise: j.promise * float64(j.m.Arch.GlobalBatch), Submit: j.w.Submit, ItersTotal: float64(j.w.Steps)}
		switch j.st {
		case pending:
			later = append(later, sj)
			continue
		case finished:
			continue
		}
		jc := *j // the run goes on: advance a copy
		j = &jc
		s.advance(j, cut)
		sj.Alloc, sj.Plan, sj.ItersDone, sj.Restarts, sj.LastChange = j.alloc, j.plan, j.done, j.restarts, j.changed
		sj.LastRun, sj.RunSeconds, sj.IdealSeconds, sj.Phase = j.lastRun, j.runSec, j.idealSec, j.phase
		if j.st == running {
			sj.LastRun = cut
			extra[j.w.Name] = ForwardJob{Rate: j.rate, RestartLeft: math.Max(j.restart-cut, 0)}
		}
		snap.Jobs = append(snap.Jobs, sj)
	}
	return snap, extra, later
}

// TestForwardReplaysTheRun: a forward simulation from a trace run's state
// at some time, told the jobs the trace still submits, is the same
// engine, policy and inputs as the rest of that run: every job that waits
// at the cut starts when it started in the run. Any difference is the
// forward simulation modelling something else than what happens.
func TestForwardReplaysTheRun(t *testing.T) {
	trace, err := Generate(GenConfig{Jobs: 80, Servers: 8, GPUsPerServer: 8, Seed: 5, Load: 1.3})
	if err != nil {
		t.Fatal(err)
	}
	models := DefaultModels(perf.A800)
	cfg := Config{Servers: 8, ServersPerRack: 4, RoundInterval: 30}
	for _, name := range []string{"replan", "morphling"} {
		starts := map[string][]float64{} // every start (preempted jobs start again)
		full := cfg
		full.OnEvent = func(e Event) {
			if e.Kind == "start" {
				starts[e.Job] = append(starts[e.Job], e.Time)
			}
		}
		// next is a job's first start at or after t.
		next := func(id string, t float64) float64 {
			for _, s := range starts[id] {
				if s >= t-1e-9 {
					return s
				}
			}
			return math.Inf(1)
		}
		p, _ := sched.NewWithRestartCost(name, 260)
		if _, err := Run(context.Background(), trace, models, p, full); err != nil {
			t.Fatal(err)
		}
		var checked, off int
		end := trace[len(trace)-1].Submit
		for k := 1; k <= 40; k++ {
			cut := math.Round(end*float64(k)/41/30) * 30 // right after a round
			snap, extra, later := replayCut(t, trace, models, name, cfg, cut)
			fp, _ := sched.NewWithRestartCost(name, 260)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			res, err := Forward(ctx, snap, fp, models, extra, ForwardConfig{RestartCost: 260, RoundEvery: 30, Arrivals: later, IdealSeconds: true})
			cancel()
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			for id := range res.Start {
				ids = append(ids, id)
			}
			sort.Strings(ids)
			for _, id := range ids {
				checked++
				if got, want := res.Start[id], next(id, cut); math.Abs(got-want) > 1e-6 {
					off++
					t.Errorf("%s, cut at %.0f s: %s starts at %.0f s in the forward simulation, at %.0f s in the run", name, cut, id, got, want)
				}
			}
			for id, why := range res.NoStart {
				t.Errorf("%s, cut at %.0f s: %s: no start (%s), started at %.0f s in the run", name, cut, id, why, next(id, cut))
			}
		}
		t.Logf("%s: %d waiting jobs checked, %d off", name, checked, off)
		if checked < 10 {
			t.Errorf("%s: only %d waiting jobs at the cuts: the trace is too light to test anything", name, checked)
		}
	}
}
