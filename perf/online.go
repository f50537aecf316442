package perf

import (
	"errors"
	"math"
	"time"
)

// Online is a model type's fitted model together with the samples it was
// fitted on. Observe adds measurements from running jobs and refits when a
// measurement is more than RefitThreshold off the prediction, so one fitted
// model is reused, and improved, across every job of its type.
type Online struct {
	Model   Model    `json:"model"`
	Samples []Sample `json:"samples"`
	Stats   FitStats `json:"stats"`
	// MaxSamples bounds the history (oldest dropped first); 0 means 256.
	MaxSamples int `json:"max_samples"`
	// Refits counts the refits Observe made.
	Refits int `json:"refits"`
	// CheckpointS is the measured cost of a checkpoint of the type in
	// seconds (0: not measured yet): the checkpoint interval is chosen
	// from it (SaveInterval).
	CheckpointS float64 `json:"checkpoint_s,omitempty"`
	// FittedAt is when the parameters were last fitted (a profiling
	// phase or an online refit; zero: never, the starting model).
	FittedAt time.Time `json:"fitted_at,omitzero"`
	// ProfiledAt is when a profiling phase of the type ended (zero:
	// never profiled); a type profiled once is not profiled on arrival
	// again.
	ProfiledAt time.Time `json:"profiled_at,omitzero"`
}

// Trusted reports whether the model has enough samples of the right kinds
// to be used for scheduling (MinSamples, MinOffloadSamples).
func (o *Online) Trusted() bool {
	off := 0
	for _, s := range o.Samples {
		if s.Plan.Offload {
			off++
		}
	}
	return len(o.Samples) >= MinSamples && off >= MinOffloadSamples
}

// Observe records a measured iteration. It returns whether the model was
// refitted: when the prediction for the sample is more than RefitThreshold
// off and at least MinSamples samples exist. A sample whose plan cannot be
// priced on its resources is an error and is not recorded.
func (o *Online) Observe(s Sample) (refitted bool, err error) {
	if s.IterS <= 0 {
		return false, errors.New("observe: iteration time must be > 0")
	}
	b, err := o.Model.Predict(s.Plan, s.Resources)
	if err != nil {
		return false, err
	}
	o.Samples = append(o.Samples, s)
	limit := o.MaxSamples
	if limit <= 0 {
		limit = 256
	}
	if len(o.Samples) > limit {
		o.Samples = append([]Sample(nil), o.Samples[len(o.Samples)-limit:]...)
	}
	if !NeedsRefit(b.Iter, s.IterS) || len(o.Samples) < MinSamples {
		return false, nil
	}
	k, st, err := Fit(o.Model, o.Samples, FitOptions{BoundOverlap: true})
	if err != nil {
		return false, err
	}
	o.Model.Params, o.Stats = k, st
	o.Refits++
	return true, nil
}

// CPUCurve is the sensitivity of m to CPU cores on a fixed placement: the
// best plan and throughput for 1..maxCPUsPerGPU cores per GPU (it matters to
// plans that offload the optimizer to the CPU).
func (m Model) CPUCurve(pl Placement, maxCPUsPerGPU int) []CurvePoint {
	pts := make([]CurvePoint, 0, maxCPUsPerGPU)
	prev := 0.0
	for c := 1; c <= maxCPUsPerGPU; c++ {
		pt := CurvePoint{GPUs: pl.GPUs(), CPUsPerGPU: float64(c), Placement: pl, Throughput: prev}
		if best, ok := m.Best(Resources{Placement: pl, CPUsPerGPU: float64(c)}); ok {
			pt.Feasible, pt.Plan, pt.PlanString = true, best.Plan, best.PlanString
			if best.Throughput > prev {
				pt.Throughput = best.Throughput
			}
		}
		if c > 1 {
			pt.Slope = pt.Throughput - prev
		}
		prev = pt.Throughput
		pts = append(pts, pt)
	}
	return pts
}

// RefitMoved is how far a refit must move a model's predictions (the
// largest relative change of a predicted iteration time over the samples
// it was fitted on, PredictionShift) to be worth telling: smaller refits
// are kept quietly. 5 %: below the run-to-run noise of measured iteration
// times, and far below the 10 % miss (RefitThreshold) that starts a refit.
const RefitMoved = 0.05

// PredictionShift is the largest relative change, over samples, of the
// iteration time predicted by before and by after: |after − before| /
// before. Samples that either model cannot price are ignored; 0 when
// none can be priced.
func PredictionShift(before, after Model, samples []Sample) float64 {
	worst := 0.0
	for _, s := range samples {
		a, err := before.Predict(s.Plan, s.Resources)
		if err != nil || a.Iter <= 0 {
			continue
		}
		b, err := after.Predict(s.Plan, s.Resources)
		if err != nil || b.Iter <= 0 {
			continue
		}
		worst = max(worst, math.Abs(b.Iter-a.Iter)/a.Iter)
	}
	return worst
}
