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
	c      *cache
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
	sort.SliceStable(waiting, func(a, b int) bool {
		x, y := &s.Jobs[waiting[a]], &s.Jobs[waiting[b]]
		if f.Tenancy && x.Class != y.Class {
			return x.Class == Guaranteed
		}
		return x.Submit < y.Submit
	})
	// Latest-submitted best-effort jobs are preempted first.
	sort.SliceStable(beRunning, func(a, b int) bool { return s.Jobs[beRunning[a]].Submit > s.Jobs[beRunning[b]].Submit })
	blocker := ""
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
					continue
				}
			}
		}
		mark := len(st.journal)
		ok, why := f.place(st, i)
		if !ok && f.Tenancy && j.Class == Guaranteed {
			// Preempt best-effort jobs until the request fits.
			for _, v := range beRunning {
				if st.jobs[v].total == 0 {
					continue
				}
				for len(st.jobs[v].alloc) > 0 {
					a := st.jobs[v].alloc[0]
					st.move(v, a.Server, -a.GPUs)
				}
				st.jobs[v].touched = true
				if ok, why = f.place(st, i); ok {
					break
				}
			}
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
	return emitState(st, func(i int) (perf.Plan, float64, perf.Memory, bool) {
		js := &st.jobs[i]
		j := js.job
		pl, cr := st.placement(i), st.cross(i)
		if j.Model == nil {
			return j.ReqPlan, 0, perf.Memory{}, true
		}
		if f.TuneCPU && j.ReqPlan.Offload {
			f.tuneCPU(st, i)
		}
		cpg := cpgOf(js.alloc)
		plan := j.ReqPlan
		thr := f.c.predict(j.Model, plan, pl, cr, cpg)
		if f.BestPlan {
			if v := f.c.best(j.Model, family{}, pl, cr, cpg); v.ok && v.thr > thr {
				return v.plan, v.thr, v.mem, true
			}
		}
		return plan, thr, perf.EstimateMemory(j.Model.Arch, plan, pl), true
	})
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
		return false, fmt.Sprintf("needs %d GPUs on one server; largest free block is %d", need, largest)
	}
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
	if got < need {
		st.rollback(mark)
		return false, fmt.Sprintf("needs %d GPUs across servers in blocks of a multiple of TP %d; %d such GPUs free", need, tp, got)
	}
	return true, ""
}

// tuneCPU raises job i's cores per GPU to what its servers can spare, up
// to each server's per-GPU share.
func (f *FIFO) tuneCPU(st *state, i int) {
	tuneCPU(st, i)
}

func tuneCPU(st *state, i int) {
	js := &st.jobs[i]
	want := 1 << 30
	for _, a := range js.alloc {
		sv := st.snap.Servers[a.Server]
		share := sv.CPUs / max(sv.GPUs, 1)
		avail := (a.CPUs + st.freeCPU[a.Server]) / max(a.GPUs, 1)
		want = min(want, share, avail)
	}
	if want <= js.cpg || want == 1<<30 {
		return
	}
	for k := range js.alloc {
		a := &js.alloc[k]
		extra := want*a.GPUs - a.CPUs
		if extra > 0 {
			a.CPUs += extra
			st.freeCPU[a.Server] -= extra
		}
	}
	js.cpg = want
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
