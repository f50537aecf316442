package sched_test

import (
	"fmt"
	"testing"

	"github.com/replan/replan/perf"
	"github.com/replan/replan/sched"
)

// tieCluster is four racks of one 8-GPU server each. Racks B and C have 4
// free GPUs each; on the other 4 of rack B runs job x, which spans racks B
// and D (so it uses B's spine uplink) when crossX, else sits on rack B
// alone. Rack C's other 4 GPUs run y (one server, no uplink), rack D is
// full, rack A is free. A waiting 12-GPU job z whose timers expired can
// only start across racks: 8 on A and 4 on B or on C, equally good for it.
// Both x and z are data-parallel: over a 50 GB/s spine each communicates
// for more than half its iteration, so they cannot share B's uplink
// without colliding. Without the tie-break the policy picks B (the fewest
// racks, then the first rack that holds the last 4 with least to spare).
func tieCluster(t *testing.T, crossX bool) sched.Snapshot { return tieClusterOn(t, crossX, 1) }

// tieClusterOn is tieCluster with x on server xs (1: rack B, 2: rack C)
// and y on the other.
func tieClusterOn(t *testing.T, crossX bool, xs int) sched.Snapshot {
	m := model(t, "gpt2")
	srv := make([]sched.Server, 4)
	for i := range srv {
		srv[i] = sched.Server{ID: "s" + string(rune('0'+i)), Rack: "r" + string(rune('A'+i)), GPUs: 8, CPUs: 96, MemGB: 1600}
	}
	x := waiting(t, "x", m, 8, 0)
	if crossX {
		x.Alloc = []sched.Alloc{{Server: xs, GPUs: 4, CPUs: 32}, {Server: 3, GPUs: 4, CPUs: 32}}
		x.Plan = dpPlan(t, m, 8)
	} else {
		x = running(t, waiting(t, "x", m, 4, 0), xs, 4)
	}
	x.ItersDone, x.LastChange, x.Phase = 1, 0, 0
	y := running(t, waiting(t, "y", m, 4, 0), 3-xs, 4)
	w := running(t, waiting(t, "w", m, 4, 0), 3, 4)
	if !crossX {
		w = running(t, waiting(t, "w", m, 8, 0), 3, 8)
	}
	z := waiting(t, "z", m, 12, 0)
	z.ReqPlan = dpPlan(t, m, 12)
	s := snapshot(srv, x, y, w, z)
	s.Now = 30 * 3600 // past both 12 h timers
	s.SpineGBps = 50  // a slow spine: communication dominates
	return s
}

// dpPlan is a pure data-parallel plan on g GPUs: its gradient
// synchronisation is most of a cross-rack iteration.
func dpPlan(t *testing.T, m *perf.Model, g int) perf.Plan {
	t.Helper()
	for _, p := range perf.Candidates(m.Arch, g) {
		if p.DP == g && !p.Offload {
			return p
		}
	}
	t.Fatalf("no data-parallel plan on %d GPUs", g)
	return perf.Plan{}
}

func racksOf(s sched.Snapshot, a []sched.Alloc) map[string]int {
	out := map[string]int{}
	for _, x := range a {
		out[s.Servers[x.Server].Rack] += x.GPUs
	}
	return out
}

func TestTieBreakPrefersCompatibleRack(t *testing.T) {
	for _, name := range []string{"dally", "dally-manual"} {
		p, _ := sched.New(name)
		s := tieCluster(t, true)
		d := p.Schedule(s)
		a, ok := find(d, "z")
		if !ok {
			t.Fatalf("%s: z not started: %v", name, d.Waiting)
		}
		checkCapacity(t, s, d)
		r := racksOf(s, a.Alloc)
		if r["rA"] != 8 || r["rC"] != 4 || a.Tier != perf.TierCrossRack {
			t.Fatalf("%s: z on %v (%v), want 8 on rA and 4 on rC, away from x's uplink", name, r, a.Tier)
		}
	}
}

