package sim

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/replan/replan/dataset"
	"github.com/replan/replan/perf"
	"github.com/replan/replan/sched"
)

// BenchConfig drives Bench.
type BenchConfig struct {
	DataDir            string
	ScaleJobs          int     // default 80,000 (a quarter and a half of it run too)
	ScaleServers       int     // default 1,024
	ScaleRoundInterval float64 // seconds; 0: a round on every event
	SkipScale          bool
	SkipNetwork        bool
	NetworkJobs        int // jobs per generated multi-rack trace (default 400)
	// OversubOnly prints only the spine-oversubscription sweeps.
	OversubOnly bool
	// OversubWorkload picks the sweeps: "philly" (Philly-like jobs on racks
	// of 8 servers), "comm" (communication-heavy data-parallel jobs on racks of 3 servers,
	// BenchOversubComm), "cassini" (BenchCassini), "both" (philly and comm)
	// or "" / "all".
	OversubWorkload string
	// OversubSeeds is how many seeds (traces) the CASSINI and the
	// communication-heavy sweeps run per cell (default 6).
	OversubSeeds int
	// JSON prints the cells of the CASSINI and communication-heavy sweeps
	// as JSON (SweepCell) instead of the text (with OversubOnly).
	JSON bool
}

// benchOversub runs the spine-oversubscription sweeps cfg asks for.
func benchOversub(ctx context.Context, w io.Writer, cfg BenchConfig) error {
	wl := cfg.OversubWorkload
	switch wl {
	case "", "all", "both", "philly", "comm", "cassini":
	default:
		return fmt.Errorf("oversub workload %q: want philly, comm, cassini, both (philly and comm) or all", wl)
	}
	if cfg.JSON {
		cells, err := sweepCells(ctx, cfg, 8, 3, cfg.NetworkJobs)
		if err != nil {
			return err
		}
		return WriteSweepJSON(w, cells)
	}
	all := wl == "" || wl == "all"
	if all || wl == "both" || wl == "philly" {
		if err := BenchOversub(ctx, w, 4, cfg.NetworkJobs); err != nil {
			return err
		}
	}
	if all || wl == "both" || wl == "comm" {
		if err := BenchOversubComm(ctx, w, 8, 3, cfg.NetworkJobs); err != nil {
			return err
		}
	}
	if all || wl == "cassini" {
		seeds := cfg.OversubSeeds
		if seeds <= 0 {
			seeds = shiftSeedCount
		}
		return BenchCassini(ctx, w, seeds)
	}
	return nil
}

// Targets of the scheduling issue.
const (
	TargetJCTvsStatic   = 2.5
	TargetMakespan      = 1.3
	TargetJCTvsAntMan   = 1.5
	TargetSixPolicies   = 2 * time.Second
	TargetRound         = 100 * time.Millisecond
	TargetScale         = 60 * time.Second
	benchRoundWaiting   = 5000
	benchRoundRunningGP = 0.75 // share of the cluster's GPUs held by running jobs
)

// Bench prints the targets with what this build reaches: Table 4
// on the Morphling base and multi-tenant traces at both restart costs, and
// the speed figures.
func Bench(ctx context.Context, w io.Writer, cfg BenchConfig) error {
	if cfg.ScaleJobs <= 0 {
		cfg.ScaleJobs = 80000
	}
	if cfg.ScaleServers <= 0 {
		cfg.ScaleServers = 1024
	}
	if cfg.OversubOnly {
		return benchOversub(ctx, w, cfg)
	}
	if cfg.JSON {
		return fmt.Errorf("sim bench: --json prints the oversubscription sweeps' cells: it needs --oversub-only")
	}
	if cfg.DataDir == "" {
		fmt.Fprintln(w, "sim bench: skipped the Morphling traces: no data directory (../shared/data/morphling is absent; pass --data)")
	} else if err := benchTraces(ctx, w, cfg.DataDir); err != nil {
		return err
	}
	if !cfg.SkipNetwork {
		if err := BenchNetwork(ctx, w, cfg); err != nil {
			return err
		}
		if err := benchOversub(ctx, w, cfg); err != nil {
			return err
		}
	}
	fmt.Fprintln(w, "\nspeed (CPU = process CPU time, which other load on a shared machine does not inflate; wall = median of 5 warm rounds)")
	if err := benchRounds(w, cfg.ScaleServers); err != nil {
		return err
	}
	if cfg.SkipScale {
		return nil
	}
	return benchTraceScale(ctx, w, cfg)
}

