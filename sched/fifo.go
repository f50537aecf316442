package sched

import (
	"fmt"
	"sort"

	"github.com/replan/replan/perf"
)

// FIFO is the family of gang-scheduling baselines: every job gets exactly
// the GPUs it asked for, all at once, in submission order, and keeps them
// until it finishes. Variants differ in what else they tune.
type FIFO struct {
	name string
	// BestPlan starts each job with the best plan for its exact placement
	// instead of the user's (Morphling-E, "plan-only").
	BestPlan bool
	// TuneCPU gives jobs whose plan is CPU-bound (optimizer offload) up to
	// their server's per-GPU share of cores (Synergy).
	TuneCPU bool
	// Tenancy gives guaranteed jobs priority within their tenant's quota
	// and lets them preempt best-effort jobs (AntMan's resource guarantee).
	Tenancy bool
	// Strict stops at the first job that does not fit (no backfilling).
	Strict bool
	// Net makes placement network-aware with Dally's delay timers and
	// Nw_sens order (dally, dally-manual).
	Net *NetOptions
	// LAS orders waiting jobs by least attained service, GPUs × seconds
	// run (Tiresias' 2D-LAS, without its discretised queues).
	LAS bool
	// SkewLoss, when > 0, consolidates jobs whose predicted loss across
	// racks is at least this (Tiresias' high-skew models) onto the
	// narrowest tier they fit; the others take any offer.
	SkewLoss float64
	// Migrate moves a running job spread over servers (racks) onto one
	// server (rack) when one frees up (Gandiva's migration).
	Migrate bool
	c       *cache
	// circleMode is the rounds' rack-circle memo and circles what it
	// did (circlememo.go).
	circleMode circleMode
	circles    circleStats
	spines     spineMemo
	// opt holds the restart cost, horizon, gain factor and MinDwell that
	// gate synergy's core changes of running jobs (the defaults of
	// Options; NewWithRestartCost sets the restart cost).
	opt Options
}

// NewTiresias is Tiresias: 2D-LAS priority, consolidation of high-skew
// jobs (predicted loss across racks ≥ 10 %), any offer for the others.
func NewTiresias() *FIFO { return &FIFO{name: "tiresias", LAS: true, SkewLoss: 0.1, c: newCache()} }

// NewGandiva is Gandiva's placement: network-agnostic, FIFO, with
// migration to a better consolidation when one frees up.
func NewGandiva() *FIFO { return &FIFO{name: "gandiva", Migrate: true, c: newCache()} }

// NewDally is Dally on exact requests: delay scheduling over tiers with
// the auto-tuned timers (auto=true, "dally") or fixed 12 h / 12 h timers
// ("dally-manual"), offers in increasing Nw_sens.
func NewDally(auto bool) *FIFO {
	n := NetOptions{AutoTune: auto, LossAccept: -1}.withDefaults()
	name := "dally-manual"
	if auto {
		name = "dally"
	}
	return &FIFO{name: name, Net: &n, c: newCache()}
}

// reqLoss is the predicted loss of j's own plan at the rack and
// cross-rack tiers, and its seconds per iteration packed.
func (f *FIFO) reqLoss(j *Job, perServer, cpg int) (float64, float64, float64) {
	g := j.ReqGPUs
	if j.Model == nil || g <= 0 {
		return 0, 0, 0
	}
	// It depends only on the request: memoised per distinct request (a
	// waiting queue of thousands is priced every round otherwise; few
	// requests differ, so the map stays small and cache-friendly).
	k := reqLossKey{j.Model, j.ReqPlan, g, perServer, cpg}
	f.c.mu.Lock()
	if f.c.req == nil {
		f.c.req = map[reqLossKey]reqLossVal{}
	}
	v, ok := f.c.req[k]
	f.c.mu.Unlock()
	if ok {
		return v.r, v.x, v.ideal
	}
	r, x, ideal := f.reqLossOf(j, perServer, cpg)
	f.c.mu.Lock()
	if len(f.c.req) > 1<<16 {
		clear(f.c.req) // bounded
	}
	f.c.req[k] = reqLossVal{r, x, ideal}
	f.c.mu.Unlock()
	return r, x, ideal
}

type reqLossKey struct {
	m           *perf.Model
	plan        perf.Plan
	g, per, cpg int
}

type reqLossVal struct {
	r, x, ideal float64
}

