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
