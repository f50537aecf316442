package sched_test

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/replan/replan/perf"
	"github.com/replan/replan/sched"
)

// racksOf3 is racks racks of 3 servers × 8 GPUs: rack r's servers are
// 3r, 3r+1, 3r+2.
func racksOf3(racks int) []sched.Server {
	var srv []sched.Server
	for r := range racks {
		for k := range 3 {
			srv = append(srv, sched.Server{ID: fmt.Sprintf("s%d%d", r, k), Rack: fmt.Sprintf("r%d", r), GPUs: 8, CPUs: 96, MemGB: 1600})
		}
	}
	return srv
}

// crossJob is a pure data-parallel job of model name running plan-pinned
// on 8 GPUs of each of servers (so across racks), at phase 0.
func crossJob(t *testing.T, id, name string, servers ...int) sched.Job {
	t.Helper()
	m := model(t, name)
	g := 8 * len(servers)
	j := waiting(t, id, m, g, 0)
	j.ReqPlan = dpPlan(t, m, g)
	j.PinPlan = true
	j.Plan = j.ReqPlan
	for _, s := range servers {
		j.Alloc = append(j.Alloc, sched.Alloc{Server: s, GPUs: 8, CPUs: 64})
	}
	j.ItersDone, j.LastChange, j.Phase = 1, 0, 0
	return j
}

// uplinkCluster is five racks of 3 servers at 4:1 (a 75 GB/s uplink per
// rack). Running across racks: x, a vit job like the waiting z, on rack 1
// (one server) and rack 3 (all three); y, a roberta job, on rack 2 (two
// servers) and rack 4 (two); a one-server job w fills rack 4. Free: rack 0
// (24 GPUs), rack 1 (16), rack 2 (8). The 32-GPU z takes rack 0 and 8 more
// GPUs of rack 1 or rack 2, equally fast for it. The fewest-racks take
// picks rack 2, the rack that holds the last 8 with the least to spare,
// where z would share the uplink with y, whose iteration is three times
// z's: their communication arcs collide at every rotation. On rack 1 it
// shares with x, whose circle it interleaves with entirely.
func uplinkCluster(t *testing.T) sched.Snapshot {
	x := crossJob(t, "x", "vit", 3, 9, 10, 11)
	y := crossJob(t, "y", "roberta", 6, 7, 12, 13)
	w := running(t, waiting(t, "w", model(t, "bert"), 8, 0), 14, 8)
	m := model(t, "vit")
	z := waiting(t, "z", m, 32, 0)
	z.ReqPlan = dpPlan(t, m, 32)
	z.PinPlan = true
	s := snapshot(racksOf3(5), x, y, w, z)
	s.Now = 30 * 3600
	s.SpineGBps = 75 // 3 servers × 100 GB/s over 75: 4:1
	return s
}

func TestUplinkPlaceInterleavesBest(t *testing.T) {
	n := sched.DefaultNetOptions()
	n.UplinkHold = -1 // the placement alone
	s := uplinkCluster(t)
	d := sched.NewReplan(sched.DefaultOptions(), n).Schedule(s)
	a, ok := find(d, "z")
	if !ok {
		t.Fatalf("z not started: %v", d.Waiting)
	}
	checkCapacity(t, s, d)
	if r := racksOf(s, a.Alloc); r["r0"] != 24 || r["r1"] != 8 || len(r) != 2 {
		t.Fatalf("z on %v, want 24 on r0 and 8 on r1, beside x whose arcs it interleaves with", r)
	}
	// The scores the choice rests on: z beside x at their best rotation
	// (x held at its phase) and beside y.
	z := circleOf(t, s, a)
	score := func(other int) float64 {
		o := s.Jobs[other]
		c := circleOf(t, s, sched.Decision{Index: other, Alloc: o.Alloc, Plan: o.Plan})
		_, sc := sched.Rotate([]sched.Circle{c, z}, []bool{true, false}, []float64{0, 0}, 1)
		return sc
	}
	withX, withY := score(0), score(1)
	if withX < 0.99 || withY > withX-0.05 {
		t.Fatalf("compatibility beside x %.3f, beside y %.3f: want x's near 1 and y's clearly lower", withX, withY)
	}
	if sc := linkScore(d, "spine:r1"); sc < 0.99 {
		t.Errorf("r1's uplink compatibility with the shifts %.3f, want about 1", sc)
	}
}

