package sched

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"sort"

	"github.com/replan/replan/perf"
)

// Options tune the curve-driven policies (Morphling and ResourcesOnly).
// The zero value of a field means its default (DefaultOptions).
type Options struct {
	// RestartCost is the seconds a checkpoint-restart takes (default 260,
	// the figure of the Morphling artifact's simulator; the paper measured
	// 78 s on average).
	RestartCost float64
	// Horizon is how far ahead, in seconds, a reconfiguration's predicted
	// gain is counted against its restart cost (default 3600). The gain of
	// a change is the normalised throughput it adds times
	// min(Horizon, the job's predicted remaining time); it must exceed
	// GainFactor times the normalised work the restart loses.
	Horizon float64
	// GainFactor is the safety factor of that comparison (default 4).
	GainFactor float64
	// MinSlope is the marginal efficiency below which a job is not grown:
	// an extra GPU must add at least this fraction of the per-GPU
	// throughput of the job's own request (default 0.2).
	MinSlope float64
	// IdleMinSlope replaces MinSlope in a round where no job waits: free
	// GPUs then serve nobody else (default 0.05).
	IdleMinSlope float64
	// MaxGPUs is the length of the sensitivity curves: no job grows beyond
	// it, or beyond its request if that is larger (default 64).
	MaxGPUs int
	// SLAMargin makes minRes demand a predicted throughput of
	// (1+SLAMargin)·promise, covering the model's error (default 0.05).
	SLAMargin float64
	// FragTolerance is the share of the packed curve's throughput a
	// placement spread over servers must still reach (default 0.8).
	FragTolerance float64
	// MinDwell is how long, in seconds, a running job keeps a new
	// allocation before it may be grown, shrunk or re-planned again
	// (default 600; guaranteed jobs below their minRes may still shrink
	// it). It stops two jobs from trading GPUs back and forth.
	MinDwell float64
	// KeepPlanFamily restricts plans to the user's plan family, scaling only
	// DP (Morphling-R; set by NewResourcesOnly).
	KeepPlanFamily bool
}

// DefaultOptions returns the documented defaults.
func DefaultOptions() Options {
	return Options{RestartCost: 260, Horizon: 3600, GainFactor: 4, MinSlope: 0.2, IdleMinSlope: 0.05, MaxGPUs: 64, MinDwell: 600, SLAMargin: 0.05, FragTolerance: 0.8}
}

func (o Options) withDefaults() Options {
	d := DefaultOptions()
	if o.RestartCost <= 0 {
		o.RestartCost = d.RestartCost
	}
	if o.Horizon <= 0 {
		o.Horizon = d.Horizon
	}
	if o.GainFactor <= 0 {
		o.GainFactor = d.GainFactor
	}
	if o.MinSlope <= 0 {
		o.MinSlope = d.MinSlope
	}
	if o.MinDwell < 0 {
		o.MinDwell = 0
	} else if o.MinDwell == 0 {
		o.MinDwell = d.MinDwell
	}
	if o.IdleMinSlope <= 0 {
		o.IdleMinSlope = d.IdleMinSlope
	}
	if o.MaxGPUs <= 0 {
		o.MaxGPUs = d.MaxGPUs
	}
	if o.SLAMargin < 0 {
		o.SLAMargin = 0
	}
	if o.FragTolerance <= 0 {
		o.FragTolerance = d.FragTolerance
	}
	return o
}

// Morphling is the full policy: Algorithm 1 over resource sensitivity
// curves, with plans chosen per placement and reconfigurations gated by the
// anti-thrashing rule of Options.
type Morphling struct {
	name string
	opt  Options
	c    *cache
	net  *NetOptions // network-aware (replan): nil for plain Morphling
	// shifts is the time-shift computation's memo across rounds.
	shifts *shiftMemo
	// flat is the CPU branch's memo of flat CPU curves across rounds.
	flat *flatMemo
	// circleMode is the rounds' rack-circle memo and circles what it
	// did (circlememo.go).
	circleMode circleMode
	circles    circleStats
	spines     spineMemo
	// why is the "cluster full" wait reasons' memo across rounds.
	why whyMemo
}

// NewReplan is replan's policy: Morphling's allocation and plans, Dally's
// delay scheduling over placement tiers (auto-tuned timers, Nw_sens
// priority, and the predicted-loss shortcut of n), and CASSINI
// time-shifts for jobs sharing links.
func NewReplan(o Options, n NetOptions) *Morphling {
	o = o.withDefaults()
	n = n.withDefaults()
	return &Morphling{name: "replan", opt: o, c: newCache(), net: &n}
}

// NewMorphling returns the full Morphling policy.
func NewMorphling(o Options) *Morphling {
	o = o.withDefaults()
	return &Morphling{name: "morphling", opt: o, c: newCache()}
}

// NewResourcesOnly is Morphling-R: the same allocation policy, but every
// job keeps its own plan family and only its DP size follows the GPUs
// (the way Sia scales 3D-parallel jobs).
func NewResourcesOnly(o Options) *Morphling {
	o = o.withDefaults()
	o.KeepPlanFamily = true
	return &Morphling{name: "resources-only", opt: o, c: newCache()}
}

// Name implements Policy.
func (p *Morphling) Name() string { return p.name }

// MinRes is a guaranteed job's minimum demand: the fewest GPUs and cores
// (with any plan the policy may use) whose predicted throughput reaches the
// promise, never more than the request; Fallback is set when no smaller
// demand reaches it and the request itself is used.
type MinRes struct {
	GPUs     int
	CPUs     int
	Plan     perf.Plan
	Promise  float64 // samples/s of the request
	Fallback bool
}

// MinRes computes j's minimum demand as Schedule does, with servers of
// perServer GPUs in one rack.
func (p *Morphling) MinRes(j *Job, perServer int) MinRes {
	return p.MinResRacks(j, perServer, 0)
}

// MinResRacks is MinRes on racks of rackGPUs GPUs (0: one rack): a
// request larger than a rack is promised what it gets packed across
// racks.
func (p *Morphling) MinResRacks(j *Job, perServer, rackGPUs int) MinRes {
	var js jstate
	js.job = j
	js.cpg = 1
	if j.ReqGPUs > 0 && j.ReqCPUs > 0 {
		js.cpg = max(1, j.ReqCPUs/j.ReqGPUs)
	}
	p.prepare(&js, perServer, rackGPUs)
	return MinRes{GPUs: js.minG, CPUs: js.minCPUs, Plan: js.minPlan, Promise: js.ref, Fallback: js.fallback}
}

// prepared is what prepare computes for a job; it depends only on the
// job's request and model, so it is memoised per job across rounds.
type prepared struct {
	model    *perf.Model
	reqGPUs  int
	reqPlan  perf.Plan
	promise  float64
	cpg      int
	rackGPUs int
	cv       *curve
	fam      family
	ref      float64
	minG     int
	minCPUs  int
	minPlan  perf.Plan
	fallback bool
}

