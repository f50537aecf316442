package sched

import (
	"fmt"
	"math"
	"slices"

	"github.com/replan/replan/perf"
)

// The CPU branch of Algorithm 1 (lines 9-17 with resType = CPU), shared by
// morphling, replan and synergy.
//
// Cores are held per GPU: a job's allocation on a server is GPUs × cpg
// cores, cpg (cores per GPU) the same on all of its servers. A job's CPU
// sensitivity curve is its throughput on its (final, tentative) placement
// for cpg = 1, 2, …: only plans that offload the optimizer to the CPU
// (ZeRO-Offload) depend on it, so every other job's curve is flat and its
// CPU slope 0. The CPU slope of a step is the normalised throughput it adds
// per core.
//
// minimum cores per GPU (the CPU part of minRes): 1 for every job whose
// plan does not offload and for best-effort jobs (nothing runs on fewer);
// for a guaranteed job, the fewest cores per GPU at which its curve still
// reaches the promise (its current cpg when none below does).
//
// Jobs with a positive CPU slope grow, steepest first, one step at a time:
// free cores on each of their servers first, then cores of the job on that
// server with the lowest CPU loss slope above its minimum, only when the
// grower's slope beats that loss (×1.05) or the grower is below its own
// minimum, never below the victim's minimum, never a job within MinDwell
// of its last change, and only when the move pays for the victim's
// restart (the anti-thrashing rule of GPU victims). A running grower whose
// GPUs and plan do not change otherwise must pay for its own restart too:
// a CPU-only change is a Reconfigure. Morphling stops a job's CPU growth
// when a core adds less than MinSlope / (the server's cores per GPU): a
// core must be worth what the GPU branch asks of a GPU, per core that
// comes with a GPU. Synergy gives every core that helps.
//
// A server keeps its per-GPU share of cores for each of its free GPUs, so
// tuning cores never blocks a later GPU placement; when a job waits, a
// reserve pass first returns that share to free GPUs that lack it (cores
// tuned while the server was full), from the jobs above their minimum,
// lowest CPU loss first: a job that cannot be placed for want of cores is
// below its minimum, so neither slopes nor MinDwell protect them.

// maxCPG caps the cores per GPU a CPU curve is evaluated to.
const maxCPG = 32

type cpuTuner struct {
	st  *state
	opt Options
	// thr is the predicted throughput of job i on its tentative placement
	// with c cores per GPU (the policy's best plan there, or its fixed
	// plan); 0 when nothing runs.
	thr func(i, c int) float64
	// w normalises job i's throughput (GPUs of its request per unit).
	w func(i int) float64
	// ref is job i's promise (guaranteed jobs).
	ref func(i int) float64
	// minC memoises each job's minimum cores per GPU.
	minC map[int]int
	memo map[[2]int]float64
	// useMinSlope stops CPU growth below MinSlope per GPU's share of
	// cores (morphling; synergy gives every core that helps).
	useMinSlope bool
	// trimStarts gives a job starting this round whose curve is flat its
	// minimum cores (synergy; no restart is involved).
	trimStarts bool
	// flat, when set, remembers across rounds which running jobs have a
	// flat CPU curve on their allocation (most do: no offload plan), so
	// an unchanged job is not re-priced every round.
	flat *flatMemo
}

// flatMemo is cpuTuner's memory of flat CPU curves, per job ID: valid
// while the job keeps its allocation and cores and the policy's Known.
type flatMemo struct {
	known      Known
	prev, next map[string]flatEntry
}

type flatEntry struct {
	model *perf.Model
	cpg   int
	alloc []Alloc
	flat  bool
}

func (t *cpuTuner) at(i, c int) float64 {
	k := [2]int{i, c}
	if v, ok := t.memo[k]; ok {
		return v
	}
	v := t.thr(i, c)
	t.memo[k] = v
	return v
}

// min is job i's minimum cores per GPU.
func (t *cpuTuner) min(i int) int {
	if c, ok := t.minC[i]; ok {
		return c
	}
	js := &t.st.jobs[i]
	c := 1
	if js.job.Class == Guaranteed && js.job.Model != nil {
		c = max(js.cpg, 1)
		target := t.ref(i) * (1 - 1e-9)
		for k := 1; k < js.cpg; k++ {
			if t.at(i, k) >= target {
				c = k
				break
			}
		}
		if t.at(i, js.cpg) < target {
			c = js.cpg // already short: keep what it has
		}
	}
	t.minC[i] = c
	return c
}