// Round-time targets of issue 15 (replan, the default policy).
const (
	TargetRound8k  = 30 * time.Millisecond  // 8,192 GPUs, 5,000 waiting
	TargetRound32k = 150 * time.Millisecond // 32,768 GPUs, 20,000 waiting
)

// benchRounds prints one round of replan and morphling at three cluster
// sizes (servers, 2×, 4×; waiting jobs in proportion), with the cost
// growth between sizes (time ratio over the 2× size ratio: 1.0 is
// linear).
func benchRounds(w io.Writer, servers int) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "  one round\tservers\tGPUs\twaiting\twall ms\tCPU ms\tgrowth (CPU)\tfirst round ms\ttarget\t")
	for _, name := range []string{"replan", "morphling"} {
		prev := time.Duration(0)
		for k, sv := range []int{servers, 2 * servers, 4 * servers} {
			waiting := benchRoundWaiting * sv / 1024
			d, cpu, cold, err := benchRoundOf(name, sv, waiting)
			if err != nil {
				return err
			}
			growth := ""
			if k > 0 && prev > 0 {
				growth = fmt.Sprintf("%.2f×/2×", float64(cpu)/float64(prev))
			}
			prev = cpu
			target := ""
			if name == "replan" && sv*8 == 8192 && waiting == 5000 {
				target = fmt.Sprintf("<= %s %s", TargetRound8k, met(min(d, cpu) <= TargetRound8k))
			}
			if name == "replan" && sv*8 == 32768 && waiting == 20000 {
				target = fmt.Sprintf("<= %s %s", TargetRound32k, met(min(d, cpu) <= TargetRound32k))
			}
			fmt.Fprintf(tw, "  %s\t%d\t%d\t%d\t%.1f\t%.1f\t%s\t%.0f\t%s\t\n", name, sv, sv*8, waiting,
				float64(d.Microseconds())/1e3, float64(cpu.Microseconds())/1e3, growth, float64(cold.Milliseconds()), target)
		}
	}
	return tw.Flush()
}

// benchRoundOf times one round of policy name on LargeSnapshot after a
// warm-up round: the median wall time and the mean CPU time of five.
func benchRoundOf(name string, servers, waiting int) (wall, cpu, cold time.Duration, err error) {
	s := LargeSnapshot(servers, waiting, benchRoundRunningGP, 7)
	p, err := sched.New(name)
	if err != nil {
		return 0, 0, 0, err
	}
	t0 := time.Now()
	p.Schedule(s)
	cold = time.Since(t0)
	var ds []time.Duration
	c0 := CPUTime()
	for i := 0; i < 5; i++ {
		t0 := time.Now()
		d := p.Schedule(s)
		ds = append(ds, time.Since(t0))
		if len(d.Actions) == 0 {
			return 0, 0, 0, fmt.Errorf("bench round: no decisions")
		}
	}
	cpu = (CPUTime() - c0) / 5
	sort.Slice(ds, func(a, b int) bool { return ds[a] < ds[b] })
	return ds[len(ds)/2], cpu, cold, nil
}

