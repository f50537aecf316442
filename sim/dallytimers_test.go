package sim

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/replan/replan/cluster"
	"github.com/replan/replan/perf"
	"github.com/replan/replan/sched"
)

// TestDallyTimerSweep is a measurement, not a check (docs/network.md,
// "Why Dally's auto-tuner does not beat its hand-set timers here"): on
// the comm sweep's traces (8 racks of 3 servers, six seeds,
// plans pinned) it prints, per arrivals and oversubscription, the median
// over seeds of dally-manual's avg JCT over that of Dally with the
// auto-tuned timers and with fixed timers (server = rack) of 1 s to 72 h.
// DALLY_TIMERS=N runs it on traces of N jobs (200: about 20 s; 400, the
// default of --network-jobs: about a minute).
func TestDallyTimerSweep(t *testing.T) {
	jobs, err := strconv.Atoi(os.Getenv("DALLY_TIMERS"))
	if err != nil || jobs <= 0 {
		t.Skip("a measurement: DALLY_TIMERS=<jobs> runs it")
	}
	timers := []float64{1, 3600, 6 * 3600, 12 * 3600, 24 * 3600, 72 * 3600}
	for _, batch := range []bool{false, true} {
		for _, over := range []float64{2, 4, 16} {
			// k = 0: auto-tuned; 1..: the fixed timers.
			ratios := make([][]float64, len(timers)+1)
			for seed := 1; seed <= shiftSeedCount; seed++ {
				gen := CommWorkload(jobs, 24, batch)
				gen.Seed = uint64(seed)
				trace, err := Generate(gen)
				if err != nil {
					t.Fatal(err)
				}
				run := func(p sched.Policy) float64 {
					models := DefaultModels(perf.A800)
					models.SetSpine(3*cluster.A800RDMAGBps/over, 3)
					r, err := Run(context.Background(), trace, models, p, Config{Servers: 24, ServersPerRack: 3, PinPlans: true})
					if err != nil {
						t.Fatal(err)
					}
					return r.AvgJCT
				}
				manual := run(sched.NewDally(false))
				ratios[0] = append(ratios[0], manual/run(sched.NewDally(true)))
				for k, tm := range timers {
					p := sched.NewDally(false)
					p.Net.ServerTimer, p.Net.RackTimer = tm, tm
					ratios[k+1] = append(ratios[k+1], manual/run(p))
				}
			}
			arr := "poisson"
			if batch {
				arr = "batch"
			}
			var b strings.Builder
			fmt.Fprintf(&b, "%-7s %2g:1  auto %.3f", arr, over, medianOf(ratios[0]))
			for k, tm := range timers {
				label := fmt.Sprintf("%g h", tm/3600)
				if tm < 3600 {
					label = fmt.Sprintf("%g s", tm)
				}
				fmt.Fprintf(&b, "  %s %.3f", label, medianOf(ratios[k+1]))
			}
			t.Log(b.String())
		}
	}
}
