package sched_test

import (
	"strings"
	"testing"

	"github.com/replan/replan/perf"
	"github.com/replan/replan/sched"
	"github.com/replan/replan/sim"
)

// model is the unfitted model of a built-in type: tests need no data.
func model(t *testing.T, name string) *perf.Model {
	t.Helper()
	a, ok := perf.Builtin(name)
	if !ok {
		t.Fatalf("no model %s", name)
	}
	m := perf.DefaultModel(a, perf.A800)
	return &m
}

func servers(n, gpus int) []sched.Server {
	out := make([]sched.Server, n)
	for i := range out {
		out[i] = sched.Server{ID: "s" + string(rune('0'+i)), Rack: "r0", GPUs: gpus, CPUs: 12 * gpus, MemGB: 1600}
	}
	return out
}

func bestPlan(t *testing.T, m *perf.Model, pl perf.Placement) perf.Plan {
	t.Helper()
	r, ok := m.Best(perf.Resources{Placement: pl, CPUsPerGPU: 8})
	if !ok {
		t.Fatalf("%s: no plan on %v", m.Arch.Name, pl)
	}
	return r.Plan
}

// waiting is a job asking for req GPUs with the best plan for them.
func waiting(t *testing.T, id string, m *perf.Model, req int, submit float64) sched.Job {
	return sched.Job{ID: id, Tenant: "B", Class: sched.BestEffort, Model: m, ReqGPUs: req, ReqCPUs: 8 * req,
		ReqPlan: bestPlan(t, m, perf.PackedPlacement(req, 8)), Submit: submit, ItersTotal: 1e6}
}

// running puts a job on server s with g GPUs and the best plan there.
func running(t *testing.T, j sched.Job, s, g int) sched.Job {
	j.Alloc = []sched.Alloc{{Server: s, GPUs: g, CPUs: 8 * g}}
	j.Plan = bestPlan(t, j.Model, perf.Placement{g})
	j.ItersDone = 1
	return j
}

func snapshot(srv []sched.Server, jobs ...sched.Job) sched.Snapshot {
	s := sched.Snapshot{Now: 1000, Servers: srv, Jobs: jobs}
	s.FillFree()
	return s
}

func cheap() sched.Options {
	o := sched.DefaultOptions()
	o.RestartCost = 1
	return o
}

func find(d sched.Decisions, job string) (sched.Decision, bool) {
	for _, a := range d.Actions {
		if a.Job == job {
			return a, true
		}
	}
	return sched.Decision{}, false
}

func reason(d sched.Decisions, job string) string {
	for _, w := range d.Waiting {
		if w.Job == job {
			return w.Reason
		}
	}
	return ""
}

// checkCapacity applies d to s and fails if any server is over-committed.
func checkCapacity(t *testing.T, s sched.Snapshot, d sched.Decisions) {
	t.Helper()
	used := make([]int, len(s.Servers))
	cpus := make([]int, len(s.Servers))
	final := map[int][]sched.Alloc{}
	for i := range s.Jobs {
		final[i] = s.Jobs[i].Alloc
	}
	for _, a := range d.Actions {
		if a.Kind == sched.Preempt {
			final[a.Index] = nil
		} else {
			final[a.Index] = a.Alloc
		}
	}
	for _, al := range final {
		for _, a := range al {
			used[a.Server] += a.GPUs
			cpus[a.Server] += a.CPUs
		}
	}
	for i, sv := range s.Servers {
		if used[i] > sv.GPUs || cpus[i] > sv.CPUs {
			t.Fatalf("server %s over-committed: %d/%d GPUs, %d/%d cores", sv.ID, used[i], sv.GPUs, cpus[i], sv.CPUs)
		}
	}
}

