package sched

import (
	"math"
	"slices"
	"sync/atomic"
)

// A job that spans racks has one time-shift for all its uplinks. The
// affinity graph's breadth-first pass (shifts) rotates it on the first of
// its links it reaches, and on its other links it is then held still: the
// other jobs there are rotated around it when they are free, but running
// jobs keep their phase (Job.Phase), so where they are all running the
// link's constraint is simply dropped. A job started between two running
// jobs (racks r1–r2 and r2–r3 on a chain of racks) thus got the best shift
// for one uplink and whatever it gave on the other. jointShift chooses
// the shift against all its uplinks at once; refineShifts applies it to
// the jobs the pass shifted on the links it dropped, and the uplink hold
// (uplinkInflation) prices an offer that shares several uplinks at that
// one shift rather than at a different best rotation on each.

// ringReuseOff (tests: the path before) prices jointShift's slowdowns
// (mine) on rings of their own, LinkLoad's, rather than on the rings its
// search built, and builds each link's circles afresh.
var ringReuseOff bool

// jointSlowdowns counts the slowdowns jointShift priced on the rings its
// search built (tests: a replay must exercise them).
var jointSlowdowns atomic.Int64

// jointLink is one uplink of a job for jointShift: the other circles on
// it at their offsets (seconds), and the link's capacity.
type jointLink struct {
	cs       []Circle
	offs     []float64
	capacity float64
}

// jointSlide is one link of a jointShift search: the link's ring with
// the others at their offsets and the job's circle last.
type jointSlide struct {
	b     *ringBuf
	base  float64   // the seconds slot 0 stands for (the first circle's offset)
	per   float64   // the unified perimeter in seconds
	me    int       // the job's circle in the ring
	room0 []float64 // capacity less the others' demand, per slot
}

func newJointSlide(me Circle, l jointLink) *jointSlide {
	b := ringPool.Get().(*ringBuf)
	var cs []Circle
	if ringReuseOff {
		cs = append(l.cs[:len(l.cs):len(l.cs)], me)
	} else {
		b.cs = append(append(b.cs[:0], l.cs...), me)
		cs = b.cs
	}
	r := b.ring(cs)
	x := &jointSlide{b: b, me: len(l.cs)}
	if r.per == nil {
		return x
	}
	if len(l.offs) > 0 {
		x.base = l.offs[0]
	}
	b.d = grow(b.d, r.n)
	for k := range l.cs {
		r.load(b.d, k, r.slot(k, l.offs[k]-x.base), 1)
	}
	if !ringReuseOff {
		b.d0 = append(b.d0[:0], b.d...) // for slowdown
	}
	x.room0 = b.d
	for n := range x.room0 {
		x.room0[n] = l.capacity - x.room0[n]
	}
	x.per = float64(r.n) * r.q
	return x
}

// added is the demand above capacity (capacity-seconds per second of the
// unified perimeter) the job adds to the link at offset off: its circle
// laid as LinkLoad lays it (ring.load), so also where the unified
// perimeter is bounded (maxUnified) and its period does not divide it.
func (x *jointSlide) added(off float64) float64 {
	if x.room0 == nil {
		return 0
	}
	r := &x.b.r
	p, prof := r.per[x.me], r.prof[x.me]
	o := r.slot(x.me, off-x.base)
	add := 0.0
	for _, k := range r.nz[x.me] {
		v := prof[k]
		for t := (k + o) % p; t < r.n; t += p {
			switch room := x.room0[t]; {
			case room <= 0:
				add += v
			case v > room:
				add += v - room
			}
		}
	}
	return add * r.q / x.per
}

// slowdown is LinkLoad's extra communication seconds per iteration of
// the job's circle me at offset off on link l, the others at their
// offsets: LinkLoad(l.cs+me, l.offs+off, l.capacity)'s last figure, to
// the bit, on the ring x already holds (the same circles) and with the
// others' demand it already summed (in the same order).
func (x *jointSlide) slowdown(me Circle, l jointLink, off float64) float64 {
	b := x.b
	r := &b.r
	if r.per == nil {
		return 0
	}
	base := off // LinkLoad measures offsets from the first circle's
	if len(l.offs) > 0 {
		base = l.offs[0]
	}
	d := b.d0
	o := r.slot(x.me, off-base)
	r.load(d, x.me, o, 1)
	if ex, _ := excessOf(d, l.capacity); ex == 0 {
		return 0
	}
	ts, fs := b.over(d, l.capacity)
	return r.extra(x.me, o, me.peak(), ts, fs)
}

