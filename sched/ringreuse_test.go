package sched_test

import (
	"context"
	"testing"

	"github.com/replan/replan/perf"
	"github.com/replan/replan/sched"
	"github.com/replan/replan/sim"
)

// TestRingReuseSameDecisions replays traces whose jobs cross racks and
// share spine uplinks (the shifts, the uplink-aware placement, the
// uplink hold and the simulator's relink all price links) with
// jointShift's reuse of its search's rings off (the path before it) and
// on: every round's decisions must be the same, field for field, and so
// the runs' outcomes; and the hold must have priced slowdowns over
// several uplinks on the search's rings.
func TestRingReuseSameDecisions(t *testing.T) {
	defer sched.SetRingReuse(true)
	replan := func() sched.Policy { return sched.NewReplan(sched.DefaultOptions(), sched.DefaultNetOptions()) }
	// a hold that passes over any offer slowed by more than 1 %: its
	// waits hinge on the slowdowns themselves
	strict := func() sched.Policy {
		n := sched.DefaultNetOptions()
		n.UplinkHold, n.UplinkHoldFit = 0.01, 0.01
		return sched.NewReplan(sched.DefaultOptions(), n)
	}
	dally := func() sched.Policy { p, _ := sched.New("dally"); return p }
	type run struct {
		name   string
		mk     func() sched.Policy
		trace  sim.GenConfig
		models *sim.Models
		cfg    sim.Config
	}
	philly := sim.DefaultModels(perf.A800)
	philly.SetSpine(8*100/4, 8) // 4:1 oversubscribed
	phillyCfg := sim.Config{Servers: 48, ServersPerRack: 8, RoundInterval: 60}
	comm := sim.DefaultModels(perf.A800)
	comm.SetSpine(3*100/4, 3)
	commCfg := sim.Config{Servers: 24, ServersPerRack: 3}
	runs := []run{
		{"replan/philly-racks-of-8", replan, sim.GenConfig{Jobs: 600, Servers: 48, Seed: 1, Load: 1.5}, philly, phillyCfg},
		{"dally/philly-racks-of-8", dally, sim.GenConfig{Jobs: 600, Servers: 48, Seed: 2, Load: 1.5}, philly, phillyCfg},
		{"replan/comm-heavy-racks-of-3", replan, sim.CommWorkload(150, 24, false), comm, commCfg},
		{"replan/comm-heavy-batch-racks-of-3", replan, sim.CommWorkload(150, 24, true), comm, commCfg},
		{"replan-strict-hold/philly-racks-of-8", strict, sim.GenConfig{Jobs: 600, Servers: 48, Seed: 3, Load: 1.5}, philly, phillyCfg},
	}
	held, shifted, joint := 0, 0, int64(0)
	for _, r := range runs {
		jobs, err := sim.Generate(r.trace)
		if err != nil {
			t.Fatal(err)
		}
		var recs [2]*recorder
		var res [2]*sim.Result
		for n, on := range []bool{false, true} {
			sched.SetRingReuse(on)
			recs[n] = &recorder{p: r.mk()}
			j0 := sched.JointSlowdowns()
			if res[n], err = sim.Run(context.Background(), jobs, r.models, recs[n], r.cfg); err != nil {
				t.Fatalf("%s: %v", r.name, err)
			}
			if on {
				joint += sched.JointSlowdowns() - j0
			}
		}
		if len(recs[0].rounds) != len(recs[1].rounds) {
			t.Fatalf("%s: %d rounds without the reuse, %d with it", r.name, len(recs[0].rounds), len(recs[1].rounds))
		}
		for k := range recs[0].rounds {
			if recs[0].rounds[k] != recs[1].rounds[k] {
				t.Fatalf("%s: round %d of %d: the decisions with the ring reuse differ from those without", r.name, k, len(recs[0].rounds))
			}
		}
		if a, b := res[0], res[1]; a.AvgJCT != b.AvgJCT || a.Makespan != b.Makespan {
			t.Fatalf("%s: avg JCT %v / makespan %v without the reuse, %v / %v with it", r.name, a.AvgJCT, a.Makespan, b.AvgJCT, b.Makespan)
		}
		held += recs[1].held
		shifted += recs[1].shifted
		t.Logf("%s: %d rounds identical; %d placements across racks, %d uplink-hold waits, %d shifted decisions", r.name, len(recs[0].rounds), recs[1].cross, recs[1].held, recs[1].shifted)
	}
	t.Logf("%d uplink-hold waits, %d shifted decisions, %d slowdowns over several uplinks priced on the search's rings", held, shifted, joint)
	if shifted == 0 || joint == 0 {
		t.Errorf("the traces do not exercise the hold's slowdowns over several uplinks (%d) or the shifts (%d)", joint, shifted)
	}
}