func (f *FIFO) reqLossOf(j *Job, perServer, cpg int) (float64, float64, float64) {
	g := j.ReqGPUs
	packed := perf.PackedPlacement(g, perServer)
	best := f.c.predict(j.Model, j.ReqPlan, packed, false, cpg)
	if best <= 0 {
		return 0, 0, 0
	}
	spread := packed
	if len(packed) == 1 && g > 1 {
		spread = perf.Placement{g - g/2, g / 2}
	}
	loss := func(v float64) float64 { return max(0, 1-v/best) }
	lr := loss(f.c.predict(j.Model, j.ReqPlan, spread, false, cpg))
	if len(packed) > 1 {
		lr = 0
	}
	return lr, loss(f.c.predict(j.Model, j.ReqPlan, spread, true, cpg)), float64(j.Model.Arch.GlobalBatch) / best
}

// NewStatic is the user's plan on exactly the requested GPUs, FIFO, gang,
// with backfilling of later jobs that fit.
func NewStatic() *FIFO { return &FIFO{name: "static", c: newCache()} }

// NewPlanOnly is Morphling-E: static allocation, best plan per placement.
func NewPlanOnly() *FIFO { return &FIFO{name: "plan-only", BestPlan: true, c: newCache()} }

// NewSynergy is static allocation and plans with CPU cores tuned per job.
func NewSynergy() *FIFO { return &FIFO{name: "synergy", TuneCPU: true, c: newCache()} }

// NewAntMan is static allocation with guaranteed jobs first within quota,
// preempting best-effort jobs: a resource, not a performance, guarantee.
func NewAntMan() *FIFO { return &FIFO{name: "antman", Tenancy: true, c: newCache()} }

// Name implements Policy.
func (f *FIFO) Name() string { return f.name }

// Schedule implements Policy.
func (f *FIFO) Schedule(s Snapshot) Decisions {
	f.c.use(s.Known)
	st := newState(&s)
	st.circleMode, st.circleStats = f.circleMode, &f.circles
	if f.Net != nil && f.circleMode != circleMemoOff {
		f.spines.round()
		st.spines = &f.spines
	}
	quota := map[string]int{}
	for _, t := range s.Tenants {
		quota[t.Name] = t.QuotaGPUs
	}
	used := map[string]int{}
	var waiting, beRunning []int
	for i := range s.Jobs {
		j := &s.Jobs[i]
		if j.Running() {
			if j.Class == Guaranteed {
				used[j.Tenant] += j.ReqGPUs
			} else {
				beRunning = append(beRunning, i)
			}
			continue
		}
		waiting = append(waiting, i)
	}
	perServer := max(st.maxPer, 1)
	if f.TuneCPU && len(waiting) > 0 {
		// Cores tuned while a server was full go back to its free GPUs.
		f.cores(st).reserve()
	}
	var nr *netRound
	if f.Net != nil || f.SkewLoss > 0 {
		st.rackAware = true
		o := NetOptions{LossAccept: -1}
		if f.Net != nil {
			o = *f.Net
		}
		nr = newNetRound(o, &s, func(i int) int { return max(s.Jobs[i].ReqGPUs, 1) }, func(i, g int) (float64, float64, float64) {
			return f.reqLoss(&s.Jobs[i], perServer, st.jobs[i].cpg)
		})
	}
	sort.SliceStable(waiting, func(a, b int) bool {
		x, y := &s.Jobs[waiting[a]], &s.Jobs[waiting[b]]
		if f.Tenancy && x.Class != y.Class {
			return x.Class == Guaranteed
		}
		if f.LAS {
			ax, ay := x.RunSeconds*float64(x.ReqGPUs), y.RunSeconds*float64(y.ReqGPUs)
			if ax != ay {
				return ax < ay
			}
		}
		if f.Net != nil && nr.jobs[waiting[a]].nw != nr.jobs[waiting[b]].nw {
			return nr.jobs[waiting[a]].nw < nr.jobs[waiting[b]].nw
		}
		return x.Submit < y.Submit
	})
	// Latest-submitted best-effort jobs are preempted first.
	sort.SliceStable(beRunning, func(a, b int) bool { return s.Jobs[beRunning[a]].Submit > s.Jobs[beRunning[b]].Submit })
	blocker := ""
	quotaBlocked := map[int]bool{}
	for _, i := range waiting {
		js := &st.jobs[i]
		j := js.job
		if blocker != "" {
			js.reason = "FIFO: waiting behind " + blocker
			continue
		}
		if j.Class == Guaranteed {
			if q, ok := quota[j.Tenant]; ok || len(quota) > 0 {
				if used[j.Tenant]+j.ReqGPUs > q {
					js.reason = fmt.Sprintf("quota of tenant %s exhausted: guaranteed jobs use %d of %d GPUs, this one asks for %d", j.Tenant, used[j.Tenant], q, j.ReqGPUs)
					quotaBlocked[i] = true
					continue
				}
			}
		}
		mark := len(st.journal)
		leave := st.only(i) // labels.go: only the servers it may use
		ok, why := f.placeNet(st, nr, i)
		var victims []victim
		if !ok && f.Tenancy && j.Class == Guaranteed {
			ok, why, victims = f.preemptFor(st, i, beRunning, why)
		}
		leave()
		if ok {
			restoreUnneeded(st, victims)
		}
		if !ok {
			st.rollback(mark)
			js.reason = why
			if f.Strict {
				blocker = j.ID
			}
			continue
		}
		if j.Class == Guaranteed {
			used[j.Tenant] += j.ReqGPUs
		}
	}
	wake := 0.0
	if f.Net != nil && f.Net.PreemptMinRun >= 0 {
		wake = f.preemptNwSens(st, nr, waiting, quotaBlocked, used, quota)
	}
	if f.Migrate {
		f.migrate(st)
	}
	if f.TuneCPU {
		f.cores(st).run()
	}
	d := emitState(st, func(i int) (perf.Plan, float64, perf.Memory, bool) {
		js := &st.jobs[i]
		j := js.job
		pl, cr := st.placement(i), st.cross(i)
		if j.Model == nil {
			return j.ReqPlan, 0, perf.Memory{}, true
		}
		cpg := cpgOf(js.alloc)
		plan := j.ReqPlan
		thr := f.c.predict(j.Model, plan, pl, cr, cpg)
		if f.BestPlan && !j.PinPlan {
			if v := f.c.best(j.Model, family{}, pl, cr, cpg); v.ok && v.thr > thr {
				return v.plan, v.thr, v.mem, true
			}
		}
		return plan, thr, perf.EstimateMemory(j.Model.Arch, plan, pl), true
	})
	if f.Net != nil {
		nr.finish(&s, &d)
		if wake > s.Now && (d.WakeAt == 0 || wake < d.WakeAt) {
			d.WakeAt = wake
		}
	}
	for k := range d.Actions {
		d.Actions[k].Tier = tierOf(s.Servers, d.Actions[k].Alloc)
	}
	return d
}