// cap is the most cores per GPU job i may reach: its servers' cores
// minus the share reserved for free GPUs and the other jobs' minimums.
func (t *cpuTuner) cap(i int) int {
	st := t.st
	js := &st.jobs[i]
	c := maxCPG
	for _, a := range js.alloc {
		if a.GPUs == 0 {
			continue
		}
		sv := st.snap.Servers[a.Server]
		room := sv.CPUs - max(st.free[a.Server], 0)*(sv.CPUs/max(sv.GPUs, 1))
		for _, k := range st.on[a.Server] {
			if k == i {
				continue
			}
			for _, b := range st.jobs[k].alloc {
				if b.Server == a.Server {
					room -= b.GPUs * t.min(k)
				}
			}
		}
		c = min(c, room/a.GPUs)
	}
	return max(c, js.cpg)
}

// step is job i's best CPU step from its cpg up to limit: the cores per
// GPU with the highest normalised gain per core, and that slope.
func (t *cpuTuner) step(i, limit int) (int, float64) {
	js := &t.st.jobs[i]
	c0 := js.cpg
	if limit <= c0 || js.total == 0 {
		return 0, 0
	}
	base := t.at(i, c0)
	if t.at(i, limit) <= base*(1+1e-9) {
		return 0, 0 // flat up to the cap
	}
	// Steps of 1, 2, 4, … cores per GPU and the cap: the curve is concave
	// in cores (the optimizer step scales as 1/cores), so this finds the
	// steepest step at a fraction of the evaluations.
	bestC, bestS := 0, 0.0
	for d := 1; ; d *= 2 {
		c := min(c0+d, limit)
		s := (t.at(i, c) - base) * t.w(i) / float64((c-c0)*js.total)
		if s > bestS*(1+1e-9) {
			bestC, bestS = c, s
		}
		if c == limit {
			break
		}
	}
	return bestC, bestS
}

// minSlope is the least normalised throughput per core worth a CPU step
// of job i (morphling): MinSlope spread over the per-GPU share of cores of
// its servers, i.e. a core must add at least what the GPU branch asks of
// a GPU, per core that comes with a GPU.
func (t *cpuTuner) minSlope(i int) float64 {
	if !t.useMinSlope {
		return 0
	}
	share := 1
	for _, a := range t.st.jobs[i].alloc {
		sv := t.st.snap.Servers[a.Server]
		share = max(share, sv.CPUs/max(sv.GPUs, 1))
	}
	return t.opt.MinSlope / float64(share)
}

// loss is what job k loses per core when it drops from its cpg to c.
func (t *cpuTuner) loss(k, c int) float64 {
	js := &t.st.jobs[k]
	d := js.cpg - c
	if d <= 0 || js.total == 0 {
		return 0
	}
	return math.Max(0, t.at(k, js.cpg)-t.at(k, c)) * t.w(k) / float64(d*js.total)
}

// setCPG gives job k c cores per GPU on every server it uses.
func (t *cpuTuner) setCPG(k, c int) {
	st := t.st
	js := &st.jobs[k]
	for n := range js.alloc {
		a := &js.alloc[n]
		d := c*a.GPUs - a.CPUs
		a.CPUs += d
		st.freeCPU[a.Server] -= d
	}
	js.cpg = c
}

// settling is MinDwell for cores: a running job changed less than
// MinDwell ago and not changed in this round.
func (t *cpuTuner) settling(k int) bool {
	js := &t.st.jobs[k]
	return js.orig > 0 && !js.touched && !js.cpuSet && js.total == js.orig && t.st.snap.Now-js.job.LastChange < t.opt.MinDwell
}

// unchanged reports whether job k would restart only for its cores.
func (t *cpuTuner) unchanged(k int) bool {
	js := &t.st.jobs[k]
	return js.orig > 0 && !js.cpuSet && !js.touched && sameAlloc(js.alloc, js.job.Alloc)
}

// horizon is min(Horizon, job k's predicted remaining time at thr).
func (t *cpuTuner) horizon(k int, thr float64) float64 {
	js := &t.st.jobs[k]
	h := t.opt.Horizon
	if thr > 0 && js.remaining > 0 && js.job.Model != nil {
		h = math.Min(h, js.remaining/(thr/float64(js.job.Model.Arch.GlobalBatch)))
	}
	return h
}

type cpuSave struct {
	job, cpg int
	cpus     []int
	cpuSet   bool
}

// reserve gives each server's free GPUs back their per-GPU share of
// cores, taking them from the jobs on it above their minimum, lowest CPU
// loss first (whatever the slopes and MinDwell: a job that cannot be
// placed for want of cores is below its minimum). Callers run it when a
// job waits, before placement: cores tuned while the server was full
// never block the GPUs a leaving job frees.
func (t *cpuTuner) reserve() {
	st := t.st
	t.minC = map[int]int{}
	t.memo = map[[2]int]float64{}
	for s, sv := range st.snap.Servers {
		banned := map[int]bool{}
		for {
			short := max(st.free[s], 0)*(sv.CPUs/max(sv.GPUs, 1)) - st.freeCPU[s]
			if short <= 0 {
				break
			}
			v, to := t.victim(-1, s, short, math.Inf(1), true, 0, banned)
			if v < 0 {
				break
			}
			banned[v] = true
			t.setCPG(v, to)
			st.jobs[v].cpuSet = true
		}
	}
}

