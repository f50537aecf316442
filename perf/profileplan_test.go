package perf

import (
	"math"
	"slices"
	"testing"
)

// TestProfileConfigsChoice: at most seven distinct configurations, each
// valid, inside the framework's space, fitting memory and the free GPUs,
// covering one GPU at two micro-batches, DP inside a server and across two.
func TestProfileConfigsChoice(t *testing.T) {
	a := Arch{Name: "mine", Params: 1.3e9, Layers: 24, Hidden: 2048, Heads: 16, SeqLen: 1024, Vocab: 50257, GlobalBatch: 32}
	m := DefaultModel(a, A800)
	cs := ProfileConfigs(m, []int{8, 8, 3}, 0)
	if len(cs) < 5 || len(cs) > MaxProfileConfigs {
		t.Fatalf("got %d configurations, want 5..7: %+v", len(cs), cs)
	}
	labels := map[string]bool{}
	seen := map[string]bool{}
	mbs := map[int]bool{}
	for _, c := range cs {
		k := c.Plan.Spec() + "@" + c.Placement.String()
		if seen[k] {
			t.Errorf("duplicate configuration %s", k)
		}
		seen[k] = true
		labels[c.Label] = true
		if err := Check(a, c.Plan, c.Placement); err != nil {
			t.Errorf("%s: %v", c.Label, err)
		}
		if err := EstimateMemory(a, c.Plan, c.Placement).Fits(A800); err != nil {
			t.Errorf("%s: %v", c.Label, err)
		}
		if len(c.Placement) > 2 || c.Placement[0] > 8 {
			t.Errorf("%s: placement %v beyond the free GPUs", c.Label, c.Placement)
		}
		if c.Placement.GPUs() == 1 && !c.Plan.Offload {
			mbs[c.Plan.MicroBatch] = true
		}
		// every term a configuration says it pins is a parameter or the
		// forward profile (the DP run across servers named k_stray after
		// it was replaced)
		for _, pin := range c.Pins {
			if pin != "forward" && !slices.Contains(ParamNames[:], pin) {
				t.Errorf("%s pins %q, not a parameter", c.Label, pin)
			}
		}
	}
	for _, want := range []string{"DP8 on 1 server", "DP16 on 2 servers", "TP2 on 1 server", "ZeRO-Offload on 1 GPU"} {
		if !labels[want] {
			t.Errorf("no %q among %v", want, labels)
		}
	}
	if len(mbs) < 2 {
		t.Errorf("one GPU at %d micro-batch sizes, want 2", len(mbs))
	}
	// the second micro-batch is what identifies k_launch
	pinsLaunch := false
	for _, c := range cs {
		pinsLaunch = pinsLaunch || slices.Contains(c.Pins, "k_launch")
	}
	if !pinsLaunch {
		t.Errorf("no configuration pins k_launch: %+v", cs)
	}
	// A limit is kept; free GPUs bound the placements.
	if got := ProfileConfigs(m, []int{8, 8}, 3); len(got) != 3 {
		t.Errorf("limit 3: got %d", len(got))
	}
	for _, c := range ProfileConfigs(m, []int{2}, 0) {
		if c.Placement.GPUs() > 2 || len(c.Placement) > 1 {
			t.Errorf("2 free GPUs on one server: got %s on %v", c.Label, c.Placement)
		}
	}
	if got := ProfileConfigs(m, []int{0, 0}, 0); len(got) != 0 {
		t.Errorf("no free GPU: got %d configurations", len(got))
	}
	// Megatron runs no offload: none is chosen.
	mm := m
	mm.Space = MegatronSpace
	for _, c := range ProfileConfigs(mm, []int{8, 8}, 0) {
		if c.Plan.Offload || c.Plan.ZeRO > 1 {
			t.Errorf("Megatron: got %s (%s)", c.Label, c.Plan)
		}
	}
}

