package sched

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"sync"

	"github.com/replan/replan/cluster"
	"github.com/replan/replan/perf"
)

// Arc is a stretch of a job's iteration during which it uses a link:
// from Start to Start+Len seconds after the iteration begins, at Demand
// (a share of the link's capacity).
type Arc struct {
	Start, Len, Demand float64
}

// Circle is one job's iteration on one link (CASSINI's geometric
// abstraction): its perimeter is the iteration time.
type Circle struct {
	Period float64
	Arcs   []Arc
}

// peak is the circle's largest arc demand (0 without arcs).
func (c Circle) peak() float64 {
	d := 0.0
	for _, a := range c.Arcs {
		d = max(d, a.Demand) // math.Max's result, to the bit (the spec's rules for NaN, ±0, ±Inf)
	}
	return d
}

// CommCircle is the circle of a job whose iteration takes iter seconds
// and uses inter-server links for comm seconds of it (the performance
// model's Breakdown.InterServer, scaled to iter): the gradient
// synchronisation closes the iteration, so the arc ends it.
func CommCircle(iter, comm, demand float64) Circle {
	comm = math.Min(comm, iter)
	if iter <= 0 || comm <= 0 || demand <= 0 {
		return Circle{Period: math.Max(iter, 0)}
	}
	return Circle{Period: iter, Arcs: []Arc{{Start: iter - comm, Len: comm, Demand: demand}}}
}

// LinkDemand is the share of a server's inter-server bandwidth a job with
// g GPUs on that server uses: the NICs its GPUs sit behind over all NICs.
func LinkDemand(e perf.Env, g int) float64 {
	nics := max(e.NICs, 1)
	per := max(e.GPUsPerServer/nics, 1)
	return float64(min((g+per-1)/per, nics)) / float64(nics)
}

// SpineDemand is the share of a rack's spine uplink of spineGBps a job
// with g GPUs on its busiest server uses while it communicates across
// racks: its NICs' RDMA bandwidth (100 GB/s for a whole A800 server), at
// most the whole uplink.
func SpineDemand(e perf.Env, g int, spineGBps float64) float64 {
	if spineGBps <= 0 {
		spineGBps = cluster.A800SpineGBps
	}
	// alone on the uplink a job gets at most the uplink
	return math.Min(1, LinkDemand(e, g)*cluster.A800RDMAGBps/spineGBps)
}

// Grid bounds of the unified perimeter: the longest period gets
// gridSlots slots, the unified circle at most maxUnified.
const (
	gridSlots  = 32
	maxUnified = 256
)

