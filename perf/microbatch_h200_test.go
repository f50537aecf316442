package perf

import (
	"encoding/csv"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"testing"
)

// The rows of testdata/h200_mbscale.csv: iteration time and peak memory
// of BERT-large (the bert architecture, global batch 32) and GPT-2 XL
// (gpt2, global batch 16) per micro-batch × GA on one NVIDIA H200
// (143771 MiB, torch 2.11, bf16 autocast, fp32 master weights, fused
// AdamW), measured by examples/gpu/mbscale.py with PyTorch's fused
// attention (sdpa: no attention scores kept) and with explicit attention
// (math: scores, softmax and dropout mask kept). iter_s is the median of 4
// iterations after 2 warm-ups; the peaks are torch's max_memory_reserved
// and max_memory_allocated in GiB.
type mbRow struct {
	model, attn     string
	mb, ga          int
	iterS, reserved float64
}

// nvmlContextGiB is what NVML shows beyond torch's reserved memory: the
// CUDA context. The daemon's peaks are NVML figures (docs/perf.md).
const nvmlContextGiB = 0.5

// h200 is one H200 as perf sees it: the A800 server's links (the rows run
// on one GPU: no communication, so they are not used) with the H200's
// 140 GiB (143771 MiB as nvidia-smi reports it).
func h200() Env {
	e := A800
	e.GPUMemGB = 140
	return e
}

func readMBScale(t *testing.T, path string) []mbRow {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	want := []string{"gpu", "model", "attn", "mb", "ga", "iter_s", "iter_s_min", "peak_reserved_gib", "peak_alloc_gib", "status"}
	if len(recs) < 2 || fmt.Sprint(recs[0]) != fmt.Sprint(want) {
		t.Fatalf("%s: header %v, want %v and rows", path, recs[0], want)
	}
	var out []mbRow
	for i, r := range recs[1:] {
		line := i + 2
		if r[9] != "ok" {
			continue
		}
		num := func(col int) float64 {
			v, err := strconv.ParseFloat(r[col], 64)
			if err != nil || v <= 0 {
				t.Fatalf("%s:%d: field %s %q: want a positive number", path, line, want[col], r[col])
			}
			return v
		}
		row := mbRow{model: r[1], attn: r[2], mb: int(num(3)), ga: int(num(4)), iterS: num(5), reserved: num(7)}
		if float64(row.mb) != num(3) || float64(row.ga) != num(4) {
			t.Fatalf("%s:%d: mb %s, ga %s: want integers", path, line, r[3], r[4])
		}
		out = append(out, row)
	}
	return out
}

// mbSeries is one (model, attention) series of the rows, as samples (DP 1
// on one GPU, the peak as NVML would report it) in the file's order.
type mbSeries struct {
	model, attn string
	arch        Arch // the built-in architecture at the series' global batch
	samples     []Sample
}

func h200Series(t *testing.T) []mbSeries {
	t.Helper()
	out := seriesOf(t, "testdata/h200_mbscale.csv")
	if len(out) != 3 {
		t.Fatalf("%d series, want bert sdpa, gpt2 sdpa, bert math", len(out))
	}
	return out
}

// seriesOf reads the series of a file of examples/gpu/mbscale.py's rows.
func seriesOf(t *testing.T, path string) []mbSeries {
	t.Helper()
	var out []mbSeries
	for _, r := range readMBScale(t, path) {
		if len(out) == 0 || out[len(out)-1].model != r.model || out[len(out)-1].attn != r.attn {
			out = append(out, mbSeries{model: r.model, attn: r.attn})
		}
		s := &out[len(out)-1]
		a, smp := h100Sample(t, r.model, r.mb, r.ga, r.iterS)
		if s.arch.Name != "" && s.arch.GlobalBatch != a.GlobalBatch {
			t.Fatalf("%s %s mb %d ga %d: global batch %d, the series runs %d", r.model, r.attn, r.mb, r.ga, a.GlobalBatch, s.arch.GlobalBatch)
		}
		s.arch = a
		smp.PeakGPUGB = r.reserved + nvmlContextGiB
		s.samples = append(s.samples, smp)
	}
	return out
}

func (s mbSeries) String() string { return s.model + " " + s.attn }

// checkOrder checks that pred (the predicted iteration seconds of s's samples) orders the plans
// as measured: a plan measured faster is predicted faster.
func (s mbSeries) checkOrder(t *testing.T, pred []float64) {
	t.Helper()
	for i, x := range s.samples {
		for j, y := range s.samples {
			if x.IterS < y.IterS && !(pred[i] < pred[j]) {
				t.Errorf("%s: mb %d measured faster than mb %d (%.4f < %.4f s) but predicted %.4f >= %.4f s", s, x.Plan.MicroBatch, y.Plan.MicroBatch, x.IterS, y.IterS, pred[i], pred[j])
			}
		}
	}
}

