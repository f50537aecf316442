package sim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"

	"github.com/replan/replan/dataset"
	"github.com/replan/replan/perf"
)

// GenConfig describes a synthetic trace.
type GenConfig struct {
	Jobs          int
	Servers       int     // default 8
	GPUsPerServer int     // default 8
	Seed          uint64  // same seed, same trace
	Load          float64 // offered load: requested GPU-seconds per second over the cluster's GPUs (default 0.9)
	// MedianMinutes is the median job duration at its request (default
	// 30); durations are log-normal with sigma 1.4 (Philly's heavy tail),
	// clamped to [2 min, 48 h].
	MedianMinutes float64
	// SLAShare is the share of guaranteed jobs (default 0).
	SLAShare float64
	// Batch submits every job at time 0 instead of Poisson arrivals.
	Batch bool
	// Mix is the GPU demand mix (nil: Philly-like, demandMix); Apps the
	// model types drawn uniformly (nil: genApps).
	Mix  []GenDemand
	Apps []string
	// Plans, when set, are the only plan codes drawn (of those that fit).
	Plans []string
	// Keep, when set, further restricts the plans drawn for a model type
	// on g GPUs (CassiniWorkload: by the share of the iteration they
	// communicate across racks).
	Keep func(m perf.Model, p perf.Plan, g int) bool
}

// GenDemand is one GPU demand of a generated mix and its probability.
type GenDemand struct {
	GPUs int
	P    float64
}

// GPU demand mix in the manner of Microsoft's Philly trace: mostly
// single-GPU jobs, some 2/4/8, few of 16 and more.
var demandMix = []GenDemand{{1, 0.60}, {2, 0.14}, {4, 0.12}, {8, 0.09}, {16, 0.03}, {32, 0.015}, {64, 0.005}}

var genApps = []string{"vit", "roberta", "bert", "t5", "gpt2", "llama7", "llama30"}

// genPlans lists the exec_plan codes of the Morphling traces a user may
// ask for on g GPUs of architecture a: named DP plans, and PP/TP/DP codes
// for the models that need model parallelism; only plans the unfitted
// model's memory estimate says fit.
func genPlans(a perf.Arch, g, perServer int, env perf.Env) []string {
	var codes []string
	codes = append(codes, "zero-dp", "ga", "gc", "zero-offload")
	if a.Params > 1e9 {
		for pp := 1; pp <= 9; pp++ {
			for tp := 1; tp <= 9; tp++ {
				if g%(pp*tp) == 0 && g/(pp*tp) <= 9 && (pp > 1 || tp > 1) {
					codes = append(codes, fmt.Sprintf("%d%d%d", pp, tp, g/(pp*tp)))
				}
			}
		}
	}
	pl := perf.PackedPlacement(g, perServer)
	var ok []string
	for _, c := range codes {
		p, err := dataset.PlanFromCode(c, a, g)
		if err != nil {
			continue
		}
		if p.MicroBatch == 0 || perf.Check(a, p, pl) != nil {
			continue
		}
		if perf.EstimateMemory(a, p, pl).Fits(env) != nil {
			continue
		}
		ok = append(ok, c)
	}
	return ok
}

// Generate makes a synthetic trace: Poisson arrivals at the rate that
// offers cfg.Load, Philly-like GPU demands, a random model type and a
// random feasible plan per job, steps from a log-normal duration priced by
// the unfitted model. The same config gives the same trace.
func Generate(cfg GenConfig) ([]dataset.WorkloadJob, error) {
	if cfg.Jobs <= 0 {
		return nil, fmt.Errorf("jobs: must be > 0, got %d", cfg.Jobs)
	}
	if cfg.Servers <= 0 {
		cfg.Servers = 8
	}
	if cfg.GPUsPerServer <= 0 {
		cfg.GPUsPerServer = 8
	}
	if cfg.Load <= 0 {
		cfg.Load = 0.9
	}
	if cfg.MedianMinutes <= 0 {
		cfg.MedianMinutes = 30
	}
	env := perf.A800
	env.GPUsPerServer = cfg.GPUsPerServer
	total := cfg.Servers * cfg.GPUsPerServer
	rng := rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15))
	type key struct {
		app  string
		gpus int
	}
	plans := map[key][]string{}
	models := map[string]perf.Model{}
	for _, a := range append(slices.Clone(genApps), cfg.Apps...) {
		if _, ok := models[a]; ok {
			continue
		}
		arch, ok := perf.Builtin(a)
		if !ok {
			return nil, fmt.Errorf("app %q: no such built-in model", a)
		}
		models[a] = perf.DefaultModel(arch, env)
	}
	mix, apps := demandMix, genApps
	if len(cfg.Mix) > 0 {
		mix = cfg.Mix
	}
	if len(cfg.Apps) > 0 {
		apps = cfg.Apps
	}
	jobs := make([]dataset.WorkloadJob, 0, cfg.Jobs)
	work := 0.0
	for len(jobs) < cfg.Jobs {
		u := rng.Float64()
		g := mix[len(mix)-1].GPUs
		for _, d := range mix {
			if u < d.P {
				g = d.GPUs
				break
			}
			u -= d.P
		}
		g = min(g, total)
		app := apps[rng.IntN(len(apps))]
		k := key{app, g}
		if _, ok := plans[k]; !ok {
			plans[k] = genPlans(models[app].Arch, g, cfg.GPUsPerServer, env)
			if len(cfg.Plans) > 0 {
				plans[k] = slices.DeleteFunc(plans[k], func(c string) bool { return !slices.Contains(cfg.Plans, c) })
			}
			if cfg.Keep != nil {
				m := models[app]
				plans[k] = slices.DeleteFunc(plans[k], func(c string) bool {
					p, err := dataset.PlanFromCode(c, m.Arch, g)
					return err != nil || !cfg.Keep(m, p, g)
				})
			}
		}
		cands := plans[k]
		if len(cands) == 0 {
			continue // this model cannot run on g GPUs: draw again
		}
		code := cands[rng.IntN(len(cands))]
		m := models[app]
		p, _ := dataset.PlanFromCode(code, m.Arch, g)
		b, err := m.Predict(p, perf.Resources{Placement: perf.PackedPlacement(g, cfg.GPUsPerServer), CPUsPerGPU: 8})
		if err != nil || b.Iter <= 0 {
			continue
		}
		dur := cfg.MedianMinutes * 60 * math.Exp(1.4*rng.NormFloat64())
		dur = math.Min(math.Max(dur, 120), 48*3600)
		steps := max(1, int(math.Round(dur/b.Iter)))
		bw := 0.0
		if g > cfg.GPUsPerServer {
			bw = 1.25
		}
		sla := cfg.SLAShare > 0 && rng.Float64() < cfg.SLAShare
		jobs = append(jobs, dataset.WorkloadJob{Name: fmt.Sprintf("%s-%d", app, len(jobs)), Duration: math.Round(dur), Application: app,
			GPUs: g, CPUs: 8 * g, Bandwidth: bw, ExecPlan: code, Steps: steps, SLA: sla})
		work += dur * float64(g)
	}
	// Poisson arrivals at the rate that offers the load.
	rate := cfg.Load * float64(total) / (work / float64(len(jobs)))
	t := 0.0
	for i := range jobs {
		if i > 0 && !cfg.Batch {
			t += rng.ExpFloat64() / rate
		}
		jobs[i].Submit = math.Round(t)
	}
	sort.SliceStable(jobs, func(a, b int) bool { return jobs[a].Submit < jobs[b].Submit })
	return jobs, nil
}