// TestProfileConfigsPinTheModel: a model whose true parameters and
// forward differ from the defaults, measured only on the chosen
// configurations, is fitted to within 15% on placements it never ran
// (the whole point of choosing them).
func TestProfileConfigsPinTheModel(t *testing.T) {
	a := Arch{Name: "mine", Params: 1.3e9, Layers: 24, Hidden: 2048, Heads: 16, SeqLen: 1024, Vocab: 50257, GlobalBatch: 32}
	start := DefaultModel(a, A800)
	truth := start
	truth.Forward.Alpha *= 1.6
	truth.Forward.Beta *= 1.6
	truth.Params.KBwd, truth.Params.KSync, truth.Params.KConst, truth.Params.KOptOff = 2.4, 1.3, 0.05, 1.8
	cs := ProfileConfigs(start, []int{8, 8}, 0)
	var samples []Sample
	for _, c := range cs {
		r := Resources{Placement: c.Placement, CPUsPerGPU: 8}
		b, err := truth.Predict(c.Plan, r)
		if err != nil {
			t.Fatal(err)
		}
		samples = append(samples, Sample{Plan: c.Plan, Resources: r, IterS: b.Iter})
	}
	k, _, err := Fit(start, samples, FitOptions{})
	if err != nil {
		t.Fatal(err)
	}
	fitted := start
	fitted.Params = k
	worstFit, worstDefault := 0.0, 0.0
	for _, g := range []int{4, 16} {
		for _, pl := range []Placement{PackedPlacement(g, 8), EvenPlacement(g, 2)} {
			r := Resources{Placement: pl, CPUsPerGPU: 8}
			p := Plan{DP: g, TP: 1, PP: 1, MicroBatch: 32 / g, GA: 1}
			want, err := truth.Predict(p, r)
			if err != nil {
				t.Fatal(err)
			}
			got, _ := fitted.Predict(p, r)
			def, _ := start.Predict(p, r)
			worstFit = math.Max(worstFit, math.Abs(got.Iter-want.Iter)/want.Iter)
			worstDefault = math.Max(worstDefault, math.Abs(def.Iter-want.Iter)/want.Iter)
		}
	}
	t.Logf("worst error on unseen placements: fitted %.1f%%, unfitted %.1f%%", 100*worstFit, 100*worstDefault)
	if worstFit > 0.15 {
		t.Errorf("fitted on the profile: worst error %.1f%% on unseen placements, want ≤ 15%%", 100*worstFit)
	}
	if worstDefault < 0.3 {
		t.Fatalf("the unfitted model is already within %.1f%%: the test proves nothing", 100*worstDefault)
	}
}

// TestEstimateForwardFarOff: a small model on a slow device (the torch
// end to end's emulated one: its forward 10⁴× what FLOPs say) cannot be
// fitted by the parameters alone; with the forward estimated from the
// profile runs it is predicted within 10% on placements it never ran.
func TestEstimateForwardFarOff(t *testing.T) {
	a := Arch{Name: "tinygpt", Params: 134912, Layers: 2, Hidden: 64, Heads: 1, SeqLen: 32, Vocab: 256, GlobalBatch: 16}
	start := DefaultModel(a, A800)
	start.Space = MegatronSpace
	truth := start
	truth.Forward = Forward{Alpha: 0.002, Beta: 0.015}
	var samples []Sample
	for _, c := range ProfileConfigs(start, []int{2, 2, 2}, 0) {
		r := Resources{Placement: c.Placement, CPUsPerGPU: 1}
		b, _ := truth.Predict(c.Plan, r)
		samples = append(samples, Sample{Plan: c.Plan, Resources: r, IterS: b.Iter})
	}
	if len(samples) < 3 {
		t.Fatalf("%d configurations", len(samples))
	}
	f, err := EstimateForward(a, samples)
	if err != nil {
		t.Fatal(err)
	}
	worst := func(m Model) float64 {
		k, _, err := Fit(m, samples, FitOptions{})
		if err != nil {
			t.Fatal(err)
		}
		m.Params = k
		w := 0.0
		for _, pl := range []Placement{{4}, {1, 1}, {2, 2, 2, 2}} {
			g := pl.GPUs()
			p := Plan{DP: g, TP: 1, PP: 1, MicroBatch: 16 / g, GA: 1}
			r := Resources{Placement: pl, CPUsPerGPU: 1}
			want, _ := truth.Predict(p, r)
			got, _ := m.Predict(p, r)
			w = math.Max(w, math.Abs(got.Iter-want.Iter)/want.Iter)
		}
		return w
	}
	est := start
	est.Forward = f
	wd, we := worst(start), worst(est)
	t.Logf("forward estimated alpha %.4f beta %.4f (true 0.002, 0.015); worst error on unseen placements: default forward %.0f%%, estimated %.1f%%", f.Alpha, f.Beta, 100*wd, 100*we)
	if we > 0.10 {
		t.Errorf("with the estimated forward: worst error %.1f%%, want ≤ 10%%", 100*we)
	}
	if wd < 0.3 {
		t.Fatalf("the default forward already fits within %.0f%%: the test proves nothing", 100*wd)
	}
}

