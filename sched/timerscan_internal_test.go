package sched

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/replan/replan/perf"
)

// randomHistory is observations of every tier at random times (out of
// order when shuffled, a NaN among them), waits and demands.
func randomHistory(rng *rand.Rand, n int, shuffled bool) TimerHistory {
	var h TimerHistory
	at := 0.0
	for range n {
		at += rng.Float64() * 100
		o := TimerObs{Tier: perf.Tier(rng.IntN(3)), GPUs: []int{1, 2, 4, 8, 16, 64, 0}[rng.IntN(7)], At: at, Wait: rng.ExpFloat64() * 1000}
		if shuffled {
			o.At = rng.Float64() * float64(n) * 50
		}
		if rng.IntN(200) == 0 {
			o.At = math.NaN()
		}
		h.Add(o)
	}
	return h
}

// TestTimersFromMatchesTimerFrom: one scan for every demand answers what
// TimerFrom's two scans per demand answer, to the bit, observation
// counts included.
func TestTimersFromMatchesTimerFrom(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for trial := range 50 {
		h := randomHistory(rng, 1+rng.IntN(400), trial%2 == 1)
		now := rng.Float64() * 20000
		window := rng.Float64() * 10000
		gs := []int{0, 1, 2, 3, 4, 8, 16, 32, 64}
		gs = gs[rng.IntN(3) : 3+rng.IntN(len(gs)-3)]
		got := h.timersFrom(gs, now, window, 43200, 21600)
		for n, g := range gs {
			s, sn := h.TimerFrom(perf.TierServer, g, now, window, 43200)
			r, rn := h.TimerFrom(perf.TierRack, g, now, window, 21600)
			if math.Float64bits(got[n].server) != math.Float64bits(s) || got[n].serverN != sn ||
				math.Float64bits(got[n].rack) != math.Float64bits(r) || got[n].rackN != rn {
				t.Fatalf("trial %d, %d GPUs: %+v from one scan, server %v (%d) and rack %v (%d) from TimerFrom", trial, g, got[n], s, sn, r, rn)
			}
		}
	}
}

// TestPruneMatchesFilter: Prune keeps exactly the observations at or
// after now-window, in order, whether the dropped ones are a prefix or
// not.
func TestPruneMatchesFilter(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for trial := range 200 {
		h := randomHistory(rng, rng.IntN(100), trial%3 == 0)
		now := rng.Float64() * 6000
		window := rng.Float64() * 3000
		var want []TimerObs
		for _, o := range h.Obs {
			if o.At >= now-window {
				want = append(want, o)
			}
		}
		h.Prune(now, window)
		if !slices.EqualFunc(h.Obs, want, func(a, b TimerObs) bool {
			return a.Tier == b.Tier && a.GPUs == b.GPUs && math.Float64bits(a.At) == math.Float64bits(b.At) && a.Wait == b.Wait
		}) {
			t.Fatalf("trial %d: kept %v, want %v", trial, h.Obs, want)
		}
		// it stays usable: observations added after a prune are kept
		h.Add(TimerObs{At: now + 1})
		if h.Obs[len(h.Obs)-1].At != now+1 {
			t.Fatalf("trial %d: an observation added after the prune is lost", trial)
		}
	}
}