// benchTraceScale replays Philly-like generated traces (sim gen) of a
// quarter, half and all of ScaleJobs on ScaleServers servers in racks of
// 32 under replan, morphling and tiresias: wall and CPU time, rounds, the
// run's peak RSS (the process's so far where the kernel cannot reset
// it), and the growth between sizes.
func benchTraceScale(ctx context.Context, w io.Writer, cfg BenchConfig) error {
	fmt.Fprintf(w, "\n  Philly-like traces (sim gen, seed 1) on %d servers in racks of 32, round interval %gs (0: every event); target: %d jobs <= %s per policy\n",
		cfg.ScaleServers, cfg.ScaleRoundInterval, cfg.ScaleJobs, TargetScale)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	rss := "peak RSS MB"
	if !ResetPeakRSS() {
		rss = "process peak RSS MB"
	}
	fmt.Fprintln(tw, "  policy\tjobs\trounds\twall s\tCPU s\tgrowth (wall)\t"+rss+"\tavg JCT h\ttarget\t")
	sizes := []int{cfg.ScaleJobs / 4, cfg.ScaleJobs / 2, cfg.ScaleJobs}
	traces := make([][]dataset.WorkloadJob, len(sizes))
	for k, n := range sizes {
		jobs, err := Generate(GenConfig{Jobs: n, Servers: cfg.ScaleServers, Seed: 1})
		if err != nil {
			return err
		}
		traces[k] = jobs
	}
	models := DefaultModels(perf.A800)
	for _, name := range []string{"replan", "morphling", "tiresias"} {
		prev := time.Duration(0)
		for k, jobs := range traces {
			p, _ := sched.New(name)
			ResetPeakRSS()
			t0, c0 := time.Now(), CPUTime()
			r, err := Run(ctx, jobs, models, p, Config{Servers: cfg.ScaleServers, ServersPerRack: 32, RoundInterval: cfg.ScaleRoundInterval})
			el, cpu := time.Since(t0), CPUTime()-c0
			if err != nil {
				fmt.Fprintf(tw, "  %s\t%d\tfailed: %v\t\t\t\t\t\t\t\n", name, len(jobs), err)
				continue
			}
			growth := ""
			if k > 0 && prev > 0 {
				growth = fmt.Sprintf("%.2f×/2×", float64(el)/float64(prev))
			}
			prev = el
			target := ""
			if len(jobs) == cfg.ScaleJobs {
				target = fmt.Sprintf("<= %s %s", TargetScale, met(el <= TargetScale))
			}
			fmt.Fprintf(tw, "  %s\t%d\t%d\t%.1f\t%.1f\t%s\t%.0f\t%.2f\t%s\t\n", name, len(jobs), r.Rounds, el.Seconds(), cpu.Seconds(), growth,
				float64(PeakRSS())/(1<<20), r.AvgJCT/3600, target)
		}
	}
	return tw.Flush()
}

// morphlingPolicies are the six policies of the Morphling comparison.
var morphlingPolicies = []string{"static", "plan-only", "resources-only", "synergy", "antman", "morphling"}

func met(ok bool) string {
	if ok {
		return "MET"
	}
	return "MISSED"
}

func benchTraces(ctx context.Context, w io.Writer, dir string) error {
	// The four tables fit the same model types on the same data: each set
	// of types is fitted once (the runs only read the models).
	fitted := map[string]*Models{}
	for _, cost := range []float64{260, 78} {
		for _, name := range []string{"base", "mt"} {
			path := filepath.Join(dir, "workloads", "workload-"+name+".csv")
			jobs, err := dataset.LoadWorkload(ctx, path)
			if err != nil {
				return err
			}
			t0 := time.Now()
			apps := make([]string, 0, len(jobs))
			for _, j := range jobs {
				apps = append(apps, j.Application)
			}
			key := modelTypesKey(apps)
			models, reused := fitted[key]
			if !reused {
				if models, err = LoadModels(ctx, dir, perf.A800, apps); err != nil {
					return err
				}
				fitted[key] = models
			}
			fit := time.Since(t0)
			var ps []sched.Policy
			for _, n := range morphlingPolicies {
				p, err := sched.NewWithRestartCost(n, cost)
				if err != nil {
					return err
				}
				ps = append(ps, p)
			}
			t1 := time.Now()
			rs, err := RunAll(ctx, jobs, models, ps, Config{RestartCost: cost})
			if err != nil {
				return err
			}
			run := time.Since(t1)
			fmt.Fprintf(w, "\n%s (%d jobs, 8 × 8 A800), restart cost %.0f s\n", filepath.Base(path), len(jobs), cost)
			if err := WriteTable(w, rs); err != nil {
				return err
			}
			by := map[string]*Result{}
			for _, r := range rs {
				by[r.Policy] = r
			}
			m := by["morphling"]
			ratio := func(o string, f func(*Result) float64) float64 { return f(by[o]) / f(m) }
			avg := func(r *Result) float64 { return r.AvgJCT }
			mk := func(r *Result) float64 { return r.Makespan }
			if name == "base" {
				for _, o := range []string{"static", "synergy"} {
					a, b := ratio(o, avg), ratio(o, mk)
					fmt.Fprintf(w, "  morphling vs %s: avg JCT %.3f× (target >= %.1f×) %s, makespan %.3f× (target >= %.1f×) %s\n", o, a, TargetJCTvsStatic, met(a >= TargetJCTvsStatic), b, TargetMakespan, met(b >= TargetMakespan))
				}
			} else {
				a := ratio("antman", avg)
				fmt.Fprintf(w, "  morphling vs antman: avg JCT %.3f× (target >= %.1f×) %s; morphling SLA violations %.0f job-s (target 0) %s\n", a, TargetJCTvsAntMan, met(a >= TargetJCTvsAntMan), m.SLAViolation, met(m.SLAViolation == 0))
			}
			how := "fit"
			if reused {
				how = "reused the fit of" // fitted for a table above
			}
			fmt.Fprintf(w, "  time: %s %d model types %s, six policies %s (concurrently), total %s (target <= %s) %s\n",
				how, len(models.Fitted), fit.Round(time.Millisecond), run.Round(time.Millisecond), (fit + run).Round(time.Millisecond), TargetSixPolicies, met(fit+run <= TargetSixPolicies))
		}
	}
	return nil
}

