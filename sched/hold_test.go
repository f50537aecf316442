package sched_test

import (
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/replan/replan/cluster"
	"github.com/replan/replan/perf"
	"github.com/replan/replan/sched"
)

// holdCluster is four racks of one 8-GPU server each over a slow spine
// (25 GB/s per rack, 4:1). Job x runs data-parallel across racks B and D (4
// GPUs each), so it uses B's and D's uplinks; u runs on half of rack A, y
// fills rack C, w the rest of D. Half of A and half of B are free. The
// waiting 8-GPU job z (data-parallel, plan pinned) can only start across
// racks, 4 on A and 4 on B, where it would share B's uplink with x: each
// communicates for more than half its iteration there. The waiting 4-GPU
// job v (submitted later, with v: also pinned) fits one server. The
// running jobs started a minute ago: MinDwell keeps them as they are.
func holdCluster(t *testing.T, withV bool) sched.Snapshot {
	m := model(t, "gpt2")
	srv := make([]sched.Server, 4)
	for i := range srv {
		srv[i] = sched.Server{ID: "s" + string(rune('0'+i)), Rack: "r" + string(rune('A'+i)), GPUs: 8, CPUs: 96, MemGB: 1600}
	}
	x := waiting(t, "x", m, 8, 0)
	x.Alloc = []sched.Alloc{{Server: 1, GPUs: 4, CPUs: 32}, {Server: 3, GPUs: 4, CPUs: 32}}
	x.Plan = dpPlan(t, m, 8)
	x.ItersDone, x.Phase = 1, 0
	x.ReqPlan, x.PinPlan = x.Plan, true
	u := running(t, waiting(t, "u", m, 4, 0), 0, 4)
	y := running(t, waiting(t, "y", m, 8, 0), 2, 8)
	w := running(t, waiting(t, "w", m, 4, 0), 3, 4)
	for _, j := range []*sched.Job{&u, &y, &w} {
		j.ReqPlan, j.PinPlan = j.Plan, true
	}
	for _, j := range []*sched.Job{&x, &u, &y, &w} {
		j.LastChange = 30*3600 - 60 // started a minute ago: nobody shrinks them (MinDwell)
	}
	z := waiting(t, "z", m, 8, 100)
	z.ReqPlan, z.PinPlan = dpPlan(t, m, 8), true
	jobs := []sched.Job{x, u, y, w, z}
	if withV {
		v := waiting(t, "v", m, 4, 200)
		v.PinPlan = true
		jobs = append(jobs, v)
	}
	s := snapshot(srv, jobs...)
	s.Now = 30 * 3600 // past both 12 h timers
	s.SpineGBps = 25
	return s
}

// holdOptions accept a spread placement over the slow spine (as
// TestTieBreakReplan's).
func holdOptions() sched.Options {
	o := sched.DefaultOptions()
	o.FragTolerance, o.MinSlope = 0.01, 0.01
	return o
}

// The uplink hold passes z over while v can use the GPUs: z would share
// rack B's uplink with x (both slowed for their whole runs), so v starts
// in one rack and z waits with a reason that names the uplink and x. With
// the hold off, z starts across A and B as before.
func TestUplinkHoldGivesGPUsToAJobInOneRack(t *testing.T) {
	s := holdCluster(t, true)
	d := sched.NewReplan(holdOptions(), sched.DefaultNetOptions()).Schedule(s)
	checkCapacity(t, s, d)
	if a, ok := find(d, "z"); ok {
		t.Fatalf("z started on %v beside x on rack B's uplink; want it held (%v)", racksOf(s, a.Alloc), d.Actions)
	}
	a, ok := find(d, "v")
	if !ok {
		t.Fatalf("v not started: %v", d.Waiting)
	}
	if r := racksOf(s, a.Alloc); len(r) != 1 {
		t.Fatalf("v on %v, want one rack", r)
	}
	why := reason(d, "z")
	for _, want := range []string{"uplink hold", "2 servers × 4 GPUs across racks", "rack rB", "job x", "4 GPUs left over this round"} {
		if !strings.Contains(why, want) {
			t.Fatalf("z's reason %q lacks %q", why, want)
		}
	}

	n := sched.DefaultNetOptions()
	n.UplinkHold = -1
	zBesideX(t, s, n, "hold off")
}

// zBesideX schedules s with replan under n and checks that z starts across
// racks A and B, beside x on B's uplink (what: the case, for the message).
func zBesideX(t *testing.T, s sched.Snapshot, n sched.NetOptions, what string) {
	t.Helper()
	d := sched.NewReplan(holdOptions(), n).Schedule(s)
	checkCapacity(t, s, d)
	a, ok := find(d, "z")
	if !ok {
		t.Fatalf("%s: z not started: %q", what, reason(d, "z"))
	}
	if r := racksOf(s, a.Alloc); r["rA"] != 4 || r["rB"] != 4 {
		t.Fatalf("%s: z on %v, want 4 on rA and 4 on rB", what, r)
	}
}

