package sched_test

import (
	"testing"

	"github.com/replan/replan/perf"
	"github.com/replan/replan/sched"
)

// offloadAt is the best plan of m on pl with cpg cores per GPU; it must
// offload the optimizer (CPU-sensitive).
func offloadAt(t *testing.T, m *perf.Model, pl perf.Placement, cpg float64) perf.Plan {
	t.Helper()
	r, ok := m.Best(perf.Resources{Placement: pl, CPUsPerGPU: cpg})
	if !ok || !r.Plan.Offload {
		t.Fatalf("%s on %v: best plan %v does not offload", m.Arch.Name, pl, r.Plan)
	}
	return r.Plan
}

func cores(d sched.Decision, fallback []sched.Alloc) int {
	al := fallback
	if d.Job != "" {
		al = d.Alloc
	}
	n := 0
	for _, a := range al {
		n += a.CPUs
	}
	return n
}

// The CPU branch of Algorithm 1: a CPU-sensitive (offload) job takes cores
// from a job on the same server whose plan does not depend on them, down
// to that job's minimum (one core per GPU); nothing is over-committed.
func TestMorphlingTakesCoresForOffload(t *testing.T) {
	bert, llama := model(t, "bert"), model(t, "llama30b")
	// x: guaranteed bert on 4 GPUs holding 88 of the 96 cores (its GPUs
	// are at its minRes, so only its cores can move).
	x := waiting(t, "x", bert, 4, 0)
	x.Class, x.Tenant = sched.Guaranteed, "A"
	x.Alloc = []sched.Alloc{{Server: 0, GPUs: 4, CPUs: 88}}
	x.Plan, x.ItersDone = x.ReqPlan, 1
	// z: llama30b on the other 4 GPUs with one core per GPU: its plan
	// offloads the optimizer, so cores speed it up.
	z := waiting(t, "z", llama, 4, 1)
	z.ReqCPUs = 4
	z.ReqPlan = offloadAt(t, llama, perf.Placement{4}, 1)
	z.Alloc = []sched.Alloc{{Server: 0, GPUs: 4, CPUs: 4}}
	z.Plan, z.ItersDone = z.ReqPlan, 1
	s := snapshot(servers(1, 8), x, z)
	s.Tenants = []sched.Tenant{{Name: "A", QuotaGPUs: 8}, {Name: "B"}}
	d := sched.NewMorphling(cheap()).Schedule(s)
	checkCapacity(t, s, d)
	dz, ok := find(d, "z")
	if !ok || dz.Kind != sched.Reconfigure || cores(dz, nil) <= 4 || dz.Placement.GPUs() != 4 {
		t.Fatalf("z: want a CPU-only reconfiguration with more cores, got %+v (all %v)", dz, d.Actions)
	}
	before, _ := llama.Predict(z.Plan, perf.Resources{Placement: perf.Placement{4}, CPUsPerGPU: 1})
	t.Logf("z: 4 → %d cores, %.4f → %.4f samples/s; x: 88 → %d cores", cores(dz, nil), before.Throughput(llama.Arch.GlobalBatch), dz.Throughput, cores(dx0(d), nil))
	if dz.Throughput <= before.Throughput(llama.Arch.GlobalBatch) {
		t.Errorf("z: predicted %.3f samples/s with %d cores, no better than %.3f with 4", dz.Throughput, cores(dz, nil), before.Throughput(llama.Arch.GlobalBatch))
	}
	dx, ok := find(d, "x")
	if !ok || dx.Kind != sched.Reconfigure || dx.Placement.GPUs() != 4 || cores(dx, nil) >= 88 || cores(dx, nil) < 4 {
		t.Fatalf("x: want its cores shrunk (not below 1 per GPU) on the same 4 GPUs, got %+v", dx)
	}
	if cores(dx, nil)+cores(dz, nil) <= 92-1 && cores(dz, nil) < 8*4 {
		t.Errorf("z got only %d cores with %d left to x", cores(dz, nil), cores(dx, nil))
	}
	// The shrink comes before the grow it makes room for.
	if d.Actions[0].Job != "x" {
		t.Errorf("order: %v", d.Actions)
	}
	// Within MinDwell of its last change x keeps its cores.
	s.Jobs[0].LastChange = s.Now - 10
	d = sched.NewMorphling(cheap()).Schedule(s)
	checkCapacity(t, s, d)
	if a, ok := find(d, "x"); ok {
		t.Errorf("x changed within MinDwell: %+v", a)
	}
}