// prepare fills a job's curve, reference throughput, normalisation and
// minRes.
func (p *Morphling) prepare(js *jstate, perServer, rackGPUs int) {
	j := js.job
	if j.Model == nil {
		return
	}
	js.remaining = math.Max(j.ItersTotal-j.ItersDone, 0)
	p.c.mu.Lock()
	pr, ok := p.c.prep[j.ID]
	p.c.mu.Unlock()
	// Curves and minRes are priced with at least the request's cores per
	// GPU: a job whose cores the CPU branch trimmed is still judged by
	// what it would run at when it grows (the CPU pass gives an offload
	// plan its cores back).
	cpg := js.cpg
	if j.ReqGPUs > 0 {
		cpg = max(cpg, j.ReqCPUs/j.ReqGPUs)
	}
	if !ok || pr.model != j.Model || pr.reqGPUs != j.ReqGPUs || pr.reqPlan != j.ReqPlan || pr.promise != j.Promise || pr.cpg != cpg || pr.rackGPUs != rackGPUs {
		v := p.compute(j, cpg, perServer, rackGPUs)
		pr = &v
		p.c.mu.Lock()
		p.c.prep[j.ID] = pr
		p.c.mu.Unlock()
	}
	js.cv, js.fam, js.ref = pr.cv, pr.fam, pr.ref
	js.w = float64(max(j.ReqGPUs, 1)) / js.ref
	if j.Class == Guaranteed {
		js.minG, js.minCPUs, js.minPlan, js.fallback = pr.minG, pr.minCPUs, pr.minPlan, pr.fallback
	}
}

// spansRacks reports whether g GPUs packed need more than one rack of
// rackGPUs GPUs (0: one rack).
func spansRacks(g, rackGPUs int) bool { return rackGPUs > 0 && g > rackGPUs }

func (p *Morphling) compute(j *Job, cpg, perServer, rackGPUs int) prepared {
	pr := prepared{model: j.Model, reqGPUs: j.ReqGPUs, reqPlan: j.ReqPlan, promise: j.Promise, cpg: cpg, rackGPUs: rackGPUs}
	if p.opt.KeepPlanFamily {
		pr.fam = familyOf(j.ReqPlan)
	}
	pr.fam = pinnedFamily(j, pr.fam) // pin.go
	maxG := max(p.opt.MaxGPUs, j.ReqGPUs)
	pr.cv = p.c.curve(j.Model, pr.fam, maxG, perServer, cpg, rackGPUs)
	if pr.fam.fixed && pr.cv.minRun == 0 {
		pr.fam = family{fixed: true, pinned: true, plan: j.ReqPlan}
		pr.cv = p.c.curve(j.Model, pr.fam, maxG, perServer, cpg, rackGPUs)
	}
	// The promise is the request packed onto as few servers as possible:
	// inside one rack when it fits, else across racks (priced at the
	// spine share the model sees), so a request larger than a rack can
	// be placed at all (the cross-rack check below prices it the same).
	reqPl := perf.PackedPlacement(max(j.ReqGPUs, 1), perServer)
	pr.ref = j.Promise
	if pr.ref <= 0 {
		pr.ref = p.c.predict(j.Model, j.ReqPlan, reqPl, spansRacks(j.ReqGPUs, rackGPUs), cpg)
	}
	if pr.ref <= 0 {
		pr.ref = pr.cv.at(j.ReqGPUs)
	}
	if pr.ref <= 0 {
		pr.ref = 1
	}
	pr.minG, pr.minCPUs, pr.minPlan, pr.fallback = j.ReqGPUs, j.ReqCPUs, j.ReqPlan, true
	target := pr.ref * (1 + p.opt.SLAMargin)
	for _, g := range pr.cv.front {
		if g > j.ReqGPUs {
			break
		}
		if pr.cv.thr[g] >= target {
			if v := p.c.best(j.Model, pr.fam, perf.PackedPlacement(g, perServer), spansRacks(g, rackGPUs), cpg); v.ok && v.thr >= target {
				pr.minG, pr.minCPUs, pr.minPlan, pr.fallback = g, min(g*cpg, max(j.ReqCPUs, g)), v.plan, false
				break
			}
		}
	}
	return pr
}

// u is normalised throughput: GPU-equivalents of the job's own request.
func (js *jstate) u(thr float64) float64 { return thr * js.w }

// next is the job's next growth step on its curve from its current total:
// the frontier count with the highest marginal normalised throughput per
// GPU, and that slope.
func (js *jstate) next(limit int) (int, float64) {
	if js.cv == nil {
		return 0, 0
	}
	base := js.u(js.cv.at(js.total))
	bestG, bestS := 0, 0.0
	for _, f := range js.cv.front {
		if f <= js.total {
			continue
		}
		if f > limit {
			break
		}
		s := (js.u(js.cv.thr[f]) - base) / float64(f-js.total)
		if s > bestS {
			bestG, bestS = f, s
		}
	}
	return bestG, bestS
}