// placeNet places job i at the widest tier it accepts: Dally's timers
// (Net), Tiresias' consolidation of high-skew jobs (SkewLoss), else
// place.
func (f *FIFO) placeNet(st *state, nr *netRound, i int) (bool, string) {
	if nr == nil {
		return f.place(st, i)
	}
	js := &st.jobs[i]
	need := js.job.ReqGPUs
	limit := nr.jobs[i].accept
	why := nr.jobs[i].why
	if f.Net == nil { // Tiresias
		nj := &nr.jobs[i]
		switch {
		case nj.lossX < f.SkewLoss:
			return f.place(st, i)
		case nj.fitsS:
			limit, why = perf.TierServer, "high-skew model: waits for one server"
		case nj.fitsR:
			limit, why = perf.TierRack, "high-skew model: waits for one rack"
		default:
			limit = perf.TierCrossRack
		}
	}
	limit = min(limit, js.job.widest()) // pin.go: never beyond the pinned tiers
	mark := len(st.journal)
	if need <= st.maxPer {
		for k := need; k <= st.maxPer; k++ {
			if sv, ok := st.idx.any(k); ok && st.freeCPU[sv] >= need*js.cpg {
				st.move(i, sv, need)
				sortAlloc(js.alloc)
				return true, ""
			}
		}
	}
	if limit == perf.TierServer {
		return false, "delay scheduling: refuses offers spanning servers (" + why + ")"
	}
	// Across servers every server holds a multiple of the plan's TP size
	// (a TP group never spans servers, as place does): an offer that
	// would split a TP group is taken again in TP blocks.
	tp := max(js.job.ReqPlan.TP, 1)
	if st.takeRack(i, need) == need {
		if tpBlocks(js.alloc, tp) {
			sortAlloc(js.alloc)
			return true, ""
		}
		st.rollback(mark)
		if ok, _ := f.placeInRack(st, i, need, tp); ok {
			return true, ""
		}
	}
	st.rollback(mark)
	if limit == perf.TierRack {
		return false, "delay scheduling: refuses offers spanning racks (" + why + ")"
	}
	if got := st.takeFree(i, need); got < need {
		st.rollback(mark)
		return false, f.why(whyFree, need, st.freeGPUs)
	}
	if !tpBlocks(js.alloc, tp) {
		st.rollback(mark)
		if f.blocksFewestRacks(st, i, need, tp) < need {
			st.rollback(mark)
			if got := f.fillBlocks(st, i, need, tp); got < need {
				st.rollback(mark)
				return false, f.why(whyTP, need, tp, got)
			}
		}
	}
	if f.Net != nil && js.job.Model != nil {
		// Dally: among equally good cross-rack offers, the one whose
		// uplinks its communication interleaves with best.
		j := js.job
		preferCompatible(st, i, j.ReqPlan, func(a []Alloc) float64 {
			return f.c.predict(j.Model, j.ReqPlan, placementOf(a), crossRack(st.snap.Servers, a), js.cpg)
		})
	}
	return true, ""
}

