package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"text/tabwriter"

	"github.com/replan/replan/cluster"
	"github.com/replan/replan/dataset"
	"github.com/replan/replan/perf"
)

// The workload class CASSINI was built for (issue 29): pure data-parallel
// jobs larger than a rack, so every job crosses racks, that communicate a
// third or so of each iteration. Jobs of cassiniGPUs GPUs on racks of
// cassiniPerRack servers × 8 GPUs (24 GPUs: a 32-GPU job spans two racks
// at least); 3 or 4 racks (CassiniRacks); model types and pure-DP plans
// kept only when the job, alone on its uplinks at cassiniRefOver:1,
// communicates across racks for CassiniCommMin to CassiniCommMax of its
// iteration (CassiniCommShare).
const (
	cassiniGPUs    = 32
	cassiniPerRack = 3
	cassiniJobs    = 60
	cassiniRefOver = 4
	CassiniCommMin = 0.25
	CassiniCommMax = 0.45
)

var (
	cassiniApps  = []string{"vit", "roberta", "bert"}
	cassiniPlans = []string{"zero-dp", "ga", "gc", "zero-offload"} // DP = GPUs, no TP or PP
	cassiniOvers = []float64{2, 4, 16}
)

// Targets of the CASSINI sweep at 4:1 (issue 29): the shifts cut exposed
// communication by at least TargetCassiniShiftCut (median over seeds) and
// replan's avg JCT beats morphling's by TargetCassiniVsMorphling.
const (
	TargetCassiniShiftCut    = 0.30
	TargetCassiniVsMorphling = 1.2
	cassiniTargetOver        = 4
)

// CassiniRacks is how many racks the trace of seed runs on: 4 for odd
// seeds, 3 for even ones.
func CassiniRacks(seed uint64) int { return 3 + int(seed%2) }

// CassiniCommShare is the share of its iteration a job of plan on g GPUs
// (packed, 8 per server) spends communicating across racks when it has
// the spine uplinks to itself, on racks of perRack servers at spine
// oversubscription over (the simulator's pricing of a job alone on its
// uplinks, and the arc of its circle).
func CassiniCommShare(m perf.Model, p perf.Plan, g, perRack int, over float64) float64 {
	spine := float64(perRack) * cluster.A800RDMAGBps / over
	m.Env.SpineFactor = math.Min(1, spine/cluster.A800RDMAGBps)
	b, err := m.Predict(p, perf.Resources{Placement: perf.PackedPlacement(g, m.Env.GPUsPerServer), CrossRack: true, CPUsPerGPU: 8})
	if err != nil || b.Iter <= 0 {
		return 0
	}
	return b.InterServer / b.Iter
}

// CassiniWorkload is the generated trace of the CASSINI sweep for seed:
// cassiniJobs pure-DP jobs of 32 GPUs on CassiniRacks(seed) racks of 3
// servers, batch or Poisson arrivals. The same seed gives the same trace.
func CassiniWorkload(seed uint64, batch bool) GenConfig {
	return GenConfig{
		Jobs: cassiniJobs, Servers: CassiniRacks(seed) * cassiniPerRack, Seed: seed, Batch: batch,
		Mix: []GenDemand{{cassiniGPUs, 1}}, Apps: cassiniApps, Plans: cassiniPlans,
		Keep: func(m perf.Model, p perf.Plan, g int) bool {
			if p.TP != 1 || p.PP != 1 || p.DP != g {
				return false
			}
			f := CassiniCommShare(m, p, g, cassiniPerRack, cassiniRefOver)
			return f >= CassiniCommMin && f <= CassiniCommMax
		},
	}
}

// SweepCell is one cell of an oversubscription sweep in the JSON of
// `replan sim bench --oversub-only --json` (a contract: checks outside
// the project read these names). Sweep is "cassini" or "comm"; Oversub
// the spine oversubscription (4: 4:1); ReplanVsMorphling morphling's avg
// JCT over replan's (> 1: replan faster); ShiftExposedCutPct the exposed
// communication replan's shifts removed, in per cent of a run with them
// ignored; DallyAutoVsManual (comm only) dally-manual's avg JCT over
// dally's (> 1: the auto-tuned timers faster).
type SweepCell struct {
	Sweep              string   `json:"sweep"`
	Oversub            float64  `json:"oversub"`
	Arrivals           string   `json:"arrivals"`
	Seed               uint64   `json:"seed"`
	ReplanVsMorphling  float64  `json:"replan_vs_morphling"`
	ShiftExposedCutPct float64  `json:"shift_exposed_cut_pct"`
	DallyAutoVsManual  *float64 `json:"dally_auto_vs_manual,omitempty"`
}

