package perf

import (
	"math"
	"testing"
)

// h100Rows are iteration times measured on one H100 (bf16, one GPU; issue
// 25): GPT-2 XL (the gpt2 architecture) at global batch 16 and BERT-large
// (bert) at global batch 32, each as micro-batch × GA.
var h100Rows = []struct {
	arch     string
	mb, ga   int
	measured float64
}{
	{"gpt2", 1, 16, 2.20},
	{"gpt2", 2, 8, 1.29},
	{"gpt2", 4, 4, 0.97},
	{"bert", 1, 32, 2.29},
	{"bert", 32, 1, 0.135},
}

func h100Sample(t *testing.T, arch string, mb, ga int, measured float64) (Arch, Sample) {
	t.Helper()
	a := mustBuiltin(t, arch)
	a.GlobalBatch = mb * ga
	return a, Sample{Plan: Plan{DP: 1, TP: 1, PP: 1, MicroBatch: mb, GA: ga}, Resources: Resources{Placement: Placement{1}, CPUsPerGPU: 8}, IterS: measured}
}

// TestMicroBatchEfficiency: compute time depends on the micro-batch (a
// fixed per-layer cost per micro-batch, k_launch, that a small micro-batch
// does not amortise). Fitted on the measured H100 rows of each model (no
// forward profile: the architecture's FLOPs scaled by k_fwd), the model
// orders the plans as measured and predicts within 12 %; fitted on GPT-2
// XL's mb 1 and mb 4 rows only, it predicts the held-out mb 2 row within
// 15 %; the k_launch the two types fit on the same GPU agree within a
// factor of 2. Before k_launch every plan of a global batch was priced alike
// (1.22 s for all three GPT-2 XL plans, the order left to a tie-break).
func TestMicroBatchEfficiency(t *testing.T) {
	launch := map[string]float64{}
	for _, arch := range []string{"gpt2", "bert"} {
		var samples []Sample
		var a Arch
		for _, r := range h100Rows {
			if r.arch != arch {
				continue
			}
			var s Sample
			a, s = h100Sample(t, r.arch, r.mb, r.ga, r.measured)
			samples = append(samples, s)
		}
		m := DefaultModel(a, A800)
		k, _, err := Fit(m, samples, FitOptions{FreeForward: true})
		if err != nil {
			t.Fatal(err)
		}
		m.Params = k
		pred := make([]float64, len(samples))
		for i, s := range samples {
			b, err := m.Predict(s.Plan, s.Resources)
			if err != nil {
				t.Fatal(err)
			}
			pred[i] = b.Iter
			if e := math.Abs(b.Iter-s.IterS) / s.IterS; e > 0.12 {
				t.Errorf("%s %s: predicted %.3fs, measured %.3fs (%.0f%% off)", arch, s.Plan, b.Iter, s.IterS, 100*e)
			}
		}
		for i := range samples {
			for j := range samples {
				if samples[i].IterS < samples[j].IterS && !(pred[i] < pred[j]) {
					t.Errorf("%s: %s measured faster than %s (%.3f < %.3f s) but predicted %.3f >= %.3f s", arch, samples[i].Plan, samples[j].Plan, samples[i].IterS, samples[j].IterS, pred[i], pred[j])
				}
			}
		}
		t.Logf("%s: k_launch %.3g s per layer", arch, k.KLaunch)
		launch[arch] = k.KLaunch
		if k.KLaunch <= 0 {
			t.Errorf("%s: k_launch %g: no per-micro-batch cost fitted", arch, k.KLaunch)
		}
		// ranking among the plans of the batch picks the largest micro-batch
		r := Resources{Placement: Placement{1}, CPUsPerGPU: 8}
		best, ok := m.Best(r)
		if !ok || best.Plan.GA != 1 && best.Plan.MicroBatch < 4 {
			t.Errorf("%s: best plan %+v (ok %v): want a large micro-batch", arch, best.Plan, ok)
		}
	}
	// k_launch is a property of the GPU and its software: the two model
	// types fitted apart agree within a factor of 2 (0.70 and 0.97 ms per
	// layer).
	if g, b := launch["gpt2"], launch["bert"]; max(g, b) > 2*min(g, b) {
		t.Errorf("k_launch %.3g s (gpt2) and %.3g s (bert) per layer on the same H100: not a property of the GPU", g, b)
	}
	// Interpolation: fit on mb 1 and mb 4, predict mb 2.
	a, s1 := h100Sample(t, "gpt2", 1, 16, 2.20)
	_, s4 := h100Sample(t, "gpt2", 4, 4, 0.97)
	_, s2 := h100Sample(t, "gpt2", 2, 8, 1.29)
	m := DefaultModel(a, A800)
	k, _, err := Fit(m, []Sample{s1, s4}, FitOptions{FreeForward: true})
	if err != nil {
		t.Fatal(err)
	}
	m.Params = k
	b, err := m.Predict(s2.Plan, s2.Resources)
	if err != nil {
		t.Fatal(err)
	}
	if e := math.Abs(b.Iter-s2.IterS) / s2.IterS; e > 0.15 {
		t.Errorf("gpt2 mb2 ga8 held out: predicted %.3fs, measured %.3fs (%.0f%% off)", b.Iter, s2.IterS, 100*e)
	}
}

