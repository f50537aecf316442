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
	if len(ms) == 0 || len(ms) != len(sets) {
		return Params{}, errors.New("fit shared: need one sample set per model")
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
				return Params{}, fmt.Errorf("fit shared: model %s sample %d: iteration time must be > 0, got %g", m.Arch.Name, i, s.IterS)
			}
			sh, err := m.prepare(s.Plan, s.Resources)
			if err != nil {
				return Params{}, fmt.Errorf("fit shared: model %s sample %d: %w", m.Arch.Name, i, err)
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
		return Params{}, errors.New("fit shared: no samples")
	}
	var free []int
	for i := range HardwareParams {
		if HardwareParams[i] {
			free = append(free, i)
			logMean[i] /= float64(len(terms))
		}
	}
	prior := logVec(fitPrior)
	value := func(x []float64) float64 {
		var sum float64
		for _, mt := range terms {
			v := logVec(mt.own)
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
		var reg float64
		for j, i := range free {
			d := x[j] - prior[i]
			reg += priorScale[i] * d * d
		}
		return sum/float64(len(terms)) + o.Prior*reg
	}
	x := make([]float64, len(free))
	for j, i := range free {
		x[j] = logMean[i]
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
	v := logVec(DefaultParams)
	for j, i := range free {
		v[i] = x[j]
	}
	var p [NumParams]float64
	for i := range p {
		p[i] = fromFree(i, v[i])
	}
	return ParamsFromVector(p), nil
}