// Schedule implements Policy: Algorithm 1.
func (p *Morphling) Schedule(s Snapshot) Decisions {
	p.c.use(s.Known)
	st := newState(&s)
	st.circleMode, st.circleStats = p.circleMode, &p.circles
	p.why.round()
	if p.net != nil && p.circleMode != circleMemoOff {
		p.spines.round()
		st.spines = &p.spines
	}
	perServer := max(st.maxPer, 1)
	if len(s.Servers) > 0 && s.Servers[0].GPUs > 0 {
		perServer = s.Servers[0].GPUs
	}
	rackGPUs := st.rackGPUs()
	for i := range st.jobs {
		js := &st.jobs[i]
		p.prepare(js, perServer, rackGPUs)
		if js.orig > 0 {
			pl := placementOf(js.job.Alloc)
			js.origThr = p.c.predict(js.job.Model, js.job.Plan, pl, crossRack(s.Servers, js.job.Alloc), js.cpg)
			if j := js.job; j.Promise > 0 && j.Plan == j.ReqPlan && pl.GPUs() == j.ReqGPUs && p.packed(pl, st) {
				js.origThr = j.Promise
			}
		}
	}
	var nr *netRound
	if p.net != nil {
		st.rackAware = true
		nr = newNetRound(*p.net, &s, func(i int) int {
			js := &st.jobs[i]
			if js.cv == nil {
				return max(js.job.ReqGPUs, 1)
			}
			if js.orig > 0 {
				return js.orig
			}
			if js.job.Class == Guaranteed {
				return max(js.minG, 1)
			}
			if f, _ := js.next(len(js.cv.env) - 1); f > 0 {
				return f
			}
			return max(js.job.ReqGPUs, 1)
		}, func(i, g int) (float64, float64, float64) {
			js := &st.jobs[i]
			return tierLoss(p.c, js.job.Model, js.fam, g, perServer, js.cpg)
		})
		nr.lossOf = func(i int, a []Alloc) float64 {
			js := &st.jobs[i]
			g := js.total
			best := p.c.best(js.job.Model, js.fam, perf.PackedPlacement(g, perServer), false, js.cpg)
			v := p.c.best(js.job.Model, js.fam, placementOf(a), crossRack(s.Servers, a), js.cpg)
			if !best.ok || best.thr <= 0 || !v.ok {
				return 1
			}
			return math.Max(0, 1-v.thr/best.thr)
		}
	}
	if anyWaiting(st) {
		// Cores tuned while a server was full go back to its free GPUs.
		p.cpuTuner(st).reserve()
	}
	quota := map[string]int{}
	for _, t := range s.Tenants {
		quota[t.Name] = t.QuotaGPUs
	}
	used := map[string]int{}
	for i := range st.jobs {
		if js := &st.jobs[i]; js.orig > 0 && js.job.Class == Guaranteed {
			used[js.job.Tenant] += js.minG
		}
	}
	// A tenant's quota bounds two things: the minRes of its guaranteed
	// jobs (admission: a waiting one is privileged when its minRes fits
	// beside theirs) and the GPUs they hold (no growth above minRes
	// takes them past it; a privileged job's tenant-mates give back GPUs
	// above their minRes first).
	if len(quota) > 0 {
		st.trackQuota()
	}
	over := func(i, g int) bool {
		js := &st.jobs[i]
		return st.gHeld != nil && js.job.Class == Guaranteed && st.gHeld[js.job.Tenant]-js.total+g > quota[js.job.Tenant]
	}

	// Lines 2-3: privileged guaranteed jobs (waiting, within quota), in
	// submission order, placed at their minRes.
	var waitingG []int
	for i := range st.jobs {
		if js := &st.jobs[i]; js.orig == 0 && js.job.Class == Guaranteed {
			waitingG = append(waitingG, i)
		}
	}
	sort.SliceStable(waitingG, func(a, b int) bool { return s.Jobs[waitingG[a]].Submit < s.Jobs[waitingG[b]].Submit })
	for _, i := range waitingG {
		js := &st.jobs[i]
		if js.cv == nil || js.cv.minRun == 0 {
			js.reason = "no feasible plan for this model on up to " + fmt.Sprint(len(js.cvEnv())-1) + " GPUs"
			continue
		}
		t := js.job.Tenant
		if q := quota[t]; len(quota) > 0 && used[t]+js.minG > q {
			js.reason = fmt.Sprintf("quota of tenant %s exhausted: guaranteed jobs use %d of %d GPUs, this one needs %d (its minRes)", t, used[t], quota[t], js.minG)
			continue
		}
		mark := len(st.journal)
		if over(i, js.minG) && !p.quotaRoom(st, i, quota[t]) {
			st.rollback(mark)
			js.reason = fmt.Sprintf("quota of tenant %s: its guaranteed jobs hold %d of %d GPUs and cannot give back enough above their minRes for this one's %d", t, st.gHeld[t], quota[t], js.minG)
			continue
		}
		leave := st.only(i) // labels.go: only the servers it may use
		ok := p.grow(st, i, js.minG, math.Inf(1), true, false)
		leave()
		if ok && nr != nil {
			if fine, _, why := nr.allows(s.Servers, i, js.alloc); !fine {
				st.rollback(mark)
				js.reason = why
				continue
			}
		}
		if !ok || !p.finish(st, i) {
			st.rollback(mark)
			if js.reason == "" {
				js.reason = fmt.Sprintf("needs %d GPUs (minRes) and cannot get them: %d free, running jobs are at their own minRes", js.minG, st.freeGPUs)
			}
			continue
		}
		used[t] += js.minG
	}

	// Lines 4-5: best-effort and running jobs by descending slope.
	var order []int
	for i := range st.jobs {
		js := &st.jobs[i]
		if js.cv == nil || js.cv.minRun == 0 {
			if js.reason == "" && js.orig == 0 {
				js.reason = "no feasible plan for this model"
			}
			continue
		}
		if js.orig == 0 && js.job.Class == Guaranteed && js.total == 0 {
			continue // waits for quota or room: reason set above
		}
		if js.orig > 0 && js.total == 0 {
			continue // preempted in this round
		}
		_, js.slope = js.next(len(js.cv.env) - 1)
		order = append(order, i)
	}
	// Sort keys copied out once (the comparator runs n log n times);
	// the index breaks the last tie, so the order is the stable one.
	type okey struct {
		slope, nw, finish, submit float64
		i                         int
	}
	shortest := nr != nil && p.net.ShortestFirst
	keys := make([]okey, len(order))
	for n, i := range order {
		keys[n] = okey{slope: st.jobs[i].slope, submit: st.jobs[i].job.Submit, i: i}
		if nr != nil {
			keys[n].nw = nr.jobs[i].nw // Dally: lowest Nw_sens first
		}
		if shortest {
			keys[n].slope = slopeTie(keys[n].slope)
			keys[n].finish = st.jobs[i].finishKey()
		}
	}
	slices.SortFunc(keys, func(x, y okey) int {
		if x.slope != y.slope {
			return cmp.Compare(y.slope, x.slope)
		}
		if x.nw != y.nw {
			return cmp.Compare(x.nw, y.nw)
		}
		if x.finish != y.finish {
			return cmp.Compare(x.finish, y.finish)
		}
		if x.submit != y.submit {
			return cmp.Compare(x.submit, y.submit)
		}
		return cmp.Compare(x.i, y.i)
	})
	for n := range keys {
		order[n] = keys[n].i
	}
	// With nobody waiting, free GPUs help nobody else: grow while any step
	// still adds IdleMinSlope (Algorithm 1's "take the free resources").
	minSlope := p.opt.MinSlope
	if !anyWaiting(st) {
		minSlope = math.Min(minSlope, p.opt.IdleMinSlope)
	}
	capacity := 0
	for _, sv := range s.Servers {
		capacity += sv.GPUs
	}
	cutoff := math.Inf(-1)
	// held: waiting jobs replan's uplink hold passed over (see below);
	// hold is off for the leftover pass that offers them what nobody took.
	var held []int
	hold := nr != nil && p.net.UplinkHold > 0
	holdRuns := 0.0 // the hold's bound this round, in runs (holdBound)
	if hold {
		holdRuns = holdBound(p.net.UplinkHoldRuns, waitingCount(st))
	}
	leftover := false
	growAll := func(order []int) {
		// shorter[n]: the shortest predicted run of the jobs waiting at
		// positions n.. of order (UplinkHoldSwap's candidates).
		var shorter []float64
		if hold && p.net.ShortestFirst && p.net.UplinkHoldSwap > 0 {
			shorter = waitingRuns(st, order)
		}
		for pos, i := range order {
			js := &st.jobs[i]
			if js.orig > 0 && js.total == 0 {
				continue
			}
			if js.slope <= cutoff && st.freeGPUs == 0 {
				if js.total == 0 {
					// Its own blocker: its own next step and slope, not
					// those of the job that set the cutoff.
					f, sl := js.next(st.gpuLimit(i, min(len(js.cv.env)-1, capacity)))
					js.reason = p.why.clusterFull(js.job.ID, f, js.job.ReqGPUs, sl)
				}
				continue
			}
			if js.orig > 0 && js.total == js.orig && !p.pays(js, js.origThr, js.cv.at(len(js.cv.env)-1)) {
				continue // no growth could pay for the restart
			}
			// A job that changed less than MinDwell ago may grow into free
			// GPUs but not take them from others (no trading back and forth).
			settling := p.settling(st, js)
			if settling && st.freeGPUs == 0 {
				continue
			}
			mark := len(st.journal)
			grew := false
			limit := st.gpuLimit(i, min(len(js.cv.env)-1, capacity))
			leave := st.only(i) // labels.go: only the servers it may use
			for {
				f, sl := js.next(limit)
				if f == 0 || sl < minSlope {
					if js.total == 0 && js.reason == "" {
						js.reason = fmt.Sprintf("no GPU count up to %d gives this job enough throughput per GPU", limit)
					}
					break
				}
				if over(i, f) {
					if js.total == 0 && js.reason == "" {
						js.reason = fmt.Sprintf("quota of tenant %s: its guaranteed jobs hold %d of %d GPUs", js.job.Tenant, st.gHeld[js.job.Tenant], quota[js.job.Tenant])
					}
					break // guaranteed jobs never hold more than their tenant's quota
				}
				step := len(st.journal)
				ok := p.grow(st, i, f, sl, false, settling)
				if ok && leftover {
					// the leftover pass takes free GPUs only: no job of
					// the first pass gives any back
					for _, o := range st.journal[step:] {
						if o.job != i {
							ok = false
							break
						}
					}
				}
				if ok && nr != nil && js.orig == 0 {
					// Dally: a waiting job refuses an offer wider than its
					// timers allow; it keeps the last step it accepted.
					if fine, _, why := nr.allows(s.Servers, i, js.alloc); !fine {
						st.rollback(step)
						if js.total == 0 {
							js.reason = why
						}
						break
					}
				}
				if ok && hold && js.orig == 0 && st.cross(i) {
					// replan's uplink hold: an offer across racks whose
					// spine uplinks other cross-rack jobs already fill
					// would slow this job (and them) for its whole run;
					// the GPUs go to the jobs after it this round.
					if v := p.c.best(js.job.Model, js.fam, st.placement(i), true, js.cpg); v.ok && v.thr > 0 {
						// No job is held for ever: only while it has waited
						// (since submit or its last run) less than holdRuns
						// times its predicted run on the offer; where the
						// uplink's load fits it, in shortest-first order,
						// only while a job behind it no longer than
						// (1 + UplinkHoldSwap·x) runs can take its turn.
						run := js.remaining * float64(js.job.Model.Arch.GlobalBatch) / v.thr
						if x, over, rack, with, load := uplinkInflation(st, i, v.plan, p.net.holdLimit); over > 1 && nr.jobs[i].starved < holdRuns*run &&
							(shorter == nil || load > 1 || shorter[pos+1] <= run*(1+p.net.UplinkHoldSwap*x)) {
							offer := st.placement(i)
							st.rollback(step)
							if js.total == 0 {
								js.reason = holdReason(offer, x, rack, with)
								held = append(held, i)
							}
							break
						}
					}
				}
				if !ok {
					st.rollback(step)
					if !grew && st.freeGPUs == 0 && js.allow == nil {
						cutoff = sl // a constrained job's failure says nothing of the others
					}
					if js.total == 0 && js.reason == "" {
						js.reason = fmt.Sprintf("needs %s; %d free, and no running job may be shrunk for it (higher slopes, at their minRes, or the restart would not pay)", needsGPUs(f, js.job.ReqGPUs), st.freeGPUs)
					}
					break
				}
				grew = true
			}
			if nr != nil && js.orig == 0 && js.total > 0 {
				p.preferCompatible(st, i, mark)
			}
			leave()
			if js.total != js.orig && !p.finish(st, i) {
				st.rollback(mark)
			}
		}
	}
	growAll(order)
	if len(held) > 0 && st.freeGPUs > 0 {
		// The leftover pass: GPUs nobody took would idle until the next
		// round; a held job may have them after all, sharing its uplinks.
		hold, leftover = false, true
		why := make([]string, len(held))
		for n, i := range held {
			why[n], st.jobs[i].reason = st.jobs[i].reason, ""
		}
		growAll(held)
		for n, i := range held {
			if js := &st.jobs[i]; js.total == 0 {
				js.reason = why[n] + " (" + gpuCount(st.freeGPUs) + " left over this round: not an offer it can take)"
			}
		}
	}

	// Consolidation: a running job spread over servers moves onto one
	// server when free GPUs allow it and the faster placement pays for the
	// restart (jobs start spread when nothing better is free).
	for i := range st.jobs {
		js := &st.jobs[i]
		if js.orig == 0 || js.total != js.orig || js.touched || js.cv == nil || st.isDirty[i] || js.total > st.maxPer || len(js.alloc) < 2 || p.settling(st, js) {
			continue
		}
		leave := st.only(i) // labels.go
		target := singleServer(st, i, js.total)
		leave()
		if target < 0 {
			continue
		}
		mark := len(st.journal)
		for _, a := range append([]Alloc(nil), js.alloc...) {
			if a.Server != target {
				st.move(i, a.Server, -a.GPUs)
			}
		}
		st.move(i, target, js.orig-js.total)
		sortAlloc(js.alloc)
		if !p.finish(st, i) {
			st.rollback(mark)
			js.touched, js.planSet = false, false
			st.circleChanged(i)
		}
	}

	// Plan-only reconfiguration of running jobs whose allocation did not
	// change: switch to the best plan when it pays for the restart.
	for i := range st.jobs {
		js := &st.jobs[i]
		if js.orig == 0 || js.total != js.orig || js.touched || js.cv == nil || p.settling(st, js) {
			continue
		}
		v := p.planFor(st, i)
		if v.ok && v.plan != js.job.Plan && p.pays(js, js.origThr, v.thr) && js.meets(v) {
			js.touched, js.planSet, js.newPlan, js.newThr = true, true, v.plan, v.thr
			st.circleChanged(i)
		}
	}
	d := p.emit(st)
	if nr != nil {
		nr.finish(&s, &d)
		if p.net.Shifts {
			if p.shifts == nil {
				p.shifts = newShiftMemo()
			}
			p.shifts.crossOnly = p.circleMode != circleMemoOff
			d.Links = shiftDecisionsMemo(&s, &d, p.opt.RestartCost, p.shifts)
		}
	}
	for i := range st.jobs {
		js := &st.jobs[i]
		if js.orig > 0 && js.total > 0 && !js.touched && js.total == js.orig && st.snap.Now-js.job.LastChange < p.opt.MinDwell {
			if t := js.job.LastChange + p.opt.MinDwell; d.WakeAt == 0 || t < d.WakeAt {
				d.WakeAt = t
			}
		}
	}
	return d
}

