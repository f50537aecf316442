package sched

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/replan/replan/cluster"

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
	js, me, cur, cands, ok := crossTies(st, i, plan)
	if !ok {
		return false
	}
	if len(cands) == 0 {
		return false
	}
	base := thr(cur)
	// rackScore is the job's compatibility on rack r's uplink with the
	// other jobs there. The job itself is left out of the rack's jobs, so
	// the score depends on the rack alone and the candidates share it.
	rackScores := map[int]float64{}
	rackScore := func(r int) float64 {
		if sc, ok := rackScores[r]; ok {
			return sc
		}
		sc := 1.0
		if tcs, _ := st.rackCircles(r, i); len(tcs) > 0 {
			cs, fixed, offs := make([]Circle, 0, len(tcs)+1), make([]bool, 0, len(tcs)+1), make([]float64, 0, len(tcs)+1)
			for _, o := range tcs {
				cs, fixed, offs = append(cs, o.c), append(fixed, o.fixed), append(offs, o.off)
			}
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

// crossTies is where preferCompatible and placeOnUplinks start: job i's
// state, its circle on the spine for plan on its current placement, that
// placement (a copy) and its tie candidates; ok is false for a job that
// does not cross racks (or has no circle).
func crossTies(st *state, i int, plan perf.Plan) (js *jstate, me Circle, cur []Alloc, cands [][]Alloc, ok bool) {
	js = &st.jobs[i]
	if len(js.alloc) < 2 || !st.cross(i) {
		return js, me, nil, nil, false
	}
	if me, ok = spineCircle(st.snap, js.job, plan, js.alloc); !ok {
		return js, me, nil, nil, false
	}
	cur = append([]Alloc(nil), js.alloc...)
	return js, me, cur, tieCandidates(st, i, cur), true
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

// tentCircle is a job's circle on its racks' spine uplinks as this round
// leaves it: ok when it spans racks and communicates across them; fixed
// when it keeps running unchanged, at offset off (its phase).
type tentCircle struct {
	c     Circle
	ok    bool
	fixed bool
	off   float64
}

// rackCirclesScan is rackCircles without the rack memo (circlememo.go):
// it walks the rack's servers and their jobs on every call. The memo
// must return exactly what it returns; tests compare the two.
func (st *state) rackCirclesScan(r, i int) ([]tentCircle, []string) {
	if len(st.seenAt) < len(st.jobs) {
		st.seenAt = make([]int, len(st.jobs))
	}
	st.seenGen++
	var tcs []tentCircle
	var ids []string
	for _, sv := range st.racks[r] {
		for _, k := range st.on[sv] {
			if k == i || st.seenAt[k] == st.seenGen {
				continue
			}
			st.seenAt[k] = st.seenGen
			if o := st.tentativeCircle(k); o.ok {
				tcs, ids = append(tcs, o), append(ids, st.jobs[k].job.ID)
			}
		}
	}
	return tcs, ids
}

// tentativeCircle is job k's circle on its tentative allocation with the
// plan it will run: the round's new plan, else its current plan when
// running, else its request. It is memoised for the round while the job's
// allocation (its servers and GPUs) and plan stay as they were (a
// prediction each). With the circle memo on (circlememo.go), a job
// whose allocation does not span racks has no circle without a memo
// entry, and an allocation no move or rollback touched since (allocVer)
// is known to be the same without comparing it.
func (st *state) tentativeCircle(k int) tentCircle {
	ks := &st.jobs[k]
	if st.circleMode != circleMemoOff && (len(ks.alloc) < 2 || !crossRack(st.snap.Servers, ks.alloc)) {
		return tentCircle{} // spineCircle's answer, without a memo entry
	}
	p := ks.job.ReqPlan
	switch {
	case ks.planSet:
		p = ks.newPlan
	case ks.orig > 0:
		p = ks.job.Plan
	}
	fixed := ks.orig > 0 && ks.total == ks.orig && !ks.touched && !st.isDirty[k]
	if m := st.circleOf(k); m != nil && m.plan == p && m.tc.fixed == fixed {
		if st.allocVer != nil && m.ver == st.allocVer[k] {
			return m.tc
		}
		if sameAlloc(m.alloc, ks.alloc) {
			if st.allocVer != nil {
				m.ver = st.allocVer[k]
			}
			return m.tc
		}
	}
	var c Circle
	var ok bool
	if st.spines != nil {
		c, ok = st.spines.circle(st.snap, ks.job, p, ks.alloc)
		if st.circleMode == circleMemoVerify {
			if wc, wok := spineCircle(st.snap, ks.job, p, ks.alloc); wok != ok || wc.Period != c.Period || !slices.Equal(wc.Arcs, c.Arcs) {
				panic(fmt.Sprintf("sched: spine-circle memo of job %s: %v %+v, want %v %+v", ks.job.ID, ok, c, wok, wc))
			}
		}
	} else {
		c, ok = spineCircle(st.snap, ks.job, p, ks.alloc)
	}
	off := 0.0
	if fixed && ok {
		off = math.Mod(ks.job.Phase, c.Period)
	}
	tc := tentCircle{c, ok, fixed, off}
	m := roundCircle{alloc: append([]Alloc(nil), ks.alloc...), plan: p, tc: tc}
	if st.allocVer != nil {
		m.ver = st.allocVer[k]
	}
	st.setCircle(k, m)
	return tc
}

// roundCircle is tentativeCircle's memo of one job.
type roundCircle struct {
	alloc []Alloc
	plan  perf.Plan
	tc    tentCircle
	ver   uint32 // the job's allocVer when alloc was copied (circle memo on)
}

// uplinkInflation is replan's uplink hold test for waiting job i on its
// tentative allocation, running plan: on each spine uplink of its racks
// that other cross-rack jobs already use (their circles as the round
// leaves them, running ones at their phase), the communication seconds
// per iteration the link's
// overload adds to the job at its best rotation (Rotate, LinkLoad), as a
// share of its iteration alone, against that uplink's limit: limit(load),
// load being the uplink's communication load with the job (Σ CommLoad).
// It returns the share on the uplink furthest over (or nearest to) its
// limit, that share over the limit, the rack, the jobs on it and its load
// (0, 0, "", nil, 0 when the allocation stays in one rack or no other
// cross-rack job shares its uplinks).
func uplinkInflation(st *state, i int, plan perf.Plan, limit func(load float64) float64) (float64, float64, string, []string, float64) {
	js := &st.jobs[i]
	var me Circle
	haveMe := false
	type shared struct {
		l    jointLink
		load float64
		rack string
		ids  []string
	}
	var ups []shared
	for n, a := range js.alloc {
		r := st.rackOf[a.Server]
		if slices.ContainsFunc(js.alloc[:n], func(b Alloc) bool { return st.rackOf[b.Server] == r }) {
			continue // rack seen
		}
		tcs, ids := st.rackCircles(r, i)
		if len(tcs) == 0 {
			continue
		}
		cs, offs := make([]Circle, 0, len(tcs)+1), make([]float64, 0, len(tcs)+1)
		for _, o := range tcs {
			cs, offs = append(cs, o.c), append(offs, o.off)
		}
		if !haveMe {
			// the job's own circle only once an uplink has others
			var ok bool
			if me, ok = spineCircle(st.snap, js.job, plan, js.alloc); !ok || me.Period <= 0 {
				return 0, 0, "", nil, 0
			}
			haveMe = true
		}
		if peakDemand(cs)+me.peak() <= 1 {
			continue // never over capacity, whatever the rotation
		}
		load := CommLoad(me)
		for _, c := range cs {
			load += CommLoad(c)
		}
		ups = append(ups, shared{jointLink{cs, offs, 1}, load, st.snap.Servers[a.Server].Rack, ids})
	}
	// The others are held where they are (those starting this round at
	// offset 0: the shifts that follow rotate them too, so this errs
	// towards holding); the job takes its best rotation, one for all its
	// uplinks (jointShift) where it shares several: it gets one shift.
	xs := make([]float64, len(ups))
	if len(ups) == 1 {
		u := ups[0].l
		fixed := make([]bool, len(u.cs)+1)
		for n := range u.cs {
			fixed[n] = true
		}
		cs, offs := append(u.cs, me), append(u.offs, 0)
		var extra []float64
		if st.circleMode == circleMemoOff {
			offs, _ = Rotate(cs, fixed, offs, 1)
			_, _, extra = LinkLoad(cs, offs, 1)
		} else {
			_, extra = rotateLoad(cs, fixed, offs, 1) // the same, on one ring
		}
		xs[0] = extra[len(extra)-1] / me.Period
	} else if len(ups) > 1 {
		jl := make([]jointLink, len(ups))
		for n, u := range ups {
			jl[n] = u.l
		}
		jointShift(me, jl, 0, false, xs)
	}
	worst, over, rack, load := 0.0, 0.0, "", 0.0
	var with []string
	for n, u := range ups {
		if l := limit(u.load); l > 0 && xs[n]/l > over {
			worst, over, rack, with, load = xs[n], xs[n]/l, u.rack, u.ids, u.load
		}
	}
	return worst, over, rack, with, load
}

// holdLimit is the uplink hold's threshold on an uplink of load (Σ
// CommLoad with the job): UplinkHoldFit where the load fits the
// capacity, else UplinkHold.
func (o NetOptions) holdLimit(load float64) float64 {
	if load <= 1 && o.UplinkHoldFit > 0 {
		return math.Min(o.UplinkHold, o.UplinkHoldFit)
	}
	return o.UplinkHold
}

// holdReason is the waiting reason of a job the uplink hold passed over:
// the offer it was made (GPUs per server, across racks), the uplink, the
// jobs on it and the predicted slowdown.
func holdReason(pl perf.Placement, x float64, rack string, with []string) string {
	jobs := "job " + with[0]
	if len(with) > 1 {
		shown := with
		if len(shown) > 3 {
			shown = shown[:3]
		}
		jobs = "jobs " + strings.Join(shown, ", ")
		if len(with) > 3 {
			jobs += " and " + strconv.Itoa(len(with)-3) + " more"
		}
	}
	return "uplink hold: the offer of " + cluster.PlacementText(pl) + " across racks would share rack " + rack +
		"'s spine uplink with " + jobs + ", slowing its iterations by " + strconv.FormatFloat(100*x, 'f', 0, 64) +
		"% even at its best time-shift; it waits for a freer uplink while jobs behind it use the GPUs"
}

// peakDemand is the sum over circles of each one's largest arc demand: a
// link whose circles sum to at most its capacity is never overloaded.
func peakDemand(cs []Circle) float64 {
	sum := 0.0
	for _, c := range cs {
		sum += c.peak()
	}
	return sum
}