// profileMBs are the micro-batches of the three one-GPU runs ProfileConfigs
// chooses for s's type on one H200, in its order.
func (s mbSeries) profileMBs(t *testing.T) []int {
	t.Helper()
	var prof []int
	for _, c := range ProfileConfigs(DefaultModel(s.arch, h200()), []int{1}, 0) {
		if p := c.Plan; p.DP == 1 && p.TP == 1 && p.PP == 1 && !p.Offload && !p.Ckpt {
			prof = append(prof, p.MicroBatch)
		}
	}
	if len(prof) != 3 {
		t.Fatalf("%s: the profile's one-GPU micro-batches %v, want three", s, prof)
	}
	return prof
}

// fitTimes fits s's iteration times on the samples whose micro-batch is in
// mbs (all when nil) and returns the model and its relative error on
// every sample. additive holds k_lo at 1 (the form before k_lo).
func (s mbSeries) fitTimes(t *testing.T, additive bool, mbs ...int) (Model, []float64) {
	t.Helper()
	var fit []Sample
	for _, x := range s.samples {
		if mbs == nil || slices.Contains(mbs, x.Plan.MicroBatch) {
			fit = append(fit, x)
		}
	}
	if mbs != nil && len(fit) != len(mbs) {
		t.Fatalf("%s: %d rows at micro-batches %v, want %d", s, len(fit), mbs, len(mbs))
	}
	m := DefaultModel(s.arch, h200())
	o := FitOptions{FreeForward: true}
	o.Hold[15] = additive
	k, _, err := Fit(m, fit, o)
	if err != nil {
		t.Fatal(err)
	}
	m.Params = k
	errs := make([]float64, len(s.samples))
	for i, x := range s.samples {
		b, err := m.Predict(x.Plan, x.Resources)
		if err != nil {
			t.Fatal(err)
		}
		errs[i] = b.Iter/x.IterS - 1
	}
	return m, errs
}

// TestMicroBatchH200: the micro-batch term measured on a real GPU the way
// the profiling phase sees a new type. Per series, the model is fitted on
// the two one-GPU runs ProfileConfigs chooses on an H200 (bert: mb 32 and
// mb 8; gpt2: mb 8 and mb 2, its mb 16 estimated above 140 GiB) and
// predicts every other row. Measured (docs/perf.md "Measured on an H200"):
// it orders every plan as measured and prices the rows at or above the
// smaller profile micro-batch within 6 %, but below it the additive
// t_sat·mb + t_fixed form under-prices by up to 64 % (bert math mb 1): a
// micro-batch of bert costs the same 38-41 ms from mb 1 to mb 8, the
// host's kernel launches, which overlap the GPU's compute rather than add
// to it. The bounds are those figures with margin: 10 % and 70 %.
// Fitted on all rows, the three series' k_launch agree within a factor of
// 2 (0.30-0.54 ms per layer), a property of the GPU and its software.
func TestMicroBatchH200(t *testing.T) {
	launch := map[string]float64{}
	for _, s := range h200Series(t) {
		prof := s.profileMBs(t)
		large, small := prof[0], prof[1] // configurations 1 and 4, the pair before k_lo
		m, errs := s.fitTimes(t, false, prof...)
		_, before := s.fitTimes(t, true, large, small)
		t.Logf("%s: fitted on the profile's mb %v: k_launch %.3g ms per layer, k_lo %.3g", s, prof, 1e3*m.Params.KLaunch, m.Params.KLO)
		pred := make([]float64, len(s.samples))
		for i, x := range s.samples {
			pred[i] = x.IterS * (1 + errs[i])
			fitted := slices.Contains(prof, x.Plan.MicroBatch)
			t.Logf("  mb %2d × GA %2d: measured %.4f s, predicted %.4f s (%+.1f %%%s; additive on mb %d and %d: %+.1f %%)",
				x.Plan.MicroBatch, x.Plan.GA, x.IterS, pred[i], 100*errs[i], map[bool]string{true: ", fit row"}[fitted], large, small, 100*before[i])
			bound := h200Bound
			if s.attn == "math" {
				bound = h200BoundMath
			}
			if math.Abs(errs[i]) > bound {
				t.Errorf("%s mb %d: predicted %.4f s, measured %.4f s: %+.0f %% off, bound %.0f %%", s, x.Plan.MicroBatch, pred[i], x.IterS, 100*errs[i], 100*bound)
			}
		}
		if m.Params.KLO < 2 {
			t.Errorf("%s: k_lo %.3g on the profile's runs: the launches do not hide behind the compute", s, m.Params.KLO)
		}
		s.checkOrder(t, pred)
		all, allErrs := s.fitTimes(t, false, nil...)
		worst := 0.0
		for _, e := range allErrs {
			worst = max(worst, math.Abs(e))
		}
		t.Logf("%s: fitted on all %d rows: k_launch %.3g ms per layer, k_lo %.3g, worst row %.1f %% off", s, len(s.samples), 1e3*all.Params.KLaunch, all.Params.KLO, 100*worst)
		if all.Params.KLaunch < 1e-5 {
			t.Errorf("%s: k_launch %.3g s per layer on all rows: no per-micro-batch cost", s, all.Params.KLaunch)
		}
		launch[s.String()] = all.Params.KLaunch
	}
	for a, ka := range launch {
		for b, kb := range launch {
			if ka > 2*kb {
				t.Errorf("k_launch %.3g ms (%s) and %.3g ms (%s) per layer on the same H200: more than a factor of 2 apart", 1e3*ka, a, 1e3*kb, b)
			}
		}
	}
}

