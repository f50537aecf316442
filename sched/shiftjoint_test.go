package sched_test

import (
	"math"
	"strings"
	"testing"

	"github.com/replan/replan/perf"
	"github.com/replan/replan/sched"
)

// TestShiftsOneShiftForAllLinks: a new job C spans two uplinks, each with
// a running job that keeps its phase: A (arc [8, 10) of a 10 s iteration)
// on the first, B (arc [0, 2)) on the second. C's 2 s arc fits both with
// its arc anywhere in [2, 8), but the breadth-first pass rotated C on the
// first link alone (its smallest clean rotation, about 2 s: an arc over
// B's) and dropped the second link's constraint, every other job there
// being fixed (compatibility 0.58 there).
func TestShiftsOneShiftForAllLinks(t *testing.T) {
	c := sched.CommCircle(10, 2, 1) // arc [8, 10) at offset 0
	links := []sched.Link{
		{Name: "spine:r1", Capacity: 1, Jobs: []sched.LinkJob{{Job: 0, Circle: c}, {Job: 2, Circle: c}}},
		{Name: "spine:r2", Capacity: 1, Jobs: []sched.LinkJob{{Job: 1, Circle: c}, {Job: 2, Circle: c}}},
	}
	off := map[int]float64{0: 0, 1: 2} // A's arc [8, 10), B's [0, 2)
	rep := sched.Shifts(links, map[int]bool{0: true, 1: true}, off)
	if off[0] != 0 || off[1] != 2 {
		t.Fatalf("running jobs moved: %v", off)
	}
	for _, l := range links {
		cs := []sched.Circle{l.Jobs[0].Circle, l.Jobs[1].Circle}
		o := []float64{off[l.Jobs[0].Job], off[l.Jobs[1].Job]}
		if got := sched.Compatibility(cs, o, 1); got != 1 {
			t.Errorf("link %s: compatibility %v with C's one shift %v s", l.Name, got, off[2])
		}
	}
	if rep.Score != 1 || len(rep.Links) != 2 {
		t.Fatalf("report %+v, want both links at score 1", rep)
	}
	for _, d := range rep.Links {
		if d.Score != 1 {
			t.Errorf("link %s reported at %v", d.Name, d.Score)
		}
		for k, j := range d.Index {
			if math.Abs(d.Offsets[k]-off[j]) > 1e-9 {
				t.Errorf("link %s: job %d reported at %v s, its shift is %v s", d.Name, j, d.Offsets[k], off[j])
			}
		}
	}
}

// TestUplinkHoldOneShiftForAllUplinks: the waiting vit job z can only
// take two servers of rack 0 and two of rack 2, beside the running vit
// jobs x (racks 0 and 1) and y (racks 2 and 3). On either uplink alone z
// interleaves with the job there entirely (identical circles, arcs of a
// third of an iteration). But y runs half an iteration out of phase with
// x, so the two arcs z must avoid leave no gap as long as its own: at its
// one shift z is slowed on one uplink or the other. The hold priced each
// uplink at its own best rotation and started z; it now holds z for v,
// which fits one rack. With y in phase with x, one shift clears both and
// z starts.
func TestUplinkHoldOneShiftForAllUplinks(t *testing.T) {
	m := model(t, "vit")
	plan := dpPlan(t, m, 32)
	pm := *m
	pm.Env.SpineFactor = 0.75
	b, err := pm.Predict(plan, perf.Resources{Placement: perf.Placement{8, 8, 8, 8}, CrossRack: true, CPUsPerGPU: 8})
	if err != nil || b.Iter <= 0 || b.InterServer <= 0 {
		t.Fatalf("vit on 4 servers across racks: %+v, %v", b, err)
	}
	c := sched.CommCircle(b.Iter, b.InterServer, 1)
	if share := b.InterServer / b.Iter; share < 0.25 || share > 0.45 {
		t.Fatalf("premise: vit communicates %.0f %% of an iteration across racks, want a third or so", 100*share)
	}
	if _, sc := sched.Rotate([]sched.Circle{c, c}, []bool{true, false}, []float64{0, 0}, 1); sc < 1-1e-9 {
		t.Fatalf("premise: two vit circles interleave with score %v, want 1", sc)
	}
	for _, tc := range []struct {
		name  string
		phase float64 // y's phase, a share of the iteration
		held  bool
	}{{"out of phase", 0.5, true}, {"in phase", 0, false}} {
		x := crossJob(t, "x", "vit", 0, 3, 4, 5)
		y := crossJob(t, "y", "vit", 6, 9, 10, 11)
		y.Phase = tc.phase * b.Iter
		z := waiting(t, "z", m, 32, 0)
		z.ReqPlan, z.PinPlan = plan, true
		z.ItersTotal = 1e9 // waited far less than a run: the hold's bound stays out of the way
		v := waiting(t, "v", m, 16, 1)
		v.ReqPlan, v.PinPlan = dpPlan(t, m, 16), true
		// a little longer than z: after it in replan's shortest-first
		// order, and near enough its length for the hold to pay
		// (UplinkHoldSwap)
		runBehind(t, &z, perf.Placement{8, 8, 8, 8}, &v, perf.Placement{8, 8}, 1.05)
		s := snapshot(racksOf3(4), x, y, z, v)
		s.Now = 30 * 3600
		s.SpineGBps = 75
		d := sched.NewReplan(sched.DefaultOptions(), sched.DefaultNetOptions()).Schedule(s)
		checkCapacity(t, s, d)
		_, started := find(d, "z")
		if tc.held && (started || !strings.Contains(reason(d, "z"), "uplink hold")) {
			t.Errorf("%s: z started %v (reason %q), want it held: no one shift clears both uplinks", tc.name, started, reason(d, "z"))
		}
		if !tc.held && !started {
			t.Errorf("%s: z waits (%q), want it started: one shift clears both uplinks", tc.name, reason(d, "z"))
		}
	}
}
