package sched

import (
	"fmt"
	"sort"
	"strings"

	"github.com/replan/replan/perf"
)

// planFunc gives the plan, predicted throughput and memory estimate of a
// job's final tentative allocation.
type planFunc func(i int) (perf.Plan, float64, perf.Memory, bool)

// emitState turns a round's working state into decisions. Host memory is
// allocated here for the chosen plan (AllocMem): offloaded optimizer states
// per server in proportion to the job's GPUs there.
func emitState(st *state, plan planFunc) Decisions {
	var d Decisions
	var shrinks, grows, starts []Decision
	var gain gainIndex
	waiting := 0
	for i := range st.jobs {
		if st.jobs[i].orig == 0 && st.jobs[i].total == 0 {
			waiting++
		}
	}
	d.Waiting = make([]Wait, 0, waiting)
	for i := range st.jobs {
		js := &st.jobs[i]
		j := js.job
		switch {
		case js.orig > 0 && js.total == 0:
			why := js.preemptWhy
			if why == "" {
				why = "shrunk to zero for a job with a higher slope or below its minRes"
				if g := gain.of(st, i); g != "" {
					why = "shrunk to zero for " + g + ": a job with a higher slope or below its minRes"
				}
			}
			d.Actions = append(d.Actions, Decision{Kind: Preempt, Job: j.ID, Index: i, Why: why})
		case js.orig > 0 && (js.touched || js.cpuSet || !sameAlloc(js.alloc, j.Alloc)):
			p, thr, mem, ok := plan(i)
			if !ok {
				d.Actions = append(d.Actions, Decision{Kind: Preempt, Job: j.ID, Index: i, Why: "no feasible plan on what is left of its allocation"})
				continue
			}
			if p == j.Plan && sameAlloc(js.alloc, j.Alloc) && sameCores(js.alloc, j.Alloc) {
				continue
			}
			dec := Decision{Kind: Reconfigure, Job: j.ID, Index: i, Plan: p, Throughput: thr}
			dec.Alloc = withMem(js.alloc, mem)
			dec.Placement = placementOf(dec.Alloc)
			switch {
			case js.total < js.orig:
				dec.Why = fmt.Sprintf("shrunk from %d to %d GPUs", js.orig, js.total)
				if g := gain.of(st, i); g != "" {
					dec.Why += " for " + g
				}
				shrinks = append(shrinks, dec)
			case js.total > js.orig:
				dec.Why = fmt.Sprintf("grown from %d to %d GPUs", js.orig, js.total)
				if f := gain.from(st, i); f != "" {
					dec.Why += "; taken from " + f
				}
				grows = append(grows, dec)
			case p == j.Plan && sameAlloc(js.alloc, j.Alloc):
				dec.Why = cpuWhy(js)
				if js.job.CPUs() > cpusOf(js.alloc) {
					shrinks = append(shrinks, dec)
				} else {
					grows = append(grows, dec)
				}
			default:
				dec.Why = "better plan on the same GPUs"
				grows = append(grows, dec)
			}
		case js.orig == 0 && js.total > 0:
			p, thr, mem, ok := plan(i)
			if !ok {
				d.Waiting = append(d.Waiting, Wait{Job: j.ID, Index: i, Reason: fmt.Sprintf("no feasible plan on placement %s", st.placement(i))})
				continue
			}
			dec := Decision{Kind: Start, Job: j.ID, Index: i, Plan: p, Throughput: thr, Why: startWhy(j.ReqGPUs, js.total, st.freeGPUs == 0, gain.from(st, i))}
			dec.Alloc = withMem(js.alloc, mem)
			dec.Placement = placementOf(dec.Alloc)
			starts = append(starts, dec)
		case js.orig == 0:
			r := js.reason
			if r == "" {
				r = "waiting for resources"
			}
			d.Waiting = append(d.Waiting, Wait{Job: j.ID, Index: i, Reason: r})
		}
	}
	d.Actions = append(d.Actions, shrinks...)
	d.Actions = append(d.Actions, grows...)
	d.Actions = append(d.Actions, starts...)
	allocMem(st, &d)
	pinReasons(st.snap, &d) // pin.go
	labelReasons(st, &d)    // labels.go
	return d
}

