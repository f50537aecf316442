package sim

import (
	"context"
	"math"
	"slices"
	"strings"
	"testing"

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

// Relink follows only the uplinks whose jobs changed; after every pass
// each running job's link-sharing slowdown must equal the one priced from
// scratch, through starts, changes, preemptions and finishes on a
// contended spine.
func TestRelinkMatchesFromScratch(t *testing.T) {
	trace, err := Generate(CommWorkload(60, 24, false))
	if err != nil {
		t.Fatal(err)
	}
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
				if bad == "" && (math.Abs(extra[j]-j.extra) > 1e-12 || shared[j] != j.sharing) {
					bad = j.w.Name
					t.Errorf("%s at %.0f s: job %s has extra %.6f s (sharing %v), from scratch %.6f s (sharing %v)", name, s.now, j.w.Name, j.extra, j.sharing, extra[j], shared[j])
				}
			}
		}
		models := DefaultModels(perf.A800)
		models.SetSpine(3*100/16.0, 3)
		p, _ := sched.New(name)
		_, err := Run(context.Background(), trace, models, p, Config{Servers: 24, ServersPerRack: 3})
		relinkHook = nil
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if passes == 0 || sharedSeen == 0 {
			t.Fatalf("%s: %d relink passes, %d sharing jobs seen: the trace does not exercise the uplinks", name, passes, sharedSeen)
		}
		t.Logf("%s: %d relink passes, %d sharing job-passes checked", name, passes, sharedSeen)
	}
}