// preferCompatible is the compatibility tie-break for a waiting job i
// that this round placed across racks with free GPUs only (no job shrunk
// since mark): among equally good placements (the same GPUs per server,
// so the same best plan and predicted throughput) the one whose rack
// uplinks its communication interleaves with best. With
// NetOptions.UplinkPlace it is the uplink-aware placement
// (placeOnUplinks), which weighs the fewest-racks alternatives and the
// uplinks' load too.
func (p *Morphling) preferCompatible(st *state, i, mark int) {
	js := &st.jobs[i]
	if js.job.Model == nil || len(js.alloc) < 2 || !st.cross(i) {
		return
	}
	for _, o := range st.journal[mark:] {
		if o.job != i {
			return // it took GPUs from others: not a free choice
		}
	}
	v := p.c.best(js.job.Model, js.fam, st.placement(i), true, js.cpg)
	if !v.ok {
		return
	}
	thr := func(a []Alloc) float64 {
		if w := p.c.best(js.job.Model, js.fam, placementOf(a), crossRack(st.snap.Servers, a), js.cpg); w.ok {
			return w.thr
		}
		return 0
	}
	if p.net.UplinkPlace {
		placeOnUplinks(st, i, v.plan, thr) // uplinkplace.go
		return
	}
	preferCompatible(st, i, v.plan, thr)
}