// linkScore is the compatibility of the link named name in d's shift
// report (1 when it is not shared).
func linkScore(d sched.Decisions, name string) float64 {
	for _, l := range d.Links.Links {
		if l.Name == name {
			return l.Score
		}
	}
	return 1
}

// With equal compatibility everywhere, the placement leaves the most
// room: three 32-GPU jobs arrive together on four empty racks of 24 GPUs.
// The fewest-racks take puts the first on racks 0 and 1, the second on
// racks 2 and 1 (rack 1 holds the last 8 with the least to spare) and the
// third on rack 3 and rack 1 again: three jobs on rack 1's uplink, whose
// arcs (about 38 % of an iteration each) cannot all interleave. Weighing
// the uplinks' load puts the second beside an empty uplink, and no uplink
// carries more than two.
func TestUplinkPlaceSpreadsLoad(t *testing.T) {
	m := model(t, "vit")
	for _, place := range []bool{true, false} {
		var jobs []sched.Job
		for k := range 3 {
			z := waiting(t, fmt.Sprintf("z%d", k), m, 32, float64(k))
			z.ReqPlan = dpPlan(t, m, 32)
			z.PinPlan = true
			jobs = append(jobs, z)
		}
		s := snapshot(racksOf3(4), jobs...)
		s.SpineGBps = 75
		n := sched.DefaultNetOptions()
		n.UplinkPlace = place
		n.UplinkHold = -1
		d := sched.NewReplan(sched.DefaultOptions(), n).Schedule(s)
		checkCapacity(t, s, d)
		per := map[string]int{}
		for _, id := range []string{"z0", "z1", "z2"} {
			a, ok := find(d, id)
			if !ok {
				t.Fatalf("place %v: %s not started: %v", place, id, d.Waiting)
			}
			for r := range racksOf(s, a.Alloc) {
				per[r]++
			}
		}
		most := 0
		for _, n := range per {
			most = max(most, n)
		}
		if place && most > 2 {
			t.Errorf("uplink-aware placement: jobs per uplink %v, want at most 2", per)
		}
		if !place && most < 3 {
			t.Errorf("fewest racks alone: jobs per uplink %v, want 3 on one (the stacking the placement avoids)", per)
		}
	}
}

// Two identical jobs on one uplink, 2 per uplink: replan's shifts remove
// all the time sharing adds. Two 32-GPU vit jobs start together on three
// racks of 24 GPUs; both span rack 1 (24 + 8 each way). Started aligned,
// their arcs (about 38 % of an iteration at 4:1, the whole uplink each)
// overlap and each waits for the other; shifted as replan decides, the
// link is never over capacity.
func TestShiftsRemoveSharingIdenticalPair(t *testing.T) {
	m := model(t, "vit")
	var jobs []sched.Job
	for k := range 2 {
		z := waiting(t, fmt.Sprintf("z%d", k), m, 32, 0)
		z.ReqPlan = dpPlan(t, m, 32)
		z.PinPlan = true
		jobs = append(jobs, z)
	}
	s := snapshot(racksOf3(3), jobs...)
	s.SpineGBps = 75
	restart := sched.DefaultOptions().RestartCost
	p, _ := sched.New("replan")
	d := p.Schedule(s)
	checkCapacity(t, s, d)
	var cs []sched.Circle
	var shifted, aligned []float64
	for _, id := range []string{"z0", "z1"} {
		a, ok := find(d, id)
		if !ok {
			t.Fatalf("%s not started: %v", id, d.Waiting)
		}
		if r := racksOf(s, a.Alloc); r["r1"] == 0 || len(r) != 2 {
			t.Fatalf("%s on %v: want it across rack 1 and one more", id, r)
		}
		c := circleOf(t, s, a)
		if f := c.Arcs[0].Len / c.Period; f < 0.25 || f > 0.45 || c.Arcs[0].Demand < 1 {
			t.Fatalf("%s communicates %.0f %% of its iteration at %.2f of the uplink: not the case under test", id, 100*f, c.Arcs[0].Demand)
		}
		cs = append(cs, c)
		// where its iteration stands when it starts: as the simulator
		// phases it (start = now + restart + shift)
		start := s.Now + restart
		shifted = append(shifted, math.Mod(start+a.Shift, c.Period))
		aligned = append(aligned, math.Mod(start, c.Period))
	}
	_, _, extra0 := sched.LinkLoad(cs, aligned, 1)
	_, _, extra := sched.LinkLoad(cs, shifted, 1)
	if extra0[0] <= 0 || extra0[1] <= 0 {
		t.Fatalf("started aligned the jobs add nothing to each other (%v): nothing for the shifts to remove", extra0)
	}
	for k := range extra {
		if extra[k] > 1e-9 {
			t.Errorf("job z%d: sharing adds %.4f s per iteration with the shifts (%.4f s aligned), want 0", k, extra[k], extra0[k])
		}
	}
	if sc := linkScore(d, "spine:r1"); sc < 1-1e-9 {
		t.Errorf("rack 1's uplink compatibility %.3f with the shifts, want 1", sc)
	}
}

