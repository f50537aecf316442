package sched

import (
	"math"

	"github.com/replan/replan/perf"
)

// placeOnUplinks is replan's uplink-aware placement (NetOptions.UplinkPlace)
// of waiting job i, which this round placed across racks on free GPUs
// (cur, its tentative allocation, from takeFewestRacks or the generic
// fill). The fewest racks alone may stack several cross-rack jobs on one
// rack's spine uplink while another uplink idles; CASSINI places a job
// where its communication interleaves with the jobs already on each link.
//
// Candidates: cur; the equivalent allocations of the compatibility
// tie-break (tieCandidates: one rack's share on servers with the same free
// GPUs elsewhere); and, for each rack of cur, the fewest-racks take with
// that rack left out. A candidate counts when it spans no more racks than
// cur and the model prices it as good (thr within tieTolerance). Each is
// scored on the uplinks of its racks by uplinkScore: the worst uplink's
// compatibility (the job's circle rotated against the cross-rack jobs
// already there, Rotate), then the most loaded uplink's communication
// load with the job added, where sharing can overload it at all (lower is
// better: it leaves room to interleave the jobs still to come), then the
// mean compatibility. The job moves
// only to a strictly better score; it returns whether it moved.
func placeOnUplinks(st *state, i int, plan perf.Plan, thr func(a []Alloc) float64) bool {
	js, me, cur, cands, ok := crossTies(st, i, plan)
	if !ok {
		return false
	}
	// The fewest-racks take without each of cur's racks in turn, from the
	// free GPUs as they were before the job took cur.
	need, racks := 0, map[int]bool{}
	for _, a := range cur {
		need += a.GPUs
		racks[st.rackOf[a.Server]] = true
	}
	mark := len(st.journal)
	for _, a := range cur {
		st.move(i, a.Server, -a.GPUs)
	}
	for r := range st.racks {
		if !racks[r] {
			continue
		}
		m2 := len(st.journal)
		if st.takeFewestRacksExcept(i, need, r) == need {
			alt := append([]Alloc(nil), js.alloc...)
			sortAlloc(alt)
			if nr := rackCount(st, alt); nr <= len(racks) {
				cands = append(cands, alt)
			}
		}
		st.rollback(m2)
	}
	st.rollback(mark) // cur again
	if len(cands) == 0 {
		return false
	}
	base := thr(cur)
	sc := newUplinkScorer(st, i, me)
	best, bestS := []Alloc(nil), sc.score(cur)
	for _, c := range cands {
		if sameAlloc(c, cur) {
			continue
		}
		if t := thr(c); base > 0 && math.Abs(t-base) > tieTolerance*base {
			continue
		}
		if x := sc.score(c); x.better(bestS) {
			best, bestS = c, x
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

// rackCount is how many racks a spans.
func rackCount(st *state, a []Alloc) int {
	seen := map[int]bool{}
	for _, x := range a {
		if x.GPUs > 0 {
			seen[st.rackOf[x.Server]] = true
		}
	}
	return len(seen)
}

// uplinkScore ranks a placement by the spine uplinks of its racks: the
// worst compatibility, the highest load with the job added, the mean
// compatibility.
type uplinkScore struct{ worst, load, mean float64 }

// better reports whether x beats y (compatibility up, load down).
func (x uplinkScore) better(y uplinkScore) bool {
	const eps = 1e-9
	switch {
	case x.worst > y.worst+eps:
		return true
	case x.worst < y.worst-eps:
		return false
	case x.load < y.load-eps:
		return true
	case x.load > y.load+eps:
		return false
	}
	return x.mean > y.mean+eps
}

// roomyLoad is the uplink load at or below which the placement treats an
// uplink as unloaded: half its capacity on average leaves room for one
// more job of as long an arc at the same demand. Below it, loads do not
// steer the placement (on the Philly-like mix at 4:1 arcs are 1-9 % of an
// iteration: moving jobs by such loads only reshuffled the trajectory,
// 2026-11-27).
const roomyLoad = 0.5

// uplinkScorer scores placements of job i (circle me) rack by rack, each
// rack's uplink once: the job is left out of the rack's jobs, so a rack's
// score does not depend on the candidate.
type uplinkScorer struct {
	st    *state
	i     int
	me    Circle
	racks map[int][2]float64 // compatibility, load with the job
}

func newUplinkScorer(st *state, i int, me Circle) *uplinkScorer {
	return &uplinkScorer{st: st, i: i, me: me, racks: map[int][2]float64{}}
}

// rack is the job's compatibility on rack r's uplink with the cross-rack
// jobs already there (their circles as the round leaves them, unchanged
// running jobs held at their phase; 1 alone) and the uplink's load with
// the job: the communication demand its circles average over a period,
// counted only where the link can be overloaded at all (their peak
// demands sum above its capacity) and above roomyLoad; else 0, as alone. A link that sharing
// cannot slow does not steer the placement: on an uncontended spine the
// choice stays the fewest-racks one.
func (u *uplinkScorer) rack(r int) (float64, float64) {
	if v, ok := u.racks[r]; ok {
		return v[0], v[1]
	}
	sc, load := 1.0, 0.0
	if tcs, _ := u.st.rackCircles(r, u.i); len(tcs) > 0 {
		cs, fixed, offs := make([]Circle, 0, len(tcs)+1), make([]bool, 0, len(tcs)+1), make([]float64, 0, len(tcs)+1)
		for _, o := range tcs {
			cs, fixed, offs = append(cs, o.c), append(fixed, o.fixed), append(offs, o.off)
		}
		// An uplink whose peak demands sum to at most its capacity is
		// never overloaded: compatibility 1, and its load does not count.
		if peakDemand(cs)+u.me.peak() > 1 {
			load = CommLoad(u.me)
			for _, c := range cs {
				load += CommLoad(c)
			}
			if load <= roomyLoad {
				load = 0
			}
			cs, fixed, offs = append(cs, u.me), append(fixed, false), append(offs, 0)
			_, sc = Rotate(cs, fixed, offs, 1)
		}
	}
	u.racks[r] = [2]float64{sc, load}
	return sc, load
}

func (u *uplinkScorer) score(a []Alloc) uplinkScore {
	x := uplinkScore{worst: 1}
	seen := map[int]bool{}
	n := 0
	for _, al := range a {
		r := u.st.rackOf[al.Server]
		if al.GPUs <= 0 || seen[r] {
			continue
		}
		seen[r] = true
		sc, load := u.rack(r)
		x.worst = math.Min(x.worst, sc)
		x.load = math.Max(x.load, load)
		x.mean += sc
		n++
	}
	x.mean /= float64(max(n, 1))
	return x
}

// CommLoad is the share of a link's capacity a circle's arcs use on
// average over its period: Σ length × demand / period.
func CommLoad(c Circle) float64 {
	if c.Period <= 0 {
		return 0
	}
	sum := 0.0
	for _, a := range c.Arcs {
		sum += a.Len * a.Demand
	}
	return sum / c.Period
}