// allocMem checks the host memory of every decision against what the
// servers have free once the changed jobs have released theirs (AllocMem
// of Algorithm 1). A start that does not fit waits with the reason; a
// reconfiguration that does not fit becomes a preemption (its old GPUs
// may already be promised to others).
func allocMem(st *state, d *Decisions) {
	free := append([]float64(nil), st.freeMem...)
	for _, a := range d.Actions {
		for _, al := range st.snap.Jobs[a.Index].Alloc {
			free[al.Server] += al.MemGB
		}
	}
	out := d.Actions[:0]
	for _, a := range d.Actions {
		if a.Kind == Preempt {
			out = append(out, a)
			continue
		}
		bad := -1
		for _, al := range a.Alloc {
			if free[al.Server]-al.MemGB < -1e-9 {
				bad = al.Server
				break
			}
		}
		if bad < 0 {
			for _, al := range a.Alloc {
				free[al.Server] -= al.MemGB
			}
			out = append(out, a)
			continue
		}
		sv := st.snap.Servers[bad]
		why := fmt.Sprintf("plan %s needs more host memory on server %s than its %.0f GiB free", a.Plan, sv.ID, free[bad])
		if a.Kind == Start {
			d.Waiting = append(d.Waiting, Wait{Job: a.Job, Index: a.Index, Reason: why})
			continue
		}
		out = append(out, Decision{Kind: Preempt, Job: a.Job, Index: a.Index, Why: why})
	}
	d.Actions = out
}

// sameCores reports whether two allocations hold the same cores on the
// same servers (GPUs compared by sameAlloc).
func sameCores(a, b []Alloc) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Server != b[i].Server || a[i].CPUs != b[i].CPUs {
			return false
		}
	}
	return true
}

func cpusOf(a []Alloc) int {
	n := 0
	for _, x := range a {
		n += x.CPUs
	}
	return n
}

// withMem copies allocs with the plan's host memory filled in (GiB).
func withMem(allocs []Alloc, mem perf.Memory) []Alloc {
	out := make([]Alloc, len(allocs))
	copy(out, allocs)
	fullest := 0
	for _, a := range out {
		fullest = max(fullest, a.GPUs)
	}
	for k := range out {
		out[k].MemGB = 0
		if mem.HostPerServer > 0 && fullest > 0 {
			out[k].MemGB = mem.HostPerServer / perf.GiB * float64(out[k].GPUs) / float64(fullest)
		}
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Server < out[b].Server })
	return out
}

// startWhy says what a start gave against what the job asked for, and
// whom it took GPUs from (from: gainIndex.from): "8 GPUs as asked",
// "asked for 8 GPUs, given 48: the extra GPUs raise its predicted
// throughput", "asked for 8 GPUs, given 4" (": no other GPU is free" when
// none is left at the end of the round, full), each with "; taken from
// j-3" when running jobs gave up GPUs for it.
func startWhy(asked, given int, full bool, from string) string {
	var why string
	switch {
	case asked <= 0:
		why = gpuCount(given)
	case given == asked:
		why = gpuCount(given) + " as asked"
	case given > asked:
		why = fmt.Sprintf("asked for %s, given %d: the extra GPUs raise its predicted throughput", gpuCount(asked), given)
	default:
		why = fmt.Sprintf("asked for %s, given %d", gpuCount(asked), given)
		if full {
			why += ": no other GPU is free"
		}
	}
	if from != "" {
		why += "; taken from " + from
	}
	return why
}