// TestLaunchCostKeepsProfile: k_launch is taken out of the profile's
// per-iteration α, so the forward of a GA 1 run (what a profile measures)
// is priced the same whatever k_launch; the backward pays it k_bwd times
// per micro-batch, and GA > 1 runs pay it per extra micro-batch.
func TestLaunchCostKeepsProfile(t *testing.T) {
	a := mustBuiltin(t, "gpt2")
	m := Model{Arch: a, Forward: Forward{Alpha: 0.05, Beta: 0.02}, Params: DefaultParams, Env: A800}
	r := Resources{Placement: Placement{1}, CPUsPerGPU: 8}
	one := Plan{DP: 1, TP: 1, PP: 1, MicroBatch: 16, GA: 1}
	many := Plan{DP: 1, TP: 1, PP: 1, MicroBatch: 1, GA: 16}
	b0, _ := m.Predict(one, r)
	g0, _ := m.Predict(many, r)
	m.Params.KLaunch = 0.5e-3 // 24 ms over 48 layers: under α
	b1, _ := m.Predict(one, r)
	g1, _ := m.Predict(many, r)
	if math.Abs(b1.Fwd-b0.Fwd) > 1e-12 || math.Abs(b1.Iter-b0.Iter-48*0.5e-3*m.Params.KBwd) > 1e-9 {
		t.Errorf("GA 1: forward %.4f s, iteration %.4f s with k_launch; %.4f s, %.4f s without", b1.Fwd, b1.Iter, b0.Fwd, b0.Iter)
	}
	// 15 extra forwards and 16 backwards × 48 layers × 0.5 ms
	want := 48 * 0.5e-3 * (15 + 16*m.Params.KBwd)
	if d := (g1.Iter - g0.Iter); math.Abs(d-want) > 1e-9 {
		t.Errorf("GA 16 pays %.4f s more with k_launch, want %.4f", d, want)
	}
}

// TestFitFindsLaunchFromMicroBatchPairs: a model type profiled on arrival
// (the e2e trainer's shape: 2 layers on servers of 2 GPUs, no forward
// profile, the forward estimated from the runs) whose every micro-batch
// pays a fixed 21 ms (7 ms forward, 14 ms backward: 3.5 ms per layer), as
// a Python trainer's does. The profile's 1-GPU mb 16 and mb 4 × GA 4 runs
// show it; the fit must find it, so that the DP4 plans on 2 servers × 2
// GPUs are priced in the measured order (mb 4 < mb 2 < mb 1) and within
// 5 %. Before launchGuess the fit stayed at k_launch 1 µs and priced all
// three alike (0.3144 s), and a tie-break or the optimizer's curse chose
// mb 1 (TestTorchProfileEndToEnd started the job there 1 run in 9: −28 %).
func TestFitFindsLaunchFromMicroBatchPairs(t *testing.T) {
	a := Arch{Name: "tinygpt", Params: 134912, Layers: 2, Hidden: 64, Heads: 1, SeqLen: 32, Vocab: 256, GlobalBatch: 16}
	env := A800
	env.GPUsPerServer = 2
	m := DefaultModel(a, env)
	const perMB, perSample = 0.021, 0.0575
	truth := func(p Plan, pl Placement) float64 {
		t := float64(p.GA) * (perMB + perSample*float64(p.MicroBatch))
		if p.DP > 1 {
			t += 0.02
			if pl.Servers() > 1 {
				t += 0.05
			}
		}
		return t
	}
	var samples []Sample
	for _, c := range ProfileConfigs(m, []int{2, 2, 2}, 7) {
		if c.Plan.TP > 1 || c.Plan.PP > 1 {
			continue // the trainer refuses model parallelism
		}
		samples = append(samples, Sample{Plan: c.Plan, Resources: Resources{Placement: c.Placement, CPUsPerGPU: 1}, IterS: truth(c.Plan, c.Placement)})
	}
	f, err := EstimateForward(a, samples)
	if err != nil {
		t.Fatal(err)
	}
	m.Forward = f
	k, _, err := Fit(m, samples, FitOptions{})
	if err != nil {
		t.Fatal(err)
	}
	m.Params = k
	wantLaunch := perMB / (1 + DefaultParams.KBwd) / float64(a.Layers)
	t.Logf("k_launch %.3g s per layer (the trainer's: %.3g), k_lo %.3g", k.KLaunch, wantLaunch, k.KLO)
	if k.KLO > 1.1 {
		t.Errorf("k_lo %.3g: the trainer pays its micro-batches' fixed time serially (1)", k.KLO)
	}
	if k.KLaunch < wantLaunch/2 || k.KLaunch > 2*wantLaunch {
		t.Errorf("k_launch %.3g s per layer, the trainer pays %.3g", k.KLaunch, wantLaunch)
	}
	pl := Placement{2, 2}
	prev := 0.0
	for _, mb := range []int{4, 2, 1} {
		p := Plan{DP: 4, TP: 1, PP: 1, MicroBatch: mb, GA: 4 / mb}
		b, err := m.Predict(p, Resources{Placement: pl, CPUsPerGPU: 1})
		if err != nil {
			t.Fatal(err)
		}
		want := truth(p, pl)
		if e := math.Abs(b.Iter-want) / want; e > 0.05 {
			t.Errorf("%s on %s: predicted %.4f s, the trainer takes %.4f (%.0f%% off)", p, pl, b.Iter, want, 100*e)
		}
		if b.Iter <= prev*(1+1e-6) {
			t.Errorf("%s on %s: predicted %.4f s, not slower than the larger micro-batch's %.4f", p, pl, b.Iter, prev)
		}
		prev = b.Iter
	}
	if r, ok := m.Best(Resources{Placement: pl, CPUsPerGPU: 1}); !ok || r.Plan.MicroBatch != 4 {
		t.Errorf("best on %s: %s, want mb 4", pl, r.Plan)
	}
}