func TestTieBreakKeepsChoiceOnEqualScores(t *testing.T) {
	p, _ := sched.New("dally")
	s := tieCluster(t, false)
	d := p.Schedule(s)
	a, ok := find(d, "z")
	if !ok {
		t.Fatalf("z not started: %v", d.Waiting)
	}
	// The free GPUs are those of tieCluster(t, true), but x does not use
	// B's uplink: every score is 1 and the policy's own choice, B, stays.
	if r := racksOf(s, a.Alloc); r["rA"] != 8 || r["rB"] != 4 {
		t.Fatalf("z on %v, want the policy's own choice: 8 on rA and 4 on rB", r)
	}
}

// replan places z the same way: its growth stops at 12 GPUs (MaxGPUs), it
// takes the step across the slow spine (FragTolerance, MinSlope), and the
// running jobs are about to finish, so none of them grows. replan grows z
// 8 GPUs at a time; its last 4 go to the best-fitting server, C, so x sits
// on C here (tieClusterOn) for the tie-break to have a move to make.
func TestTieBreakReplan(t *testing.T) {
	o := sched.DefaultOptions()
	o.MaxGPUs, o.FragTolerance, o.MinSlope = 12, 0.01, 0.01
	for _, cross := range []bool{true, false} {
		s := tieClusterOn(t, cross, 2)
		for k := range 3 {
			s.Jobs[k].ItersTotal = s.Jobs[k].ItersDone + 1
		}
		d := sched.NewReplan(o, sched.DefaultNetOptions()).Schedule(s)
		a, ok := find(d, "z")
		if !ok {
			t.Fatalf("z not started: %v", d.Waiting)
		}
		checkCapacity(t, s, d)
		want := "rC"
		if cross {
			want = "rB"
		}
		if r := racksOf(s, a.Alloc); r["rA"] != 8 || r[want] != 4 {
			t.Fatalf("x across racks %v: z on %v, want 8 on rA and 4 on %s (%v)", cross, r, want, d.Actions)
		}
	}
}

// A job larger than a rack spans as few racks as the free GPUs allow: with
// one empty rack of 24 GPUs and single free servers scattered over four
// others, a 32-GPU job takes the empty rack and one more server (2 racks),
// where filling the fullest servers wherever they are spread it over more.
// Each rack it spans puts its traffic on one more shared spine uplink.
func TestLargerThanRackSpansFewestRacks(t *testing.T) {
	m := model(t, "bert")
	var srv []sched.Server
	for r := range 6 {
		for k := range 3 {
			srv = append(srv, sched.Server{ID: fmt.Sprintf("s%d%d", r, k), Rack: fmt.Sprintf("r%d", r), GPUs: 8, CPUs: 96, MemGB: 1600})
		}
	}
	// rack 0 empty; racks 1-5: servers 1 and 2 busy, server 0 free
	var jobs []sched.Job
	for r := 1; r < 6; r++ {
		for k := 1; k < 3; k++ {
			jobs = append(jobs, running(t, waiting(t, fmt.Sprintf("b%d%d", r, k), m, 8, 0), 3*r+k, 8))
		}
	}
	for _, name := range []string{"dally", "replan"} {
		z := waiting(t, "z", m, 32, 0)
		z.ReqPlan = dpPlan(t, m, 32)
		z.PinPlan = true
		s := snapshot(srv, append(append([]sched.Job(nil), jobs...), z)...)
		s.Now = 30 * 3600 // past the timers
		p, _ := sched.New(name)
		d := p.Schedule(s)
		a, ok := find(d, "z")
		if !ok {
			t.Fatalf("%s: z not started: %v", name, d.Waiting)
		}
		checkCapacity(t, s, d)
		if r := racksOf(s, a.Alloc); len(r) != 2 || r["r0"] != 24 {
			t.Errorf("%s: z on racks %v, want the empty rack r0 and one more", name, r)
		}
	}
}