func TestFreeResourcePlacement(t *testing.T) {
	bert := model(t, "bert")
	srv := servers(2, 8)
	s := snapshot(srv, waiting(t, "a", bert, 4, 0))
	for _, p := range []sched.Policy{sched.NewMorphling(cheap()), sched.NewStatic()} {
		d := p.Schedule(s)
		a, ok := find(d, "a")
		if !ok || a.Kind != sched.Start {
			t.Fatalf("%s: want a start, got %+v", p.Name(), d)
		}
		if a.Throughput <= 0 || perf.Check(bert.Arch, a.Plan, a.Placement) != nil {
			t.Errorf("%s: plan %s on %s: throughput %.2f", p.Name(), a.Plan, a.Placement, a.Throughput)
		}
		if p.Name() == "static" && (len(a.Placement) != 1 || a.Placement.GPUs() != 4) {
			t.Errorf("%s: want exactly the 4 GPUs on one server, got %s", p.Name(), a.Placement)
		}
		checkCapacity(t, s, d)
	}
	// Static takes exactly the request on the best-fitting server.
	s = snapshot(srv, running(t, waiting(t, "x", bert, 4, 0), 0, 4), waiting(t, "a", bert, 4, 1))
	d := sched.NewStatic().Schedule(s)
	if a, _ := find(d, "a"); a.Kind != sched.Start || a.Alloc[0].Server != 0 || a.Placement.GPUs() != 4 {
		t.Errorf("static: want 4 GPUs on the best-fitting server s0, got %+v", a)
	}
}

func TestStaticReasonLargestBlock(t *testing.T) {
	bert := model(t, "bert")
	s := snapshot(servers(2, 8), running(t, waiting(t, "x", bert, 4, 0), 0, 4), running(t, waiting(t, "y", bert, 4, 0), 1, 4), waiting(t, "a", bert, 8, 1))
	d := sched.NewStatic().Schedule(s)
	if got, want := reason(d, "a"), "needs 8 GPUs on one server; largest free block is 4"; got != want {
		t.Errorf("reason = %q, want %q", got, want)
	}
}

func TestShrinkLowestSlope(t *testing.T) {
	bert := model(t, "bert")
	// x holds 2 GPUs (steep part of its curve), y holds 6 (flat part):
	// the newcomer z must take GPUs from y, never from x.
	x := running(t, waiting(t, "x", bert, 1, 0), 0, 2)
	y := running(t, waiting(t, "y", bert, 1, 1), 0, 6)
	z := waiting(t, "z", bert, 1, 2)
	s := snapshot(servers(1, 8), x, y, z)
	d := sched.NewMorphling(cheap()).Schedule(s)
	if a, ok := find(d, "z"); !ok || a.Kind != sched.Start {
		t.Fatalf("z not started: %+v", d)
	}
	a, ok := find(d, "y")
	if !ok || (a.Kind == sched.Reconfigure && a.Placement.GPUs() >= 6) {
		t.Errorf("y (lowest slope) not shrunk: %+v", a)
	}
	if a, ok := find(d, "x"); ok && (a.Kind == sched.Preempt || a.Placement.GPUs() < 2) {
		t.Errorf("x (higher slope) shrunk: %+v", a)
	}
	checkCapacity(t, s, d)
}

func TestPreemptByShrinkToZero(t *testing.T) {
	bert := model(t, "bert")
	y := running(t, waiting(t, "y", bert, 1, 0), 0, 1)
	// z asked for a slow plan (checkpointing, offload): its best plan on
	// one GPU is worth several of its own requests, a much higher slope
	// than y loses.
	z := waiting(t, "z", bert, 1, 1)
	z.ReqPlan = perf.Plan{DP: 1, TP: 1, PP: 1, MicroBatch: 1, GA: 32, ZeRO: 3, Offload: true, Ckpt: true}
	s := snapshot(servers(1, 1), y, z)
	d := sched.NewMorphling(cheap()).Schedule(s)
	if a, ok := find(d, "y"); !ok || a.Kind != sched.Preempt {
		t.Fatalf("y not preempted: %+v", d)
	}
	if a, ok := find(d, "z"); !ok || a.Kind != sched.Start {
		t.Fatalf("z not started: %+v", d)
	}
	if d.Actions[0].Kind != sched.Preempt {
		t.Errorf("preemptions must come first: %v", d.Actions)
	}
	checkCapacity(t, s, d)
}