// maxPreemptTries bounds the victims tried for one waiting job.
const maxPreemptTries = 8

// preemptNwSens is Dally's network-sensitive preemption, kept
// conservative. After the offers of the round, each job still waiting, in
// increasing Nw_sens (waiting, already in that order), may preempt one
// running job when:
//
//   - its delay timers have expired (it accepts any offer: waiting longer
//     cannot buy it a better tier), and it is not held back by its
//     tenant's quota;
//   - the victim is best-effort, unchanged this round, has run at least
//     PreemptMinRun seconds since its last start (no thrashing), and its
//     Nw_sens is at least PreemptGap above the waiting job's;
//   - preempting that one job alone frees enough GPUs for the waiting job
//     at the tier it accepts.
//
// Among the eligible victims the one with the highest Nw_sens (the job
// that lost the least to the network) goes first, then the latest
// started; at most maxPreemptTries are tried per waiting job, and a job
// preempted this round is not preempted twice. It returns the earliest
// time a victim that is eligible but for PreemptMinRun becomes eligible
// (0: none), for WakeAt.
func (f *FIFO) preemptNwSens(st *state, nr *netRound, waiting []int, quotaBlocked map[int]bool, used, quota map[string]int) float64 {
	now := st.snap.Now
	wake := 0.0
	var cands []int
	for v := range st.jobs {
		vs := &st.jobs[v]
		if vs.orig > 0 && vs.total == vs.orig && !vs.touched && vs.job.Class == BestEffort {
			cands = append(cands, v)
		}
	}
	sort.SliceStable(cands, func(a, b int) bool {
		x, y := nr.jobs[cands[a]].nw, nr.jobs[cands[b]].nw
		if x != y {
			return x > y
		}
		return st.jobs[cands[a]].job.LastChange > st.jobs[cands[b]].job.LastChange
	})
	for _, i := range waiting {
		js := &st.jobs[i]
		nj := &nr.jobs[i]
		if js.total > 0 || quotaBlocked[i] || nj.accept != perf.TierCrossRack {
			continue
		}
		if j := js.job; j.Class == Guaranteed && len(quota) > 0 && used[j.Tenant]+j.ReqGPUs > quota[j.Tenant] {
			continue
		}
		tries := 0
		for _, v := range cands {
			vs := &st.jobs[v]
			if vs.total == 0 || vs.touched || nr.jobs[v].nw < nj.nw+f.Net.PreemptGap || !st.onAllowed(v, i) {
				continue
			}
			if vs.orig < js.job.ReqGPUs-st.freeGPUs {
				continue // frees too few GPUs
			}
			if ran := now - vs.job.LastChange; ran < f.Net.PreemptMinRun {
				if t := vs.job.LastChange + f.Net.PreemptMinRun; wake == 0 || t < wake {
					wake = t
				}
				continue
			}
			if tries++; tries > maxPreemptTries {
				break
			}
			mark := len(st.journal)
			for len(vs.alloc) > 0 {
				a := vs.alloc[0]
				st.move(v, a.Server, -a.GPUs)
			}
			leave := st.only(i) // labels.go
			ok, _ := f.placeNet(st, nr, i)
			leave()
			if !ok {
				st.rollback(mark)
				continue
			}
			vs.touched = true
			st.circleChanged(v)
			vs.preemptWhy = fmt.Sprintf("Dally: preempted for %s (Nw_sens %.2f < %.2f, its timers expired; ran %.1f h since its start)",
				js.job.ID, nj.nw, nr.jobs[v].nw, (now-vs.job.LastChange)/3600)
			js.reason = ""
			if j := js.job; j.Class == Guaranteed {
				used[j.Tenant] += j.ReqGPUs
			}
			break
		}
	}
	return wake
}