// A guaranteed offload job's cores are never taken below its minRes: the
// cores its promise needs.
func TestMorphlingKeepsGuaranteedCores(t *testing.T) {
	llama := model(t, "llama30b")
	plan := offloadAt(t, llama, perf.Placement{4}, 8)
	b, err := llama.Predict(plan, perf.Resources{Placement: perf.Placement{4}, CPUsPerGPU: 8})
	if err != nil {
		t.Fatal(err)
	}
	g := waiting(t, "g", llama, 4, 0)
	g.Class, g.Tenant = sched.Guaranteed, "A"
	g.ReqCPUs, g.ReqPlan, g.Promise = 32, plan, b.Throughput(llama.Arch.GlobalBatch)
	g.Alloc = []sched.Alloc{{Server: 0, GPUs: 4, CPUs: 32}}
	g.Plan, g.ItersDone = plan, 1
	// A best-effort offload job starved of cores next to it.
	z := waiting(t, "z", llama, 4, 1)
	z.ReqCPUs = 4
	z.ReqPlan = offloadAt(t, llama, perf.Placement{4}, 1)
	z.Alloc = []sched.Alloc{{Server: 0, GPUs: 4, CPUs: 4}}
	z.Plan, z.ItersDone = z.ReqPlan, 1
	srv := servers(1, 8)
	srv[0].CPUs = 40 // 4 free cores
	s := snapshot(srv, g, z)
	s.Tenants = []sched.Tenant{{Name: "A", QuotaGPUs: 8}, {Name: "B"}}
	for _, p := range []sched.Policy{sched.NewMorphling(cheap()), sched.NewReplan(cheap(), sched.DefaultNetOptions())} {
		d := p.Schedule(s)
		checkCapacity(t, s, d)
		if a, ok := find(d, "g"); ok && (a.Kind == sched.Preempt || cores(a, nil) < 32 || a.Throughput < g.Promise*(1-1e-9)) {
			t.Errorf("%s: guaranteed job's cores taken below its minRes: %+v", p.Name(), a)
		}
		if a, ok := find(d, "z"); ok && cores(a, nil) > 8 {
			t.Errorf("%s: z got %d cores, only 4 were free", p.Name(), cores(a, nil))
		}
	}
}

// Synergy: with the GPUs and plans fixed, an offload job sharing a server
// with a job that does not offload gets more cores than static gives it
// (the other job keeps its minimum), and a higher predicted throughput.
func TestSynergyGivesOffloadMoreCores(t *testing.T) {
	bert, llama := model(t, "bert"), model(t, "llama30b")
	off := waiting(t, "off", llama, 4, 0)
	off.ReqPlan = offloadAt(t, llama, perf.Placement{4}, 8)
	plain := waiting(t, "plain", bert, 4, 1)
	s := snapshot(servers(1, 8), off, plain)
	ds, dy := sched.NewStatic().Schedule(s), sched.NewSynergy().Schedule(s)
	checkCapacity(t, s, ds)
	checkCapacity(t, s, dy)
	so, _ := find(ds, "off")
	yo, ok := find(dy, "off")
	if !ok || yo.Kind != sched.Start || yo.Plan != off.ReqPlan || yo.Placement.GPUs() != 4 {
		t.Fatalf("synergy: want off started on its 4 GPUs with its plan, got %+v", yo)
	}
	if cores(yo, nil) <= cores(so, nil) || cores(yo, nil) <= 48 {
		t.Errorf("synergy gives off %d cores, static %d (proportional share 48)", cores(yo, nil), cores(so, nil))
	}
	t.Logf("off: static %d cores %.4f samples/s, synergy %d cores %.4f samples/s", cores(so, nil), so.Throughput, cores(yo, nil), yo.Throughput)
	if yo.Throughput <= so.Throughput {
		t.Errorf("synergy: off predicted %.4f samples/s, static %.4f", yo.Throughput, so.Throughput)
	}
	if yp, _ := find(dy, "plain"); cores(yp, nil) != 4 {
		t.Errorf("synergy: plain (not CPU-sensitive) gets %d cores, want its minimum 4", cores(yp, nil))
	}
	// A newcomer later still finds its cores next to the tuned job: free
	// GPUs keep their share.
	run := func(d sched.Decisions, j sched.Job) sched.Job {
		a, _ := find(d, j.ID)
		j.Alloc, j.Plan, j.ItersDone, j.LastChange = a.Alloc, a.Plan, 1, 0
		return j
	}
	s2 := snapshot(servers(1, 8), run(dy, off), waiting(t, "new", bert, 4, 2))
	s2.Now = 5000
	d2 := sched.NewSynergy().Schedule(s2)
	checkCapacity(t, s2, d2)
	if a, ok := find(d2, "new"); !ok || a.Kind != sched.Start {
		t.Errorf("newcomer not started next to the tuned job: %+v", d2)
	}
}

func dx0(d sched.Decisions) sched.Decision { a, _ := find(d, "x"); return a }