// modelTypesKey names the set of model types a trace's applications need.
func modelTypesKey(apps []string) string {
	names := make([]string, 0, len(apps))
	for _, a := range apps {
		names = append(names, perf.CanonicalName(a))
	}
	slices.Sort(names)
	return strings.Join(slices.Compact(names), ",")
}

// LargeSnapshot builds a synthetic round: servers of 8 GPUs with running
// jobs holding about runningShare of the GPUs (1-8 GPUs each, on one
// server) and waiting jobs with Philly-like demands, every job one of the
// built-in model types with its unfitted model. Deterministic in seed.
func LargeSnapshot(servers, waiting int, runningShare float64, seed uint64) sched.Snapshot {
	rng := rand.New(rand.NewPCG(seed, seed+1))
	env := perf.A800
	models := map[string]*perf.Model{}
	var names []string
	for _, a := range perf.Builtins() {
		m := perf.DefaultModel(a, env)
		models[a.Name] = &m
		names = append(names, a.Name)
	}
	sort.Strings(names)
	s := sched.Snapshot{Now: 1e5}
	for i := 0; i < servers; i++ {
		s.Servers = append(s.Servers, sched.Server{ID: "s" + strconv.Itoa(i), Rack: "r" + strconv.Itoa(i/32), GPUs: 8, CPUs: 96, MemGB: 1600})
	}
	demand := func() int {
		u := rng.Float64()
		for _, d := range demandMix {
			if u < d.P {
				return d.GPUs
			}
			u -= d.P
		}
		return 1
	}
	id := 0
	newJob := func(g int) sched.Job {
		for {
			n := names[rng.IntN(len(names))]
			m := models[n]
			pl := perf.PackedPlacement(g, 8)
			r, ok := m.Best(perf.Resources{Placement: pl, CPUsPerGPU: 8})
			if !ok {
				g = max(g, 8)
				continue
			}
			id++
			class := sched.BestEffort
			if rng.Float64() < 0.3 {
				class = sched.Guaranteed
			}
			return sched.Job{ID: "j" + strconv.Itoa(id), Tenant: map[sched.Class]string{sched.BestEffort: "B", sched.Guaranteed: "A"}[class], Class: class,
				Model: m, ReqGPUs: g, ReqCPUs: 8 * g, ReqPlan: r.Plan, Submit: float64(id), ItersTotal: 1000 + float64(rng.IntN(100000))}
		}
	}
	target := int(runningShare * float64(servers*8))
	held := 0
	for sv := 0; sv < servers && held < target; sv++ {
		free := 8
		for free > 0 && held < target {
			g := min(1<<rng.IntN(4), free)
			j := newJob(g)
			if j.ReqGPUs != g {
				break
			}
			j.Alloc = []sched.Alloc{{Server: sv, GPUs: g, CPUs: 8 * g}}
			j.Plan = j.ReqPlan
			j.ItersDone = j.ItersTotal / 3
			s.Jobs = append(s.Jobs, j)
			free -= g
			held += g
		}
	}
	for i := 0; i < waiting; i++ {
		s.Jobs = append(s.Jobs, newJob(demand()))
	}
	s.Tenants = []sched.Tenant{{Name: "A", QuotaGPUs: servers * 8 / 2}, {Name: "B"}}
	s.FillFree()
	return s
}
