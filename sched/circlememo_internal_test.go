package sched

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"

	"github.com/replan/replan/perf"
)

// memoCluster is 5 racks of 3 servers × 8 GPUs over a 4:1 spine with 24
// jobs of 4-16 GPUs on data-parallel plans, each spread over servers of
// two racks where it fits (so most have circles on their racks'
// uplinks); every third job runs, with a phase.
func memoCluster(t *testing.T, rng *rand.Rand) Snapshot {
	t.Helper()
	s := Snapshot{Now: 1000, SpineGBps: 75}
	for i := range 15 {
		s.Servers = append(s.Servers, Server{ID: "s" + strconv.Itoa(i), Rack: "r" + strconv.Itoa(i/3), GPUs: 8, CPUs: 96, MemGB: 1600})
	}
	free := make([]int, len(s.Servers))
	for i := range free {
		free[i] = 8
	}
	names := []string{"gpt2", "bert", "t5", "roberta"}
	for n := range 24 {
		a, ok := perf.Builtin(names[n%len(names)])
		if !ok {
			t.Fatalf("no model %s", names[n%len(names)])
		}
		m := perf.DefaultModel(a, perf.A800)
		g := 4 << rng.IntN(3)
		plan, found := perf.Plan{}, false
		for _, p := range perf.Candidates(m.Arch, g) {
			if p.DP == g && !p.Offload {
				plan, found = p, true
				break
			}
		}
		if !found {
			t.Fatalf("%s: no data-parallel plan on %d GPUs", a.Name, g)
		}
		j := Job{ID: "j" + strconv.Itoa(n), Tenant: "B", Class: BestEffort, Model: &m, ReqGPUs: g, ReqCPUs: 8 * g, ReqPlan: plan, ItersTotal: 1e6, Submit: float64(n)}
		if n%3 == 0 {
			// half on a server of one rack, half on a server of another
			r1 := rng.IntN(5)
			r2 := (r1 + 1 + rng.IntN(4)) % 5
			var alloc []Alloc
			for _, r := range []int{r1, r2} {
				for sv := 3 * r; sv < 3*r+3; sv++ {
					if free[sv] >= g/2 {
						free[sv] -= g / 2
						alloc = append(alloc, Alloc{Server: sv, GPUs: g / 2, CPUs: 4 * g})
						break
					}
				}
			}
			if len(alloc) == 2 {
				sortAlloc(alloc)
				j.Alloc, j.Plan, j.ItersDone, j.Phase = alloc, plan, 1, rng.Float64()*10
			} else {
				for _, x := range alloc {
					free[x.Server] += x.GPUs
				}
			}
		}
		s.Jobs = append(s.Jobs, j)
	}
	s.FillFree()
	return s
}

// TestRackCircleMemoMatchesScan drives a round's state through random
// moves, rollbacks and plan changes (what the policies do between two
// asks) and asks for random racks' circles on behalf of random jobs, the
// memo verifying each answer against the walk over the rack (it panics
// on the first difference). Each answer must also be the walk's to the
// bit here.
func TestRackCircleMemoMatchesScan(t *testing.T) {
	for seed := range uint64(20) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 29))
			s := memoCluster(t, rng)
			st := newState(&s)
			st.circleMode = circleMemoVerify
			var stats circleStats
			st.circleStats = &stats
			var marks []int
			for range 3000 {
				j := rng.IntN(len(st.jobs))
				js := &st.jobs[j]
				switch op := rng.IntN(10); {
				case op < 3: // one GPU elsewhere (a growth step, a move)
					if len(js.alloc) > 0 {
						a := js.alloc[rng.IntN(len(js.alloc))]
						st.move(j, a.Server, -1)
					}
					if sv := rng.IntN(len(st.free)); st.free[sv] > 0 {
						st.move(j, sv, 1)
					}
				case op < 4: // a shrink to nothing
					for len(js.alloc) > 0 {
						st.move(j, js.alloc[0].Server, -js.alloc[0].GPUs)
					}
				case op < 5:
					marks = append(marks, len(st.journal))
				case op < 6:
					if len(marks) > 0 {
						k := rng.IntN(len(marks))
						st.rollback(marks[k])
						marks = marks[:k]
					}
				case op < 7: // finish, shrink or the plan pass
					js.touched = rng.IntN(2) == 0
					js.planSet = rng.IntN(2) == 0
					if js.planSet && len(js.alloc) > 0 {
						g := 0
						for _, a := range js.alloc {
							g += a.GPUs
						}
						if r, ok := js.job.Model.Best(perf.Resources{Placement: placementOf(js.alloc), CrossRack: true, CPUsPerGPU: 4}); ok && r.Plan.GPUs() == g {
							js.newPlan = r.Plan
						}
					}
					st.circleChanged(j)
				default:
					st.rackCircles(rng.IntN(len(st.racks)), j)
				}
			}
			if stats.Hits == 0 || stats.Shared == 0 || stats.Hits == stats.Asks {
				t.Fatalf("the walk did not exercise the memo: %+v", stats)
			}
			t.Logf("%+v", stats)
		})
	}
}