// planFor is the plan job i runs on its tentative allocation: the best
// plan the policy may use there, or the user's own plan when the
// allocation is exactly the request and the measured promise beats every
// predicted alternative (the model is only a model).
func (p *Morphling) planFor(st *state, i int) planVal {
	js := &st.jobs[i]
	j := js.job
	pl, cr := st.placement(i), st.cross(i)
	v := p.c.best(j.Model, js.fam, pl, cr, js.cpg)
	// The promise was measured with the request's cores: an offload plan
	// with fewer cores per GPU is slower than that.
	reqCores := !j.ReqPlan.Offload || js.cpg >= j.ReqCPUs/max(j.ReqGPUs, 1)
	if j.Promise > 0 && !cr && reqCores && (!v.ok || v.thr < j.Promise) && pl.GPUs() == j.ReqGPUs && p.packed(pl, st) {
		v = planVal{ok: true, plan: j.ReqPlan, thr: j.Promise, mem: perf.EstimateMemory(j.Model.Arch, j.ReqPlan, pl)}
	}
	return v
}

// packed reports whether pl uses as few servers as its GPU count allows.
func (p *Morphling) packed(pl perf.Placement, st *state) bool {
	return len(pl) == (pl.GPUs()+st.maxPer-1)/max(st.maxPer, 1)
}

// meets reports whether a guaranteed job's plan keeps its promise.
func (js *jstate) meets(v planVal) bool {
	return js.job.Class != Guaranteed || (v.ok && v.thr >= js.ref*(1-1e-9))
}

// settling reports whether a running job changed less than MinDwell ago
// and has not been changed in this round (then it may change freely).
func (p *Morphling) settling(st *state, js *jstate) bool {
	return js.orig > 0 && !js.touched && js.total == js.orig && st.snap.Now-js.job.LastChange < p.opt.MinDwell
}

// singleServer finds a server that can hold all of job i's target GPUs
// (and cores): one it already uses first, else the best-fitting free one;
// -1 when none can.
func singleServer(st *state, i, target int) int {
	js := &st.jobs[i]
	for _, a := range js.alloc {
		if st.free[a.Server]+a.GPUs >= target && st.freeCPU[a.Server]+a.CPUs >= target*js.cpg {
			return a.Server
		}
	}
	for k := target; k <= st.maxPer; k++ {
		if sv, ok := st.idx.any(k); ok && st.freeCPU[sv] >= target*js.cpg {
			return sv
		}
	}
	return -1
}

// slopeTie rounds a slope to 1e-6 for NetOptions.ShortestFirst: slopes
// that differ below that are one slope computed along two paths (a
// normalised throughput of about the request's GPU count: a pinned
// job's single step is 1 ± rounding), so the finish order decides them.
func slopeTie(s float64) float64 {
	return math.Round(s*1e6) / 1e6
}

// finishKey is NetOptions.ShortestFirst's key: the job's submission time
// plus its predicted remaining run time, the remaining iterations at the
// throughput of the GPUs it holds (a waiting job: its curve's first
// step), alone on its links. Earliest first: the shortest of jobs
// submitted together goes first, and a job's key is fixed while it
// waits (unless its model is refitted), so once the clock passes it no job
// submitted later overtakes it.
// A job of unknown length (ItersTotal 0) or no throughput goes last.
func (js *jstate) finishKey() float64 {
	j := js.job
	if j.Model == nil || js.cv == nil || j.ItersTotal <= 0 {
		return math.Inf(1)
	}
	thr := js.cv.at(max(js.orig, js.cv.minRun))
	if thr <= 0 {
		return math.Inf(1)
	}
	return j.Submit + js.remaining*float64(j.Model.Arch.GlobalBatch)/thr
}

// waitingRuns is, for each position n of order, the shortest predicted
// run (remaining iterations at the throughput of the curve's first step,
// alone) of the jobs at positions n.. that wait and whose length is
// known; +Inf past the last. NetOptions.UplinkHoldSwap: a hold gives the
// held job's GPUs to the jobs behind it.
func waitingRuns(st *state, order []int) []float64 {
	out := make([]float64, len(order)+1)
	out[len(order)] = math.Inf(1)
	for n := len(order) - 1; n >= 0; n-- {
		out[n] = out[n+1]
		js := &st.jobs[order[n]]
		if js.orig != 0 || js.total != 0 || js.cv == nil || js.cv.minRun == 0 || js.job.ItersTotal <= 0 || js.job.Model == nil {
			continue
		}
		if thr := js.cv.at(js.cv.minRun); thr > 0 {
			out[n] = math.Min(out[n], js.remaining*float64(js.job.Model.Arch.GlobalBatch)/thr)
		}
	}
	return out
}

// waitingCount is how many jobs wait at the round's start (anyWaiting's
// jobs).
func waitingCount(st *state) int {
	n := 0
	for i := range st.jobs {
		if js := &st.jobs[i]; js.orig == 0 && js.total == 0 && js.cv != nil && js.cv.minRun > 0 {
			n++
		}
	}
	return n
}

// holdBound is the uplink hold's bound in runs of the held job
// (NetOptions.UplinkHoldRuns) when waiting jobs wait at the round's start,
// the held one among them: the others waiting, at least 2, at most
// maxRuns. A hold is a reorder among the waiting: the
// held job's GPUs go to a job behind it whose communication interleaves
// with the uplink's jobs. With many waiting it costs the held job little
// (someone waits in any order) and saves each of them the uplink capacity
// an overlapping pair would waste for the pair's whole run; with one or
// two others waiting it is mostly a delay of the held job (issue 29,
// 2026-11-27: Poisson arrivals at load 0.9 keep 0-5 jobs waiting, a batch
// dozens). The floor of two runs gives a job that has one other job
// behind it a second run of hold (issue 29: at one, the Poisson
// arrivals of the CASSINI sweep at 4:1 started more jobs beside uplinks
// they do not interleave with; docs/network.md).
func holdBound(maxRuns float64, waiting int) float64 {
	return math.Min(maxRuns, math.Max(2, float64(waiting-1)))
}

// anyWaiting reports whether a job still waits after the privileged pass.
func anyWaiting(st *state) bool {
	for i := range st.jobs {
		if js := &st.jobs[i]; js.orig == 0 && js.total == 0 && js.cv != nil && js.cv.minRun > 0 {
			return true
		}
	}
	return false
}

func (js *jstate) cvEnv() []float64 {
	if js.cv == nil {
		return []float64{0}
	}
	return js.cv.env
}

// pays is the anti-thrashing rule for a job changing from throughput from
// to to: the normalised gain over min(Horizon, remaining time) must exceed
// GainFactor times the work the restart loses.
func (p *Morphling) pays(js *jstate, from, to float64) bool {
	if to <= from {
		return false
	}
	h := p.opt.Horizon
	if to > 0 && js.remaining > 0 {
		h = math.Min(h, js.remaining/(to/float64(js.job.Model.Arch.GlobalBatch)))
	}
	gain := js.u(to-from) * h
	cost := p.opt.GainFactor * js.u(from) * p.opt.RestartCost
	return gain > cost
}