// CassiniCell is one trace of the CASSINI sweep: its SweepCell and the
// figures the text output prints beside it.
type CassiniCell struct {
	SweepCell
	Racks int
	// CommMin and CommMax are the range of the jobs' cross-rack
	// communication share alone at the cell's oversubscription.
	CommMin, CommMax float64
	// SlopeOrderVsMorphling is ReplanVsMorphling with replan in
	// Morphling's order (NetOptions.ShortestFirst off): what replan gains
	// from the network alone.
	SlopeOrderVsMorphling float64
	// P99VsSlopeOrder is replan's p99 JCT over replan's in Morphling's
	// order: what the shortest-first order costs the longest jobs.
	P99VsSlopeOrder float64
	// UnpricedVsMorphling and UnpricedCutPct are ReplanVsMorphling and
	// ShiftExposedCutPct with replan's uplink hold not priced against the
	// shortest-first order (NetOptions.UplinkHoldSwap off): what the
	// pricing trades.
	UnpricedVsMorphling, UnpricedCutPct float64
	// NoPlaceVsMorphling is ReplanVsMorphling with replan's uplink-aware
	// placement off (NetOptions.UplinkPlace); HeldCutPct the exposed
	// communication the shifts removed with the trajectory held
	// (Config.PriceUnshifted, start delays counted); SharedRatio the
	// communication sharing added, with the shifts over without.
	NoPlaceVsMorphling, HeldCutPct, SharedRatio float64
	// CeilingPct is the cut had the shifts removed all that sharing added
	// in the run without them: its share of that run's exposed
	// communication.
	CeilingPct float64
}

// arrivalName is "batch" or "poisson".
func arrivalName(batch bool) string {
	if batch {
		return "batch"
	}
	return "poisson"
}

// CassiniSweep runs the CASSINI sweep: for each oversubscription of overs,
// batch then Poisson arrivals, seeds 1..seeds of CassiniWorkload, plans
// pinned, under replan (its shifts applied and ignored), replan without
// its uplink-aware placement, replan in Morphling's order, replan with its
// hold not priced against the order (shifts applied and ignored), and
// morphling.
func CassiniSweep(ctx context.Context, seeds int, overs []float64) ([]CassiniCell, error) {
	var out []CassiniCell
	for _, over := range overs {
		for _, batch := range []bool{true, false} {
			for seed := uint64(1); seed <= uint64(seeds); seed++ {
				c, err := cassiniCell(ctx, seed, over, batch)
				if err != nil {
					return nil, err
				}
				out = append(out, c)
			}
		}
	}
	return out, nil
}