// migrate moves running jobs that span servers onto one server, or jobs
// that span racks into one rack, when one has room (Gandiva).
func (f *FIFO) migrate(st *state) {
	for i := range st.jobs {
		js := &st.jobs[i]
		if js.orig == 0 || js.total != js.orig || js.touched || len(js.alloc) < 2 {
			continue
		}
		was := tierOf(st.snap.Servers, js.alloc)
		mark := len(st.journal)
		old := append([]Alloc(nil), js.alloc...)
		for _, a := range old {
			st.move(i, a.Server, -a.GPUs)
		}
		ok := false
		leave := st.only(i) // labels.go
		if js.orig <= st.maxPer {
			for k := js.orig; k <= st.maxPer && !ok; k++ {
				if sv, found := st.idx.any(k); found && st.freeCPU[sv] >= js.orig*js.cpg {
					st.move(i, sv, js.orig)
					ok = true
				}
			}
		}
		if !ok && was == perf.TierCrossRack && len(st.racks) > 1 {
			// in TP blocks: a TP group never spans servers
			ok = st.takeRack(i, js.orig) == js.orig && tpBlocks(js.alloc, max(js.job.ReqPlan.TP, 1))
		}
		leave()
		sortAlloc(js.alloc)
		if !ok || tierOf(st.snap.Servers, js.alloc) >= was {
			st.rollback(mark)
			continue
		}
		js.touched = true
		st.circleChanged(i)
	}
}

// place finds exactly the requested GPUs for job i: one server when the
// request fits a server, else whole servers first, each holding a
// multiple of the plan's TP size.
func (f *FIFO) place(st *state, i int) (bool, string) {
	js := &st.jobs[i]
	j := js.job
	need := j.ReqGPUs
	tp := max(j.ReqPlan.TP, 1)
	mark := len(st.journal)
	if need <= 0 {
		return false, "requests no GPUs"
	}
	if need <= st.maxPer {
		for k := need; k <= st.maxPer; k++ {
			if s, ok := st.idx.any(k); ok && st.freeCPU[s] >= need*js.cpg {
				st.move(i, s, need)
				sortAlloc(js.alloc)
				return true, ""
			}
		}
		largest := 0
		for k := st.maxPer; k >= 1; k-- {
			if _, ok := st.idx.any(k); ok {
				largest = k
				break
			}
		}
		return false, f.why(whyBlock, need, largest)
	}
	if j.widest() == perf.TierRack {
		return f.placeInRack(st, i, need, tp) // pin.go
	}
	if got := f.fillBlocks(st, i, need, tp); got < need {
		st.rollback(mark)
		return false, f.why(whyTP, need, tp, got)
	}
	return true, ""
}

// fillBlocks gives job i up to need free GPUs, the servers with the most
// free GPUs first, each holding a multiple of tp (so no TP group spans
// servers). It returns how many it got.
func (f *FIFO) fillBlocks(st *state, i, need, tp int) int {
	js := &st.jobs[i]
	got := 0
	for k := st.maxPer; k >= tp && got < need; k-- {
		for got < need {
			s, ok := st.idx.any(k)
			if !ok {
				break
			}
			n := min(k, need-got)
			n -= n % tp
			if n == 0 || st.freeCPU[s] < n*js.cpg {
				if !st.idx.skip(k, s) {
					break
				}
				continue
			}
			st.move(i, s, n)
			got += n
		}
	}
	st.idx.unskip()
	sortAlloc(js.alloc)
	return got
}

// blocksFewestRacks gives job i need free GPUs in blocks of a multiple of
// tp per server over as few racks as it can (as takeFewestRacks does
// without blocks): each step the rack whose blocks alone hold what is
// still needed with the least to spare, else the rack with the most, its
// servers with the largest blocks first. It returns how many it got.
func (f *FIFO) blocksFewestRacks(st *state, i, need, tp int) int {
	cpg := max(st.jobs[i].cpg, 1)
	block := func(s int) int {
		n := min(st.free[s], st.freeCPU[s]/cpg)
		return max(n-n%tp, 0)
	}
	used := make([]bool, len(st.racks))
	got := 0
	for got < need {
		rest := need - got
		fit, big, fitN, bigN := -1, -1, 0, 0
		for r, l := range st.racks {
			if used[r] {
				continue
			}
			n := 0
			for _, s := range l {
				n += block(s)
			}
			if n == 0 {
				continue
			}
			if n >= rest && (fit < 0 || n < fitN) {
				fit, fitN = r, n
			}
			if big < 0 || n > bigN {
				big, bigN = r, n
			}
		}
		r := fit
		if r < 0 {
			r = big
		}
		if r < 0 {
			break
		}
		used[r] = true
		got += st.fillRack(i, r, need-got, block)
	}
	sortAlloc(st.jobs[i].alloc)
	return got
}

