package sim

import (
	"context"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/replan/replan/cluster"
	"github.com/replan/replan/perf"
	"github.com/replan/replan/sched"
)

// The communication-heavy workload of the contended sweep (issue 15):
// data-parallel jobs of 8-64 GPUs on racks of 3 servers, so that most
// jobs of 16 GPUs or more span racks or share a rack with another job.
var (
	commMix   = []GenDemand{{8, 0.2}, {16, 0.3}, {32, 0.3}, {64, 0.2}}
	commApps  = []string{"gpt2", "t5", "bert", "roberta"}
	commPlans = []string{"zero-dp", "ga"} // pure data parallelism
)

// CommWorkload is the generated trace of the contended sweep: jobs jobs
// (seed 1) on servers servers of 8 GPUs, drawn from commMix, commApps and
// commPlans (the unfitted model's feasible data-parallel plans).
func CommWorkload(jobs, servers int, batch bool) GenConfig {
	return GenConfig{Jobs: jobs, Servers: servers, Seed: 1, Batch: batch, Mix: commMix, Apps: commApps, Plans: commPlans}
}

// BenchOversubComm is the spine-oversubscription sweep where links are
// contended: racks of perRack servers × 8 A800 (default 8 racks of 3),
// CommWorkload, the same policies and oversubscriptions as BenchOversub.
// It runs twice: with every plan pinned (each job runs its data-parallel
// request, so all policies hold the same allocations and differ only in
// when and where they place them), then elastic (Morphling may change the
// GPU count and the plan).
func BenchOversubComm(ctx context.Context, w io.Writer, racks, perRack, jobs int) error {
	if racks <= 0 {
		racks = 8
	}
	if perRack <= 0 {
		perRack = 3
	}
	if jobs <= 0 {
		jobs = 200
	}
	for _, pin := range []bool{true, false} {
		how := "plans pinned"
		if !pin {
			how = "elastic (plans and GPU counts free)"
		}
		fmt.Fprintf(w, "\nspine oversubscription, communication-heavy, %s: %d racks of %d servers × 8 A800, %d generated data-parallel jobs of 8/16/32/64 GPUs (20/30/30/20 %%) of gpt2, t5, bert, roberta (seed 1), restart cost 260 s\n", how, racks, perRack, jobs)
		if err := oversubSweep(ctx, w, CommWorkload(jobs, racks*perRack, false), perRack, pin, []float64{1, 2, 4, 16}); err != nil {
			return err
		}
	}
	for _, batch := range []bool{false, true} {
		es, err := ShiftSeeds(ctx, jobs, racks, perRack, shiftSeedCount, []float64{2, 4, 16}, batch)
		if err != nil {
			return err
		}
		printShiftSeeds(w, es, jobs, shiftSeedCount, batch)
	}
	return nil
}

// shiftSeedCount is how many traces the bench's shift summary runs.
const shiftSeedCount = 6

// ShiftEffect is what replan's time-shifts do on the contended sweep
// (plans pinned, Poisson or batch arrivals) at one oversubscription, over several
// seeds of the trace: per seed, the same trace run with the shifts and
// with them ignored (Config.NoShifts).
type ShiftEffect struct {
	Over float64 // spine oversubscription
	// SharedRatio is the communication link sharing added, with the shifts
	// over without; ExposedCut the exposed communication the shifts
	// removed (a share of it without); JCTRatio avg JCT with over without;
	// VsMorphling morphling's avg JCT over replan's (with the shifts);
	// NoHoldVsMorphling the same with replan's uplink hold off
	// (NetOptions.UplinkHold).
	SharedRatio, ExposedCut, JCTRatio, VsMorphling, NoHoldVsMorphling []float64
	// The same with the trajectory held (Config.PriceUnshifted): in the
	// run with the shifts, HeldShared is the communication sharing added
	// over what it would have added had no job been shifted, at the same
	// placements and progress; HeldCut the exposed communication that
	// removed (a share of the unshifted exposed communication); and
	// HeldNet the same less the start delay the shifts cost.
	HeldShared, HeldCut, HeldNet []float64
	// DallyAutoVsManual is dally-manual's avg JCT over dally's: > 1 when
	// Dally's auto-tuned timers beat its hand-set ones.
	DallyAutoVsManual []float64
}