// gainIndex relates the jobs whose GPUs moved this round: whom a shrink
// or a preemption made room for, and whom a start or growth took GPUs
// from. Allocations count GPUs per server, so a job is named only where
// it is certain: a job that gained more GPUs on a server than were free
// there before the round plus what the other jobs gave up there took some
// of this one's. Built on first use (most rounds move nobody's GPUs).
type gainIndex struct {
	built bool
	moves map[int][]move // server → jobs whose GPUs on it changed, in job order
	free  map[int]int    // server → GPUs free on it before the round
	lost  map[int]int    // server → GPUs all jobs gave up on it
}

// move is one job's change of GPUs on one server (+ gained, − gave up).
type move struct{ job, gpus int }

func (g *gainIndex) build(st *state) {
	g.built, g.moves, g.free, g.lost = true, map[int][]move{}, map[int]int{}, map[int]int{}
	for k := range st.jobs {
		js := &st.jobs[k]
		if (js.total == 0 && js.orig == 0) || sameAlloc(js.job.Alloc, js.alloc) {
			continue
		}
		for s, d := range allocDelta(js.job.Alloc, js.alloc) {
			if d == 0 {
				continue
			}
			g.moves[s] = append(g.moves[s], move{k, d})
			g.free[s] += d // free before = free after + what jobs gained
			if d < 0 {
				g.lost[s] -= d
			}
		}
	}
	for s := range g.free {
		g.free[s] += st.free[s]
	}
}

// of lists the jobs that took GPUs job v gave up: "j-3", "j-3 and j-5",
// "j-3, j-5, j-7 and 2 more"; "" when none certainly did.
func (g *gainIndex) of(st *state, v int) string { return g.related(st, v, -1) }

// from lists the jobs whose GPUs job v certainly took.
func (g *gainIndex) from(st *state, v int) string { return g.related(st, v, +1) }

// related names the jobs on the other side of job v's moves: for a job
// that gave GPUs up (dir −1) those that certainly took some of them, for
// one that gained (dir +1) those it certainly took some from.
func (g *gainIndex) related(st *state, v, dir int) string {
	if !g.built {
		g.build(st)
	}
	var servers []int
	for s, d := range allocDelta(st.jobs[v].job.Alloc, st.jobs[v].alloc) {
		if d*dir > 0 {
			servers = append(servers, s)
		}
	}
	sort.Ints(servers)
	seen := map[int]bool{}
	var ids []string
	for _, s := range servers {
		for _, m := range g.moves[s] {
			if m.job == v || seen[m.job] || m.gpus*dir > 0 {
				continue
			}
			// the gainer's GPUs beyond what was free and what the other
			// jobs gave up can only have been the loser's
			gainer, giver := v, m.job
			if dir < 0 {
				gainer, giver = m.job, v
			}
			if g.gained(s, gainer) > g.free[s]+g.lost[s]-g.gaveUp(s, giver) {
				seen[m.job] = true
				ids = append(ids, st.jobs[m.job].job.ID)
			}
		}
	}
	switch n := len(ids); {
	case n == 0:
		return ""
	case n == 1:
		return ids[0]
	case n <= 3:
		return fmt.Sprintf("%s and %s", strings.Join(ids[:n-1], ", "), ids[n-1])
	default:
		return fmt.Sprintf("%s and %d more", strings.Join(ids[:3], ", "), n-3)
	}
}

// gained and gaveUp are job k's GPUs gained and given up on server s.
func (g *gainIndex) gained(s, k int) int { return max(g.delta(s, k), 0) }
func (g *gainIndex) gaveUp(s, k int) int { return max(-g.delta(s, k), 0) }

func (g *gainIndex) delta(s, k int) int {
	for _, m := range g.moves[s] {
		if m.job == k {
			return m.gpus
		}
	}
	return 0
}

// allocDelta is the change of GPUs per server from before to after.
func allocDelta(before, after []Alloc) map[int]int {
	d := map[int]int{}
	for _, a := range before {
		d[a.Server] -= a.GPUs
	}
	for _, a := range after {
		d[a.Server] += a.GPUs
	}
	return d
}
