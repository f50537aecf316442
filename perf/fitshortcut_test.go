package perf

import (
	"math"
	"math/rand/v2"
	"reflect"
	"testing"
)

// shortcutSamples is a varied sample set for the fit-shortcut tests:
// candidate plans of gpt2 on placements of one to four servers (stray
// ones among them), offload plans, measured optimizer phases on some,
// and repeated measurements of the same runs (samples of one shape).
func shortcutSamples(t *testing.T, m Model, seed uint64) []Sample {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 7))
	var out []Sample
	for _, pl := range []Placement{{1}, {2}, {4}, {8}, {4, 4}, {3, 5}, {8, 8}, {8, 4, 4}, {2, 2, 2, 2}} {
		var plans []Plan
		ForEachCandidate(m.Arch, pl.GPUs(), func(p Plan) { plans = append(plans, p) })
		for range 3 {
			if len(plans) == 0 {
				break
			}
			p := plans[rng.IntN(len(plans))]
			r := Resources{Placement: pl, CPUsPerGPU: float64(2 + rng.IntN(6))}
			b, err := m.Predict(p, r)
			if err != nil {
				continue
			}
			s := Sample{Plan: p, Resources: r, IterS: b.Iter * math.Exp(rng.NormFloat64()*0.1)}
			if !p.Offload && rng.IntN(3) == 0 {
				s.OptS = b.Too * math.Exp(rng.NormFloat64()*0.1)
			}
			out = append(out, s)
			if rng.IntN(3) == 0 {
				// measured again
				s.IterS = b.Iter * math.Exp(rng.NormFloat64()*0.1)
				out = append(out, s)
			}
		}
	}
	// one run far off: the robust pass screens it
	out[len(out)/2].IterS *= 3
	return out
}

// TestFitShortcutsMatchPlain: the fit prices each distinct shape once
// per point and answers a shape's unchanged overlaps and logarithms from
// the last point's; its parameters and statistics are those of the
// former objective, to the bit, robust pass and outlier screening
// included.
func TestFitShortcutsMatchPlain(t *testing.T) {
	a, _ := Builtin("gpt2")
	m := Model{Arch: a, Forward: Forward{Alpha: 0.01, Beta: 0.07}, Params: DefaultParams, Env: A800}
	for seed := uint64(1); seed <= 3; seed++ {
		samples := shortcutSamples(t, m, seed)
		shapes := make([]shape, len(samples))
		for i, s := range samples {
			var err error
			if shapes[i], err = m.prepare(s.Plan, s.Resources); err != nil {
				t.Fatal(err)
			}
		}
		if d, _ := distinctShapes(shapes); len(d) == len(shapes) {
			t.Fatalf("seed %d: no two samples of one shape: the test does not reach the shortcut", seed)
		}
		for _, o := range []FitOptions{{}, {OutlierLogErr: -1, Seed: seed}} {
			fitPlain = true
			want, wst, werr := Fit(m, samples, o)
			fitPlain = false
			got, gst, gerr := Fit(m, samples, o)
			if (werr == nil) != (gerr == nil) {
				t.Fatalf("seed %d: errors %v and %v", seed, werr, gerr)
			}
			wv, gv := want.Vector(), got.Vector()
			for i := range wv {
				if math.Float64bits(wv[i]) != math.Float64bits(gv[i]) {
					t.Errorf("seed %d %+v: parameter %d: %v with the shortcuts, %v without", seed, o, i, gv[i], wv[i])
				}
			}
			if !reflect.DeepEqual(wst, gst) {
				t.Errorf("seed %d %+v: stats %+v with the shortcuts, %+v without", seed, o, gst, wst)
			}
		}
	}
}

// TestEvalMemoMatchesEval moves one parameter at a time, as a
// finite-difference gradient does, and then all of them: every
// breakdown through the overlap memo is eval's, to the bit.
func TestEvalMemoMatchesEval(t *testing.T) {
	a, _ := Builtin("gpt2")
	m := Model{Arch: a, Forward: Forward{Alpha: 0.01, Beta: 0.07}, Params: DefaultParams, Env: A800}
	samples := shortcutSamples(t, m, 9)
	rng := rand.New(rand.NewPCG(3, 4))
	hits := 0
	for _, s := range samples {
		sh, err := m.prepare(s.Plan, s.Resources)
		if err != nil {
			t.Fatal(err)
		}
		var om overlapMemo
		x := startParams(DefaultParams).Vector()
		for step := range 200 {
			y := x
			if step%5 == 4 {
				for i := range y {
					y[i] *= math.Exp(rng.NormFloat64() * 0.3)
				}
			} else {
				i := rng.IntN(len(y))
				y[i] *= math.Exp(rng.NormFloat64() * 0.3)
			}
			k := ParamsFromVector(y)
			before := om
			got, want := sh.evalMemo(k, &om), sh.eval(k)
			if !reflect.DeepEqual(got, want) || math.Float64bits(got.Iter) != math.Float64bits(want.Iter) || math.Float64bits(got.Too) != math.Float64bits(want.Too) {
				t.Fatalf("%s on %s, step %d: %+v through the memo, %+v without", s.Plan, s.Resources.Placement, step, got, want)
			}
			if before[0].set && om[0] == before[0] {
				hits++
			}
		}
	}
	if hits == 0 {
		t.Fatal("no overlap answered from the memo: the test does not reach it")
	}
}