// ShiftSeeds measures ShiftEffect for each oversubscription over seeds
// traces of jobs jobs (seeds 1..seeds; batch: every job at time 0, else
// Poisson arrivals) on racks of perRack servers. A
// single trace says little: a shift delays a start by up to an
// iteration, later events come in another order, and the two runs part
// ways (one seed's sharing ratio ranged 0.41-1.75 across six seeds).
func ShiftSeeds(ctx context.Context, jobs, racks, perRack, seeds int, overs []float64, batch bool) ([]ShiftEffect, error) {
	var out []ShiftEffect
	for _, over := range overs {
		e := ShiftEffect{Over: over}
		for seed := 1; seed <= seeds; seed++ {
			gen := CommWorkload(jobs, racks*perRack, batch)
			gen.Seed = uint64(seed)
			trace, err := Generate(gen)
			if err != nil {
				return nil, err
			}
			var r [6]*Result
			for k, run := range []struct {
				policy   string
				noShifts bool
			}{{"replan", false}, {"replan", true}, {"morphling", false}, {"replan no-hold", false}, {"dally", false}, {"dally-manual", false}} {
				cfg := Config{Servers: racks * perRack, ServersPerRack: perRack, PinPlans: true, NoShifts: run.noShifts, PriceUnshifted: k == 0}
				models := DefaultModels(perf.A800)
				models.SetSpine(float64(perRack)*cluster.A800RDMAGBps/over, perRack)
				p, err := policyNamed(run.policy)
				if err != nil {
					return nil, err
				}
				if r[k], err = Run(ctx, trace, models, p, cfg); err != nil {
					return nil, fmt.Errorf("%s, seed %d, %g:1: %w", run.policy, seed, over, err)
				}
			}
			with, without := r[0], r[1]
			e.VsMorphling = append(e.VsMorphling, ratio(r[2].AvgJCT, with.AvgJCT))
			e.NoHoldVsMorphling = append(e.NoHoldVsMorphling, ratio(r[2].AvgJCT, r[3].AvgJCT))
			e.SharedRatio = append(e.SharedRatio, ratio(with.CommShared, without.CommShared))
			e.ExposedCut = append(e.ExposedCut, 1-ratio(with.CommExposed, without.CommExposed))
			e.JCTRatio = append(e.JCTRatio, ratio(with.AvgJCT, without.AvgJCT))
			unshifted := with.CommExposed - with.CommShared + with.CommSharedUnshifted
			e.HeldShared = append(e.HeldShared, ratio(with.CommShared, with.CommSharedUnshifted))
			e.HeldCut = append(e.HeldCut, 1-ratio(with.CommExposed, unshifted))
			e.HeldNet = append(e.HeldNet, 1-ratio(with.CommExposed+with.ShiftDelay, unshifted))
			e.DallyAutoVsManual = append(e.DallyAutoVsManual, ratio(r[5].AvgJCT, r[4].AvgJCT))
		}
		out = append(out, e)
	}
	return out, nil
}

// ratio is a/b, 1 when both are 0 (nothing to compare).
func ratio(a, b float64) float64 {
	switch {
	case b > 0:
		return a / b
	case a > 0:
		return math.Inf(1)
	}
	return 1
}