func cassiniCell(ctx context.Context, seed uint64, over float64, batch bool) (CassiniCell, error) {
	gen := CassiniWorkload(seed, batch)
	trace, err := Generate(gen)
	if err != nil {
		return CassiniCell{}, err
	}
	racks := CassiniRacks(seed)
	c := CassiniCell{SweepCell: SweepCell{Sweep: "cassini", Oversub: over, Arrivals: arrivalName(batch), Seed: seed}, Racks: racks, CommMin: 1}
	for _, j := range trace {
		arch, _ := perf.Builtin(j.Application)
		p, _ := dataset.PlanFromCode(j.ExecPlan, arch, j.GPUs)
		f := CassiniCommShare(perf.DefaultModel(arch, perf.A800), p, j.GPUs, cassiniPerRack, over)
		c.CommMin, c.CommMax = math.Min(c.CommMin, f), math.Max(c.CommMax, f)
	}
	var r [7]*Result
	for k, run := range []struct {
		policy   string
		noShifts bool
	}{{"replan", false}, {"replan", true}, {"morphling", false}, {"replan no-place", false}, {"replan slope-order", false}, {"replan unpriced-hold", false}, {"replan unpriced-hold", true}} {
		cfg := Config{Servers: racks * cassiniPerRack, ServersPerRack: cassiniPerRack, PinPlans: true, NoShifts: run.noShifts, PriceUnshifted: k == 0}
		models := DefaultModels(perf.A800)
		models.SetSpine(float64(cassiniPerRack)*cluster.A800RDMAGBps/over, cassiniPerRack)
		p, err := policyNamed(run.policy)
		if err != nil {
			return c, err
		}
		if r[k], err = Run(ctx, trace, models, p, cfg); err != nil {
			return c, fmt.Errorf("cassini sweep: %s, seed %d, %g:1, %s: %w", run.policy, seed, over, c.Arrivals, err)
		}
	}
	with, without := r[0], r[1]
	c.ReplanVsMorphling = finite(ratio(r[2].AvgJCT, with.AvgJCT))
	c.NoPlaceVsMorphling = finite(ratio(r[2].AvgJCT, r[3].AvgJCT))
	c.SlopeOrderVsMorphling = finite(ratio(r[2].AvgJCT, r[4].AvgJCT))
	c.P99VsSlopeOrder = finite(ratio(with.P99JCT, r[4].P99JCT))
	c.ShiftExposedCutPct = finite(100 * (1 - ratio(with.CommExposed, without.CommExposed)))
	c.UnpricedVsMorphling = finite(ratio(r[2].AvgJCT, r[5].AvgJCT))
	c.UnpricedCutPct = finite(100 * (1 - ratio(r[5].CommExposed, r[6].CommExposed)))
	unshifted := with.CommExposed - with.CommShared + with.CommSharedUnshifted
	c.HeldCutPct = finite(100 * (1 - ratio(with.CommExposed+with.ShiftDelay, unshifted)))
	c.SharedRatio = finite(ratio(with.CommShared, without.CommShared))
	c.CeilingPct = finite(100 * ratio(without.CommShared, without.CommExposed))
	return c, nil
}

// finite is x, or 0 where it is not a finite number (JSON has none).
func finite(x float64) float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return 0
	}
	return x
}

// BenchCassini prints the CASSINI sweep: every seed's figures per
// oversubscription and arrivals, the medians and, at 4:1, the targets.
func BenchCassini(ctx context.Context, w io.Writer, seeds int) error {
	cells, err := CassiniSweep(ctx, seeds, cassiniOvers)
	if err != nil {
		return err
	}
	printCassini(w, cells, seeds)
	return nil
}

func printCassini(w io.Writer, cells []CassiniCell, seeds int) {
	fmt.Fprintf(w, "\nCASSINI workload (issue 29): %d generated pure data-parallel jobs of %d GPUs (vit, roberta, bert; zero-dp, ga, gc, zero-offload where alone at %d:1 they communicate across racks %.0f-%.0f %% of an iteration) on 4 racks (odd seeds) or 3 racks (even seeds) of %d servers × 8 A800, so every job crosses racks; plans pinned; %d seeds, restart cost 260 s\n",
		cassiniJobs, cassiniGPUs, cassiniRefOver, 100*CassiniCommMin, 100*CassiniCommMax, cassiniPerRack, seeds)
	fmt.Fprintf(w, "targets at %d:1: morphling/replan avg JCT >= %.1f× and the shifts' exposed comm cut >= %.0f %% (medians over seeds)\n", cassiniTargetOver, TargetCassiniVsMorphling, 100*TargetCassiniShiftCut)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "  oversub.\tarrivals\tseed\tracks\tcomm share alone\tmorphling/replan avg JCT\tin Morphling's order\tp99 JCT, over Morphling's order\twithout uplink-aware placement\tshifts: exposed comm cut\thold not priced: morphling/replan, cut\theld: exposed comm cut\tsharing-added comm, with / without shifts\tceiling: cut were all sharing removed\t")
	type key struct {
		over  float64
		batch string
	}
	var order []key
	groups := map[key][]CassiniCell{}
	for _, c := range cells {
		k := key{c.Oversub, c.Arrivals}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], c)
	}
	for _, k := range order {
		var vs, so, p99, np, cut, uvs, ucut, held, sh, ceil []float64
		for _, c := range groups[k] {
			fmt.Fprintf(tw, "  %g:1\t%s\t%d\t%d\t%.0f-%.0f %%\t%.3f×\t%.3f×\t%.2f×\t%.3f×\t%+.1f %%\t%.3f×, %+.1f %%\t%+.1f %%\t%.2f×\t%.1f %%\t\n", c.Oversub, c.Arrivals, c.Seed, c.Racks, 100*c.CommMin, 100*c.CommMax,
				c.ReplanVsMorphling, c.SlopeOrderVsMorphling, c.P99VsSlopeOrder, c.NoPlaceVsMorphling, c.ShiftExposedCutPct, c.UnpricedVsMorphling, c.UnpricedCutPct, c.HeldCutPct, c.SharedRatio, c.CeilingPct)
			vs, so, np, cut = append(vs, c.ReplanVsMorphling), append(so, c.SlopeOrderVsMorphling), append(np, c.NoPlaceVsMorphling), append(cut, c.ShiftExposedCutPct)
			uvs, ucut = append(uvs, c.UnpricedVsMorphling), append(ucut, c.UnpricedCutPct)
			held, sh, ceil = append(held, c.HeldCutPct), append(sh, c.SharedRatio), append(ceil, c.CeilingPct)
			p99 = append(p99, c.P99VsSlopeOrder)
		}
		t1, t2 := "", ""
		if k.over == cassiniTargetOver {
			t1 = fmt.Sprintf(" (target >= %.1f×) %s", TargetCassiniVsMorphling, met(medianOf(vs) >= TargetCassiniVsMorphling))
			t2 = fmt.Sprintf(" (target >= %.0f %%) %s", 100*TargetCassiniShiftCut, met(medianOf(cut) >= 100*TargetCassiniShiftCut))
		}
		fmt.Fprintf(tw, "  %g:1\t%s\tmedian\t\t\t%.3f×%s\t%.3f×\t%.2f×\t%.3f×\t%+.1f %%%s\t%.3f×, %+.1f %%\t%+.1f %%\t%.2f×\t%.1f %%\t\n", k.over, k.batch, medianOf(vs), t1, medianOf(so), medianOf(p99), medianOf(np), medianOf(cut), t2, medianOf(uvs), medianOf(ucut), medianOf(held), medianOf(sh), medianOf(ceil))
	}
	tw.Flush()
}

