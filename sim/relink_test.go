package sim

import (
	"context"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/replan/replan/dataset"
	"github.com/replan/replan/perf"
	"github.com/replan/replan/sched"
)

// relinkFromScratch prices every uplink again from the running jobs alone:
// what relink answered before it followed only the uplinks that changed.
func relinkFromScratch(s *simulator) (extra map[*job]float64, shared map[*job]bool) {
	byRack := map[string][]*job{}
	for j := range s.spread {
		seen := map[string]bool{}
		for _, a := range j.alloc {
			rk := s.servers[a.Server].Rack
			if !seen[rk] {
				seen[rk] = true
				byRack[rk] = append(byRack[rk], j)
			}
		}
	}
	extra, shared = map[*job]float64{}, map[*job]bool{}
	for _, js := range byRack {
		if len(js) < 2 {
			continue
		}
		slices.SortFunc(js, func(a, b *job) int { return strings.Compare(a.w.Name, b.w.Name) })
		cs := make([]sched.Circle, len(js))
		offs := make([]float64, len(js))
		for k, j := range js {
			cs[k] = sched.CommCircle(j.baseIter, j.comm, sched.SpineDemand(s.models.Env, j.pl[0], s.models.SpineGBps))
			offs[k] = math.Mod(j.phase, j.baseIter)
		}
		_, _, ex := sched.LinkLoad(cs, offs, 1)
		for k, j := range js {
			shared[j] = true
			extra[j] = math.Max(extra[j], ex[k])
		}
	}
	return extra, shared
}

// Relink follows only the uplinks whose jobs changed (and skips pricing
// an uplink whose demands cannot exceed it); after every pass each running
// job's link-sharing slowdown must equal, to the bit, the one priced from
// scratch, through starts, changes, preemptions and finishes: on a
// contended spine (racks of 3) and on a Philly-like trace on racks of 32
// with a round interval, the shape of `sim bench`'s scale replays.
func TestRelinkMatchesFromScratch(t *testing.T) {
	comm, err := Generate(CommWorkload(60, 24, false))
	if err != nil {
		t.Fatal(err)
	}
	philly, err := Generate(GenConfig{Jobs: 1500, Servers: 128, Seed: 1, Load: 1.5})
	if err != nil {
		t.Fatal(err)
	}
	type tc struct {
		name   string
		trace  []dataset.WorkloadJob
		models func() *Models
		cfg    Config
	}
	contended := func() *Models {
		m := DefaultModels(perf.A800)
		m.SetSpine(3*100/16.0, 3)
		return m
	}
	cases := []tc{
		{"comm", comm, contended, Config{Servers: 24, ServersPerRack: 3}},
		{"philly", philly, func() *Models { return DefaultModels(perf.A800) }, Config{Servers: 128, ServersPerRack: 32, RoundInterval: 60}},
	}
	for _, c := range cases {
		for _, name := range []string{"replan", "morphling", "dally"} {
			passes, sharedSeen := 0, 0
			var bad string
			relinkHook = func(s *simulator) {
				passes++
				extra, shared := relinkFromScratch(s)
				for j := range s.spread {
					if shared[j] {
						sharedSeen++
					}
					// What each uplink's pricing left (j.rx) must be the
					// from-scratch figure to the bit; the slowdown in
					// force moves only by more than 1e-12 (setExtra).
					priced := 0.0
					for n, r := range j.racks {
						if len(s.uplinks[r].jobs) >= 2 {
							priced = math.Max(priced, j.rx[n])
						}
					}
					if bad == "" && (priced != extra[j] || math.Abs(extra[j]-j.extra) > 1e-12 || shared[j] != j.sharing) {
						bad = j.w.Name
						t.Errorf("%s/%s at %.0f s: job %s priced %v s, extra %v s (sharing %v), from scratch %v s (sharing %v)", c.name, name, s.now, j.w.Name, priced, j.extra, j.sharing, extra[j], shared[j])
					}
				}
			}
			p, _ := sched.New(name)
			_, err := Run(context.Background(), c.trace, c.models(), p, c.cfg)
			relinkHook = nil
			if err != nil {
				t.Fatalf("%s/%s: %v", c.name, name, err)
			}
			if passes == 0 || sharedSeen == 0 {
				t.Fatalf("%s/%s: %d relink passes, %d sharing jobs seen: the trace does not exercise the uplinks", c.name, name, passes, sharedSeen)
			}
			t.Logf("%s/%s: %d relink passes, %d sharing job-passes checked", c.name, name, passes, sharedSeen)
		}
	}
}