func TestPrivilegedGuaranteedFirst(t *testing.T) {
	bert := model(t, "bert")
	be := running(t, waiting(t, "be", bert, 1, 0), 0, 1)
	g := waiting(t, "g", bert, 1, 5)
	g.Class, g.Tenant = sched.Guaranteed, "A"
	// A best-effort newcomer with a far higher slope still loses to the
	// guaranteed job below its minRes.
	hot := waiting(t, "hot", bert, 1, 1)
	hot.ReqPlan = perf.Plan{DP: 1, TP: 1, PP: 1, MicroBatch: 1, GA: 32, ZeRO: 3, Offload: true, Ckpt: true}
	s := snapshot(servers(1, 1), be, g, hot)
	s.Tenants = []sched.Tenant{{Name: "A", QuotaGPUs: 8}, {Name: "B"}}
	d := sched.NewMorphling(cheap()).Schedule(s)
	if a, ok := find(d, "g"); !ok || a.Kind != sched.Start {
		t.Fatalf("guaranteed job not started first: %+v", d)
	}
	if a, ok := find(d, "be"); !ok || a.Kind != sched.Preempt {
		t.Errorf("best-effort job not preempted for the guaranteed one: %+v", a)
	}
	if r := reason(d, "hot"); r == "" {
		t.Errorf("hot: no reason given")
	}
	checkCapacity(t, s, d)
}

func TestQuotaExhausted(t *testing.T) {
	bert := model(t, "bert")
	g1 := running(t, waiting(t, "g1", bert, 2, 0), 0, 2)
	g1.Class, g1.Tenant = sched.Guaranteed, "A"
	g2 := waiting(t, "g2", bert, 2, 1)
	g2.Class, g2.Tenant = sched.Guaranteed, "A"
	s := snapshot(servers(1, 8), g1, g2)
	s.Tenants = []sched.Tenant{{Name: "A", QuotaGPUs: 2}}
	for _, p := range []sched.Policy{sched.NewMorphling(cheap()), sched.NewAntMan(), sched.NewStatic()} {
		d := p.Schedule(s)
		if r := reason(d, "g2"); !strings.Contains(r, "quota of tenant A exhausted") {
			t.Errorf("%s: reason %q, want quota of tenant A exhausted", p.Name(), r)
		}
	}
}

func TestMinRes(t *testing.T) {
	bert := model(t, "bert")
	p := sched.NewMorphling(sched.DefaultOptions())
	// A poor plan on 8 GPUs: a better plan reaches its throughput on fewer.
	j := waiting(t, "g", bert, 8, 0)
	j.Class = sched.Guaranteed
	j.ReqPlan = perf.Plan{DP: 8, TP: 1, PP: 1, MicroBatch: 1, GA: 4, ZeRO: 3, Offload: true, Ckpt: true}
	mr := p.MinRes(&j, 8)
	if mr.Fallback || mr.GPUs >= 8 || mr.GPUs < 1 {
		t.Fatalf("minRes = %+v, want fewer than 8 GPUs", mr)
	}
	b, err := bert.Predict(mr.Plan, perf.Resources{Placement: perf.PackedPlacement(mr.GPUs, 8), CPUsPerGPU: 8})
	if err != nil || b.Throughput(bert.Arch.GlobalBatch) < mr.Promise {
		t.Errorf("minRes plan %s on %d GPUs predicts %.2f < promise %.2f", mr.Plan, mr.GPUs, b.Throughput(bert.Arch.GlobalBatch), mr.Promise)
	}
	if mr.CPUs > j.ReqCPUs {
		t.Errorf("minRes cores %d above the request %d", mr.CPUs, j.ReqCPUs)
	}
	// The best plan on one GPU cannot be beaten with fewer resources:
	// minRes falls back to the request and its plan.
	one := waiting(t, "h", bert, 1, 0)
	one.Class = sched.Guaranteed
	mr = p.MinRes(&one, 8)
	if !mr.Fallback || mr.GPUs != 1 || mr.Plan != one.ReqPlan {
		t.Errorf("minRes = %+v, want the request (fallback)", mr)
	}
}

