package perf

import (
	"errors"
	"fmt"
	"math"

	"gonum.org/v1/gonum/diff/fd"
	"gonum.org/v1/gonum/optimize"
)

// FitShared fits the hardware parameters (HardwareParams) jointly over
// several model types of one cluster: each model keeps its own
// parameters (ms[i].Params) and forward profile, and the hardware terms
// minimise the mean over the models of each model's mean squared log
// error on its samples (sets[i]), the same error Fit minimises, with the
// same prior. Only the hardware entries of the result are meaningful;
// merge them with Params.WithHardware. The search starts from the
// geometric mean of the models' own hardware values.
func FitShared(ms []Model, sets [][]Sample, o FitOptions) (Params, error) {
	p, _, err := FitSharedIdentified(ms, sets, o)
	return p, err
}

// IdentifiedErr is how much halving or doubling a hardware term must raise
// FitShared's error (the mean over the model types of each one's mean
// squared log error) for the samples to identify it: 1e-4, the error of
// every prediction moving by 1 % more. A term that moves the error less in
// either direction is not pinned within a factor of 2 by the samples, so
// its fitted value would say nothing about the cluster.
const IdentifiedErr = 1e-4

// FitSharedIdentified is FitShared that also reports the hardware terms
// the samples do not identify (IdentifiedErr): those are not fitted but
// held at their physical default (the fit's prior: DefaultParams, k_stage
// 1 ms, k_launch 1 µs per layer, i.e. no per-micro-batch cost, k_hop
// 0.1 ms), and the others refitted with them held.
func FitSharedIdentified(ms []Model, sets [][]Sample, o FitOptions) (Params, []string, error) {
	if len(ms) == 0 || len(ms) != len(sets) {
		return Params{}, nil, errors.New("fit shared: need one sample set per model")
	}
	if o.MaxEvals <= 0 {
		o.MaxEvals = 2000
	}
	if o.Prior == 0 {
		o.Prior = 1e-5
	}
	type modelTerms struct {
		shapes []shape
		logY   []float64
		logOpt []float64
		own    Params
		n      float64
	}
	terms := make([]modelTerms, 0, len(ms))
	var logMean [NumParams]float64
	for mi, m := range ms {
		mt := modelTerms{own: startParams(m.Params)}
		for i, s := range sets[mi] {
			if s.IterS <= 0 || math.IsNaN(s.IterS) || math.IsInf(s.IterS, 0) {
				return Params{}, nil, fmt.Errorf("fit shared: model %s sample %d: iteration time must be > 0, got %g", m.Arch.Name, i, s.IterS)
			}
			sh, err := m.prepare(s.Plan, s.Resources)
			if err != nil {
				return Params{}, nil, fmt.Errorf("fit shared: model %s sample %d: %w", m.Arch.Name, i, err)
			}
			mt.shapes = append(mt.shapes, sh)
			mt.logY = append(mt.logY, math.Log(s.IterS))
			lo := 0.0
			if s.OptS > 0 && !s.Plan.Offload && !math.IsInf(s.OptS, 0) {
				lo = math.Log(s.OptS)
				mt.n++
			}
			mt.logOpt = append(mt.logOpt, lo)
			mt.n++
		}
		if len(mt.shapes) == 0 {
			continue
		}
		l := logVec(mt.own)
		for i := range l {
			logMean[i] += l[i]
		}
		terms = append(terms, mt)
	}
	if len(terms) == 0 {
		return Params{}, nil, errors.New("fit shared: no samples")
	}
	var free []int
	for i := range HardwareParams {
		if HardwareParams[i] {
			free = append(free, i)
			logMean[i] /= float64(len(terms))
		}
	}
	prior := logVec(fitPrior)
	// errOf is the data's error with the free terms at x (the others at
	// base, the fit's free variables); value adds the prior.
	base := prior
	errOf := func(free []int, x []float64) float64 {
		var sum float64
		for _, mt := range terms {
			v := logVec(mt.own)
			for i := range HardwareParams {
				if HardwareParams[i] {
					v[i] = base[i]
				}
			}
			for j, i := range free {
				v[i] = x[j]
			}
			var p [NumParams]float64
			for i := range p {
				p[i] = fromFree(i, v[i])
			}
			k := ParamsFromVector(p)
			var ms float64
			for i := range mt.shapes {
				b := mt.shapes[i].eval(k)
				if !(b.Iter > 0) || math.IsInf(b.Iter, 0) {
					return math.Inf(1)
				}
				d := math.Log(b.Iter) - mt.logY[i]
				ms += d * d
				if mt.logOpt[i] != 0 {
					d := math.Log(max(b.Too, 1e-9)) - mt.logOpt[i]
					ms += d * d
				}
			}
			sum += ms / mt.n
		}
		return sum / float64(len(terms))
	}
	fitFree := func(free []int, x []float64) []float64 {
		value := func(x []float64) float64 {
			var reg float64
			for j, i := range free {
				d := x[j] - prior[i]
				reg += priorScale[i] * d * d
			}
			return errOf(free, x) + o.Prior*reg
		}
		bestF := value(x)
		settings := &optimize.Settings{FuncEvaluations: o.MaxEvals, Converger: &optimize.FunctionConverge{Absolute: 1e-9, Relative: 1e-7, Iterations: 60}}
		for r := 0; r < 2; r++ {
			res, err := optimize.Minimize(optimize.Problem{Func: value}, x, settings, &optimize.NelderMead{})
			if (err != nil && res == nil) || res.F >= bestF {
				break
			}
			x, bestF = append([]float64(nil), res.X...), res.F
		}
		grad := func(g, x []float64) { fd.Gradient(g, value, x, &fd.Settings{Formula: fd.Central, Step: 1e-5}) }
		if res, _ := optimize.Minimize(optimize.Problem{Func: value, Grad: grad}, x,
			&optimize.Settings{MajorIterations: 40, GradientThreshold: 1e-8}, &optimize.BFGS{}); res != nil && res.F < bestF {
			x = res.X
		}
		return x
	}
	x := make([]float64, len(free))
	for j, i := range free {
		x[j] = logMean[i]
	}
	x = fitFree(free, x)
	// A term the samples do not pin within a factor of 2 is held at its
	// default and the others refitted.
	var notIdentified []string
	var kept []int
	var keptX []float64
	e0 := errOf(free, x)
	for j, i := range free {
		val := fromFree(i, x[j])
		moved := math.Inf(1)
		for _, f := range []float64{2, 0.5} {
			var pv [NumParams]float64
			pv[i] = val * f
			y := append([]float64(nil), x...)
			y[j] = logVec(ParamsFromVector(pv))[i]
			moved = math.Min(moved, errOf(free, y)-e0)
		}
		if moved < IdentifiedErr {
			notIdentified = append(notIdentified, ParamNames[i])
			continue
		}
		kept = append(kept, i)
		keptX = append(keptX, x[j])
	}
	if len(notIdentified) > 0 {
		free = kept
		x = keptX
		if len(free) > 0 {
			x = fitFree(free, x)
		}
	}
	v := logVec(DefaultParams)
	for i := range HardwareParams {
		if HardwareParams[i] {
			v[i] = base[i]
		}
	}
	for j, i := range free {
		v[i] = x[j]
	}
	var p [NumParams]float64
	for i := range p {
		p[i] = fromFree(i, v[i])
	}
	return ParamsFromVector(p), notIdentified, nil
}