// jointShift is the offset (seconds, in [0, me.Period)) of circle me that
// adds the least demand above capacity over all links (each link's
// excess per second of its unified perimeter, as Rotate weighs one
// link), the others held still; mine, when not nil, receives me's
// slowdown on each link there (LinkLoad's extra seconds per iteration
// over its period). The offsets tried are a grid as fine as the finest of
// the links' rings (the longest period on a link gets gridSlots slots),
// and cur when haveCur: cur stays unless a grid offset is strictly
// better; among grid offsets the smallest of the least excess wins.
func jointShift(me Circle, links []jointLink, cur float64, haveCur bool, mine []float64) float64 {
	if me.Period <= 0 || len(links) == 0 {
		return 0
	}
	q := math.Inf(1)
	xs := make([]*jointSlide, len(links))
	for n, l := range links {
		longest := me.Period
		for _, c := range l.cs {
			longest = max(longest, c.Period)
		}
		q = min(q, longest/gridSlots)
		xs[n] = newJointSlide(me, l)
	}
	defer func() {
		for _, x := range xs {
			ringPool.Put(x.b)
		}
	}()
	cost := func(off float64) float64 {
		c := 0.0
		for _, x := range xs {
			c += x.added(off)
		}
		return c
	}
	best, bestCost := 0.0, math.Inf(1)
	if haveCur {
		best, bestCost = cur, cost(cur)
	}
	steps := max(1, int(math.Round(me.Period/q)))
	for k := range steps {
		if bestCost <= 1e-12 {
			break
		}
		off := float64(k) * q
		if c := cost(off); c < bestCost-1e-12 {
			best, bestCost = off, c
		}
	}
	best = math.Mod(best, me.Period)
	for n, l := range links {
		if mine == nil {
			break
		}
		if !ringReuseOff {
			mine[n] = xs[n].slowdown(me, l, best) / me.Period
			jointSlowdowns.Add(1)
			continue
		}
		cs := append(l.cs[:len(l.cs):len(l.cs)], me)
		offs := append(l.offs[:len(l.offs):len(l.offs)], best)
		_, _, extra := LinkLoad(cs, offs, l.capacity)
		mine[n] = extra[len(extra)-1] / me.Period
	}
	return best
}

// refineShifts revisits, after the breadth-first pass, the jobs it
// shifted (not fixed) on the links it dropped (every job there already
// had its shift; the link's constraint was never weighed): each in turn
// takes the shift that adds the least excess over all its links
// (jointShift), the others held, twice over. A job keeps its shift
// unless another is strictly better, so the total excess never grows.
// The report's links and score are recomputed when a shift moved.
func refineShifts(links []Link, byJob map[int][]int, fixed map[int]bool, offsets map[int]float64, rep *LinkReport) {
	if len(rep.Dropped) == 0 {
		return
	}
	// A dropped link whose jobs already interleave (score 1) has nothing
	// to gain.
	dropped := make(map[string]bool, len(rep.Dropped))
	for _, n := range rep.Dropped {
		dropped[n] = true
	}
	for _, d := range rep.Links {
		if dropped[d.Name] && d.Score >= 1-1e-9 {
			dropped[d.Name] = false
		}
	}
	var free []int
	seen := map[int]bool{}
	for _, l := range links {
		if !dropped[l.Name] {
			continue
		}
		for _, lj := range l.Jobs {
			if _, ok := offsets[lj.Job]; ok && !fixed[lj.Job] && !seen[lj.Job] {
				seen[lj.Job] = true
				free = append(free, lj.Job)
			}
		}
	}
	if len(free) == 0 {
		return
	}
	slices.Sort(free)
	moved := map[int]bool{}
	for range 2 {
		pass := false
		for _, j := range free {
			var me Circle
			var jl []jointLink
			for _, li := range byJob[j] {
				l := links[li]
				x := jointLink{capacity: l.Capacity}
				for _, lj := range l.Jobs {
					if lj.Job == j {
						me = lj.Circle
						continue
					}
					x.cs = append(x.cs, lj.Circle)
					x.offs = append(x.offs, offsets[lj.Job])
				}
				jl = append(jl, x)
			}
			off := jointShift(me, jl, offsets[j], true, nil)
			if off != offsets[j] {
				offsets[j] = off
				pass, moved[j] = true, true
			}
		}
		if !pass {
			break
		}
	}
	if len(moved) == 0 {
		return
	}
	byName := make(map[string]int, len(links))
	for li, l := range links {
		byName[l.Name] = li
	}
	var wsum, ssum float64
	for k := range rep.Links {
		det := &rep.Links[k]
		l := links[byName[det.Name]]
		if slices.ContainsFunc(l.Jobs, func(lj LinkJob) bool { return moved[lj.Job] }) {
			cs := make([]Circle, len(l.Jobs))
			for n, lj := range l.Jobs {
				cs[n] = lj.Circle
				det.Offsets[n] = offsets[lj.Job]
			}
			det.Score = Compatibility(cs, det.Offsets, l.Capacity)
		}
		w := linkDemand(l)
		wsum += w
		ssum += w * det.Score
	}
	if wsum > 0 {
		rep.Score = ssum / wsum
	}
}

// linkDemand is the link's communication load: Σ over its circles of arc
// length × demand over the period (the BFS's order and the report's
// weights).
func linkDemand(l Link) float64 {
	s := 0.0
	for _, lj := range l.Jobs {
		for _, a := range lj.Circle.Arcs {
			s += a.Len * a.Demand / math.Max(lj.Circle.Period, 1e-9)
		}
	}
	return s
}
