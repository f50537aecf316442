package sched

import (
	"sync"

	"github.com/replan/replan/perf"
)

// family restricts the plans a policy may pick. The zero value allows every
// plan; a fixed family keeps TP, PP, ZeRO stage, offload and checkpointing
// of the user's plan and lets only DP (with micro-batch and accumulation
// steps, so the global batch stays fixed) follow the GPU count.
type family struct {
	fixed         bool
	tp, pp, zero  int
	offload, ckpt bool
	// pinned: the family has no feasible plan at all, so the job runs its
	// own plan on exactly its request (resource scaling disabled, as Sia's
	// evaluation does for jobs it cannot scale).
	pinned bool
	plan   perf.Plan
}

func familyOf(p perf.Plan) family {
	return family{fixed: true, tp: p.TP, pp: p.PP, zero: p.ZeRO, offload: p.Offload, ckpt: p.Ckpt}
}

func (f family) allows(p perf.Plan) bool {
	return !f.fixed || (p.TP == f.tp && p.PP == f.pp && p.ZeRO == f.zero && p.Offload == f.offload && p.Ckpt == f.ckpt)
}

// curve is a job type's resource sensitivity curve over GPU counts 0..max,
// servers packed: the best throughput with exactly g GPUs (0 where no plan
// fits), its running maximum, and the frontier of counts where the
// throughput strictly rises (the only counts worth allocating).
type curve struct {
	thr    []float64
	env    []float64
	front  []int
	minRun int // smallest feasible count; 0 when none
}

// at is the best throughput with at most g GPUs.
func (c *curve) at(g int) float64 {
	if g <= 0 {
		return 0
	}
	if g >= len(c.env) {
		return c.env[len(c.env)-1]
	}
	return c.env[g]
}

// floor is the largest frontier count <= g, or 0.
func (c *curve) floor(g int) int {
	best := 0
	for _, f := range c.front {
		if f > g {
			break
		}
		best = f
	}
	return best
}

// below is the largest frontier count < g, or 0.
func (c *curve) below(g int) int { return c.floor(g - 1) }

type curveKey struct {
	m    *perf.Model
	fam  family
	max  int
	cpg  int
	gpus int // GPUs per server
	// cross: a pinned request larger than a rack, priced across racks
	cross bool
}

type planKey struct {
	m     *perf.Model
	fam   family
	pl    string
	cross bool
	cpg   int
}

type planVal struct {
	ok   bool
	plan perf.Plan
	thr  float64
	mem  perf.Memory
}

type predKey struct {
	m     *perf.Model
	plan  perf.Plan
	pl    string
	cross bool
	cpg   int
}

// cache memoises the pure computations a policy repeats every round:
// curves, best plans per placement, predictions of a given plan.
type cache struct {
	mu     sync.Mutex
	curves map[curveKey]*curve
	plans  map[planKey]planVal
	preds  map[predKey]float64
	prep   map[string]*prepared // by job ID; a pointer: a lookup copies 8 bytes, not the struct
	tiers  map[tierKey][3]float64
	req    map[reqLossKey]reqLossVal // FIFO.reqLoss
	whys   map[whyKey]string         // FIFO.why
	perf   perf.CurveCache
	known  Known
}

// use makes the cache answer with k's measurements, dropping everything
// computed without them (or with another Known).
func (c *cache) use(k Known) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.known == k {
		return
	}
	c.known = k
	c.curves = map[curveKey]*curve{}
	c.plans = map[planKey]planVal{}
	c.preds = map[predKey]float64{}
	c.prep = map[string]*prepared{}
	c.tiers = map[tierKey][3]float64{}
	c.req = nil
}

func newCache() *cache {
	return &cache{curves: map[curveKey]*curve{}, plans: map[planKey]planVal{}, preds: map[predKey]float64{}, prep: map[string]*prepared{}, tiers: map[tierKey][3]float64{}}
}

func resources(pl perf.Placement, cross bool, cpg int) perf.Resources {
	return perf.Resources{Placement: pl, CrossRack: cross, CPUsPerGPU: float64(cpg)}
}