// run is the CPU pass over every job holding GPUs.
func (t *cpuTuner) run() {
	st := t.st
	t.minC = map[int]int{}
	t.memo = make(map[[2]int]float64, 2*len(st.jobs))
	if t.trimStarts {
		for i := range st.jobs {
			js := &st.jobs[i]
			if js.orig == 0 && js.total > 0 && js.job.Model != nil {
				if lo := t.min(i); lo < js.cpg && t.at(i, lo) >= t.at(i, js.cpg)*(1-1e-9) && t.at(i, js.cpg+1) <= t.at(i, js.cpg)*(1+1e-9) {
					t.setCPG(i, lo)
				}
			}
		}
	}
	var order []cpuCand
	for i := range st.jobs {
		js := &st.jobs[i]
		if js.total == 0 || js.job.Model == nil {
			continue
		}
		// More cores never slow a plan down: no gain at maxCPG means a
		// flat curve (most jobs stop here).
		if t.flat != nil {
			e, ok := t.flat.prev[js.job.ID]
			if !ok || e.model != js.job.Model || e.cpg != js.cpg || !sameAlloc(e.alloc, js.alloc) {
				e = flatEntry{model: js.job.Model, cpg: js.cpg, alloc: append([]Alloc(nil), js.alloc...), flat: t.at(i, maxCPG) <= t.at(i, js.cpg)*(1+1e-9)}
			}
			t.flat.next[js.job.ID] = e
			if e.flat {
				continue
			}
		} else if t.at(i, maxCPG) <= t.at(i, js.cpg)*(1+1e-9) {
			continue
		}
		if _, s := t.step(i, t.cap(i)); s > 0 {
			order = append(order, cpuCand{i, s})
		}
	}
	slices.SortFunc(order, func(a, b cpuCand) int { return cpuOrder(st, a, b) })
	for _, o := range order {
		i := o.i
		js := &st.jobs[i]
		from := js.cpg
		if t.settling(i) {
			continue
		}
		saved := t.saveAround(i)
		for {
			limit := t.cap(i)
			c, slope := t.step(i, limit)
			must := js.cpg < t.min(i)
			if must && c < t.min(i) {
				c, slope = t.min(i), math.Inf(1)
			}
			if c == 0 || slope <= 0 || (!must && slope < t.minSlope(i)) {
				break
			}
			if !t.grow(i, c, slope, must) {
				break
			}
		}
		if js.cpg != from {
			// A running job that changes only its cores restarts: the
			// gain must pay for it.
			if t.unchangedBut(i) && !t.pays(i, t.at(i, from), t.at(i, js.cpg)) {
				t.restoreSaved(saved)
			}
		}
	}
}

// unchangedBut reports whether job i's only change this round is its
// cores (so the restart is charged to them).
func (t *cpuTuner) unchangedBut(i int) bool {
	js := &t.st.jobs[i]
	return js.orig > 0 && !js.touched && sameAlloc(js.alloc, js.job.Alloc)
}

func (t *cpuTuner) pays(i int, from, to float64) bool {
	if to <= from {
		return false
	}
	w := t.w(i)
	return w*(to-from)*t.horizon(i, to) > t.opt.GainFactor*w*from*t.opt.RestartCost
}

// grow brings job i to c cores per GPU: free cores first, then victims on
// each of its servers. It changes nothing and returns false when a server
// cannot supply them.
func (t *cpuTuner) grow(i, c int, slope float64, must bool) bool {
	st := t.st
	js := &st.jobs[i]
	var saved []cpuSave
	save := func(k int) {
		for _, s := range saved {
			if s.job == k {
				return
			}
		}
		v := &st.jobs[k]
		cs := make([]int, len(v.alloc))
		for n, a := range v.alloc {
			cs[n] = a.CPUs
		}
		saved = append(saved, cpuSave{job: k, cpg: v.cpg, cpus: cs, cpuSet: v.cpuSet})
	}
	undo := func() {
		for n := len(saved) - 1; n >= 0; n-- {
			s := saved[n]
			v := &st.jobs[s.job]
			for m := range v.alloc {
				d := s.cpus[m] - v.alloc[m].CPUs
				v.alloc[m].CPUs += d
				st.freeCPU[v.alloc[m].Server] -= d
			}
			v.cpg, v.cpuSet = s.cpg, s.cpuSet
		}
	}
	save(i)
	gainThr := t.at(i, c)
	for _, a := range js.alloc {
		s := a.Server
		sv := st.snap.Servers[s]
		reserve := max(st.free[s], 0) * (sv.CPUs / max(sv.GPUs, 1))
		need := c*a.GPUs - a.CPUs
		banned := map[int]bool{i: true}
		for st.freeCPU[s]-reserve < need {
			v, to := t.victim(i, s, need-(st.freeCPU[s]-reserve), slope, must, gainThr, banned)
			if v < 0 {
				undo()
				return false
			}
			banned[v] = true
			save(v)
			t.setCPG(v, to)
			st.jobs[v].cpuSet = true
		}
	}
	t.setCPG(i, c)
	js.cpuSet = true
	return true
}