// rotateLoad (uplinkInflation's one ring) gives what Rotate then
// LinkLoad give, to the bit, on random circles with random fixed ones.
func TestRotateLoadMatchesRotateThenLinkLoad(t *testing.T) {
	rng := rand.New(rand.NewPCG(29, 2))
	over := 0
	for trial := range 3000 {
		n := 1 + rng.IntN(12)
		cs := make([]Circle, n)
		offs := make([]float64, n)
		fixed := make([]bool, n)
		for i := range cs {
			iter := 0.2 + rng.Float64()*5
			cs[i] = CommCircle(iter, rng.Float64()*iter, rng.Float64())
			if rng.IntN(5) == 0 {
				cs[i].Arcs = append(cs[i].Arcs, Arc{Start: rng.Float64() * iter, Len: rng.Float64() * iter / 2, Demand: rng.Float64()})
			}
			offs[i] = rng.Float64() * 10
			fixed[i] = rng.IntN(3) > 0
		}
		if rng.IntN(10) == 0 {
			cs[rng.IntN(n)] = Circle{}
		}
		capacity := []float64{1, 0.5, 2, 0.999}[rng.IntN(4)]
		wantOffs, _ := Rotate(cs, fixed, offs, capacity)
		ex, _, wantExtra := LinkLoad(cs, wantOffs, capacity)
		gotOffs, gotExtra := rotateLoad(cs, fixed, offs, capacity)
		if !sameBits(gotOffs, wantOffs) || !sameBits(gotExtra, wantExtra) {
			t.Fatalf("trial %d: rotateLoad %v %v, Rotate then LinkLoad %v %v", trial, gotOffs, gotExtra, wantOffs, wantExtra)
		}
		if ex > 0 {
			over++
		}
	}
	if over < 300 {
		t.Fatalf("only %d trials overloaded a link", over)
	}
}

// sameBits reports whether a and b hold the same floats to the bit (NaN
// included).
func sameBits(a, b []float64) bool {
	return slices.EqualFunc(a, b, func(x, y float64) bool { return math.Float64bits(x) == math.Float64bits(y) })
}

// rotateRef is Rotate as it was before issue 29 (each free circle's
// demand slots found by a walk over the unified circle, weights summed
// at every comparison): the reference the faster one must equal.
func rotateRef(cs []Circle, fixed []bool, offsets []float64, capacity float64) ([]float64, float64) {
	out := append([]float64(nil), offsets...)
	r := newRing(cs)
	if r.per == nil {
		return out, 1
	}
	d, os := make([]float64, r.n), make([]int, len(cs))
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
	weight := func(i int) float64 {
		w := 0.0
		for _, v := range r.prof[i] {
			w += v
		}
		return w
	}
	slices.SortStableFunc(free, func(a, b int) int { return cmp.Compare(weight(b), weight(a)) })
	place := func(i int) {
		p, prof := r.per[i], r.prof[i]
		var arc []int
		var arcV []float64
		for t := range r.n {
			if v := prof[t%p]; v != 0 {
				arc = append(arc, t)
				arcV = append(arcV, v)
			}
		}
		bestO, best := 0, math.Inf(1)
		for o := 0; o < p && best > 1e-12; o++ {
			add := 0.0
			for k, t := range arc {
				u := t + o
				if u >= r.n {
					u -= r.n
				}
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

// Rotate equals rotateRef to the bit on random circles: periods whose
// unified circle reaches its bound (n not a multiple of every period),
// several arcs, empty circles, all, some or no circles fixed.
func TestRotateMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(29, 3))
	capped, over := 0, 0
	for trial := range 4000 {
		n := 1 + rng.IntN(10)
		cs := make([]Circle, n)
		offs := make([]float64, n)
		var fixed []bool
		if rng.IntN(5) > 0 {
			fixed = make([]bool, n)
		}
		for i := range cs {
			iter := 0.2 + rng.Float64()*5
			if rng.IntN(3) == 0 {
				iter = float64(1+rng.IntN(7)) * 0.37 // awkward ratios: a long unified circle
			}
			cs[i] = CommCircle(iter, rng.Float64()*iter, rng.Float64())
			for range rng.IntN(3) {
				cs[i].Arcs = append(cs[i].Arcs, Arc{Start: rng.Float64() * iter, Len: rng.Float64() * iter / 2, Demand: rng.Float64()})
			}
			offs[i] = rng.Float64() * 10
			if fixed != nil {
				fixed[i] = rng.IntN(2) == 0
			}
		}
		if rng.IntN(10) == 0 {
			cs[rng.IntN(n)] = Circle{}
		}
		capacity := []float64{1, 0.5, 2, 0.999}[rng.IntN(4)]
		wantOffs, wantScore := rotateRef(cs, fixed, offs, capacity)
		gotOffs, gotScore := Rotate(cs, fixed, offs, capacity)
		if !sameBits(gotOffs, wantOffs) || math.Float64bits(gotScore) != math.Float64bits(wantScore) {
			t.Fatalf("trial %d: Rotate %v %v, reference %v %v", trial, gotOffs, gotScore, wantOffs, wantScore)
		}
		if r := newRing(cs); r.per != nil && slices.ContainsFunc(r.per, func(p int) bool { return r.n%p != 0 }) {
			capped++
		}
		if wantScore < 1 {
			over++
		}
	}
	if capped < 100 || over < 500 {
		t.Fatalf("the trials reached the unified circle's bound %d times and overloaded %d times: too few", capped, over)
	}
}