// TestProfileConfigsIdentifyLaunchCost: the profile's one-GPU runs at
// different micro-batches identify k_launch, the fixed time of a
// micro-batch (issue 25): a type whose GPU pays 0.3 ms per layer and
// micro-batch (what GPT-2 XL's H100 rows fit), measured only on the
// profile configurations, is then priced within 3 % at micro-batch 1
// with 4 accumulation steps on DP 8, a plan no profile run used, where a
// fit with k_launch held at its prior (no such cost) is 8 % or more off.
// Before k_launch's prior was weakened the fit stayed at the prior's
// 1 µs: the log-prior's pull from 1 µs to 0.3 ms outweighed the 6 %
// difference of the two runs. The launches add to the compute here
// (k_lo 1, a serial trainer): the fit's k_lo stays within 10 % of 1.
// TestProfileConfigsIdentifyLaunchOverlap is the other kind.
func TestProfileConfigsIdentifyLaunchCost(t *testing.T) {
	a := Arch{Name: "mine", Params: 1.3e9, Layers: 24, Hidden: 2048, Heads: 16, SeqLen: 1024, Vocab: 50257, GlobalBatch: 32}
	start := DefaultModel(a, A800)
	truth := start
	truth.Params.KLaunch = 0.3e-3
	truth.Forward.Alpha += truth.Params.KLaunch * float64(a.Layers) // a GA 1 forward holds one micro-batch's launches
	samples := profileSamples(t, truth, start)
	small := Plan{DP: 8, TP: 1, PP: 1, MicroBatch: 1, GA: 4}
	r := Resources{Placement: Placement{8}, CPUsPerGPU: 8}
	want, err := truth.Predict(small, r)
	if err != nil {
		t.Fatal(err)
	}
	errAt := func(o FitOptions) (float64, Params) {
		m := fitWithForward(t, start, truth.Forward, samples, o)
		k := m.Params
		got, err := m.Predict(small, r)
		if err != nil {
			t.Fatal(err)
		}
		return math.Abs(got.Iter-want.Iter) / want.Iter, k
	}
	var held FitOptions
	held.Hold[12] = true
	fitted, k := errAt(FitOptions{})
	without, _ := errAt(held)
	t.Logf("%s on 8 GPUs: %.1f%% off with k_launch fitted on the profile runs (%.3g ms per layer, k_lo %.3g), %.1f%% with it held at its prior", small, 100*fitted, 1e3*k.KLaunch, k.KLO, 100*without)
	if fitted > 0.03 {
		t.Errorf("k_launch fitted on the profile runs: %s %.1f%% off, want ≤ 3%%", small, 100*fitted)
	}
	if k.KLO > 1.1 {
		t.Errorf("k_lo %.3g: the profile's launches add to the compute (1)", k.KLO)
	}
	if without < 0.08 {
		t.Fatalf("without k_launch the plan is already within %.1f%%: the test proves nothing", 100*without)
	}
}

