package sched

import (
	"cmp"
	"fmt"
	"math"
	"math/rand"
	"slices"
	"testing"
)

// TestWhyMemoSameText: the "cluster full" reason memo answers the text the
// formatting gives for the same figures, formats again when a figure
// changes (NaN slopes included), and forgets a job not asked for in a
// round.
func TestWhyMemoSameText(t *testing.T) {
	want := func(f, req int, sl float64) string {
		return fmt.Sprintf("cluster full: needs %s and no running job above its minRes has a lower slope than its %.2f to shrink", needsGPUs(max(f, 1), req), sl)
	}
	var w whyMemo
	cases := []struct {
		f, req int
		sl     float64
	}{{4, 4, 1}, {4, 4, 1}, {2, 4, 1}, {2, 4, 1.004}, {2, 8, 1.004}, {0, 1, 0.5}, {0, 1, math.NaN()}, {0, 1, math.NaN()}, {0, 1, math.Inf(1)}}
	for n, c := range cases {
		w.round()
		if got := w.clusterFull("j1", c.f, c.req, c.sl); got != want(c.f, c.req, c.sl) {
			t.Errorf("case %d %+v: %q, want %q", n, c, got, want(c.f, c.req, c.sl))
		}
	}
	w.round()
	w.clusterFull("j2", 1, 1, 1)
	w.round()
	if _, ok := w.prev["j1"]; ok {
		t.Errorf("j1 kept after a round it was not asked in")
	}
	if _, ok := w.prev["j2"]; !ok {
		t.Errorf("j2 dropped after the round it was asked in")
	}
}

// orderCases are random candidate lists with ties of the first and second
// keys and NaN keys, in index order.
func orderCases(seed int64) (*state, [][2]float64) {
	r := rand.New(rand.NewSource(seed))
	n := 1 + r.Intn(60)
	st := &state{jobs: make([]jstate, n)}
	keys := make([][2]float64, n)
	vals := []float64{0, 0.5, 1, 1, 2, math.NaN(), math.Inf(1), -1}
	for i := range n {
		st.jobs[i].job = &Job{ID: fmt.Sprint(i), Submit: vals[r.Intn(len(vals))]}
		keys[i] = [2]float64{vals[r.Intn(len(vals))], st.jobs[i].job.Submit}
	}
	return st, keys
}

// checkStableOrder sorts n random cases' lists with order and checks the
// result is the stable sort's of the same lists with stable; key gives a
// list element's job index.
func checkStableOrder[T any](t *testing.T, mk func(i int, k [2]float64) T, key func(T) int, stable func(st *state) func(a, b T) int, order func(st *state) func(a, b T) int) {
	t.Helper()
	for seed := range int64(2000) {
		st, keys := orderCases(seed)
		var l []T
		for i, k := range keys {
			l = append(l, mk(i, k))
		}
		want := slices.Clone(l)
		slices.SortStableFunc(want, stable(st))
		slices.SortFunc(l, order(st))
		for n := range l {
			if key(l[n]) != key(want[n]) {
				t.Fatalf("seed %d: position %d is job %d, the stable sort put job %d there", seed, n, key(l[n]), key(want[n]))
			}
		}
	}
}

// TestVictimOrderIsTheStableOne: victimOrder with pdqsort gives the order
// the stable sort of the victim list gave (the comparator before it), on
// random lists with ties and NaN losses and submits.
func TestVictimOrderIsTheStableOne(t *testing.T) {
	checkStableOrder(t, func(i int, k [2]float64) vcand { return vcand{job: i, loss: k[0]} }, func(c vcand) int { return c.job },
		func(st *state) func(x, y vcand) int {
			return func(x, y vcand) int {
				if x.loss != y.loss {
					return cmp.Compare(x.loss, y.loss)
				}
				return cmp.Compare(st.jobs[y.job].job.Submit, st.jobs[x.job].job.Submit)
			}
		}, victimOrder)
}

// TestCPUOrderIsTheStableOne: the same for the CPU branch's candidates.
func TestCPUOrderIsTheStableOne(t *testing.T) {
	checkStableOrder(t, func(i int, k [2]float64) cpuCand { return cpuCand{i: i, slope: k[0]} }, func(c cpuCand) int { return c.i },
		func(st *state) func(a, b cpuCand) int {
			return func(a, b cpuCand) int {
				if a.slope != b.slope {
					return cmp.Compare(b.slope, a.slope)
				}
				return cmp.Compare(st.jobs[a.i].job.Submit, st.jobs[b.i].job.Submit)
			}
		}, func(st *state) func(a, b cpuCand) int { return func(a, b cpuCand) int { return cpuOrder(st, a, b) } })
}