// quotaRoom shrinks the other guaranteed jobs of waiting job i's tenant
// toward their minRes, the one furthest above it first, until i's minRes
// fits under the tenant's quota q beside what they hold; a job whose
// promise its smaller placement would break is left alone. It reports
// whether it made the room (the caller rolls back when not).
func (p *Morphling) quotaRoom(st *state, i, q int) bool {
	js := &st.jobs[i]
	t := js.job.Tenant
	banned := map[int]bool{}
	for st.gHeld[t]-js.total+js.minG > q {
		v := -1
		for k := range st.jobs {
			ks := &st.jobs[k]
			if k == i || banned[k] || ks.job.Class != Guaranteed || ks.job.Tenant != t || ks.cv == nil || ks.total <= ks.minG {
				continue
			}
			if v < 0 || ks.total-ks.minG > st.jobs[v].total-st.jobs[v].minG {
				v = k
			}
		}
		if v < 0 {
			return false
		}
		vs := &st.jobs[v]
		to := max(vs.cv.below(vs.total), vs.minG)
		before := len(st.journal)
		p.shrink(st, v, to, i)
		if vs.total > 0 && !vs.meets(p.planFor(st, v)) {
			st.rollback(before)
			banned[v] = true
		}
	}
	return true
}

// grow tries to bring job i to target GPUs: free GPUs first, then by
// shrinking the lowest-slope job above its minRes (lines 7-19). must is set
// for a job below its minRes (it may shrink jobs whatever their slope).
func (p *Morphling) grow(st *state, i, target int, slope float64, must, freeOnly bool) bool {
	js := &st.jobs[i]
	need := target - js.total
	if need <= 0 {
		return true
	}
	if must && js.total == 0 {
		// A waiting guaranteed job: free GPUs when they form a packed
		// placement, else Algorithm 1's node-by-node shrinking on the
		// servers that can hold it packed; only then anything (which
		// finish rejects when too spread for the promise).
		mark := len(st.journal)
		if st.takeFree(i, need) == need && p.packed(st.placement(i), st) && (!st.cross(i) || spansRacks(target, st.rackGPUs())) {
			return true
		}
		st.rollback(mark)
		if p.packedGrow(st, i, target) {
			return true
		}
		st.rollback(mark)
		// Free GPUs and those of jobs above their minRes only shrink
		// during the privileged pass: a target that found too few of them
		// anywhere will not find more for a larger one.
		if f, ok := st.mustFail[js.cpg]; ok && target >= f && st.scope == nil {
			return false
		}
	}
	if target <= st.maxPer && js.total > 0 {
		// A job that fits one server grows onto one server when it can
		// (its own, or the best-fitting free one), not across servers.
		if sv := singleServer(st, i, target); sv >= 0 {
			for _, a := range append([]Alloc(nil), js.alloc...) {
				if a.Server != sv {
					st.move(i, a.Server, -a.GPUs)
				}
			}
			st.move(i, sv, target-js.total)
			sortAlloc(js.alloc)
			need = 0
		}
	}
	need -= st.takeFree(i, need)
	if need > 0 && freeOnly {
		return false
	}
	// Algorithm 1 shrinks until the job fits: a victim may give several
	// steps (it is re-ranked by its new loss after each); only a victim
	// whose shrink is refused (a guaranteed job that would fall below its
	// promise) is banned for the rest of this growth.
	banned := map[int]bool{}
	for need > 0 {
		v, to := p.victim(st, i, slope, must, banned)
		if v < 0 {
			if must && js.orig == 0 && st.scope == nil {
				if st.mustFail == nil {
					st.mustFail = map[int]int{}
				}
				if f, ok := st.mustFail[js.cpg]; !ok || target < f {
					st.mustFail[js.cpg] = target
				}
			}
			return false
		}
		before := len(st.journal)
		p.shrink(st, v, to, i)
		if vs := &st.jobs[v]; vs.total > 0 && vs.job.Class == Guaranteed && !vs.meets(p.planFor(st, v)) {
			st.rollback(before)
			banned[v] = true
			continue
		}
		need -= st.takeFree(i, need)
	}
	if must {
		return true
	}
	// Placement check: spread over servers, the job must still get most of
	// what the packed curve promised (a packed placement is the curve).
	pl := st.placement(i)
	if p.packed(pl, st) && !st.cross(i) && js.total < len(js.cv.thr) && js.cv.thr[js.total] > 0 && (len(pl) == 1 || pl[len(pl)-1] == js.total-(len(pl)-1)*st.maxPer) {
		return js.cv.thr[js.total] > js.origThrOrZero()
	}
	v := p.c.best(js.job.Model, js.fam, pl, st.cross(i), js.cpg)
	ref := js.cv.at(js.total)
	if st.cross(i) && spansRacks(js.total, st.rackGPUs()) {
		// No rack holds this many GPUs: the curve's packed placement
		// (priced inside one rack) cannot be had, the same count packed
		// across racks is the most it can get.
		if w := p.c.best(js.job.Model, js.fam, perf.PackedPlacement(js.total, max(st.maxPer, 1)), true, js.cpg); w.ok {
			ref = math.Min(ref, w.thr)
		}
	}
	return v.ok && v.thr >= p.opt.FragTolerance*ref && v.thr > js.origThrOrZero()
}

func (js *jstate) origThrOrZero() float64 {
	if js.orig == 0 {
		return 0
	}
	return js.origThr
}

// victim picks the running job with the lowest loss slope that is above
// its minRes and may be shrunk for job i, and the count to shrink it to.
func (p *Morphling) victim(st *state, i int, slope float64, must bool, banned map[int]bool) (int, int) {
	js := &st.jobs[i]
	if st.vlist == nil {
		// Victims that have not changed this round, by ascending loss:
		// built once per round, so a search stops at the first eligible.
		st.vlist = make([]vcand, 0, len(st.jobs))
		for k := range st.jobs {
			if to, loss, ok := p.lossOf(st, k); ok {
				v := &st.jobs[k]
				c := vcand{job: k, to: to, loss: loss, give: v.total - to, settling: p.settling(st, v)}
				if !v.touched && v.total == v.orig && v.orig > 0 {
					c.cost = p.opt.GainFactor * v.u(v.origThr) * p.opt.RestartCost
				}
				st.vlist = append(st.vlist, c)
			}
		}
		slices.SortFunc(st.vlist, victimOrder(st))
	}
	best, bestTo, bestLoss := -1, 0, math.Inf(1)
	consider := func(k, to int, loss float64) bool {
		v := &st.jobs[k]
		if k == i || banned[k] || !st.onAllowed(k, i) {
			return false
		}
		if !must {
			if slope <= loss*1.05 || p.settling(st, v) {
				return false
			}
			// Anti-thrashing: the gain of moving the GPUs must pay for the
			// victim's restart (none if it changes this round anyway).
			if !v.touched && v.total == v.orig && v.orig > 0 {
				h := p.opt.Horizon
				if thr := js.cv.at(js.total + (v.total - to)); thr > 0 && js.remaining > 0 {
					h = math.Min(h, js.remaining/(thr/float64(js.job.Model.Arch.GlobalBatch)))
				}
				gain := (slope - loss) * float64(v.total-to) * h
				if gain <= p.opt.GainFactor*v.u(v.origThr)*p.opt.RestartCost {
					return false
				}
			}
		}
		if loss < bestLoss || (loss == bestLoss && v.job.Submit > st.jobs[best].job.Submit) {
			best, bestTo, bestLoss = k, to, loss
		}
		return true
	}
	for _, k := range st.dirty {
		if v := &st.jobs[k]; v.total <= v.minG || v.cv == nil || banned[k] || k == i {
			continue // cannot be shrunk: skip before pricing it
		}
		if to, loss, ok := p.lossOf(st, k); ok {
			consider(k, to, loss)
		}
	}
	// The unchanged victims, lowest loss first: their eligibility is
	// read from the list (settling and the restart cost do not change
	// while they stay unchanged), so the scan touches no job state.
	for n := range st.vlist {
		c := &st.vlist[n]
		if c.loss > bestLoss || (!must && slope <= c.loss*1.05) {
			break
		}
		if st.isDirty[c.job] || c.job == i || len(banned) > 0 && banned[c.job] {
			continue
		}
		if !must {
			if c.settling {
				continue
			}
			if c.cost > 0 {
				h := p.opt.Horizon
				if thr := js.cv.at(js.total + c.give); thr > 0 && js.remaining > 0 {
					h = math.Min(h, js.remaining/(thr/float64(js.job.Model.Arch.GlobalBatch)))
				}
				if (slope-c.loss)*float64(c.give)*h <= c.cost {
					continue
				}
			}
		}
		if consider(c.job, c.to, c.loss) {
			break
		}
	}
	return best, bestTo
}

