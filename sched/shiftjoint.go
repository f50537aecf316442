package sched

import (
	"math"
	"slices"
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
// every job the pass shifted, and the uplink hold (uplinkInflation) prices
// an offer that shares several uplinks at that one shift rather than at a
// different best rotation on each.

// jointLink is one uplink of a job for jointShift: the other circles on
// it at their offsets (seconds), and the link's capacity.
type jointLink struct {
	cs       []Circle
	offs     []float64
	capacity float64
}

// jointCost is the link-sharing slowdown on the links with circle me at
// offset off: Σ over links and circles of the seconds sharing adds to an
// iteration over the circle's period (LinkLoad, the simulator's pricing),
// and me's share on each link.
func jointCost(me Circle, off float64, links []jointLink, mine []float64) float64 {
	cost := 0.0
	for n, l := range links {
		cs := append(l.cs[:len(l.cs):len(l.cs)], me)
		offs := append(l.offs[:len(l.offs):len(l.offs)], off)
		_, _, extra := LinkLoad(cs, offs, l.capacity)
		for k, x := range extra {
			if cs[k].Period > 0 {
				cost += x / cs[k].Period
			}
		}
		if mine != nil {
			mine[n] = extra[len(extra)-1] / me.Period
		}
	}
	return cost
}

// jointShift is the offset (seconds, in [0, me.Period)) of circle me that
// slows the circles of links least in all (jointCost), the others held
// still, and me's slowdown on each link there (extra seconds per
// iteration over its period). The offsets tried are a grid as fine as the
// finest of the links' rings (the longest period on a link gets gridSlots
// slots), and cur when haveCur: cur stays unless a grid offset is
// strictly better; among grid offsets the smallest of the least cost
// wins.
func jointShift(me Circle, links []jointLink, cur float64, haveCur bool) (float64, []float64) {
	mine := make([]float64, len(links))
	if me.Period <= 0 || len(links) == 0 {
		return 0, mine
	}
	q := math.Inf(1)
	for _, l := range links {
		longest := me.Period
		for _, c := range l.cs {
			longest = math.Max(longest, c.Period)
		}
		q = math.Min(q, longest/gridSlots)
	}
	best, bestCost := 0.0, math.Inf(1)
	if haveCur {
		best, bestCost = cur, jointCost(me, cur, links, nil)
	}
	steps := max(1, int(math.Round(me.Period/q)))
	for k := range steps {
		if bestCost <= 1e-12 {
			break
		}
		off := float64(k) * q
		if c := jointCost(me, off, links, nil); c < bestCost-1e-12 {
			best, bestCost = off, c
		}
	}
	best = math.Mod(best, me.Period)
	jointCost(me, best, links, mine)
	return best, mine
}

// refineShifts revisits, after the breadth-first pass, every job the pass
// shifted (not fixed) that shares a link: each in turn takes the shift
// that slows the jobs on all its links least (jointShift), the others
// held, twice over. A job keeps its shift unless another is strictly
// better, so the total slowdown never grows. The report's links and score
// are recomputed when a shift moved.
func refineShifts(links []Link, byJob map[int][]int, fixed map[int]bool, offsets map[int]float64, rep *LinkReport) {
	var free []int
	for j := range byJob {
		if !fixed[j] {
			if _, ok := offsets[j]; ok {
				free = append(free, j)
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
			off, _ := jointShift(me, jl, offsets[j], true)
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
