package sched

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// randomCircles is n circles, half of them from pool when it is not
// empty (so links share circles and grid steps), mostly one arc, some
// with none or two, some at odd starts or of NaN demand.
func randomCircles(rng *rand.Rand, n int, pool []Circle) []Circle {
	cs := make([]Circle, n)
	for i := range cs {
		if len(pool) > 0 && rng.IntN(2) == 0 {
			cs[i] = pool[rng.IntN(len(pool))]
			continue
		}
		per := 0.1 + rng.Float64()*20
		if rng.IntN(4) == 0 {
			per = float64(1 + rng.IntN(8))
		}
		c := CommCircle(per, rng.Float64()*per, rng.Float64())
		switch rng.IntN(10) {
		case 0:
			c.Arcs = append(c.Arcs, Arc{Start: rng.Float64() * per, Len: rng.Float64() * per / 2, Demand: rng.Float64()})
		case 1:
			c.Arcs = nil
		case 2:
			c.Arcs[0].Start = -rng.Float64() * per
		case 3:
			c.Arcs[0].Start = math.Inf(1 - 2*rng.IntN(2))
		case 4:
			c.Arcs[0].Len = 0
		case 5:
			c.Arcs[0].Len = per - c.Arcs[0].Start // to the end exactly
		case 6:
			c.Arcs[0].Demand = math.NaN()
		}
		cs[i] = c
	}
	return cs
}

// Rings built one after another on one buffer (its arrays reused, the
// profiles computed with the builtin min and max) are the full scan's
// (math.Min, math.Max, fresh arrays) to the bit: over thousands of links
// priced again and again, each time with a new circle, without its
// longest one (another grid step) or anew, with arcs at odd starts and
// NaN demands.
func TestRingBufMatchesFullScan(t *testing.T) {
	rng := rand.New(rand.NewPCG(29, 4))
	pool := randomCircles(rng, 300, nil)
	b := new(ringBuf)
	links := make([][]Circle, 30)
	for n := range links {
		links[n] = randomCircles(rng, 1+rng.IntN(10), pool)
	}
	for trial := range 6000 {
		l := rng.IntN(len(links))
		cs := slices.Clone(links[l])
		switch rng.IntN(4) {
		case 0:
			cs = append(cs, randomCircles(rng, 1, pool)...)
		case 1:
			slices.SortStableFunc(cs, func(a, b Circle) int { return -cmpFloat(a.Period, b.Period) })
			if cs = cs[1:]; len(cs) == 0 {
				continue
			}
		case 2:
			links[l] = randomCircles(rng, 1+rng.IntN(10), pool)
			cs = links[l]
		}
		want := ringFullScan(cs)
		got := b.ring(cs)
		if got.q != want.q || got.n != want.n || !slices.Equal(got.per, want.per) {
			t.Fatalf("trial %d: grid q=%v n=%d per=%v, full scan q=%v n=%d per=%v", trial, got.q, got.n, got.per, want.q, want.n, want.per)
		}
		for i := range cs {
			if !sameBits(got.prof[i], want.prof[i]) || !slices.Equal(got.nz[i], want.nz[i]) {
				t.Fatalf("trial %d circle %d %+v: profile %v (slots %v), full scan %v (slots %v)", trial, i, cs[i], got.prof[i], got.nz[i], want.prof[i], want.nz[i])
			}
		}
	}
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// jointShift's slowdowns (mine) from the rings it searched on are
// LinkLoad's on rings of their own, to the bit, as is the shift; on
// random links of random circles, some empty, over and under capacity.
func TestJointShiftSlowdownMatchesLinkLoad(t *testing.T) {
	rng := rand.New(rand.NewPCG(29, 5))
	pool := randomCircles(rng, 40, nil)
	defer func() { ringReuseOff = false }()
	slowed := 0
	for trial := range 3000 {
		me := randomCircles(rng, 1, pool)[0]
		if me.Period <= 0 {
			continue
		}
		links := make([]jointLink, 1+rng.IntN(4))
		for n := range links {
			cs := randomCircles(rng, rng.IntN(8), pool)
			offs := make([]float64, len(cs))
			for k := range offs {
				offs[k] = rng.Float64() * 10
			}
			links[n] = jointLink{cs: cs, offs: offs, capacity: []float64{1, 0.5, 2, 0.999}[rng.IntN(4)]}
		}
		cur, haveCur := rng.Float64()*me.Period, rng.IntN(2) == 0
		got, want := make([]float64, len(links)), make([]float64, len(links))
		ringReuseOff = true
		wantOff := jointShift(me, links, cur, haveCur, want)
		ringReuseOff = false
		gotOff := jointShift(me, links, cur, haveCur, got)
		if math.Float64bits(gotOff) != math.Float64bits(wantOff) || !sameBits(got, want) {
			t.Fatalf("trial %d: shift %v slowdowns %v, on rings of their own %v %v", trial, gotOff, got, wantOff, want)
		}
		for _, x := range got {
			if x > 0 {
				slowed++
				break
			}
		}
	}
	if slowed < 300 {
		t.Fatalf("only %d trials slowed the job: the test does not exercise the slowdown", slowed)
	}
}
