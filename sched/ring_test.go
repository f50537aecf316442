package sched

import (
	"math"
	"math/rand"
	"slices"
	"testing"
)

// ringFullScan is newRing as it was before it visited only the slots an
// arc can overlap: every arc against every slot of its circle's period.
func ringFullScan(cs []Circle) *ring {
	longest := 0.0
	for _, c := range cs {
		longest = math.Max(longest, c.Period)
	}
	r := &ring{q: 1, n: 1}
	if longest <= 0 {
		return r
	}
	r.q = longest / gridSlots
	r.per = make([]int, len(cs))
	r.prof = make([][]float64, len(cs))
	r.nz = make([][]int, len(cs))
	l := 1
	for i, c := range cs {
		p := max(1, int(math.Round(c.Period/r.q)))
		r.per[i] = p
		if l > 0 {
			l = l / gcd(l, p) * p
			if l > maxUnified {
				l = 0
			}
		}
		prof := make([]float64, p)
		for _, a := range c.Arcs {
			for k := range p {
				lo, hi := float64(k)*r.q, float64(k+1)*r.q
				ov := math.Min(hi, a.Start+a.Len) - math.Max(lo, a.Start)
				if ov > 0 {
					prof[k] += a.Demand * ov / r.q
				}
			}
		}
		r.prof[i] = prof
		for k, v := range prof {
			if v != 0 {
				r.nz[i] = append(r.nz[i], k)
			}
		}
	}
	if l == 0 {
		l = maxUnified
	}
	r.n = l
	return r
}

// newRing builds the same profiles, to the bit, as the full scan: on
// random circles with arcs at slot edges, past the period, empty, at
// negative and infinite starts, and with several arcs per circle.
func TestRingMatchesFullScan(t *testing.T) {
	rng := rand.New(rand.NewSource(29))
	edge := []float64{0, 0.25, 1.0 / 3, 0.5, 31.0 / 32, 1, 1.5}
	for trial := range 3000 {
		n := 1 + rng.Intn(6)
		cs := make([]Circle, n)
		for i := range cs {
			per := 0.1 + rng.Float64()*20
			if rng.Intn(4) == 0 {
				per = float64(1 + rng.Intn(8))
			}
			c := Circle{Period: per}
			for range rng.Intn(4) {
				a := Arc{Start: rng.Float64() * per, Len: rng.Float64() * per, Demand: rng.Float64()}
				switch rng.Intn(8) {
				case 0:
					a.Start = edge[rng.Intn(len(edge))] * per
					a.Len = per - a.Start
				case 1:
					a.Len = 0
				case 2:
					a.Start = -rng.Float64() * per
				case 3:
					a.Start = math.Inf(1 - 2*rng.Intn(2))
				case 4:
					a = CommCircle(per, rng.Float64()*per, a.Demand).Arcs[0]
				}
				c.Arcs = append(c.Arcs, a)
			}
			cs[i] = c
		}
		got, want := newRing(cs), ringFullScan(cs)
		if got.q != want.q || got.n != want.n || !slices.Equal(got.per, want.per) {
			t.Fatalf("trial %d: grid q=%v n=%d per=%v, full scan q=%v n=%d per=%v", trial, got.q, got.n, got.per, want.q, want.n, want.per)
		}
		for i := range cs {
			if !slices.Equal(got.prof[i], want.prof[i]) || !slices.Equal(got.nz[i], want.nz[i]) {
				t.Fatalf("trial %d circle %d %+v: profile %v (slots %v), full scan %v (slots %v)", trial, i, cs[i], got.prof[i], got.nz[i], want.prof[i], want.nz[i])
			}
		}
	}
}

// linkLoadDense is LinkLoad as it was before it summed only the slots
// above capacity: every slot of the unified perimeter, for every circle.
func linkLoadDense(cs []Circle, offsets []float64, capacity float64) (excess, total float64, extra []float64) {
	r := ringFullScan(cs)
	extra = make([]float64, len(cs))
	if r.per == nil {
		return 0, 0, extra
	}
	d := make([]float64, r.n)
	os := make([]int, len(cs))
	for i := range cs {
		os[i] = r.slot(i, offsets[i]-offsets[0])
		r.load(d, i, os[i], 1)
	}
	ex, tot := excessOf(d, capacity)
	if ex == 0 {
		return 0, tot * r.q, extra
	}
	over := make([]float64, len(d))
	for t, v := range d {
		if v > capacity {
			over[t] = v/capacity - 1
		}
	}
	w := make([]float64, 0, gridSlots)
	for i := range cs {
		p, prof := r.per[i], r.prof[i]
		dem := cs[i].peak()
		if dem <= 0 {
			continue
		}
		w = w[:0]
		for _, v := range prof {
			w = append(w, v/dem*r.q)
		}
		e := 0.0
		k := ((-os[i])%p + p) % p
		for _, f := range over {
			e += w[k] * f
			if k++; k == p {
				k = 0
			}
		}
		extra[i] = e / (float64(r.n) / float64(p))
	}
	return ex * r.q, tot * r.q, extra
}

// LinkLoad answers, to the bit, what the dense sum over every slot
// answered: on random job circles at random offsets, over and under
// capacity.
func TestLinkLoadMatchesDense(t *testing.T) {
	rng := rand.New(rand.NewSource(2929))
	over := 0
	for trial := range 5000 {
		n := 1 + rng.Intn(24)
		cs := make([]Circle, n)
		offs := make([]float64, n)
		for i := range cs {
			iter := 0.2 + rng.Float64()*5
			cs[i] = CommCircle(iter, rng.Float64()*iter, rng.Float64())
			if rng.Intn(5) == 0 {
				cs[i].Arcs = append(cs[i].Arcs, Arc{Start: rng.Float64() * iter, Len: rng.Float64() * iter / 2, Demand: rng.Float64()})
			}
			offs[i] = rng.Float64() * 10
		}
		capacity := []float64{1, 0.5, 2, 0.999}[rng.Intn(4)]
		ex, tot, extra := LinkLoad(cs, offs, capacity)
		wex, wtot, wextra := linkLoadDense(cs, offs, capacity)
		if ex != wex || tot != wtot || !slices.Equal(extra, wextra) {
			t.Fatalf("trial %d: LinkLoad %v %v %v, dense %v %v %v", trial, ex, tot, extra, wex, wtot, wextra)
		}
		if ex > 0 {
			over++
		}
	}
	if over < 1000 {
		t.Fatalf("only %d of 5000 trials over capacity: the test does not exercise the slowdown sum", over)
	}
}
