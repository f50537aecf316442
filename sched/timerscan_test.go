package sched_test

import (
	"context"
	"testing"

	"github.com/replan/replan/perf"
	"github.com/replan/replan/sched"
	"github.com/replan/replan/sim"
)

// TestTimerScanSameDecisions replays Philly-like traces on racks of 8
// under the policies whose timers are auto-tuned (dally, replan) with the
// timers from one history scan per round and from two scans per waiting
// demand (the path before): every round's decisions must be the same,
// field for field, and the history must have tuned some timer.
func TestTimerScanSameDecisions(t *testing.T) {
	models := sim.DefaultModels(perf.A800)
	models.SetSpine(8*100/4, 8)
	cfg := sim.Config{Servers: 48, ServersPerRack: 8, RoundInterval: 60}
	jobs, err := sim.Generate(sim.GenConfig{Jobs: 600, Servers: 48, Seed: 3, Load: 1.5})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"dally", "replan"} {
		var recs [2]*recorder
		var res [2]*sim.Result
		tuned := 0
		for n, perDemand := range []bool{true, false} {
			sched.SetTimerScanPerDemand(perDemand)
			p, _ := sched.New(name)
			recs[n] = &recorder{p: p}
			var err error
			res[n], err = sim.Run(context.Background(), jobs, models, recs[n], cfg)
			sched.SetTimerScanPerDemand(false)
			if err != nil {
				t.Fatal(err)
			}
			tuned = recs[n].tuned
		}
		if len(recs[0].rounds) != len(recs[1].rounds) {
			t.Fatalf("%s: %d rounds scanning per demand, %d scanning once", name, len(recs[0].rounds), len(recs[1].rounds))
		}
		for k := range recs[0].rounds {
			if recs[0].rounds[k] != recs[1].rounds[k] {
				t.Fatalf("%s: round %d of %d: the decisions differ", name, k, len(recs[0].rounds))
			}
		}
		if res[0].AvgJCT != res[1].AvgJCT || res[0].Makespan != res[1].Makespan {
			t.Fatalf("%s: avg JCT %v / %v", name, res[0].AvgJCT, res[1].AvgJCT)
		}
		if tuned == 0 {
			t.Errorf("%s: no waiting job's timer came from the history: the trace does not exercise the scan", name)
		}
		t.Logf("%s: %d rounds identical, %d waiting-job timers tuned from the history", name, len(recs[0].rounds), tuned)
	}
}
