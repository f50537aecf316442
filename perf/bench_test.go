package perf

import "testing"

func benchModel(b *testing.B) Model {
	a, _ := Builtin("gpt2")
	return Model{Arch: a, Forward: Forward{Alpha: 0.01, Beta: 0.07}, Params: Params{KBwd: 2, KSync: 1.5, KOpt: 0.05, KOptOff: 2, KOff: 1, KSwap: 1, KConst: 0.02}, Env: A800}
}

// BenchmarkCurve64 is one full sensitivity curve for 1..64 GPUs (target ≤ 5 ms).
func BenchmarkCurve64(b *testing.B) {
	m := benchModel(b)
	for b.Loop() {
		m.Curve(64, 8)
	}
}

// BenchmarkFit fits the twelve parameters on 14 samples (target ≤ 50 ms).
func BenchmarkFit(b *testing.B) {
	m := benchModel(b)
	samples := serverLadder(b, m, 16, func(int) float64 { return 1.03 })
	for _, pl := range []Placement{{4, 4}, {2, 6}, {1, 1, 1, 1}} {
		p := Plan{DP: pl.GPUs(), TP: 1, PP: 1, MicroBatch: 16 / pl.GPUs(), GA: 1, Ckpt: true}
		r := Resources{Placement: pl, CPUsPerGPU: 4}
		bd, _ := m.Predict(p, r)
		samples = append(samples, Sample{Plan: p, Resources: r, IterS: bd.Iter * 0.97})
	}
	start := m
	start.Params = DefaultParams
	for b.Loop() {
		if _, _, err := Fit(start, samples, FitOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPredict prices one 3D plan on 64 GPUs.
func BenchmarkPredict(b *testing.B) {
	m := benchModel(b)
	p := Plan{DP: 8, TP: 1, PP: 8, MicroBatch: 1, GA: 2}
	r := Resources{Placement: Placement{8, 8, 8, 8, 8, 8, 8, 8}}
	for b.Loop() {
		if _, err := m.Predict(p, r); err != nil {
			b.Fatal(err)
		}
	}
}
