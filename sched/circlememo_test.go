package sched_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"strings"
	"testing"

	"github.com/replan/replan/perf"
	"github.com/replan/replan/sched"
	"github.com/replan/replan/sim"
)

// recorder wraps a policy and keeps a digest of every round's decisions
// (every field, floats to the bit) and what they show of the paths the
// rack-circle memo serves.
type recorder struct {
	p       sched.Policy
	rounds  [][32]byte
	cross   int // starts and reconfigures across racks
	held    int // waits for the uplink hold
	shifted int // decisions with a time-shift
	tuned   int // waiting jobs' timers derived from the history
}

func (r *recorder) Name() string { return r.p.Name() }

func (r *recorder) Schedule(s sched.Snapshot) sched.Decisions {
	d := r.p.Schedule(s)
	r.rounds = append(r.rounds, sha256.Sum256([]byte(fmt.Sprintf("%+v", d))))
	for _, a := range d.Actions {
		if a.Tier == perf.TierCrossRack && a.Kind != sched.Preempt {
			r.cross++
		}
		if a.Shift != 0 {
			r.shifted++
		}
	}
	for _, jt := range d.Timers {
		if jt.ServerFrom > 0 || jt.RackFrom > 0 {
			r.tuned++
		}
	}
	for _, w := range d.Waiting {
		if strings.HasPrefix(w.Reason, "uplink hold") {
			r.held++
		}
	}
	return d
}

// replayBoth replays trace under a fresh policy from mk with the circle
// memo off (the path before it), on, and verifying each answer against
// the path before it, and fails at the first round whose decisions
// differ. It returns the memo run's recorder and what its memo did.
func replayBoth(t *testing.T, mk func() sched.Policy, trace sim.GenConfig, models *sim.Models, cfg sim.Config) (*recorder, sched.CircleStats) {
	t.Helper()
	jobs, err := sim.Generate(trace)
	if err != nil {
		t.Fatal(err)
	}
	modes := []string{"off", "on", "verify"}
	recs := make([]*recorder, len(modes))
	res := make([]*sim.Result, len(modes))
	var stats sched.CircleStats
	for n, mode := range modes {
		p := mk()
		if err := sched.SetCircleMemo(p, mode); err != nil {
			t.Fatal(err)
		}
		recs[n] = &recorder{p: p}
		if res[n], err = sim.Run(context.Background(), jobs, models, recs[n], cfg); err != nil {
			t.Fatalf("memo %s: %v", mode, err)
		}
		if mode == "on" {
			stats = sched.CircleStatsOf(p)
		}
	}
	old := recs[0]
	for n, memo := range recs[1:] {
		for k := range min(len(old.rounds), len(memo.rounds)) {
			if old.rounds[k] != memo.rounds[k] {
				t.Fatalf("%s: round %d of %d: the decisions with the circle memo %s differ from those without", old.Name(), k, len(old.rounds), modes[n+1])
			}
		}
		if len(old.rounds) != len(memo.rounds) {
			t.Fatalf("%s: %d rounds without the memo, %d with it %s", old.Name(), len(old.rounds), len(memo.rounds), modes[n+1])
		}
		if a, b := res[0], res[n+1]; a.AvgJCT != b.AvgJCT || a.Makespan != b.Makespan {
			t.Fatalf("%s: avg JCT %v / makespan %v without the memo, %v / %v with it %s", old.Name(), a.AvgJCT, a.Makespan, b.AvgJCT, b.Makespan, modes[n+1])
		}
	}
	memo := recs[1]
	t.Logf("%s: %d rounds identical; %d placements across racks, %d uplink-hold waits, %d shifted decisions; memo: %d asks, %d hits, %d with other jobs' circles",
		old.Name(), len(old.rounds), memo.cross, memo.held, memo.shifted, stats.Asks, stats.Hits, stats.Shared)
	return memo, stats
}

// TestCircleMemoSameDecisions replays traces whose jobs cross racks and
// share spine uplinks under the policies that ask for rack circles
// (replan with its uplink-aware placement, replan with the plain
// compatibility tie-break, dally) with the rack-circle memo off and on:
// every round's decisions must be the same, field for field. The traces
// must exercise the memo: placements across racks, uplink holds.
func TestCircleMemoSameDecisions(t *testing.T) {
	replan := func() sched.Policy { return sched.NewReplan(sched.DefaultOptions(), sched.DefaultNetOptions()) }
	tieBreak := func() sched.Policy {
		n := sched.DefaultNetOptions()
		n.UplinkPlace = false
		return sched.NewReplan(sched.DefaultOptions(), n)
	}
	dally := func() sched.Policy { p, _ := sched.New("dally"); return p }

	// exercised fails unless the memo answered asks from memory and
	// some of its answers held other jobs' circles.
	exercised := func(t *testing.T, st sched.CircleStats) {
		t.Helper()
		if st.Hits == 0 || st.Shared == 0 || st.Hits == st.Asks {
			t.Errorf("the trace does not exercise the memo: %+v", st)
		}
	}
	t.Run("philly-racks-of-8", func(t *testing.T) {
		models := sim.DefaultModels(perf.A800)
		models.SetSpine(8*100/4, 8) // 4:1 oversubscribed
		cfg := sim.Config{Servers: 48, ServersPerRack: 8, RoundInterval: 60}
		for _, seed := range []uint64{1, 2} {
			_, st := replayBoth(t, replan, sim.GenConfig{Jobs: 600, Servers: 48, Seed: seed, Load: 1.5}, models, cfg)
			exercised(t, st)
		}
		// dally asks once per job it places across racks: no hits
		if _, st := replayBoth(t, dally, sim.GenConfig{Jobs: 600, Servers: 48, Seed: 1, Load: 1.5}, models, cfg); st.Shared == 0 {
			t.Errorf("dally: no answer held other jobs' circles: %+v", st)
		}
	})
	t.Run("comm-heavy-racks-of-3", func(t *testing.T) {
		models := sim.DefaultModels(perf.A800)
		models.SetSpine(3*100/4, 3)
		cfg := sim.Config{Servers: 24, ServersPerRack: 3}
		for _, mk := range []func() sched.Policy{replan, tieBreak} {
			for _, batch := range []bool{false, true} {
				r, st := replayBoth(t, mk, sim.CommWorkload(150, 24, batch), models, cfg)
				exercised(t, st)
				if r.shifted == 0 {
					t.Errorf("no time-shift: the trace shares no uplink")
				}
			}
		}
	})
}