func TestAntiThrashing(t *testing.T) {
	bert := model(t, "bert")
	// A running job next to free GPUs: growing pays only when enough work
	// is left to win back the restart.
	almost := running(t, waiting(t, "a", bert, 1, 0), 0, 1)
	almost.ItersDone = almost.ItersTotal - 5
	s := snapshot(servers(1, 8), almost)
	d := sched.NewMorphling(sched.DefaultOptions()).Schedule(s)
	if a, ok := find(d, "a"); ok {
		t.Errorf("job 5 iterations from the end reconfigured: %+v", a)
	}
	long := running(t, waiting(t, "a", bert, 1, 0), 0, 1)
	s = snapshot(servers(1, 8), long)
	d = sched.NewMorphling(sched.DefaultOptions()).Schedule(s)
	if a, ok := find(d, "a"); !ok || a.Kind != sched.Reconfigure || a.Placement.GPUs() <= 1 {
		t.Errorf("long job next to 7 free GPUs not grown: %+v", d)
	}
	// Shrinking a running job for a newcomer must pay for the victim's
	// restart too: with an expensive restart and a newcomer that has
	// little work, nothing moves and the newcomer is told why.
	y := running(t, waiting(t, "y", bert, 1, 0), 0, 8)
	z := waiting(t, "z", bert, 1, 1)
	z.ItersTotal = 10
	o := sched.DefaultOptions()
	o.RestartCost = 3600
	s = snapshot(servers(1, 8), y, z)
	d = sched.NewMorphling(o).Schedule(s)
	if len(d.Actions) != 0 {
		t.Errorf("thrashing: %v", d.Actions)
	}
	if reason(d, "z") == "" {
		t.Errorf("z waits without a reason")
	}
}

func TestDeterministicAndPure(t *testing.T) {
	bert, gpt2 := model(t, "bert"), model(t, "gpt2")
	s := snapshot(servers(2, 8), running(t, waiting(t, "x", bert, 2, 0), 0, 3), waiting(t, "a", gpt2, 4, 1), waiting(t, "b", bert, 2, 2))
	before := s.Jobs[0].Alloc[0]
	for _, name := range sched.Names() {
		p1, _ := sched.New(name)
		p2, _ := sched.New(name)
		d1, d2 := p1.Schedule(s), p2.Schedule(s)
		if len(d1.Actions) != len(d2.Actions) || len(d1.Waiting) != len(d2.Waiting) {
			t.Errorf("%s: two runs differ", name)
		}
		for i := range d1.Actions {
			if d1.Actions[i].String() != d2.Actions[i].String() {
				t.Errorf("%s: %s vs %s", name, d1.Actions[i], d2.Actions[i])
			}
		}
		if s.Jobs[0].Alloc[0] != before {
			t.Fatalf("%s modified the snapshot", name)
		}
		checkCapacity(t, s, d1)
	}
}

func TestResourcesOnlyKeepsPlanFamily(t *testing.T) {
	gpt2 := model(t, "gpt2")
	j := waiting(t, "a", gpt2, 2, 0)
	j.ReqPlan = perf.Plan{DP: 2, TP: 1, PP: 1, MicroBatch: 4, GA: 2, ZeRO: 2}
	s := snapshot(servers(1, 8), j)
	d := sched.NewResourcesOnly(cheap()).Schedule(s)
	a, ok := find(d, "a")
	if !ok || a.Kind != sched.Start {
		t.Fatalf("not started: %+v", d)
	}
	if a.Plan.TP != 1 || a.Plan.PP != 1 || a.Plan.ZeRO != 2 || a.Plan.Offload || a.Plan.Ckpt {
		t.Errorf("plan family changed: %s", a.Plan)
	}
}

func TestNewKnowsEveryName(t *testing.T) {
	for _, n := range sched.Names() {
		p, err := sched.New(n)
		if err != nil || p.Name() != n {
			t.Errorf("New(%q) = %v, %v", n, p, err)
		}
	}
	if _, err := sched.New("nope"); err == nil {
		t.Error("unknown policy accepted")
	}
}

func TestHostMemoryAllocated(t *testing.T) {
	bert := model(t, "bert")
	j := waiting(t, "off", bert, 1, 0)
	j.ReqPlan = perf.Plan{DP: 1, TP: 1, PP: 1, MicroBatch: 1, GA: 32, ZeRO: 2, Offload: true}
	srv := servers(1, 8)
	srv[0].MemGB = 1
	s := snapshot(srv, j)
	d := sched.NewStatic().Schedule(s)
	if _, ok := find(d, "off"); ok {
		t.Fatalf("offload plan started without the host memory for it: %+v", d)
	}
	if r := reason(d, "off"); !strings.Contains(r, "host memory") {
		t.Errorf("reason %q does not name host memory", r)
	}
	srv[0].MemGB = 1600
	s = snapshot(srv, j)
	d = sched.NewStatic().Schedule(s)
	a, ok := find(d, "off")
	if !ok || a.Alloc[0].MemGB <= 0 {
		t.Errorf("offload start without host memory allocated: %+v", a)
	}
}