// best is the fastest feasible plan of family fam on pl (memory checked).
func (c *cache) best(m *perf.Model, fam family, pl perf.Placement, cross bool, cpg int) planVal {
	k := planKey{m, fam, plKey(pl), cross, cpg}
	c.mu.Lock()
	v, ok := c.plans[k]
	c.mu.Unlock()
	if ok {
		return v
	}
	res := resources(pl, cross, cpg)
	if fam.pinned {
		if pl.GPUs() == fam.plan.GPUs() && perf.Check(m.Arch, fam.plan, pl) == nil && m.Space.Check(fam.plan, pl) == nil {
			if b, err := m.Predict(fam.plan, res); err == nil && b.Iter > 0 {
				v = planVal{ok: true, plan: fam.plan, thr: b.Throughput(m.Arch.GlobalBatch), mem: perf.EstimateMemory(m.Arch, fam.plan, pl)}
			}
		}
	} else if !fam.fixed {
		if r, ok := m.Best(res); ok {
			v = planVal{ok: true, plan: r.Plan, thr: r.Throughput, mem: r.Memory}
		}
	} else {
		perf.ForEachCandidate(m.Arch, pl.GPUs(), func(p perf.Plan) {
			if !fam.allows(p) || perf.Check(m.Arch, p, pl) != nil || (p.Offload && cpg < 1) || m.Space.Check(p, pl) != nil {
				return
			}
			mem := perf.EstimateMemory(m.Arch, p, pl)
			if mem.Fits(m.Env) != nil {
				return
			}
			b, err := m.Predict(p, res)
			if err != nil {
				return
			}
			if t := b.Throughput(m.Arch.GlobalBatch); !v.ok || t > v.thr {
				v = planVal{ok: true, plan: p, thr: t, mem: mem}
			}
		})
	}
	if c.known != nil && !cross {
		// Measurements beat predictions: the model's pick at its measured
		// speed, and every measured plan of the family on pl.
		if v.ok {
			if t, ok := c.known.Throughput(m, v.plan, pl, cpg); ok {
				v.thr = t
			}
		}
		for _, p := range c.known.Plans(m, pl) {
			if !fam.allows(p) || (fam.pinned && p != fam.plan) || (p.Offload && cpg < 1) {
				continue
			}
			if t, ok := c.known.Throughput(m, p, pl, cpg); ok && (!v.ok || t > v.thr) {
				v = planVal{ok: true, plan: p, thr: t, mem: perf.EstimateMemory(m.Arch, p, pl)}
			}
		}
	}
	c.mu.Lock()
	c.plans[k] = v
	c.mu.Unlock()
	return v
}

// predict is the predicted throughput of plan p on pl (0 when it cannot be
// priced).
func (c *cache) predict(m *perf.Model, p perf.Plan, pl perf.Placement, cross bool, cpg int) float64 {
	k := predKey{m, p, plKey(pl), cross, cpg}
	c.mu.Lock()
	v, ok := c.preds[k]
	c.mu.Unlock()
	if ok {
		return v
	}
	if t, ok := c.knownThr(m, p, pl, cross, cpg); ok {
		v = t
	} else if b, err := m.Predict(p, resources(pl, cross, cpg)); err == nil {
		v = b.Throughput(m.Arch.GlobalBatch)
	}
	c.mu.Lock()
	c.preds[k] = v
	c.mu.Unlock()
	return v
}

// curve returns the sensitivity curve of m for family fam up to max GPUs on
// servers of perServer GPUs with cpg cores per GPU. The unrestricted curve
// comes from perf.CurveCache; a fixed family is priced plan by plan.
func (c *cache) curve(m *perf.Model, fam family, max, perServer, cpg, rackGPUs int) *curve {
	// A pinned request larger than a rack runs across racks wherever it
	// is placed: its one point is priced there, as the job will run.
	cross := fam.pinned && spansRacks(fam.plan.GPUs(), rackGPUs)
	k := curveKey{m, fam, max, cpg, perServer, cross}
	c.mu.Lock()
	cv, ok := c.curves[k]
	c.mu.Unlock()
	if ok {
		return cv
	}
	cv = &curve{thr: make([]float64, max+1), env: make([]float64, max+1)}
	if fam.pinned {
		if g := fam.plan.GPUs(); g <= max {
			cv.thr[g] = c.best(m, fam, perf.PackedPlacement(g, perServer), cross, cpg).thr
		}
	} else if !fam.fixed && perServer == m.Env.GPUsPerServer && c.known == nil {
		for _, pt := range c.perf.Get(*m, max, float64(cpg)) {
			if pt.Feasible && pt.GPUs <= max {
				cv.thr[pt.GPUs] = pt.Throughput
			}
		}
	} else {
		for g := 1; g <= max; g++ {
			if v := c.best(m, fam, perf.PackedPlacement(g, perServer), false, cpg); v.ok {
				cv.thr[g] = v.thr
			}
		}
	}
	prev := 0.0
	for g := 1; g <= max; g++ {
		cv.env[g] = max64(prev, cv.thr[g])
		if cv.thr[g] > prev*(1+1e-9) && cv.thr[g] > 0 {
			cv.front = append(cv.front, g)
			if cv.minRun == 0 {
				cv.minRun = g
			}
		}
		prev = cv.env[g]
	}
	c.mu.Lock()
	c.curves[k] = cv
	c.mu.Unlock()
	return cv
}

func (c *cache) knownThr(m *perf.Model, p perf.Plan, pl perf.Placement, cross bool, cpg int) (float64, bool) {
	if c.known == nil || cross {
		return 0, false
	}
	return c.known.Throughput(m, p, pl, cpg)
}

func max64(a, b float64) float64 {
	if a > b {
		return a
	}
	return b
}

// plKey is a compact map key for a placement (one byte per server, counts
// above 255 spill into more bytes).
func plKey(pl perf.Placement) string {
	var buf [64]byte
	b := buf[:0]
	for _, g := range pl {
		for g >= 255 {
			b = append(b, 255)
			g -= 255
		}
		b = append(b, byte(g))
	}
	return string(b)
}