// circleOf is the circle of a's job on a's allocation at s's spine, as
// the simulator prices it: the model alone on the uplink.
func circleOf(t *testing.T, s sched.Snapshot, a sched.Decision) sched.Circle {
	t.Helper()
	j := s.Jobs[a.Index]
	mm := *j.Model
	mm.Env.SpineFactor = math.Min(1, s.SpineGBps/100)
	var pl perf.Placement
	for _, x := range a.Alloc {
		pl = append(pl, x.GPUs)
	}
	b, err := mm.Predict(a.Plan, perf.Resources{Placement: pl, CrossRack: true, CPUsPerGPU: 8})
	if err != nil {
		t.Fatal(err)
	}
	return sched.CommCircle(b.Iter, b.InterServer, sched.SpineDemand(j.Model.Env, 8, s.SpineGBps))
}

// fitHoldCluster is TestUplinkHoldFitHoldsIncompatible's cluster: five
// racks of 3 servers, the roberta job y across racks 0 and 2 (servers 6,
// 7, 12 and 13), bert jobs filling the rest but rack 0 and the last server
// of rack 2; the waiting 32-GPU vit job z and, submitted a second later,
// the 16-GPU vit job v, both plan-pinned. v's run is 1.05 times z's (an
// order of shortest-first: after z; runBehind) and z's far longer than
// it has waited (the hold's bound stays out of the way). It returns the
// snapshot and the indexes of z and v.
func fitHoldCluster(t *testing.T) (sched.Snapshot, int, int) {
	t.Helper()
	y := crossJob(t, "y", "roberta", 6, 7, 12, 13)
	jobs := []sched.Job{y}
	for k, sv := range []int{3, 4, 5, 14} {
		jobs = append(jobs, running(t, waiting(t, fmt.Sprintf("w%d", k), model(t, "bert"), 8, 0), sv, 8))
	}
	m := model(t, "vit")
	z := waiting(t, "z", m, 32, 0)
	z.ReqPlan = dpPlan(t, m, 32)
	z.PinPlan = true
	z.ItersTotal = 1e9
	v := waiting(t, "v", m, 16, 1)
	v.ReqPlan = dpPlan(t, m, 16)
	v.PinPlan = true
	runBehind(t, &z, perf.Placement{8, 8, 8, 8}, &v, perf.Placement{8, 8}, 1.05)
	s := snapshot(racksOf3(5), append(jobs, z, v)...)
	s.Now = 30 * 3600
	s.SpineGBps = 75
	return s, len(jobs), len(jobs) + 1
}

// The uplink hold where the uplink's load fits it (UplinkHoldFit): the
// 32-GPU vit job z can only start beside the roberta job y (rack 0 and the
// last 8 GPUs of rack 2; rack 1 runs jobs inside it). Their circles
// collide: a small slowdown, under the 25 % hold, but the two together use
// less than the uplink, so a job that interleaves with y may come, and z
// waits while the 16-GPU job v behind it takes rack 0. With the
// fit threshold off, z starts beside y.
func TestUplinkHoldFitHoldsIncompatible(t *testing.T) {
	for _, fit := range []float64{0, -1} {
		s, _, _ := fitHoldCluster(t)
		n := sched.DefaultNetOptions()
		if fit != 0 {
			n.UplinkHoldFit = fit
		}
		d := sched.NewReplan(sched.DefaultOptions(), n).Schedule(s)
		checkCapacity(t, s, d)
		_, started := find(d, "z")
		if fit == 0 && (started || !strings.Contains(reason(d, "z"), "uplink hold")) {
			t.Errorf("fit threshold on: z started %v (reason %q), want it held for a job that interleaves", started, reason(d, "z"))
		}
		if fit < 0 && !started {
			t.Errorf("fit threshold off: z waits (%q), want it started beside y (slowdown under 25 %%)", reason(d, "z"))
		}
	}
}
