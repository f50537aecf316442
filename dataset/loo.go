package dataset

import (
	"fmt"
	"math"
	"sort"

	"github.com/replan/replan/perf"
)

// LOOProtocol describes the leave-one-model-out check (ValidateOptions.LOO).
const LOOProtocol = `leave one model out: the tables are grouped by the profile they are served from (llama7 and llama7b_bsz16 are one model); for each group, ` +
	`every other table is fitted on its profile and all its rows (its own parameters), then the hardware terms (perf.HardwareParams) are fitted jointly over those tables (perf.FitShared; a term that halving or doubling moves the joint error by less than perf.IdentifiedErr is not identified: held at its physical default, and the fold says so), ` +
	`then each table of the group fits only its model's own terms (k_bwd, k_opt_off, k_const, k_mp, k_uneven, k_stage, k_fwd) on its profile and the protocol's fit rows, the hardware terms held, and predicts every row. ` +
	`Errors are over the rows not fitted; regret is, per placement with two or more measured plans, the measured time of the plan predicted fastest over the fastest measured, minus 1.`

// LOORow is one measured row of a table under the leave-one-model-out
// check: its prediction by the model whose hardware terms were fitted on
// the other model types.
type LOORow struct {
	Placement  string  `json:"placement"`
	Plan       string  `json:"plan"`
	MeasuredS  float64 `json:"measured_s"`
	PredictedS float64 `json:"predicted_s"`
	// Fit is whether the row was used to fit the model's own terms.
	Fit bool `json:"fit"`
}

// LOOFold is one held-out group and the hardware terms fitted without it.
type LOOFold struct {
	HeldOut   []string           `json:"held_out"`
	TrainedOn []string           `json:"trained_on"`
	Hardware  map[string]float64 `json:"hardware"`
	// NotIdentified names the hardware terms the training tables do not
	// pin within a factor of 2 (perf.IdentifiedErr): held at their
	// physical default in Hardware, not fitted.
	NotIdentified []string `json:"not_identified,omitempty"`
}

// hardwareMap names the hardware entries of p.
func hardwareMap(p perf.Params) map[string]float64 {
	out := map[string]float64{}
	v := p.Vector()
	for i, n := range perf.ParamNames {
		if perf.HardwareParams[i] {
			out[n] = v[i]
		}
	}
	return out
}

// leaveOneOut fills the leave-one-model-out figures of rep's models from
// every table's data (all, selected or not: the others train the hardware
// terms).
func leaveOneOut(rep *Report, all []*looData, selected map[string]bool) error {
	rep.LOOProtocol = LOOProtocol
	// Each table's own parameters, fitted on everything it has.
	train := make([][]perf.Sample, len(all))
	trained := make([]perf.Model, len(all))
	for i, ld := range all {
		train[i] = append([]perf.Sample(nil), ld.profSamples...)
		for _, h := range ld.held {
			train[i] = append(train[i], h.sample)
		}
		m := ld.model
		k, _, err := perf.Fit(m, train[i], perf.FitOptions{})
		if err != nil {
			return fmt.Errorf("leave one out: fit %s: %w", ld.name, err)
		}
		m.Params = k
		trained[i] = m
	}
	var groups []string
	byGroup := map[string][]int{}
	for i, ld := range all {
		if byGroup[ld.profile] == nil {
			groups = append(groups, ld.profile)
		}
		byGroup[ld.profile] = append(byGroup[ld.profile], i)
	}
	if len(groups) < 2 {
		rep.LOOProtocol += " (skipped: fewer than two model types)"
		return nil
	}
	index := map[string]int{}
	for i := range rep.Models {
		index[rep.Models[i].Model] = i
	}
	for _, g := range groups {
		var ms []perf.Model
		var sets [][]perf.Sample
		fold := LOOFold{}
		for i, ld := range all {
			if ld.profile == g {
				fold.HeldOut = append(fold.HeldOut, ld.name)
				continue
			}
			ms = append(ms, trained[i])
			sets = append(sets, train[i])
			fold.TrainedOn = append(fold.TrainedOn, ld.name)
		}
		hw, notIdentified, err := perf.FitSharedIdentified(ms, sets, perf.FitOptions{})
		if err != nil {
			return fmt.Errorf("leave one out without %s: %w", g, err)
		}
		fold.Hardware = hardwareMap(hw)
		fold.NotIdentified = notIdentified
		rep.LOOFolds = append(rep.LOOFolds, fold)
		for _, i := range byGroup[g] {
			ld := all[i]
			if !selected[ld.name] {
				continue
			}
			mi, ok := index[ld.name]
			if !ok {
				continue
			}
			if err := predictHeldOut(&rep.Models[mi], ld, hw); err != nil {
				return fmt.Errorf("leave one out %s: %w", ld.name, err)
			}
		}
	}
	return nil
}

// predictHeldOut fits ld's own terms with the hardware terms hw held and
// fills mr's leave-one-out figures.
func predictHeldOut(mr *ModelReport, ld *looData, hw perf.Params) error {
	m := ld.model
	m.Params = perf.DefaultParams.WithHardware(hw)
	fit := append([]perf.Sample(nil), ld.profSamples...)
	isFit := map[int]bool{}
	for _, i := range ld.chosen {
		fit = append(fit, ld.held[i].sample)
		isFit[i] = true
	}
	if len(fit) > 0 {
		k, _, err := perf.Fit(m, fit, perf.FitOptions{Hold: perf.HardwareParams})
		if err != nil {
			return err
		}
		m.Params = k
	}
	mr.LOOParams = m.Params
	mr.LOORows = nil
	mr.LOOAvgErrPct, mr.LOOMaxErrPct = 0, 0
	n := 0
	type cand struct{ meas, pred float64 }
	byPl := map[string][]cand{}
	var pls []string
	for i, h := range ld.held {
		b, err := m.Predict(h.sample.Plan, h.sample.Resources)
		if err != nil {
			return fmt.Errorf("line %d: %w", h.row.Line, err)
		}
		pl := h.row.Placement.String()
		mr.LOORows = append(mr.LOORows, LOORow{Placement: pl, Plan: h.row.ExecPlan, MeasuredS: h.row.IterS, PredictedS: b.Iter, Fit: isFit[i]})
		if byPl[pl] == nil {
			pls = append(pls, pl)
		}
		byPl[pl] = append(byPl[pl], cand{h.row.IterS, b.Iter})
		if isFit[i] {
			continue
		}
		e := 100 * math.Abs(b.Iter-h.row.IterS) / h.row.IterS
		mr.LOOAvgErrPct += e
		mr.LOOMaxErrPct = math.Max(mr.LOOMaxErrPct, e)
		n++
	}
	if n > 0 {
		mr.LOOAvgErrPct /= float64(n)
	}
	sort.Strings(pls)
	mr.RegretMeanPct, mr.RegretMaxPct = 0, 0
	np := 0
	for _, pl := range pls {
		cs := byPl[pl]
		if len(cs) < 2 {
			continue
		}
		best, pick := cs[0].meas, cs[0]
		for _, c := range cs[1:] {
			best = math.Min(best, c.meas)
			if c.pred < pick.pred {
				pick = c
			}
		}
		r := 100 * (pick.meas/best - 1)
		mr.RegretMeanPct += r
		mr.RegretMaxPct = math.Max(mr.RegretMaxPct, r)
		np++
	}
	if np > 0 {
		mr.RegretMeanPct /= float64(np)
	}
	mr.RegretPlacements = np
	return nil
}