func TestMinDwellAndWakeAt(t *testing.T) {
	bert := model(t, "bert")
	// y took the whole server 100 s ago: a newcomer that would otherwise
	// shrink it (see TestShrinkLowestSlope) waits until MinDwell has
	// passed, and the policy asks to be woken up then.
	y := running(t, waiting(t, "y", bert, 1, 0), 0, 8)
	y.LastChange = 900
	z := waiting(t, "z", bert, 1, 1)
	s := snapshot(servers(1, 8), y, z) // Now = 1000
	d := sched.NewMorphling(cheap()).Schedule(s)
	if len(d.Actions) != 0 {
		t.Errorf("job changed 100 s ago was shrunk: %v", d.Actions)
	}
	if want := 900 + sched.DefaultOptions().MinDwell; d.WakeAt != want {
		t.Errorf("WakeAt = %v, want %v", d.WakeAt, want)
	}
	s.Now = d.WakeAt
	d = sched.NewMorphling(cheap()).Schedule(s)
	if a, ok := find(d, "z"); !ok || a.Kind != sched.Start {
		t.Errorf("after MinDwell the newcomer should get GPUs from y: %+v", d)
	}
	// Growing into free GPUs is not trading: allowed while settling.
	j := running(t, waiting(t, "a", bert, 1, 0), 0, 1)
	j.LastChange = 900
	d = sched.NewMorphling(sched.DefaultOptions()).Schedule(snapshot(servers(1, 8), j))
	if a, ok := find(d, "a"); !ok || a.Kind != sched.Reconfigure || a.Placement.GPUs() <= 1 {
		t.Errorf("settling job next to free GPUs not grown: %+v", d)
	}
}

// fastKnown claims one measured plan on one GPU is ten times faster than
// anything the model predicts.
type fastKnown struct{ plan perf.Plan }

func (k *fastKnown) Throughput(m *perf.Model, p perf.Plan, pl perf.Placement, cpg int) (float64, bool) {
	if p == k.plan && pl.GPUs() == 1 {
		return 1e4, true
	}
	return 0, false
}

func (k *fastKnown) Plans(m *perf.Model, pl perf.Placement) []perf.Plan {
	if pl.GPUs() == 1 {
		return []perf.Plan{k.plan}
	}
	return nil
}

func TestKnownMeasurementsBeatPredictions(t *testing.T) {
	bert := model(t, "bert")
	odd := perf.Plan{DP: 1, TP: 1, PP: 1, MicroBatch: 2, GA: 16, ZeRO: 1}
	s := snapshot(servers(1, 8), waiting(t, "a", bert, 1, 0))
	s.Known = &fastKnown{plan: odd}
	d := sched.NewMorphling(sched.DefaultOptions()).Schedule(s)
	a, ok := find(d, "a")
	if !ok || a.Plan != odd || a.Placement.GPUs() != 1 || a.Throughput != 1e4 {
		t.Errorf("want the measured plan on one GPU, got %+v", a)
	}
}

// TestEveryWaitingJobHasAReason checks, on a busy synthetic cluster, that
// every policy accounts for every waiting job (started or told why) and
// never over-commits a server.
func TestEveryWaitingJobHasAReason(t *testing.T) {
	s := sim.LargeSnapshot(32, 300, 0.75, 3)
	for _, name := range sched.Names() {
		p, _ := sched.New(name)
		d := p.Schedule(s)
		checkCapacity(t, s, d)
		seen := map[int]bool{}
		for _, a := range d.Actions {
			seen[a.Index] = true
		}
		for _, w := range d.Waiting {
			if w.Reason == "" {
				t.Errorf("%s: job %s waits without a reason", name, w.Job)
			}
			seen[w.Index] = true
		}
		for i, j := range s.Jobs {
			if !j.Running() && !seen[i] {
				t.Errorf("%s: waiting job %s neither started nor given a reason", name, j.ID)
			}
		}
	}
}

func TestSmallClusterStillServesBigModel(t *testing.T) {
	// llama30b's most efficient step is beyond one 8-GPU server: on a
	// cluster of one server it must still start on what there is.
	llama := model(t, "llama30b")
	j := waiting(t, "big", llama, 8, 0)
	d := sched.NewMorphling(sched.DefaultOptions()).Schedule(snapshot(servers(1, 8), j))
	if a, ok := find(d, "big"); !ok || a.Kind != sched.Start {
		t.Fatalf("not started on the only server: %+v", d)
	}
}
