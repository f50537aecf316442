package sched

import (
	"math"
	"sort"

	"github.com/replan/replan/perf"
)

// Bounds of the compatibility tie-break: at most maxTieCandidates
// alternative placements are scored, and two placements are equally good
// when their predicted throughputs differ by less than tieTolerance.
const (
	maxTieCandidates = 8
	tieTolerance     = 1e-3
)

// preferCompatible breaks ties among equally good placements of job i,
// whose tentative allocation spans racks, by CASSINI's compatibility. The
// candidates are the job's placement with one rack's share moved onto
// another rack the job does not use: the same GPUs (and cores) per server,
// on servers that had exactly as many free GPUs as the ones they replace
// (so the free GPUs left to others are the same multiset), hence the same
// tier and GPU count; a candidate counts only when its predicted
// throughput (thr) is within tieTolerance of the current one. Each is
// scored on the spine uplinks of its racks: the job's circle (plan on the
// placement) rotated against the cross-rack jobs already there (unchanged
// running jobs held at their phase); the worst link's compatibility, then
// the mean, decides. The job moves only to a strictly better score: with
// equal scores the policy's own choice stays. It returns whether it moved.
func preferCompatible(st *state, i int, plan perf.Plan, thr func(a []Alloc) float64) bool {
	js := &st.jobs[i]
	s := st.snap
	if len(js.alloc) < 2 || !st.cross(i) {
		return false
	}
	me, ok := spineCircle(s, js.job, plan, js.alloc)
	if !ok {
		return false
	}
	cur := append([]Alloc(nil), js.alloc...)
	cands := tieCandidates(st, i, cur)
	if len(cands) == 0 {
		return false
	}
	base := thr(cur)
	others := map[int]struct {
		c     Circle
		ok    bool
		fixed bool
		off   float64
	}{}
	circleOf := func(k int) (Circle, bool, bool, float64) {
		if o, seen := others[k]; seen {
			return o.c, o.ok, o.fixed, o.off
		}
		ks := &st.jobs[k]
		p := ks.job.ReqPlan
		switch {
		case ks.planSet:
			p = ks.newPlan
		case ks.orig > 0:
			p = ks.job.Plan
		}
		c, ok := spineCircle(s, ks.job, p, ks.alloc)
		fixed := ks.orig > 0 && ks.total == ks.orig && !ks.touched && !st.isDirty[k]
		off := 0.0
		if fixed && ok {
			off = math.Mod(ks.job.Phase, c.Period)
		}
		others[k] = struct {
			c     Circle
			ok    bool
			fixed bool
			off   float64
		}{c, ok, fixed, off}
		return c, ok, fixed, off
	}
	// rackScore is the job's compatibility on rack r's uplink with the
	// other jobs there. The job itself is left out of the rack's jobs, so
	// the score depends on the rack alone and the candidates share it.
	rackScores := map[int]float64{}
	rackScore := func(r int) float64 {
		if sc, ok := rackScores[r]; ok {
			return sc
		}
		cs, fixed, offs := []Circle{}, []bool{}, []float64{}
		jobs := map[int]bool{}
		for _, sv := range st.racks[r] {
			for _, k := range st.on[sv] {
				if k == i || jobs[k] {
					continue
				}
				jobs[k] = true
				if c, ok, f, off := circleOf(k); ok {
					cs, fixed, offs = append(cs, c), append(fixed, f), append(offs, off)
				}
			}
		}
		sc := 1.0
		if len(cs) > 0 {
			cs, fixed, offs = append(cs, me), append(fixed, false), append(offs, 0)
			_, sc = Rotate(cs, fixed, offs, 1)
		}
		rackScores[r] = sc
		return sc
	}
	// score is the worst and the mean compatibility of a's rack uplinks.
	score := func(a []Alloc) (float64, float64) {
		worst, sum, n := 1.0, 0.0, 0
		seen := map[int]bool{}
		for _, x := range a {
			r := st.rackOf[x.Server]
			if seen[r] {
				continue
			}
			seen[r] = true
			sc := rackScore(r)
			worst = math.Min(worst, sc)
			sum += sc
			n++
		}
		return worst, sum / float64(max(n, 1))
	}
	bestW, bestM := score(cur)
	var best []Alloc
	for _, c := range cands {
		if t := thr(c); base > 0 && math.Abs(t-base) > tieTolerance*base {
			continue
		}
		w, m := score(c)
		if w > bestW+1e-9 || w > bestW-1e-9 && m > bestM+1e-9 {
			bestW, bestM, best = w, m, c
		}
	}
	if best == nil {
		return false
	}
	for _, a := range cur {
		st.move(i, a.Server, -a.GPUs)
	}
	for _, a := range best {
		st.move(i, a.Server, a.GPUs)
	}
	sortAlloc(js.alloc)
	return true
}

// tieCandidates lists up to maxTieCandidates allocations equivalent to
// cur for job i: one rack's share moved, server for server, onto servers
// of a rack the job does not use that have exactly the free GPUs the
// replaced servers had before the job took them, and the cores.
func tieCandidates(st *state, i int, cur []Alloc) [][]Alloc {
	cpg := max(st.jobs[i].cpg, 1)
	used := map[int]bool{}
	var racks []int
	for _, a := range cur {
		if r := st.rackOf[a.Server]; !used[r] {
			used[r] = true
			racks = append(racks, r)
		}
	}
	var out [][]Alloc
	for _, r := range racks {
		var share, keep []Alloc
		for _, a := range cur {
			if st.rackOf[a.Server] == r {
				share = append(share, a)
			} else {
				keep = append(keep, a)
			}
		}
		sort.SliceStable(share, func(a, b int) bool { return share[a].GPUs > share[b].GPUs })
		for r2 := range st.racks {
			if used[r2] || len(out) >= maxTieCandidates {
				continue
			}
			taken := map[int]bool{}
			alt := append([]Alloc(nil), keep...)
			ok := true
			for _, a := range share {
				had := st.free[a.Server] + a.GPUs // free before the job took it
				found := -1
				for _, sv := range st.racks[r2] {
					if !taken[sv] && st.free[sv] == had && st.freeCPU[sv] >= a.GPUs*cpg {
						found = sv
						break
					}
				}
				if found < 0 {
					ok = false
					break
				}
				taken[found] = true
				alt = append(alt, Alloc{Server: found, GPUs: a.GPUs})
			}
			if ok {
				sortAlloc(alt)
				out = append(out, alt)
			}
		}
	}
	return out
}