// victim picks the job on server s with the lowest CPU loss slope above
// its minimum that may give cores to job i, and the cores per GPU to
// drop it to (enough to free short cores on s when it can).
func (t *cpuTuner) victim(i, s, short int, slope float64, must bool, gainThr float64, banned map[int]bool) (int, int) {
	st := t.st
	best, bestTo, bestLoss := -1, 0, math.Inf(1)
	for _, k := range st.on[s] {
		if banned[k] {
			continue
		}
		v := &st.jobs[k]
		lo := t.min(k)
		if v.cpg <= lo || v.total == 0 {
			continue
		}
		if !must && t.settling(k) {
			continue
		}
		g := 0
		for _, a := range v.alloc {
			if a.Server == s {
				g = a.GPUs
			}
		}
		if g == 0 {
			continue
		}
		// The smallest drop that covers the shortage, not below lo.
		to := max(lo, v.cpg-(short+g-1)/g)
		l := t.loss(k, to)
		if !must && slope <= l*1.05 {
			continue
		}
		if !must && t.unchanged(k) {
			// Anti-thrashing: the cores moved must pay for the victim's
			// restart over the grower's horizon.
			moved := float64((v.cpg - to) * g)
			if (slope-l)*moved*t.horizon(i, gainThr) <= t.opt.GainFactor*t.w(k)*t.at(k, v.cpg)*t.opt.RestartCost {
				continue
			}
		}
		if l < bestLoss || (l == bestLoss && v.job.Submit > st.jobs[best].job.Submit) {
			best, bestTo, bestLoss = k, to, l
		}
	}
	return best, bestTo
}

// saveAround records the cores of job i and of every job sharing one of
// its servers (the only jobs its growth can take cores from), so that
// restoreSaved can put the round back exactly as it was before i grew.
func (t *cpuTuner) saveAround(i int) []cpuSave {
	st := t.st
	var saved []cpuSave
	seen := map[int]bool{}
	add := func(k int) {
		if seen[k] {
			return
		}
		seen[k] = true
		v := &st.jobs[k]
		cs := make([]int, len(v.alloc))
		for n, a := range v.alloc {
			cs[n] = a.CPUs
		}
		saved = append(saved, cpuSave{job: k, cpg: v.cpg, cpus: cs, cpuSet: v.cpuSet})
	}
	add(i)
	for _, a := range st.jobs[i].alloc {
		for _, k := range st.on[a.Server] {
			add(k)
		}
	}
	return saved
}

// restoreSaved undoes a job's CPU growth: every job saveAround recorded
// gets back exactly the cores it had, so every server's free cores are
// what they were before (never more in use than before; the old undo
// put back the snapshot's cores without looking at what was free and
// over-committed servers).
func (t *cpuTuner) restoreSaved(saved []cpuSave) {
	st := t.st
	for _, s := range saved {
		v := &st.jobs[s.job]
		for m := range v.alloc {
			d := s.cpus[m] - v.alloc[m].CPUs
			v.alloc[m].CPUs += d
			st.freeCPU[v.alloc[m].Server] -= d
		}
		v.cpg, v.cpuSet = s.cpg, s.cpuSet
	}
}

// cpuWhy describes a CPU-only change of a running job.
func cpuWhy(js *jstate) string {
	from := cpgOf(js.job.Alloc)
	return fmt.Sprintf("cores per GPU from %d to %d (CPU sensitivity)", from, cpgOf(js.alloc))
}

// cpuCand is a job the CPU branch may give cores, with its slope.
type cpuCand struct {
	i     int
	slope float64
}

// cpuOrder orders the CPU branch's candidates: the steepest slope first,
// then the earliest submitted. The job index breaks the last tie, so
// pdqsort gives the order a stable sort of the candidates (built in index
// order) gave; two NaN slopes tie, as they did
// (TestCPUOrderIsTheStableOne).
func cpuOrder(st *state, a, b cpuCand) int {
	return stableOrder(b.slope, a.slope, st.jobs[a.i].job.Submit, st.jobs[b.i].job.Submit, a.i, b.i)
}