// ring is a set of circles on one unified, discretised perimeter.
type ring struct {
	q    float64     // seconds per slot
	n    int         // slots of the unified perimeter
	per  []int       // each circle's period in slots
	prof [][]float64 // each circle's demand per slot of its own period
	nz   [][]int     // the slots of each circle's period with demand
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// newRing unifies the perimeters: periods are rounded to a grid of
// gridSlots slots for the longest one, and the unified perimeter is the
// LCM of the rounded periods, bounded by maxUnified slots (beyond the bound
// the shorter circles are repeated over the bound: an approximation).
func newRing(cs []Circle) *ring {
	return new(ringBuf).ring(cs)
}

// ringBuf holds a ring and the scratch arrays of one LinkLoad or Rotate
// call, reused through ringPool: the simulator and the policies price
// links many thousand times a round, and the arrays were most of what
// the collector saw of it.
type ringBuf struct {
	r     ring
	per   []int
	prof  [][]float64
	nz    [][]int
	profs []float64
	nzs   []int
	d     []float64 // the unified perimeter's demand
	os    []int     // each circle's offset in slots
	ts    []int
	fs    []float64
	ws    []float64 // Rotate: each free circle's weight
	arc   []int     // Rotate: the slots a circle demands, and how much
	arcV  []float64
	d0    []float64 // jointSlide: the others' demand, before room0
	cs    []Circle  // jointSlide: the link's circles and the job's
}

var ringPool = sync.Pool{New: func() any { return new(ringBuf) }}

// grow returns b[:n], zeroed, reusing b's array when it is large enough.
func grow[T any](b []T, n int) []T {
	if cap(b) < n {
		return make([]T, n)
	}
	b = b[:n]
	clear(b)
	return b
}

// ring builds the ring of cs (newRing) in b's arrays; it stays valid
// until b is built again or put back in the pool.
func (b *ringBuf) ring(cs []Circle) *ring {
	longest := 0.0
	for _, c := range cs {
		longest = max(longest, c.Period)
	}
	b.r = ring{q: 1, n: 1}
	r := &b.r
	if longest <= 0 {
		return r
	}
	r.q = longest / gridSlots
	b.per = grow(b.per, len(cs))
	b.prof = grow(b.prof, len(cs))
	b.nz = grow(b.nz, len(cs))
	r.per, r.prof, r.nz = b.per, b.prof, b.nz
	// One backing array each for the profiles and their demand slots.
	slots := 0
	for i, c := range cs {
		r.per[i] = max(1, int(math.Round(c.Period/r.q)))
		slots += r.per[i]
	}
	b.profs = grow(b.profs, slots)
	b.nzs = grow(b.nzs, slots)[:0]
	profs, nzs := b.profs, b.nzs
	l := 1
	for i, c := range cs {
		p := r.per[i]
		if l > 0 {
			l = l / gcd(l, p) * p
			if l > maxUnified {
				l = 0
			}
		}
		prof := profs[:p:p]
		profs = profs[p:]
		r.prof[i] = prof
		for _, a := range c.Arcs {
			// Only the slots the arc can overlap (one slot of margin
			// each side against rounding); the others add nothing, nor
			// does an empty arc or one at no finite start.
			if !(a.Len > 0) || math.IsNaN(a.Start) || math.IsInf(a.Start, 0) {
				continue
			}
			// The builtin min and max answer math.Min and math.Max
			// to the bit (NaN, ±0 and ±Inf alike) without a call.
			end := a.Start + a.Len
			k0 := int(max(0, math.Floor(a.Start/r.q)-1))
			k1 := int(min(float64(p), math.Ceil(end/r.q)+1))
			for k := k0; k < k1; k++ {
				lo, hi := float64(k)*r.q, float64(k+1)*r.q
				ov := min(hi, end) - max(lo, a.Start)
				if ov > 0 {
					prof[k] += a.Demand * ov / r.q
				}
			}
		}
		n0 := len(nzs)
		for k, v := range prof {
			if v != 0 {
				nzs = append(nzs, k)
			}
		}
		if len(nzs) > n0 {
			r.nz[i] = nzs[n0:len(nzs):len(nzs)]
		}
	}
	if l == 0 {
		l = maxUnified
	}
	r.n = l
	return r
}

// slot converts an offset in seconds to slots of circle i.
func (r *ring) slot(i int, off float64) int {
	p := r.per[i]
	k := int(math.Round(off/r.q)) % p
	if k < 0 {
		k += p
	}
	return k
}

// load adds circle i at offset o (slots) to d: slot t of d holds the
// circle's slot (t−o) mod p, so each slot with demand lands every p slots
// from (k+o) mod p (one addition per slot of d, as a walk over d would).
func (r *ring) load(d []float64, i, o int, sign float64) {
	p, prof := r.per[i], r.prof[i]
	for _, k := range r.nz[i] {
		v := sign * prof[k]
		t := (k + o) % p
		if t < 0 {
			t += p
		}
		for ; t < len(d); t += p {
			d[t] += v
		}
	}
}

func excessOf(d []float64, capacity float64) (ex, tot float64) {
	for _, v := range d {
		tot += v
		if v > capacity {
			ex += v - capacity
		}
	}
	return ex, tot
}

// LinkLoad is the demand above capacity and the total demand (both in
// capacity-seconds over the unified perimeter) of circles at offsets
// (seconds), and each circle's extra communication seconds per iteration:
// its arcs slowed in proportion to the link's overload.
func LinkLoad(cs []Circle, offsets []float64, capacity float64) (excess, total float64, extra []float64) {
	b := ringPool.Get().(*ringBuf)
	defer ringPool.Put(b)
	return b.linkLoad(b.ring(cs), cs, offsets, capacity)
}

// linkLoad is LinkLoad on r, the ring of cs that b holds.
func (b *ringBuf) linkLoad(r *ring, cs []Circle, offsets []float64, capacity float64) (excess, total float64, extra []float64) {
	extra = make([]float64, len(cs))
	if r.per == nil {
		return 0, 0, extra
	}
	b.d, b.os = grow(b.d, r.n), grow(b.os, len(cs))
	d, os := b.d, b.os
	for i := range cs {
		os[i] = r.slot(i, offsets[i]-offsets[0]) // relative: the first need not lie on the grid
		r.load(d, i, os[i], 1)
	}
	ex, tot := excessOf(d, capacity)
	if ex == 0 {
		return 0, tot * r.q, extra // no slot over capacity: nobody slows down
	}
	// The slots above capacity and how far, as a share of it: the others
	// would add w·0 = 0 to each circle's sum, so they are skipped and the
	// sums are the same to the bit (same terms, same order).
	ts, fs := b.over(d, capacity)
	for i := range cs {
		extra[i] = r.extra(i, os[i], cs[i].peak(), ts, fs)
	}
	return ex * r.q, tot * r.q, extra
}

// over is the slots of d above capacity and how far, as a share of it
// (in b's arrays).
func (b *ringBuf) over(d []float64, capacity float64) ([]int, []float64) {
	ts, fs := b.ts[:0], b.fs[:0]
	for t, v := range d {
		if v > capacity {
			ts = append(ts, t)
			fs = append(fs, v/capacity-1)
		}
	}
	b.ts, b.fs = ts, fs
	return ts, fs
}

// extra is circle i's extra communication seconds per iteration at
// offset o (slots) with peak demand dem, the slots ts above capacity by
// fs (a share of it): LinkLoad's figure for one circle.
func (r *ring) extra(i, o int, dem float64, ts []int, fs []float64) float64 {
	if dem <= 0 {
		return 0
	}
	p, prof := r.per[i], r.prof[i]
	// prof[k]/dem·q: the seconds slot k of the circle's period
	// carries at full speed, per unit of overload. With more slots over
	// capacity than in the period, each slot's figure is computed once
	// (the same rounding: the products are formed in the same order).
	e := 0.0
	if len(ts) > p && p <= gridSlots {
		var w [gridSlots]float64
		for k, v := range prof {
			w[k] = v / dem * r.q
		}
		for n, t := range ts {
			k := (t - o) % p
			if k < 0 {
				k += p
			}
			e += w[k] * fs[n]
		}
	} else {
		for n, t := range ts {
			k := (t - o) % p
			if k < 0 {
				k += p
			}
			e += prof[k] / dem * r.q * fs[n]
		}
	}
	return e / (float64(r.n) / float64(p))
}

// Compatibility is CASSINI's score of circles at offsets on a link: 1 −
// excess/total demand (1 when nothing is demanded).
func Compatibility(cs []Circle, offsets []float64, capacity float64) float64 {
	ex, tot, _ := LinkLoad(cs, offsets, capacity)
	if tot <= 0 {
		return 1
	}
	return 1 - ex/tot
}

// Rotate searches the offsets (seconds) of the circles that are not fixed
// so the demand above capacity on the link is least; fixed circles keep
// offsets[i]. The circles are added largest demand first, each at the
// rotation that adds the least excess (ties: the smallest rotation), then
// every free circle is revisited once with all others present. It returns
// the offsets and the compatibility score.
func Rotate(cs []Circle, fixed []bool, offsets []float64, capacity float64) ([]float64, float64) {
	b := ringPool.Get().(*ringBuf)
	defer ringPool.Put(b)
	return b.rotate(b.ring(cs), cs, fixed, offsets, capacity)
}

// rotateLoad is Rotate's offsets, then LinkLoad's extra communication
// seconds of each circle at those offsets: the same figures as the two
// calls, from one ring.
func rotateLoad(cs []Circle, fixed []bool, offsets []float64, capacity float64) ([]float64, []float64) {
	b := ringPool.Get().(*ringBuf)
	defer ringPool.Put(b)
	r := b.ring(cs)
	offs, _ := b.rotate(r, cs, fixed, offsets, capacity)
	_, _, extra := b.linkLoad(r, cs, offs, capacity)
	return offs, extra
}

// rotate is Rotate on r, the ring of cs that b holds (r stays as it was).
func (b *ringBuf) rotate(r *ring, cs []Circle, fixed []bool, offsets []float64, capacity float64) ([]float64, float64) {
	out := append([]float64(nil), offsets...)
	if r.per == nil {
		return out, 1
	}
	b.d, b.os = grow(b.d, r.n), grow(b.os, len(cs))
	d, os := b.d, b.os
	// Offsets are measured from the first fixed circle, so its phase
	// need not lie on the grid.
	base := 0.0
	for i := range cs {
		if fixed != nil && fixed[i] {
			base = offsets[i]
			break
		}
	}
	var free []int
	for i := range cs {
		if fixed != nil && fixed[i] {
			os[i] = r.slot(i, offsets[i]-base)
			r.load(d, i, os[i], 1)
		} else {
			free = append(free, i)
		}
	}
	// Each free circle's weight, summed once (the sort compares them
	// many times).
	b.ws = grow(b.ws, len(cs))
	for _, i := range free {
		w := 0.0
		for _, v := range r.prof[i] {
			w += v
		}
		b.ws[i] = w
	}
	ws := b.ws
	slices.SortStableFunc(free, func(a, b int) int { return cmp.Compare(ws[b], ws[a]) })
	place := func(i int) {
		p, prof := r.per[i], r.prof[i]
		// The slots of the unified circle where i demands at rotation 0,
		// ascending, and how much: its slots with demand (nz), repeated
		// every p slots up to n.
		arc, arcV := b.arc[:0], b.arcV[:0]
		for base := 0; base < r.n; base += p {
			for _, k := range r.nz[i] {
				t := base + k
				if t >= r.n {
					break
				}
				arc = append(arc, t)
				arcV = append(arcV, prof[k])
			}
		}
		b.arc, b.arcV = arc, arcV
		bestO, best := 0, math.Inf(1)
		for o := 0; o < p && best > 1e-12; o++ {
			add := 0.0
			for k, t := range arc {
				u := t + o
				if u >= r.n {
					u -= r.n
				}
				// the excess this slot gains: capacity − d[u] is the room left
				room := capacity - d[u]
				v := arcV[k]
				switch {
				case room <= 0:
					add += v
				case v > room:
					add += v - room
				}
				if add >= best {
					break
				}
			}
			if add < best-1e-12 {
				bestO, best = o, add
			}
		}
		os[i] = bestO
		r.load(d, i, bestO, 1)
	}
	for _, i := range free {
		place(i)
	}
	if ex, _ := excessOf(d, capacity); ex > 0 {
		for _, i := range free {
			r.load(d, i, os[i], -1)
			place(i)
		}
	}
	for _, i := range free {
		out[i] = math.Mod(float64(os[i])*r.q+base, cs[i].Period)
	}
	ex, tot := excessOf(d, capacity)
	if tot <= 0 {
		return out, 1
	}
	return out, 1 - ex/tot
}

// LinkJob is one job's use of one link, for Shifts.
type LinkJob struct {
	Job    int // caller's job index
	Circle Circle
}

// Link is one shared link (a server's uplink, say) and the jobs using it.
type Link struct {
	Name     string
	Capacity float64
	Jobs     []LinkJob
}

// LinkReport summarises a time-shift computation.
type LinkReport struct {
	// Shared counts links used by two jobs or more.
	Shared int `json:"shared"`
	// Score is the demand-weighted mean compatibility of the shared links.
	Score float64 `json:"score"`
	// Dropped names the links whose constraint was not optimised because
	// every job on them already had its shift through other links (a cycle
	// of the affinity graph).
	Dropped []string `json:"dropped,omitempty"`
	// Links details every shared link: the jobs on it, where each one's
	// communication starts in its iteration, and the link's compatibility.
	Links []LinkDetail `json:"links,omitempty"`
}

// LinkDetail is one shared link of a LinkReport.
type LinkDetail struct {
	Name  string  `json:"name"`
	Score float64 `json:"score"` // 1 − excess/total demand with the shifts applied
	// Jobs are the jobs on the link (IDs from a scheduling round; Shifts
	// itself leaves them empty and fills Index).
	Jobs []string `json:"jobs"`
	// Offsets are each job's time-shift in seconds, modulo its iteration.
	Offsets []float64 `json:"offsets_s"`
	Index   []int     `json:"-"`
}

// Shifts gives every job one offset (seconds, mod its period) consistent
// on all its links: CASSINI's affinity graph of jobs and links, traversed
// breadth-first from the link with the most demand in each connected
// component. A link is solved with Rotate, its jobs that already have an
// offset (fixed ones: running jobs, given in fixed; or jobs reached through
// an earlier link) held still. A link all of whose jobs were already
// reached closes a cycle: its constraint is dropped and reported. offsets
// gives the fixed jobs' offsets and receives the others'.
func Shifts(links []Link, fixed map[int]bool, offsets map[int]float64) LinkReport {
	return shifts(links, fixed, offsets, nil, nil)
}

// shiftMemo carries what a policy's shift computation can reuse from one
// round to the next: each running job's circle (it changes only with its
// plan or allocation) and the score of every link whose jobs all kept
// their phases (nothing to rotate: the same circles at the same offsets).
type shiftMemo struct {
	circles, nextCircles map[string]circleMemo
	links, nextLinks     map[string]linkMemo
	// crossOnly keeps only the jobs whose allocations span racks (the
	// others have no circle on a spine uplink) instead of every running
	// job: the rack-circle memo's setting (circlememo.go).
	crossOnly bool
}

type circleMemo struct {
	plan  perf.Plan
	alloc []Alloc
	spine float64
	c     Circle
	ok    bool
}

type linkMemo struct {
	ids   []string
	offs  []float64
	score float64
}

func newShiftMemo() *shiftMemo {
	return &shiftMemo{circles: map[string]circleMemo{}, links: map[string]linkMemo{}}
}

// round starts a round: entries not used in it are dropped at its end.
func (m *shiftMemo) round() {
	m.nextCircles = make(map[string]circleMemo, len(m.circles))
	m.nextLinks = make(map[string]linkMemo, len(m.links))
}

func (m *shiftMemo) end() {
	m.circles, m.links = m.nextCircles, m.nextLinks
}

func shifts(links []Link, fixed map[int]bool, offsets map[int]float64, memo *shiftMemo, ids func(int) string) LinkReport {
	var rep LinkReport
	byJob := map[int][]int{}
	var shared []int
	for li, l := range links {
		if len(l.Jobs) < 2 {
			continue
		}
		shared = append(shared, li)
		for _, lj := range l.Jobs {
			byJob[lj.Job] = append(byJob[lj.Job], li)
		}
	}
	rep.Shared = len(shared)
	demand := func(li int) float64 {
		s := 0.0
		for _, lj := range links[li].Jobs {
			for _, a := range lj.Circle.Arcs {
				s += a.Len * a.Demand / math.Max(lj.Circle.Period, 1e-9)
			}
		}
		return s
	}
	slices.SortStableFunc(shared, func(a, b int) int { return cmp.Compare(demand(b), demand(a)) })
	assigned := map[int]bool{}
	for j, f := range fixed {
		if f {
			assigned[j] = true
		}
	}
	done := make([]bool, len(links))
	var wsum, ssum float64
	for _, seed := range shared {
		if done[seed] {
			continue
		}
		queue := []int{seed}
		done[seed] = true
		for len(queue) > 0 {
			li := queue[0]
			queue = queue[1:]
			l := links[li]
			cs := make([]Circle, len(l.Jobs))
			fx := make([]bool, len(l.Jobs))
			off := make([]float64, len(l.Jobs))
			nfree, reached := 0, false
			for k, lj := range l.Jobs {
				cs[k] = lj.Circle
				if assigned[lj.Job] {
					fx[k], off[k] = true, offsets[lj.Job]
					if !fixed[lj.Job] {
						reached = true
					}
				} else {
					nfree++
				}
			}
			if nfree == 0 && reached {
				rep.Dropped = append(rep.Dropped, l.Name)
			}
			var res []float64
			var score float64
			if memo != nil && nfree == 0 && !reached {
				// Every job on the link kept its phase: the same score as
				// last round when they are the same jobs at the same offsets.
				lm, ok := memo.links[l.Name]
				if ok && len(lm.ids) == len(l.Jobs) {
					for k, lj := range l.Jobs {
						if lm.ids[k] != ids(lj.Job) || lm.offs[k] != off[k] {
							ok = false
							break
						}
					}
				} else {
					ok = false
				}
				if !ok {
					_, lm.score = Rotate(cs, fx, off, l.Capacity)
					lm.ids, lm.offs = make([]string, len(l.Jobs)), off
					for k, lj := range l.Jobs {
						lm.ids[k] = ids(lj.Job)
					}
				}
				memo.nextLinks[l.Name] = lm
				res, score = append([]float64(nil), off...), lm.score
			} else {
				res, score = Rotate(cs, fx, off, l.Capacity)
			}
			w := demand(li)
			wsum += w
			ssum += w * score
			det := LinkDetail{Name: l.Name, Score: score}
			for k, lj := range l.Jobs {
				det.Index = append(det.Index, lj.Job)
				det.Offsets = append(det.Offsets, res[k])
			}
			rep.Links = append(rep.Links, det)
			for k, lj := range l.Jobs {
				if fx[k] {
					continue
				}
				offsets[lj.Job] = res[k]
				assigned[lj.Job] = true
				for _, lk := range byJob[lj.Job] {
					if !done[lk] {
						done[lk] = true
						queue = append(queue, lk)
					}
				}
			}
		}
	}
	rep.Score = 1
	if wsum > 0 {
		rep.Score = ssum / wsum
	}
	refineShifts(links, byJob, fixed, offsets, &rep)
	return rep
}

// shiftDecisions computes CASSINI time-shifts for the jobs that will run
// after d is applied. The shared links are the racks' spine uplinks (a
// server's NICs serve only its own GPUs and the top-of-rack switch is
// non-blocking, so jobs inside a rack do not contend). Unchanged running
// jobs keep their phase (Job.Phase); every started or reconfigured job
// that spans racks gets the Shift that interleaves its communication with
// the others on its racks' uplinks, assuming it starts restart seconds
// after Now. It also fills Decision.Tier.
func shiftDecisions(s *Snapshot, d *Decisions, restart float64) LinkReport {
	return shiftDecisionsMemo(s, d, restart, nil)
}

func shiftDecisionsMemo(s *Snapshot, d *Decisions, restart float64, memo *shiftMemo) LinkReport {
	if memo != nil {
		memo.round()
		defer memo.end()
	}
	type run struct {
		alloc []Alloc
		plan  perf.Plan
		act   int // index into d.Actions, -1 for unchanged
	}
	// A job whose allocation stays in one rack has no circle on a spine
	// uplink (spineCircle): with crossOnly it is left out from the start.
	crossOnly := memo != nil && memo.crossOnly
	runs := map[int]run{}
	for i := range s.Jobs {
		if j := &s.Jobs[i]; j.Running() && (!crossOnly || len(j.Alloc) > 1 && crossRack(s.Servers, j.Alloc)) {
			runs[i] = run{alloc: j.Alloc, plan: j.Plan, act: -1}
		}
	}
	for k := range d.Actions {
		a := &d.Actions[k]
		switch a.Kind {
		case Preempt:
			delete(runs, a.Index)
		default:
			a.Tier = tierOf(s.Servers, a.Alloc)
			if crossOnly && !(len(a.Alloc) > 1 && crossRack(s.Servers, a.Alloc)) {
				delete(runs, a.Index)
				continue
			}
			runs[a.Index] = run{alloc: a.Alloc, plan: a.Plan, act: k}
		}
	}
	byRack := map[string]*Link{}
	period := map[int]float64{}
	fixed := map[int]bool{}
	offsets := map[int]float64{}
	idx := make([]int, 0, len(runs))
	for i := range runs {
		idx = append(idx, i)
	}
	slices.Sort(idx)
	for _, i := range idx {
		r := runs[i]
		j := &s.Jobs[i]
		var c Circle
		var ok bool
		if memo != nil {
			cm, hit := memo.circles[j.ID]
			if !hit || cm.plan != r.plan || cm.spine != s.SpineGBps || !sameAlloc(cm.alloc, r.alloc) || !sameCores(cm.alloc, r.alloc) {
				cm = circleMemo{plan: r.plan, alloc: append([]Alloc(nil), r.alloc...), spine: s.SpineGBps}
				cm.c, cm.ok = spineCircle(s, j, r.plan, r.alloc)
			}
			memo.nextCircles[j.ID] = cm
			c, ok = cm.c, cm.ok
		} else {
			c, ok = spineCircle(s, j, r.plan, r.alloc)
		}
		if !ok {
			continue
		}
		period[i] = c.Period
		if r.act < 0 {
			fixed[i] = true
			offsets[i] = math.Mod(j.Phase, c.Period)
		}
		seen := map[string]bool{}
		for _, a := range r.alloc {
			rk := s.Servers[a.Server].Rack
			if seen[rk] {
				continue
			}
			seen[rk] = true
			l := byRack[rk]
			if l == nil {
				l = &Link{Name: "spine:" + rk, Capacity: 1}
				byRack[rk] = l
			}
			l.Jobs = append(l.Jobs, LinkJob{Job: i, Circle: c})
		}
	}
	racks := make([]string, 0, len(byRack))
	for rk := range byRack {
		racks = append(racks, rk)
	}
	slices.Sort(racks)
	links := make([]Link, 0, len(racks))
	for _, rk := range racks {
		links = append(links, *byRack[rk])
	}
	rep := shifts(links, fixed, offsets, memo, func(i int) string { return s.Jobs[i].ID })
	for k := range rep.Links {
		for _, i := range rep.Links[k].Index {
			rep.Links[k].Jobs = append(rep.Links[k].Jobs, s.Jobs[i].ID)
		}
	}
	for _, i := range idx {
		r := runs[i]
		if r.act < 0 || period[i] <= 0 {
			continue
		}
		if off, ok := offsets[i]; ok {
			t := period[i]
			d.Actions[r.act].Shift = math.Mod(math.Mod(off-(s.Now+restart), t)+t, t)
		}
	}
	return rep
}

// spineCircle is job j's circle on its racks' spine uplinks when it runs
// plan on alloc: its iteration as it runs when it has the uplink to itself
// (contention is what shifts and the compatibility tie-break avoid), its
// cross-rack communication closing it. ok is false when alloc does not
// span racks or the job does not communicate across servers.
func spineCircle(s *Snapshot, j *Job, plan perf.Plan, alloc []Alloc) (Circle, bool) {
	if len(alloc) < 2 || j.Model == nil || !crossRack(s.Servers, alloc) {
		return Circle{}, false
	}
	spine := s.SpineGBps
	if spine <= 0 {
		spine = cluster.A800SpineGBps
	}
	pl := placementOf(alloc)
	m := *j.Model
	m.Env.SpineFactor = math.Min(1, spine/cluster.A800RDMAGBps)
	b, err := m.Predict(plan, perf.Resources{Placement: pl, CrossRack: true, CPUsPerGPU: float64(cpgOf(alloc))})
	if err != nil || b.Iter <= 0 || b.InterServer <= 0 {
		return Circle{}, false
	}
	return CommCircle(b.Iter, b.InterServer, SpineDemand(j.Model.Env, pl[0], s.SpineGBps)), true
}

// ShiftBenchLinks builds a synthetic affinity graph for benchmarks: jobs
// jobs, each spanning two of racks rack uplinks, iteration times of 0.5-4 s
// with 10-40 % of it communicating.
func ShiftBenchLinks(jobs, racks int) []Link {
	links := make([]Link, racks)
	for r := range links {
		links[r] = Link{Name: fmt.Sprint("spine:r", r), Capacity: 1}
	}
	x := uint64(88172645463325252)
	rnd := func() float64 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		return float64(x%1_000_000) / 1_000_000
	}
	for j := range jobs {
		per := 0.5 + 3.5*rnd()
		c := CommCircle(per, per*(0.1+0.3*rnd()), 0.25+0.5*rnd())
		a := int(rnd() * float64(racks))
		b := (a + 1 + int(rnd()*float64(racks-1))) % racks
		links[a].Jobs = append(links[a].Jobs, LinkJob{Job: j, Circle: c})
		if b != a {
			links[b].Jobs = append(links[b].Jobs, LinkJob{Job: j, Circle: c})
		}
	}
	return links
}

// shifted adds CASSINI time-shifts to another policy's decisions.
type shifted struct {
	p       Policy
	restart float64
}

// WithShifts returns p with CASSINI time-shifts added to its starts and
// reconfigurations (Decision.Shift, Decisions.Links), its placements
// unchanged: how much interleaving alone buys on a policy's placements.
// restart is the checkpoint-restart time the caller charges before a job
// runs. Its name is p's with "+shifts".
func WithShifts(p Policy, restart float64) Policy { return &shifted{p: p, restart: restart} }

// Name implements Policy.
func (s *shifted) Name() string { return s.p.Name() + "+shifts" }

// Schedule implements Policy.
func (s *shifted) Schedule(snap Snapshot) Decisions {
	d := s.p.Schedule(snap)
	d.Links = shiftDecisions(&snap, &d, s.restart)
	return d
}
