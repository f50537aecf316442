package perf

import (
	"math"
	"slices"
)

// The activation factor of a model type: EstimateMemory counts the
// activations a transformer layer keeps as Korthikanti et al. do,
// s·b·h·(34 + 5·a·s/h) bytes, but implementations differ (a memory-efficient
// or flash attention keeps no a·s² score matrices: 34 instead of 74 for
// BERT-large at sequence 512, 0.46 of the count). The measured peak memory
// of a type's runs tells how much it really keeps; FitActScale turns the
// peaks into a factor on the activations and logits.
const (
	// MinActScale and MaxActScale bound a fitted factor. 0.3 is the
	// smallest share of the count that only drops the attention scores
	// for the built-in types (34/114 for GPT-2 XL at sequence 1024, the
	// largest s/h): a lower factor more likely comes from a peak read
	// before the run reached it than from an implementation. 1.5 allows
	// the caching allocator's slack and fp32 activations beyond the
	// count, but keeps one odd reading (another process on the GPU) from
	// refusing every plan of the type.
	MinActScale = 0.3
	MaxActScale = 1.5
	// ActShareMin is the smallest share of a sample's estimate that its
	// activations and logits must have for its peak to calibrate them:
	// below it, the peak measures the model states and buffers, and an
	// error of a few percent there would be read as a large factor.
	ActShareMin = 0.25
)

// actScale is a's activation factor, 1 when not measured.
func (a Arch) actScale() float64 {
	if a.ActScale > 0 {
		return a.ActScale
	}
	return 1
}

// FitActScale is the activation factor of a's type from samples with a
// measured peak (Sample.PeakGPUGB): per sample, what the peak leaves after
// the estimated model states and buffers, over the estimated activations
// and logits (unscaled), for samples whose activations and logits are at
// least ActShareMin of the estimate; the median of those, clamped to
// [MinActScale, MaxActScale] and rounded to hundredths (refits that move
// it by noise do not change plans). used is how many samples it used; with
// none, the factor is 1.
func FitActScale(a Arch, samples []Sample) (scale float64, used int) {
	a.ActScale = 1
	var rs []float64
	for _, s := range samples {
		p := s.Plan
		if s.PeakGPUGB <= 0 || p.DP < 1 || p.TP < 1 || p.PP < 1 || p.GA < 1 {
			continue
		}
		m, scaled := estimateMemory(a, p, s.Resources.Placement)
		if scaled <= 0 || m.GPU <= 0 || scaled < ActShareMin*m.GPU {
			continue
		}
		rs = append(rs, (s.PeakGPUGB*GiB-(m.GPU-scaled))/scaled)
	}
	if len(rs) == 0 {
		return 1, 0
	}
	slices.Sort(rs)
	med := rs[len(rs)/2]
	if len(rs)%2 == 0 {
		med = (rs[len(rs)/2-1] + med) / 2
	}
	med = min(max(med, MinActScale), MaxActScale)
	return math.Round(med*100) / 100, len(rs)
}
