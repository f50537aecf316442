package perf

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"sync"
)

// Ranked is a feasible plan with its prediction and memory estimate.
type Ranked struct {
	Plan       Plan      `json:"plan"`
	PlanString string    `json:"plan_string"`
	Family     string    `json:"family"`
	Predicted  Breakdown `json:"predicted"`
	Throughput float64   `json:"samples_per_s"`
	Memory     Memory    `json:"memory"`
}

// Rank enumerates every plan for m.Arch on r, drops those that break a rule
// or do not fit in memory (each with its reason) and returns the rest by
// descending predicted throughput.
func (m Model) Rank(r Resources) ([]Ranked, []Rejection, error) {
	valid, rejected, err := Enumerate(m.Arch, r.Placement)
	if err != nil {
		return nil, nil, err
	}
	var out []Ranked
	for _, p := range valid {
		if err := m.Space.Check(p, r.Placement); err != nil {
			rejected = append(rejected, Rejection{Plan: p, Rule: RuleFramework, Reason: err.(*RuleError).Msg})
			continue
		}
		mem := EstimateMemory(m.Arch, p, r.Placement)
		if err := mem.Fits(m.Env); err != nil {
			var re *RuleError
			if errors.As(err, &re) {
				rejected = append(rejected, Rejection{Plan: p, Rule: re.Rule, Reason: re.Msg})
				continue
			}
			return nil, nil, err
		}
		if p.Offload && r.CPUsPerGPU < 1 {
			rejected = append(rejected, Rejection{Plan: p, Rule: RuleCPUs, Reason: fmt.Sprintf("offload needs at least 1 CPU per GPU, has %.1f", r.CPUsPerGPU)})
			continue
		}
		b, err := m.Predict(p, r)
		if err != nil {
			return nil, nil, err
		}
		out = append(out, Ranked{Plan: p, PlanString: p.String(), Family: p.Family(), Predicted: b, Throughput: b.Throughput(m.Arch.GlobalBatch), Memory: mem})
	}
	sort.SliceStable(out, func(i, j int) bool {
		ti, tj := out[i].Throughput, out[j].Throughput
		if ti > tj*(1+1e-9) || tj > ti*(1+1e-9) {
			return ti > tj
		}
		return simpler(out[i].Plan, out[j].Plan)
	})
	return out, rejected, nil
}

// Best returns the fastest feasible plan on r, or ok=false when none fits.
// It is Rank without the reasons: the hot path of curves and scheduling.
func (m Model) Best(r Resources) (Ranked, bool) {
	var best Ranked
	found := false
	server := serverOfRank(r.Placement)
	capGPU, capHost := m.Env.GPUMemGB*GiB, m.Env.HostMemGB*GiB
	forEachCandidate(m.Arch, r.Placement.GPUs(), func(p Plan) {
		if !valid(m.Arch, p, r.Placement) || (p.Offload && r.CPUsPerGPU < 1) || !m.Space.allows(p, r.Placement) {
			return
		}
		mem := EstimateMemory(m.Arch, p, r.Placement)
		if mem.GPU > capGPU || mem.HostPerServer > capHost {
			return
		}
		s, err := m.prepareWith(p, r, server)
		if err != nil {
			return
		}
		b := s.eval(m.Params)
		tp := b.Throughput(m.Arch.GlobalBatch)
		if !found || tp > best.Throughput*(1+1e-9) || (tp >= best.Throughput*(1-1e-9) && simpler(p, best.Plan)) {
			best = Ranked{Plan: p, Predicted: b, Throughput: tp, Memory: mem}
			found = true
		}
	})
	if found {
		best.PlanString, best.Family = best.Plan.String(), best.Plan.Family()
	}
	return best, found
}

// valid is Check without building the reason.
func valid(a Arch, p Plan, pl Placement) bool {
	if p.DP < 1 || p.TP < 1 || p.PP < 1 || p.MicroBatch < 1 || p.GA < 1 || p.ZeRO < 0 || p.ZeRO > 3 {
		return false
	}
	if p.GPUs() != pl.GPUs() || a.Heads%p.TP != 0 || a.Layers%p.PP != 0 || p.GlobalBatch() != a.GlobalBatch {
		return false
	}
	for _, g := range pl {
		if g > 0 && g%p.TP != 0 {
			return false
		}
	}
	return !(p.ZeRO >= 2 && p.PP > 1) && !(p.Offload && p.ZeRO < 1)
}