// A hold never leaves GPUs idle: with nobody else to take the free GPUs,
// the leftover pass starts z across racks after all.
func TestUplinkHoldLeavesNoGPUIdle(t *testing.T) {
	zBesideX(t, holdCluster(t, false), sched.DefaultNetOptions(), "nobody else takes the GPUs")
}

// No job is held for ever: z, 10 iterations from its end (seconds of work
// on the offer), has waited 30 h, far more than UplinkHoldRuns (8) times
// its run, so it starts beside x although v could use the GPUs.
func TestUplinkHoldIsBounded(t *testing.T) {
	s := holdCluster(t, true)
	z := &s.Jobs[4]
	if z.ID != "z" {
		t.Fatalf("job 4 is %s, want z", z.ID)
	}
	z.ItersTotal = 10
	zBesideX(t, s, sched.DefaultNetOptions(), "waited 30 h for a 10-iteration run")
}

// The hold's bound follows the queue (issue 29): z has waited about three
// times its predicted run on the offer. With only v behind it, a hold is
// mostly z's delay: the bound is two runs (its floor) and z starts beside
// x. With a dozen more jobs waiting behind it, the bound is 13 runs: z is
// held and v takes the GPUs.
func TestUplinkHoldBoundFollowsTheQueue(t *testing.T) {
	s := holdCluster(t, true)
	z := &s.Jobs[4]
	if z.ID != "z" {
		t.Fatalf("job 4 is %s, want z", z.ID)
	}
	// z's iteration on the offer (4 + 4 GPUs across racks, the 25 GB/s
	// spine), as the policy's model prices it: within a factor of 3 is
	// enough here.
	m := *z.Model
	m.Env.SpineFactor = math.Min(1, s.SpineGBps/cluster.A800RDMAGBps)
	b, err := m.Predict(z.ReqPlan, perf.Resources{Placement: perf.Placement{4, 4}, CrossRack: true, CPUsPerGPU: 8})
	if err != nil || b.Iter <= 0 {
		t.Fatalf("predict z: %v %+v", err, b)
	}
	waited := z.Starved(s.Now)
	z.ItersTotal = math.Round(waited / 3 / b.Iter)
	if z.ItersTotal < 10 {
		t.Fatalf("z's run too short: %g iterations", z.ItersTotal)
	}
	zBesideX(t, s, sched.DefaultNetOptions(), "z waited 3 runs, one job behind it")

	long := holdCluster(t, true)
	long.Jobs[4].ItersTotal = z.ItersTotal
	mm := long.Jobs[4].Model
	for k := range 12 {
		w := waiting(t, "q"+strconv.Itoa(k), mm, 8, 300+float64(k))
		w.ReqPlan, w.PinPlan = dpPlan(t, mm, 8), true
		long.Jobs = append(long.Jobs, w)
	}
	long.FillFree()
	d := sched.NewReplan(holdOptions(), sched.DefaultNetOptions()).Schedule(long)
	checkCapacity(t, long, d)
	if a, ok := find(d, "z"); ok {
		t.Fatalf("z started on %v with 13 jobs waiting behind it; want it held (%v)", racksOf(long, a.Alloc), d.Actions)
	}
	if why := reason(d, "z"); !strings.Contains(why, "uplink hold") {
		t.Fatalf("z's reason %q, want the uplink hold", why)
	}
}

// The hold's bound is at least two runs (issue 29, Poisson arrivals): with
// only v behind it, z is held while it has waited less than two of its
// runs on the offer (1.5 here: held, v takes the GPUs; it started beside
// x while the floor was one run), and starts beside x past them (2.5).
func TestUplinkHoldBoundAtLeastTwoRuns(t *testing.T) {
	for _, c := range []struct {
		runs float64
		held bool
	}{{1.5, true}, {2.5, false}} {
		s := holdCluster(t, true)
		z := &s.Jobs[4]
		// z's run on the offer as the hold prices it: its iterations at
		// the offer's throughput on its own model (the model's spine, as
		// the policy's plan cache predicts it).
		b, err := z.Model.Predict(z.ReqPlan, perf.Resources{Placement: perf.Placement{4, 4}, CrossRack: true, CPUsPerGPU: 8})
		if err != nil || b.Iter <= 0 {
			t.Fatalf("predict z: %v %+v", err, b)
		}
		z.ItersTotal = math.Round(z.Starved(s.Now) / c.runs / b.Iter)
		if !c.held {
			zBesideX(t, s, sched.DefaultNetOptions(), "z waited 2.5 runs, one job behind it")
			continue
		}
		d := sched.NewReplan(holdOptions(), sched.DefaultNetOptions()).Schedule(s)
		checkCapacity(t, s, d)
		if a, ok := find(d, "z"); ok {
			t.Fatalf("z started on %v after 1.5 runs with v behind it; want it held", racksOf(s, a.Alloc))
		}
		if _, ok := find(d, "v"); !ok {
			t.Fatalf("v not started while z is held: %q", reason(d, "v"))
		}
		if why := reason(d, "z"); !strings.Contains(why, "uplink hold") {
			t.Fatalf("z's reason %q, want the uplink hold", why)
		}
	}
}