// printShiftSeeds prints ShiftSeeds' medians and ranges.
func printShiftSeeds(w io.Writer, es []ShiftEffect, jobs, seeds int, batch bool) {
	arrivals := "Poisson"
	if batch {
		arrivals = "batch"
	}
	fmt.Fprintf(w, "\n%d seeds of the communication-heavy trace (plans pinned, %s, %d jobs), median (min to max): replan against morphling, with and without its uplink hold; replan with the shifts against a run without them; and, trajectory held, the run with the shifts against its own links priced unshifted (same placements and progress; the cut counts the start delays the shifts cost)\n", seeds, arrivals, jobs)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "  oversub.\tmorphling/replan avg JCT (target >= 1.15×)\twithout the uplink hold\tshifts: sharing-added comm\texposed comm cut (target >= 30%)\tavg JCT\theld: sharing-added comm\theld: exposed comm cut\tdally-manual/dally avg JCT (target >= 1×)\t")
	for _, e := range es {
		fmt.Fprintf(tw, "  %g:1\t%s %s\t%s\t%s\t%s %s\t%s\t%s\t%s %s\t%s %s\t\n", e.Over, spreadOf(e.VsMorphling, "%.2f×"), met(medianOf(e.VsMorphling) >= 1.15), spreadOf(e.NoHoldVsMorphling, "%.2f×"),
			spreadOf(e.SharedRatio, "%.2f×"), spreadOf(pct(e.ExposedCut), "%+.1f%%"), met(medianOf(e.ExposedCut) >= 0.3), spreadOf(e.JCTRatio, "%.2f×"),
			spreadOf(e.HeldShared, "%.2f×"), spreadOf(pct(e.HeldNet), "%+.1f%%"), met(medianOf(e.HeldNet) >= 0.3),
			spreadOf(e.DallyAutoVsManual, "%.2f×"), met(medianOf(e.DallyAutoVsManual) >= 1))
	}
	tw.Flush()
	// every seed's figures, as the JSON has them
	fmt.Fprintln(w, "  per seed (seeds 1..n): morphling/replan avg JCT | shifts' exposed comm cut | dally-manual/dally avg JCT")
	for _, e := range es {
		var a, b, c []string
		for n := range e.VsMorphling {
			a = append(a, fmt.Sprintf("%.2f×", e.VsMorphling[n]))
			b = append(b, fmt.Sprintf("%+.1f%%", 100*e.ExposedCut[n]))
			c = append(c, fmt.Sprintf("%.2f×", e.DallyAutoVsManual[n]))
		}
		fmt.Fprintf(w, "  %g:1  %s | %s | %s\n", e.Over, strings.Join(a, " "), strings.Join(b, " "), strings.Join(c, " "))
	}
}

func pct(v []float64) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = 100 * x
	}
	return out
}

func medianOf(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// spreadOf formats a median and the range of v.
func spreadOf(v []float64, f string) string {
	if len(v) == 0 {
		return "–"
	}
	return fmt.Sprintf(f+" ("+f+" to "+f+")", medianOf(v), slices.Min(v), slices.Max(v))
}

// policyNamed is sched.New, "replan no-hold": replan with its uplink hold
// off (the ablation of NetOptions.UplinkHold), and "replan no-place":
// replan without its uplink-aware placement (NetOptions.UplinkPlace), and
// "replan slope-order": replan in Morphling's order among slope ties
// (NetOptions.ShortestFirst off), and "replan unpriced-hold": replan's
// uplink hold not priced against that order (NetOptions.UplinkHoldSwap
// off).
func policyNamed(name string) (sched.Policy, error) {
	switch name {
	case "replan unpriced-hold":
		n := sched.DefaultNetOptions()
		n.UplinkHoldSwap = -1
		return sched.NewReplan(sched.DefaultOptions(), n), nil
	case "replan no-hold":
		n := sched.DefaultNetOptions()
		n.UplinkHold = -1
		return sched.NewReplan(sched.DefaultOptions(), n), nil
	case "replan slope-order":
		n := sched.DefaultNetOptions()
		n.ShortestFirst = false
		return sched.NewReplan(sched.DefaultOptions(), n), nil
	case "replan no-place":
		n := sched.DefaultNetOptions()
		n.UplinkPlace = false
		return sched.NewReplan(sched.DefaultOptions(), n), nil
	}
	return sched.New(name)
}