// CurvePoint is one point of a resource sensitivity curve.
type CurvePoint struct {
	GPUs       int       `json:"gpus"`
	CPUsPerGPU float64   `json:"cpus_per_gpu"`
	Feasible   bool      `json:"feasible"`
	Plan       Plan      `json:"plan"`
	PlanString string    `json:"plan_string,omitempty"`
	Placement  Placement `json:"placement"`
	Throughput float64   `json:"samples_per_s"`
	// Slope is the throughput gained per GPU from the previous point
	// (0 for the first point).
	Slope float64 `json:"slope"`
}

// Curve is the resource sensitivity curve of m for 1..maxGPUs GPUs packed
// onto servers of m.Env.GPUsPerServer GPUs, with cpusPerGPU cores each:
// the best feasible plan at each count and its throughput. Where no plan is
// feasible the curve stays flat at the previous throughput (more GPUs than
// that are worth nothing to the job).
func (m Model) Curve(maxGPUs int, cpusPerGPU float64) []CurvePoint {
	per := max(m.Env.GPUsPerServer, 1)
	pts := make([]CurvePoint, 0, maxGPUs)
	prev := 0.0
	for g := 1; g <= maxGPUs; g++ {
		pl := PackedPlacement(g, per)
		pt := CurvePoint{GPUs: g, CPUsPerGPU: cpusPerGPU, Placement: pl, Throughput: prev}
		if best, ok := m.Best(Resources{Placement: pl, CPUsPerGPU: cpusPerGPU}); ok && best.Throughput > prev {
			pt.Feasible, pt.Plan, pt.PlanString, pt.Throughput = true, best.Plan, best.PlanString, best.Throughput
		} else if ok {
			pt.Feasible, pt.Plan, pt.PlanString = true, best.Plan, best.PlanString
			pt.Throughput = math.Max(prev, best.Throughput)
		}
		pt.Slope = pt.Throughput - prev
		if g == 1 {
			pt.Slope = 0
		}
		prev = pt.Throughput
		pts = append(pts, pt)
	}
	return pts
}

// CurveKey identifies a cached curve: model type, batch, topology shape.
type CurveKey struct {
	Model         string
	GlobalBatch   int
	GPUsPerServer int
	MaxGPUs       int
	CPUsPerGPU    float64
	Params        Params
	Space         Space
}

// CurveCache memoises curves per CurveKey. Safe for concurrent use.
type CurveCache struct {
	mu sync.Mutex
	m  map[CurveKey][]CurvePoint
}

// Get returns the cached curve of m or computes and stores it.
func (c *CurveCache) Get(m Model, maxGPUs int, cpusPerGPU float64) []CurvePoint {
	k := CurveKey{m.Arch.Name, m.Arch.GlobalBatch, m.Env.GPUsPerServer, maxGPUs, cpusPerGPU, m.Params, m.Space}
	c.mu.Lock()
	if pts, ok := c.m[k]; ok {
		c.mu.Unlock()
		return pts
	}
	c.mu.Unlock()
	pts := m.Curve(maxGPUs, cpusPerGPU)
	c.mu.Lock()
	if c.m == nil || len(c.m) >= MaxCachedCurves {
		// refits give new keys: start over rather than grow without bound
		c.m = map[CurveKey][]CurvePoint{}
	}
	c.m[k] = pts
	c.mu.Unlock()
	return pts
}

// MaxCachedCurves bounds a CurveCache; past it the cache starts empty again.
const MaxCachedCurves = 512

// DefaultForward is a forward profile for a model type nobody has profiled
// yet: 2·params·seq FLOPs per sample at an effective 60 TFLOP/s (what the
// A800 data shows across its models), no per-micro-batch overhead. Replace
// it with FitForward as soon as samples exist.
func DefaultForward(a Arch) Forward {
	return Forward{Alpha: 0.005, Beta: 2 * a.Params * float64(a.SeqLen) / 60e12}
}

// DefaultModel is the unfitted model of a: DefaultForward, DefaultParams.
func DefaultModel(a Arch, e Env) Model {
	return Model{Arch: a, Forward: DefaultForward(a), Params: DefaultParams, Env: e}
}

// simpler breaks ties between plans predicted equally fast: fewer
// memory-saving features (ZeRO stage, offload, checkpointing), then the
// larger micro-batch (fewer, fuller kernels).
func simpler(a, b Plan) bool {
	ca := a.ZeRO + 2*b2i(a.Offload) + b2i(a.Ckpt)
	cb := b.ZeRO + 2*b2i(b.Offload) + b2i(b.Ckpt)
	if ca != cb {
		return ca < cb
	}
	return a.MicroBatch > b.MicroBatch
}