// TestBoundOverlapKeepsAccumulationSlower: fitted on samples whose
// backward and sync overlap worse than serially (k_sync below 1, as a fit
// on a few noisy live samples may find), the model prices DP4 at
// micro-batch 1 × GA 4 faster than micro-batch 4 × GA 1 of the same
// samples: only the last micro-batch's backward meets the sync, so more
// micro-batches leave less to the superadditive overlap. The daemon
// started a profiled job on such a plan (TestTorchProfileEndToEnd:
// predicted 59.3 samples/s, measured 44.2, where micro-batch 4 ran 55.9).
// With BoundOverlap (the daemon's fits) k_sync is held at 1, the serial
// bound, and gradient accumulation is never priced faster.
func TestBoundOverlapKeepsAccumulationSlower(t *testing.T) {
	a := mustBuiltin(t, "gpt2")
	a.GlobalBatch = 16
	truth := DefaultModel(a, A800)
	truth.Params.KSync = 0.7
	var samples []Sample
	for _, c := range []struct {
		pl     Placement
		dp, mb int
	}{{Placement{1}, 1, 16}, {Placement{2}, 2, 8}, {Placement{4}, 4, 4}, {Placement{2, 2}, 4, 4}, {Placement{1, 1}, 2, 8}, {Placement{4, 4}, 8, 2}, {Placement{8}, 8, 2}} {
		p := Plan{DP: c.dp, TP: 1, PP: 1, MicroBatch: c.mb, GA: 1}
		r := Resources{Placement: c.pl, CPUsPerGPU: 8}
		b, err := truth.Predict(p, r)
		if err != nil {
			t.Fatal(err)
		}
		samples = append(samples, Sample{Plan: p, Resources: r, IterS: b.Iter})
	}
	res := Resources{Placement: Placement{2, 2}, CPUsPerGPU: 8}
	one, cut := Plan{DP: 4, TP: 1, PP: 1, MicroBatch: 4, GA: 1}, Plan{DP: 4, TP: 1, PP: 1, MicroBatch: 1, GA: 4}
	for _, bound := range []bool{false, true} {
		m := DefaultModel(a, A800)
		k, st, err := Fit(m, samples, FitOptions{BoundOverlap: bound})
		if err != nil {
			t.Fatal(err)
		}
		m.Params = k
		b1, _ := m.Predict(one, res)
		b4, _ := m.Predict(cut, res)
		t.Logf("bound %v: k_sync %.3f; DP4 mb4×GA1 %.4f s, mb1×GA4 %.4f s; flags %q", bound, k.KSync, b1.Iter, b4.Iter, st.Flags)
		switch {
		case !bound && (k.KSync >= 1 || b4.Iter >= b1.Iter):
			t.Fatalf("unbounded: want k_sync below 1 and accumulation priced faster (the defect this guards), got k_sync %.3f, %.4f against %.4f s", k.KSync, b4.Iter, b1.Iter)
		case bound && (k.KSync < 1 || b4.Iter < b1.Iter*(1-1e-12)):
			t.Errorf("bounded: k_sync %.3f, micro-batch 1 × GA 4 priced %.4f s against %.4f s for micro-batch 4", k.KSync, b4.Iter, b1.Iter)
		}
	}
}