// tpBlocks reports whether every server of allocs holds a multiple of tp
// GPUs: tensor-parallel groups (consecutive ranks) then never span
// servers.
func tpBlocks(allocs []Alloc, tp int) bool {
	if tp <= 1 {
		return true
	}
	for _, a := range allocs {
		if a.GPUs%tp != 0 {
			return false
		}
	}
	return true
}

// The wait reasons place gives, by kind.
const (
	whyFree  = iota // needs N GPUs; F free
	whyBlock        // needs N GPUs on one server
	whyTP           // needs N GPUs in blocks of a multiple of TP
)

type whyKey struct{ kind, a, b, c int }

// why is the wait reason of a kind with its figures, formatted once: a
// long queue asks for the same few ("needs 8 GPUs; 3 free") for every
// waiting job, every round.
func (f *FIFO) why(kind, a, b int, more ...int) string {
	k := whyKey{kind: kind, a: a, b: b}
	if len(more) > 0 {
		k.c = more[0]
	}
	c := f.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if s, ok := c.whys[k]; ok {
		return s
	}
	var s string
	switch kind {
	case whyFree:
		s = fmt.Sprintf("needs %d GPUs; %d free", a, b)
	case whyBlock:
		s = fmt.Sprintf("needs %d GPUs on one server; largest free block is %d", a, b)
	default:
		s = fmt.Sprintf("needs %d GPUs across servers in blocks of a multiple of TP %d; %d such GPUs free", a, b, k.c)
	}
	if c.whys == nil || len(c.whys) >= 4096 {
		c.whys = map[whyKey]string{} // bounded: free counts change
	}
	c.whys[k] = s
	return s
}

// cores is Synergy's CPU tuner: with the GPUs and the user's plan fixed, each
// server's cores go by CPU sensitivity (cpu.go). A job starting this round
// whose plan does not depend on cores gets its minimum (one per GPU); jobs
// whose plan offloads the optimizer take the free cores, then the cores of
// less sensitive jobs on their servers above their minimum, steepest CPU
// slope first. Running jobs are re-tuned as jobs arrive and leave, each
// change a restart gated by the anti-thrashing rule and MinDwell.
func (f *FIFO) cores(st *state) *cpuTuner {
	o := f.opt.withDefaults()
	ref := make([]float64, len(st.jobs))
	perServer := max(st.maxPer, 1)
	for i := range st.jobs {
		js := &st.jobs[i]
		j := js.job
		js.remaining = max(j.ItersTotal-j.ItersDone, 0)
		if j.Model == nil {
			continue
		}
		ref[i] = j.Promise
		if ref[i] <= 0 {
			cpg := max(1, j.ReqCPUs/max(j.ReqGPUs, 1))
			ref[i] = f.c.predict(j.Model, j.ReqPlan, perf.PackedPlacement(max(j.ReqGPUs, 1), perServer), false, cpg)
		}
		if ref[i] <= 0 {
			ref[i] = 1
		}
	}
	return &cpuTuner{st: st, opt: o, trimStarts: true,
		thr: func(i, c int) float64 {
			js := &st.jobs[i]
			if js.job.Model == nil || js.total == 0 {
				return 0
			}
			return f.c.predict(js.job.Model, js.job.ReqPlan, st.placement(i), st.cross(i), c)
		},
		w:   func(i int) float64 { return float64(max(st.jobs[i].job.ReqGPUs, 1)) / ref[i] },
		ref: func(i int) float64 { return ref[i] },
	}
}

// cpgOf is the cores per GPU of an allocation (the smallest share).
func cpgOf(allocs []Alloc) int {
	c := 0
	for _, a := range allocs {
		if a.GPUs > 0 {
			x := a.CPUs / a.GPUs
			if c == 0 || x < c {
				c = x
			}
		}
	}
	return max(c, 1)
}