// profileSamples measures truth on the configurations ProfileConfigs
// chooses for start on two 8-GPU servers.
func profileSamples(t *testing.T, truth, start Model) []Sample {
	t.Helper()
	var samples []Sample
	for _, c := range ProfileConfigs(start, []int{8, 8}, 0) {
		r := Resources{Placement: c.Placement, CPUsPerGPU: 8}
		b, err := truth.Predict(c.Plan, r)
		if err != nil {
			t.Fatal(err)
		}
		samples = append(samples, Sample{Plan: c.Plan, Resources: r, IterS: b.Iter})
	}
	if !LaunchOverlapIdentified(samples) {
		t.Fatalf("the profile's runs do not identify k_lo: %+v", samples)
	}
	return samples
}

// TestProfileConfigsIdentifyLaunchOverlap: a GPU whose launches hide
// behind a large micro-batch's compute (k_lo 4, as the H200's bert fits
// on all its rows: 4.6), measured
// only on the profile configurations, is priced within 4 % (measured:
// 2.0 %, k_lo fitted 3.1) on one GPU at
// micro-batch 4 × GA 8, between the profile's micro-batches 8 and 2,
// and on DP 8 at micro-batch 1 × GA 4; the additive form (k_lo held at
// 1) fitted on the same runs is 10 % or more off on one of them
// (measured: 13.7 %).
func TestProfileConfigsIdentifyLaunchOverlap(t *testing.T) {
	a := Arch{Name: "mine", Params: 1.3e9, Layers: 24, Hidden: 2048, Heads: 16, SeqLen: 1024, Vocab: 50257, GlobalBatch: 32}
	start := DefaultModel(a, A800)
	truth := start
	// a GPU 10× faster than DefaultForward's guess, where a micro-batch's
	// 24 ms of launches are the compute of 5.5 samples (bert on the H200:
	// 40 ms, 12 samples)
	truth.Forward.Beta /= 10
	truth.Params.KLaunch, truth.Params.KLO = 1e-3, 4
	samples := profileSamples(t, truth, start)
	unseen := []struct {
		p  Plan
		pl Placement
	}{
		{Plan{DP: 1, TP: 1, PP: 1, MicroBatch: 4, GA: 8}, Placement{1}},
		{Plan{DP: 8, TP: 1, PP: 1, MicroBatch: 1, GA: 4}, Placement{8}},
	}
	worst := func(o FitOptions) (float64, Params) {
		m := fitWithForward(t, start, truth.Forward, samples, o)
		k := m.Params
		w := 0.0
		for _, u := range unseen {
			r := Resources{Placement: u.pl, CPUsPerGPU: 8}
			want, err := truth.Predict(u.p, r)
			if err != nil {
				t.Fatal(err)
			}
			got, err := m.Predict(u.p, r)
			if err != nil {
				t.Fatal(err)
			}
			w = max(w, math.Abs(got.Iter-want.Iter)/want.Iter)
		}
		return w, k
	}
	var additive FitOptions
	additive.Hold[15] = true
	fitted, k := worst(FitOptions{})
	without, _ := worst(additive)
	t.Logf("unseen plans: worst %.1f%% off with k_lo fitted (%.3g; k_launch %.3g ms per layer), %.1f%% with k_lo held at 1", 100*fitted, k.KLO, 1e3*k.KLaunch, 100*without)
	if fitted > 0.04 {
		t.Errorf("k_lo fitted on the profile runs: worst unseen plan %.1f%% off, want ≤ 4%%", 100*fitted)
	}
	if without < 0.10 {
		t.Fatalf("the additive form is already within %.1f%%: the test proves nothing", 100*without)
	}
}

// fitWithForward is start with the forward profile f, fitted on samples.
func fitWithForward(t *testing.T, start Model, f Forward, samples []Sample, o FitOptions) Model {
	t.Helper()
	m := start
	m.Forward = f
	k, _, err := Fit(m, samples, o)
	if err != nil {
		t.Fatal(err)
	}
	m.Params = k
	return m
}