// vcand is a possible victim with the count it would shrink to and the
// normalised throughput it would lose per GPU.
type vcand struct {
	job, to int
	loss    float64
	// Fixed while the job is unchanged this round: the GPUs the step
	// frees, whether it is settling (MinDwell), and GainFactor times the
	// normalised work its restart loses (0: no restart to pay for).
	give     int
	settling bool
	cost     float64
}

// lossOf is what shrinking job k by one step costs: the count it would
// drop to (0: preemption) and the normalised throughput lost per GPU; ok
// is false when k cannot be shrunk (not running, at its minRes).
func (p *Morphling) lossOf(st *state, k int) (int, float64, bool) {
	v := &st.jobs[k]
	if v.total == 0 || v.cv == nil || v.total <= v.minG {
		return 0, 0, false
	}
	to := v.cv.below(v.total)
	if to < v.minG {
		to = v.minG
	}
	if to > 0 && to < v.cv.minRun {
		to = 0
	}
	if v.minG > 0 && to < v.minG {
		return 0, 0, false
	}
	cur := v.u(v.cv.at(v.total))
	if v.orig > 0 && v.total == v.orig {
		cur = v.u(v.origThr)
	}
	return to, (cur - v.u(v.cv.at(to))) / float64(v.total-to), true
}

// packedGrow places waiting job i on target GPUs over the fewest servers
// that count allows, as Algorithm 1's ScheduleJob does node by node: it
// picks the servers with the most GPUs that are free or that jobs above
// their minRes can give back (inside one rack when a rack can hold the job),
// takes their free GPUs, then shrinks the jobs on them, lowest loss
// first, until the job has its share of each. A guaranteed victim that
// would fall below its promise is left alone. It returns false (the
// caller rolls back) when those servers cannot supply target.
func (p *Morphling) packedGrow(st *state, i, target int) bool {
	js := &st.jobs[i]
	per := max(st.maxPer, 1)
	k := (target + per - 1) / per
	cpg := max(js.cpg, 1)
	// Room (free GPUs plus those of jobs above their minRes) only shrinks
	// during the privileged pass: once target GPUs at cpg cores found no
	// servers, no larger target will this round.
	if st.packFail == nil {
		st.packFail = map[int]int{}
	}
	if f, ok := st.packFail[cpg]; ok && target >= f && st.scope == nil {
		return false
	}
	if st.roomOK == nil {
		st.roomAt = make([]int, len(st.snap.Servers))
		st.roomOK = make([]bool, len(st.snap.Servers))
		st.roomMin = make([]int, len(st.snap.Servers))
		st.roomCPG = make([]int, len(st.snap.Servers))
	}
	defer func() {
		if js.total < target && st.scope == nil {
			if f, ok := st.packFail[cpg]; !ok || target < f {
				st.packFail[cpg] = target
			}
		}
	}()
	room := func(s int) int {
		if st.hidden(s) {
			return 0 // labels.go: not a server the job may use
		}
		if st.roomOK[s] {
			if st.roomCPG[s] != cpg {
				st.roomMin[s], st.roomCPG[s] = min(st.roomAt[s], st.snap.Servers[s].CPUs/cpg), cpg
			}
			return st.roomMin[s]
		}
		// A job above its minRes gives back at most what it holds
		// above it (Algorithm 1 shrinks "Over-Min" jobs only): a
		// guaranteed job grown past its request does not make its
		// server look as roomy as one of best-effort jobs.
		n := max(st.free[s], 0)
		for _, j := range st.on[s] {
			if v := &st.jobs[j]; j != i && v.cv != nil && v.total > v.minG {
				for _, a := range v.alloc {
					if a.Server == s {
						n += min(a.GPUs, v.total-v.minG)
					}
				}
			}
		}
		n = min(n, st.snap.Servers[s].GPUs)
		st.roomAt[s], st.roomOK[s] = n, true
		st.roomMin[s], st.roomCPG[s] = min(n, st.snap.Servers[s].CPUs/cpg), cpg
		return st.roomMin[s]
	}
	// better orders servers for the job: the roomiest first; among equally
	// roomy ones those with more free GPUs (fewer running jobs to shrink:
	// a free server is not passed over for one whose job would have to be
	// shrunk or preempted), then by index.
	better := func(a, b int) bool {
		if ra, rb := room(a), room(b); ra != rb {
			return ra > rb
		}
		if fa, fb := max(st.free[a], 0), max(st.free[b], 0); fa != fb {
			return fa > fb
		}
		return a < b
	}
	// The k best servers of a group, roomiest first, and their room.
	pick := func(group []int) ([]int, int) {
		top := make([]int, 0, k+1)
		for _, s := range group {
			r := room(s)
			if r == 0 {
				continue
			}
			n := len(top)
			if n == k && !better(s, top[n-1]) {
				continue
			}
			top = append(top, s)
			for x := len(top) - 1; x > 0 && better(top[x], top[x-1]); x-- {
				top[x], top[x-1] = top[x-1], top[x]
			}
			if len(top) > k {
				top = top[:k]
			}
		}
		sum := 0
		for _, s := range top {
			sum += room(s)
		}
		return top, sum
	}
	var chosen []int
	if rg := st.rackGPUs(); rg > 0 && target <= rg {
		bestFree := -1
		for _, r := range st.racks {
			top, sum := pick(r)
			if sum < target {
				continue
			}
			free := 0
			for _, s := range top {
				free += max(st.free[s], 0)
			}
			if free > bestFree {
				chosen, bestFree = top, free
			}
		}
	} else {
		all := make([]int, len(st.snap.Servers))
		for s := range all {
			all[s] = s
		}
		var sum int
		chosen, sum = pick(all)
		if sum < target {
			chosen = nil
		}
	}
	if len(chosen) == 0 {
		return false
	}
	// Shares: the packed placement, fullest share on the roomiest server.
	left := target
	banned := map[int]bool{}
	for _, s := range chosen {
		want := min(per, left, room(s))
		got := 0
		take := func() {
			if n := min(want-got, max(st.free[s], 0), st.freeCPU[s]/cpg); n > 0 {
				st.move(i, s, n)
				got += n
			}
		}
		take()
		for got < want {
			v, to, best := -1, 0, math.Inf(1)
			for _, j := range st.on[s] {
				if j == i || banned[j] {
					continue
				}
				if t, l, ok := p.lossOf(st, j); ok && (l < best || l == best && v >= 0 && st.jobs[j].job.Submit > st.jobs[v].job.Submit) {
					v, to, best = j, t, l
				}
			}
			if v < 0 {
				return false
			}
			before := len(st.journal)
			p.shrinkOn(st, v, to, s)
			if vs := &st.jobs[v]; vs.total > 0 && vs.job.Class == Guaranteed && !vs.meets(p.planFor(st, v)) {
				st.rollback(before)
				banned[v] = true
				continue
			}
			take()
		}
		left -= got
	}
	sortAlloc(js.alloc)
	return left == 0
}