// WriteSweepJSON writes cells as one JSON array, an object per cell.
func WriteSweepJSON(w io.Writer, cells []SweepCell) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if cells == nil {
		cells = []SweepCell{}
	}
	return enc.Encode(cells)
}

// commCells are the cells of the communication-heavy sweep (ShiftSeeds'
// traces, seeds 1..len) for the JSON.
func commCells(es []ShiftEffect, batch bool) []SweepCell {
	var out []SweepCell
	for _, e := range es {
		for n := range e.VsMorphling {
			c := SweepCell{Sweep: "comm", Oversub: e.Over, Arrivals: arrivalName(batch), Seed: uint64(n + 1),
				ReplanVsMorphling: finite(e.VsMorphling[n]), ShiftExposedCutPct: finite(100 * e.ExposedCut[n])}
			if n < len(e.DallyAutoVsManual) {
				x := finite(e.DallyAutoVsManual[n])
				c.DallyAutoVsManual = &x
			}
			out = append(out, c)
		}
	}
	return out
}

// sweepCells is the JSON of the sweeps cfg.OversubWorkload names: the
// CASSINI sweep's cells, then the communication-heavy sweep's (Poisson,
// then batch arrivals, as the text prints them).
func sweepCells(ctx context.Context, cfg BenchConfig, racks, perRack, jobs int) ([]SweepCell, error) {
	if jobs <= 0 {
		jobs = 200
	}
	seeds := cfg.OversubSeeds
	if seeds <= 0 {
		seeds = shiftSeedCount
	}
	var out []SweepCell
	if cfg.OversubWorkload == "" || cfg.OversubWorkload == "all" || cfg.OversubWorkload == "cassini" {
		cs, err := CassiniSweep(ctx, seeds, cassiniOvers)
		if err != nil {
			return nil, err
		}
		for _, c := range cs {
			out = append(out, c.SweepCell)
		}
	}
	if cfg.OversubWorkload != "cassini" && cfg.OversubWorkload != "philly" {
		for _, batch := range []bool{false, true} {
			es, err := ShiftSeeds(ctx, jobs, racks, perRack, seeds, []float64{2, 4, 16}, batch)
			if err != nil {
				return nil, err
			}
			out = append(out, commCells(es, batch)...)
		}
	}
	return out, nil
}
