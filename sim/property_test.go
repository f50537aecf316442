package sim_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/replan/replan/perf"
	"github.com/replan/replan/sched"
	"github.com/replan/replan/sim"
)

// TestPropertyEveryPolicyEveryShape replays random traces under every
// policy on random cluster shapes (servers, racks, cores, quotas, round
// intervals). The simulator checks sched.CheckInvariants after every round
// and its own progress rules; any violation, abort, hang (a per-run
// deadline) or unfinished job fails the case. The cases are seeded: a
// failure names its seed and shape, and reruns identically.
func TestPropertyEveryPolicyEveryShape(t *testing.T) {
	cases := 40
	if testing.Short() {
		cases = 10
	}
	models := sim.DefaultModels(perf.A800)
	names := sched.Names()
	runs := 0
	start := time.Now()
	for c := range cases {
		rng := rand.New(rand.NewPCG(uint64(c), 77))
		servers := 1 + rng.IntN(6)
		// Every fourth case is a longer trace on a larger cluster: the
		// states small traces never reach (cores tuned on full servers).
		big := c%4 == 3
		if big {
			servers = 4 + rng.IntN(5)
		}
		shape := []int{0, 1, 2, 3}[rng.IntN(4)]
		cfg := sim.Config{
			Servers:        servers,
			ServersPerRack: shape,
			CPUsPerServer:  []int{16, 32, 96}[rng.IntN(3)],
		}
		if rng.IntN(4) == 0 {
			cfg.RoundInterval = []float64{60, 300, 900}[rng.IntN(3)]
		}
		sla := []float64{0, 0.3, 0.6}[rng.IntN(3)]
		quota := sla > 0 && rng.IntN(2) == 0
		njobs := 12 + rng.IntN(14)
		if big {
			njobs = 80 + rng.IntN(80)
		}
		jobs, err := sim.Generate(sim.GenConfig{Jobs: njobs, Servers: servers, Seed: uint64(1000 + c),
			Load: 0.8 + rng.Float64(), MedianMinutes: 10 + 20*rng.Float64(), SLAShare: sla, Batch: rng.IntN(4) == 0})
		if err != nil {
			t.Fatal(err)
		}
		if quota {
			// A quota every guaranteed request fits (a larger request is
			// refused up front: TestImpossibleInputRefusedUpFront).
			cfg.QuotaGPUs = 8 * (1 + rng.IntN(servers))
			for _, j := range jobs {
				if j.SLA {
					cfg.QuotaGPUs = max(cfg.QuotaGPUs, j.GPUs)
				}
			}
		}
		// Ask for the cores the generator's jobs would like (offload plans
		// are CPU-sensitive): cores are contended on small servers.
		if !big || rng.IntN(2) == 0 {
			for k := range jobs {
				jobs[k].CPUs = jobs[k].GPUs * (2 + rng.IntN(14))
			}
		}
		desc := fmt.Sprintf("case %d: %d servers, %d per rack, %d cores, quota %d, interval %.0f, sla %.1f, %d jobs",
			c, servers, shape, cfg.CPUsPerServer, cfg.QuotaGPUs, cfg.RoundInterval, sla, len(jobs))
		for _, name := range names {
			p, err := sched.New(name)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			r, err := sim.Run(ctx, jobs, models, p, cfg)
			cancel()
			runs++
			if err != nil {
				t.Errorf("%s: %s: %v", desc, name, err)
				continue
			}
			if r.Finished != len(jobs) {
				t.Errorf("%s: %s: %d of %d jobs finished", desc, name, r.Finished, len(jobs))
			}
		}
	}
	t.Logf("%d runs (%d cases × %d policies) in %s", runs, cases, len(names), time.Since(start).Round(time.Millisecond))
}