// shrink takes victim v down to `to` GPUs, releasing first on the servers
// job i already uses, then where v holds the most. A guaranteed victim
// whose spread placement would fall below its promise is not shrunk.
func (p *Morphling) shrink(st *state, v, to, forJob int) { p.shrinkFrom(st, v, to, forJob, -1) }

// shrinkOn is shrink releasing on server first before any other.
func (p *Morphling) shrinkOn(st *state, v, to, first int) { p.shrinkFrom(st, v, to, -1, first) }

func (p *Morphling) shrinkFrom(st *state, v, to, forJob, first int) {
	vs := &st.jobs[v]
	give := vs.total - to
	if to == 0 {
		for len(vs.alloc) > 0 && give > 0 {
			a := vs.alloc[len(vs.alloc)-1]
			st.move(v, a.Server, -a.GPUs)
			give -= a.GPUs
		}
		vs.touched = true
		vs.planSet = false
		st.circleChanged(v)
		return
	}
	mine := map[int]bool{}
	if forJob >= 0 {
		for _, a := range st.jobs[forJob].alloc {
			mine[a.Server] = true
		}
	}
	if first >= 0 {
		mine[first] = true
	}
	servers := make([]Alloc, len(vs.alloc))
	copy(servers, vs.alloc)
	sort.SliceStable(servers, func(a, b int) bool {
		if ha, hb := st.hidden(servers[a].Server), st.hidden(servers[b].Server); ha != hb {
			return hb // labels.go: first where the job it is shrunk for may use them
		}
		ma, mb := mine[servers[a].Server], mine[servers[b].Server]
		if ma != mb {
			return ma
		}
		return servers[a].GPUs+st.free[servers[a].Server] > servers[b].GPUs+st.free[servers[b].Server]
	})
	for _, a := range servers {
		if give == 0 {
			break
		}
		n := min(a.GPUs, give)
		st.move(v, a.Server, -n)
		give -= n
	}
	sortAlloc(vs.alloc)
	vs.touched = true
	vs.planSet = false
	st.circleChanged(v)
}

// finish checks job i's new allocation: a feasible best plan, the
// guarantee, the anti-thrashing rule, cores and host memory (lines 20-24).
func (p *Morphling) finish(st *state, i int) bool {
	js := &st.jobs[i]
	if js.total == 0 {
		return false
	}
	pl := st.placement(i)
	v := p.planFor(st, i)
	if !v.ok {
		js.reason = fmt.Sprintf("no feasible plan on placement %s", pl)
		return false
	}
	if !js.meets(v) {
		js.reason = fmt.Sprintf("free GPUs (placement %s) are too spread to meet the promised %.2f samples/s", pl, js.ref)
		return false
	}
	if js.orig > 0 && !p.pays(js, js.origThr, v.thr) {
		return false
	}
	js.touched, js.planSet, js.newPlan, js.newThr = true, true, v.plan, v.thr
	st.circleChanged(i)
	return true
}

// emit turns the working state into decisions: preemptions and shrinks
// first, then grows and plan changes, then starts; then the reasons.
func (p *Morphling) emit(st *state) Decisions {
	// The CPU branch of Algorithm 1 on the final GPU allocations: cores
	// by CPU slope, taken from the lowest CPU-slope jobs above their
	// minimum (cpu.go).
	t := p.cpuTuner(st)
	if p.flat == nil || p.flat.known != st.snap.Known {
		p.flat = &flatMemo{known: st.snap.Known}
	}
	p.flat.next = make(map[string]flatEntry, len(p.flat.prev))
	t.flat = p.flat
	t.run()
	p.flat.prev, p.flat.next = p.flat.next, nil
	return emitState(st, func(i int) (perf.Plan, float64, perf.Memory, bool) {
		js := &st.jobs[i]
		if js.planSet && !js.cpuSet && js.newPlan.GPUs() == js.total && sameAlloc(js.alloc, js.job.Alloc) {
			v := p.planFor(st, i)
			return js.newPlan, js.newThr, v.mem, true
		}
		v := p.planFor(st, i)
		return v.plan, v.thr, v.mem, v.ok
	})
}

// cpuTuner is the CPU branch over st: a job's CPU curve is its best plan
// (planFor) on its tentative placement per cores per GPU.
func (p *Morphling) cpuTuner(st *state) *cpuTuner {
	return &cpuTuner{st: st, opt: p.opt, useMinSlope: true,
		thr: func(i, c int) float64 {
			js := &st.jobs[i]
			if js.cv == nil || js.total == 0 {
				return 0
			}
			old := js.cpg
			js.cpg = c
			v := p.planFor(st, i)
			js.cpg = old
			if !v.ok {
				return 0
			}
			return v.thr
		},
		w:   func(i int) float64 { return st.jobs[i].w },
		ref: func(i int) float64 { return st.jobs[i].ref },
	}
}

func sameAlloc(a, b []Alloc) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Server != b[i].Server || a[i].GPUs != b[i].GPUs {
			return false
		}
	}
	return true
}

// gpuCount is "1 GPU" or "n GPUs".
// needsGPUs is what a waiting job needs to start, its next step of n GPUs,
// said as the least it takes when it asked for more: "≥1 GPU (asks 8)";
// "8 GPUs" when that is what it asked.
func needsGPUs(n, asked int) string {
	if asked > n {
		return fmt.Sprintf("≥%s (asks %d)", gpuCount(n), asked)
	}
	return gpuCount(n)
}

func gpuCount(n int) string {
	if n == 1 {
		return "1 GPU"
	}
	return fmt.Sprintf("%d GPUs", n)
}

// victimOrder orders the victim list: ascending loss, then the latest
// submitted first. The job index breaks the last tie, so pdqsort gives
// the order a stable sort of the list (built in index order) gave, at a
// third of its cost on a backlog's thousands of running jobs; two NaN
// losses tie, as they did (TestVictimOrderIsTheStableOne).
func victimOrder(st *state) func(x, y vcand) int {
	return func(x, y vcand) int {
		return stableOrder(x.loss, y.loss, st.jobs[y.job].job.Submit, st.jobs[x.job].job.Submit, x.job, y.job)
	}
}

// stableOrder compares by a first key (a, b), then a second (sa, sb),
// then the index (ia, ib): what a stable sort by the two keys gives a
// list in index order. Where the first keys differ but compare equal
// (two NaNs) the index decides, as the stable sort's comparator, which
// returned 0 there, left them.
func stableOrder(a, b, sa, sb float64, ia, ib int) int {
	if a != b {
		if c := cmp.Compare(a, b); c != 0 {
			return c
		}
		return cmp.Compare(ia, ib)
	}
	if c := cmp.Compare(sa, sb); c != 0 {
		return c
	}
	return cmp.Compare(ia, ib)
}