// TestMicroBatchH200's bounds on a row's error: measured at most 6.4 %
// on the sdpa series (bert mb 16, gpt2 mb 16; the additive pair fit:
// −52 % at bert mb 1, −23 % at gpt2 mb 1) and 34 % on bert math (mb 4,
// whose 38.7 ms per micro-batch sits below its mb 1 and 2 neighbours'
// 44-50 ms, the series whose small micro-batches' medians are 8-14 %
// above their fastest iteration; the additive pair fit: −64 % at mb 1).
const (
	h200Bound     = 0.10
	h200BoundMath = 0.40
)

// TestMemoryH200: the memory estimate against the measured peaks (torch's
// reserved memory plus the CUDA context, as NVML reports it). The fixed
// estimate is 32-37 % above bert's sdpa peaks and 9-100 % above gpt2's,
// but 19-22 % below bert math's at mb 16 and 32 (its explicit attention
// keeps fp32 softmax outputs, more than Korthikanti's count). FitActScale
// on each series' peaks gives a factor below 1 for the fused attention
// and above 1 for the explicit one (measured: bert sdpa 0.56, gpt2 sdpa
// 0.50, bert math 1.27), and with it the estimate is within 17 % of
// every peak it used (bound 20 %). With gpt2's factor the H200's fastest
// measured plan, mb 16 × GA 1 (81.8 GiB), fits and is the best plan; the
// fixed estimate (164 GiB) refuses it.
func TestMemoryH200(t *testing.T) {
	scale := map[string]float64{}
	for _, s := range h200Series(t) {
		f, used := FitActScale(s.arch, s.samples)
		scale[s.String()] = f
		if used < 3 {
			t.Errorf("%s: FitActScale used %d of %d peaks", s, used, len(s.samples))
		}
		cal := s.arch
		cal.ActScale = f
		// The factor the two largest micro-batches' difference gives: the
		// states and buffers cancel, whatever their estimate's error.
		n := len(s.samples)
		hi, lo := s.samples[n-1], s.samples[n-2]
		_, partHi := estimateMemory(s.arch, hi.Plan, hi.Resources.Placement)
		_, partLo := estimateMemory(s.arch, lo.Plan, lo.Resources.Placement)
		t.Logf("%s: activation factor %.2f from %d peaks (mb %d against mb %d: %.2f)", s, f, used,
			hi.Plan.MicroBatch, lo.Plan.MicroBatch, (hi.PeakGPUGB-lo.PeakGPUGB)*GiB/(partHi-partLo))
		for _, x := range s.samples {
			raw, part := estimateMemory(s.arch, x.Plan, x.Resources.Placement)
			est := EstimateMemory(cal, x.Plan, x.Resources.Placement).GPU / GiB
			usable := part >= ActShareMin*raw.GPU
			t.Logf("  mb %2d: peak %.2f GiB; estimate %.2f GiB (%+.1f %%), with %.2f: %.2f GiB (%+.1f %%)%s", x.Plan.MicroBatch, x.PeakGPUGB,
				raw.GPU/GiB, 100*(raw.GPU/GiB/x.PeakGPUGB-1), f, est, 100*(est/x.PeakGPUGB-1), map[bool]string{false: " (states: not used)"}[usable])
			if e := est/x.PeakGPUGB - 1; usable && math.Abs(e) > 0.20 {
				t.Errorf("%s mb %d: estimate %.2f GiB with factor %.2f, peak %.2f GiB: %+.0f %% off", s, x.Plan.MicroBatch, est, f, x.PeakGPUGB, 100*e)
			}
		}
	}
	if !(scale["bert sdpa"] < 1 && scale["gpt2 sdpa"] < 1 && scale["bert math"] > 1) {
		t.Errorf("activation factors %v: want below 1 for the fused attention (no scores kept), above 1 for the explicit one", scale)
	}
	// The calibrated estimate admits gpt2's fastest measured plan.
	for _, s := range h200Series(t) {
		if s.model != "gpt2" {
			continue
		}
		m, _ := s.fitTimes(t, false, nil...)
		fast := Plan{DP: 1, TP: 1, PP: 1, MicroBatch: 16, GA: 1}
		r := Resources{Placement: Placement{1}, CPUsPerGPU: 8}
		if b, ok := m.Best(r); !ok || b.Plan == fast {
			t.Fatalf("unscaled: best %s (ok %v): the test needs the fixed estimate to refuse %s", b.Plan, ok, fast)
		}
		m.Arch.ActScale = scale[s.String()]
		if b, ok := m.Best(r); !ok || b.Plan != fast {
			t.Errorf("with the factor %.2f: best %s (ok %v), want %s (measured fastest, peak 81.8 GiB)", m.Arch.ActScale, b.Plan, ok, fast)
		}
	}
}