// runBehind sets v's iterations so that its predicted run (its model
// alone on vPl, inside a rack) is ratio times z's on the offer zPl across
// racks, as the uplink hold prices both (UplinkHoldSwap: a job behind a
// held one of about its length takes its turn).
func runBehind(t *testing.T, z *sched.Job, zPl perf.Placement, v *sched.Job, vPl perf.Placement, ratio float64) {
	t.Helper()
	bz, err := z.Model.Predict(z.ReqPlan, perf.Resources{Placement: zPl, CrossRack: true, CPUsPerGPU: 8})
	if err != nil || bz.Iter <= 0 {
		t.Fatalf("predict %s: %v %+v", z.ID, err, bz)
	}
	bv, err := v.Model.Predict(v.ReqPlan, perf.Resources{Placement: vPl, CPUsPerGPU: 8})
	if err != nil || bv.Iter <= 0 {
		t.Fatalf("predict %s: %v %+v", v.ID, err, bv)
	}
	v.ItersTotal = math.Round(ratio * z.ItersTotal * bz.Iter / bv.Iter)
}

// The hold priced against the shortest-first order (UplinkHoldSwap, issue
// 29): z, beside the roberta job y, would be slowed about 13 % (the
// uplink's load fits it: TestUplinkHoldFitHoldsIncompatible's cluster).
// Holding it hands its turn to v behind it. With v predicted to run 1.05
// times z's run, the swap costs less than the sharing (1 + 2·0.13): z is
// held. With v twice as long, every job queued behind them would wait
// longer for v's run than the sharing costs: z starts beside y. With the
// swap pricing off, z is held for the long v too.
func TestUplinkHoldSwapPricesTheOrder(t *testing.T) {
	for _, c := range []struct {
		name  string
		ratio float64
		swap  float64
		held  bool
	}{{"v about as long", 1.05, 0, true}, {"v twice as long", 2, 0, false}, {"v twice as long, pricing off", 2, -1, true}} {
		s, z, v := fitHoldCluster(t)
		runBehind(t, &s.Jobs[z], perf.Placement{8, 8, 8, 8}, &s.Jobs[v], perf.Placement{8, 8}, c.ratio)
		n := sched.DefaultNetOptions()
		if c.swap != 0 {
			n.UplinkHoldSwap = c.swap
		}
		d := sched.NewReplan(sched.DefaultOptions(), n).Schedule(s)
		checkCapacity(t, s, d)
		_, started := find(d, "z")
		if c.held && (started || !strings.Contains(reason(d, "z"), "uplink hold")) {
			t.Errorf("%s: z started %v (%q), want it held", c.name, started, reason(d, "z"))
		}
		if !c.held && !started {
			t.Errorf("%s: z waits (%q), want it started beside y", c.name, reason(d, "z"))
		}
	}
}

// SetHold (--hold): with v twice as long as z behind it, "priced" starts
// z beside y, "unpriced" holds it, "off" starts it (no hold at all); an
// unknown hold names the choices, and a policy without an uplink hold
// refuses one.
func TestSetHold(t *testing.T) {
	for _, c := range []struct {
		hold string
		held bool
	}{{"unpriced", true}, {"priced", false}, {"off", false}} {
		s, z, v := fitHoldCluster(t)
		runBehind(t, &s.Jobs[z], perf.Placement{8, 8, 8, 8}, &s.Jobs[v], perf.Placement{8, 8}, 2)
		p, _ := sched.New("replan")
		if err := sched.SetHold(p, c.hold); err != nil {
			t.Fatal(err)
		}
		d := p.Schedule(s)
		checkCapacity(t, s, d)
		if _, started := find(d, "z"); started == c.held {
			t.Errorf("--hold %s: z started %v (%q), want held %v", c.hold, started, reason(d, "z"), c.held)
		}
	}
	m, _ := sched.New("morphling")
	r, _ := sched.New("replan")
	if err := sched.SetHold(m, ""); err != nil {
		t.Errorf("no hold given: %v", err)
	}
	for _, c := range []struct {
		p    sched.Policy
		hold string
		want string
	}{{m, "priced", "only replan has an uplink hold"}, {r, "strict", "want one of priced, unpriced, off"}} {
		if err := sched.SetHold(c.p, c.hold); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s --hold %s: %v, want an error saying %q", c.p.Name(), c.hold, err, c.want)
		}
	}
}
