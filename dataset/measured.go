package dataset

import (
	"context"
	"fmt"
	"strconv"

	"github.com/replan/replan/perf"
)

// Measured answers "how long did an iteration of this plan on this
// placement take on the real cluster?" from the placements tables: the
// ground truth a simulator replays where it exists.
type Measured struct {
	rows  map[measuredKey]float64
	codes map[[2]string][]string // (model, placement key) → exec_plan codes
}

type measuredKey struct {
	model, code, placement string
}

// RotationKey writes a placement the way the tables do: one count per
// server ("44", or "16.16" when a count has two digits), as the smallest
// rotation of that sequence.
func RotationKey(pl perf.Placement) string {
	n := len(pl)
	best := ""
	for r := 0; r < n; r++ {
		rot := make(perf.Placement, 0, n)
		rot = append(rot, pl[r:]...)
		rot = append(rot, pl[:r]...)
		if s := rot.String(); best == "" || s < best {
			best = s
		}
	}
	return best
}

// NewMeasured returns an empty table set.
func NewMeasured() *Measured {
	return &Measured{rows: map[measuredKey]float64{}, codes: map[[2]string][]string{}}
}

// Add records the rows of one placements table for model type model
// (a canonical name). Rows with a zero iteration time (did not run) are
// skipped.
func (m *Measured) Add(model string, rows []PlacementRow) {
	for _, r := range rows {
		if r.IterS <= 0 {
			continue
		}
		k := measuredKey{model, r.ExecPlan, RotationKey(r.Placement)}
		if _, dup := m.rows[k]; !dup {
			ck := [2]string{model, k.placement}
			m.codes[ck] = append(m.codes[ck], r.ExecPlan)
		}
		m.rows[k] = r.IterS
	}
}

// Plans lists the plans of model type model (architecture a) measured on
// placement pl, in table order. Rows whose plan splits the batch unevenly
// (micro-batch 0) are left out: no launcher could run them as plans.
func (m *Measured) Plans(model string, a perf.Arch, pl perf.Placement) []perf.Plan {
	if m == nil {
		return nil
	}
	var out []perf.Plan
	for _, c := range m.codes[[2]string{model, RotationKey(pl)}] {
		p, err := PlanFromCode(c, a, pl.GPUs())
		if err != nil || p.MicroBatch == 0 {
			continue
		}
		out = append(out, p)
	}
	return out
}

// Len is the number of measured configurations.
func (m *Measured) Len() int { return len(m.rows) }

// LoadMeasured reads the placements tables of dir whose name is a model
// type at its standard batch (llama7 → llama7b); variants at other batch
// sizes or model sizes (llama7b_bsz16, t5_3B) are not the trace's models
// and are left out.
func LoadMeasured(ctx context.Context, dir string) (*Measured, error) {
	_, tables, err := ListDir(dir)
	if err != nil {
		return nil, err
	}
	m := NewMeasured()
	for _, t := range tables {
		canon := perf.CanonicalName(t)
		if _, ok := perf.Builtin(canon); !ok {
			continue
		}
		rows, err := LoadPlacement(ctx, dir, t)
		if err != nil {
			return nil, fmt.Errorf("measured table %s: %w", t, err)
		}
		m.Add(canon, rows)
	}
	return m, nil
}

// PlanCode is the exec_plan code of the tables that PlanFromCode turns into
// p, if there is one: a named plan (ga, gc, zero-dp, zero-offload) or a
// PP/TP/DP code.
func PlanCode(p perf.Plan, a perf.Arch) (string, bool) {
	g := p.GPUs()
	var cands []string
	if p.TP <= 9 && p.PP <= 9 && p.DP <= 9 {
		cands = append(cands, strconv.Itoa(p.PP)+strconv.Itoa(p.TP)+strconv.Itoa(p.DP))
	}
	if p.TP == 1 && p.PP == 1 {
		cands = append(cands, "ga", "gc", "zero-dp", "zero-offload")
	}
	for _, c := range cands {
		q, err := PlanFromCode(c, a, g)
		if err != nil {
			continue
		}
		if q.MicroBatch == 0 {
			q.MicroBatch = p.MicroBatch
		}
		if q == p {
			return c, true
		}
	}
	return "", false
}

// IterTime returns the measured seconds per iteration of plan p of model
// type model (canonical name, architecture a) on placement pl.
func (m *Measured) IterTime(model string, a perf.Arch, p perf.Plan, pl perf.Placement) (float64, bool) {
	if m == nil || len(m.rows) == 0 {
		return 0, false
	}
	code, ok := PlanCode(p, a)
	if !ok {
		return 0, false
	}
	v, ok := m.rows[measuredKey{model, code, RotationKey(pl)}]
	return v, ok
}
