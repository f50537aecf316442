package sched_test

import (
	"testing"

	"github.com/replan/replan/perf"
	"github.com/replan/replan/sched"
)

// TestAvoidsStrayStall: with 3 GPUs free on one server and 5 on the other
// and no spread check, a job of 8 may run on 35, a stray placement (a
// server holds an odd GPU count on the A800, 2 GPUs per NIC) where a
// model that measured a severe stall (k_uneven 1 s) prices a
// data-parallel collective spanning the servers at that path. Neither policy may start it with a plan the
// model says stalls there: a pipeline whose stages split at the servers is
// fine, a DP group across them is not. (With k_uneven out of the way,
// morphling starts z on 53 with DP4·PP2, whose DP groups span both
// servers.)
func TestAvoidsStrayStall(t *testing.T) {
	m := model(t, "gpt2")
	m.Params.KUneven = 1 // a fit that measured a severe stall (seconds per iteration)
	if b, _ := m.Predict(perf.Plan{DP: 8, TP: 1, PP: 1, MicroBatch: 2, GA: 1}, perf.Resources{Placement: perf.Placement{3, 5}}); !b.Stray {
		t.Fatal("DP8 on 35 is not priced as a stray placement")
	}
	for _, name := range []string{"morphling", "replan"} {
		a := running(t, waiting(t, "a", m, 5, 0), 0, 5)
		b := running(t, waiting(t, "b", m, 3, 1), 1, 3)
		for _, j := range []*sched.Job{&a, &b} {
			j.ItersTotal = j.ItersDone + 1 // about to finish: they do not grow
		}
		z := waiting(t, "z", m, 8, 2)
		s := snapshot(servers(2, 8), a, b, z)
		// no spread check: only the model's price can keep z off a stall
		o := cheap()
		o.FragTolerance, o.MinSlope = 0.01, 0.01
		var d sched.Decisions
		if name == "morphling" {
			d = sched.NewMorphling(o).Schedule(s)
		} else {
			d = sched.NewReplan(o, sched.DefaultNetOptions()).Schedule(s)
		}
		checkCapacity(t, s, d)
		dz, ok := find(d, "z")
		if !ok || dz.Kind != sched.Start {
			continue
		}
		var pl perf.Placement
		for _, al := range dz.Alloc {
			pl = append(pl, al.GPUs)
		}
		if br, err := m.Predict(dz.Plan, perf.Resources{Placement: pl, CPUsPerGPU: 8}); err != nil || br.Stray {
			t.Errorf("%s: z started with %s on %v, which the model prices as a stray stall (%v): %v", name, dz.Plan, pl, err, d.Actions)
		}
	}
}
