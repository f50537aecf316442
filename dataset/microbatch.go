package dataset

import (
	"fmt"

	"github.com/replan/replan/perf"
)

// MicroBatchMargin is how much better (ratio of the fits' RMSLE) a table's
// rows must fit read as MicroBatchOne for that reading to replace
// WholeBatch, the reading of every batch-8 table of the Morphling data. With
// a handful of rows the two fits can land within a few percent of each
// other (gpt2 and t5: 3 %), and the wrong reading prices every pipelined row
// 2-3× off, so the default gives way only to a clear difference
// (llama7b_bsz16: 0.51×).
const MicroBatchMargin = 2.0 / 3

// MicroBatchChoice is the outcome of chooseMicroBatching.
type MicroBatchChoice struct {
	Reading MicroBatching
	// Compared is false when no chosen row reads differently (no PP or TP
	// code, or every DP fills the batch): nothing to choose between.
	Compared bool
	// RMSLE of the fit with the rows read each way (WholeBatch,
	// MicroBatchOne); zero unless Compared.
	RMSLE [2]float64
}

// String names the reading for reports, with both fits' RMSLE when they
// were compared.
func (c MicroBatchChoice) String() string {
	if !c.Compared {
		return c.Reading.String()
	}
	return fmt.Sprintf("%s (fit RMSLE %.4f; %.4f read as %s)", c.Reading, c.RMSLE[c.Reading], c.RMSLE[1-c.Reading], 1-c.Reading)
}

// chooseMicroBatching reads rows (a placements table of architecture arch)
// both ways, fits m on base plus the rows pick selects, and returns the
// reading to use and its rows. pick sees rows in table order and must
// select by row alone (family, placement), not by the plan a reading gives,
// so both fits see the same rows.
func chooseMicroBatching(m perf.Model, base []perf.Sample, rows []PlacementRow, arch perf.Arch, pick func([]heldRow) []int) (MicroBatchChoice, []heldRow, error) {
	whole := heldRows(rows, arch, WholeBatch)
	one := heldRows(rows, arch, MicroBatchOne)
	idx := pick(whole)
	differs := false
	for _, i := range idx {
		if whole[i].sample.Plan != one[i].sample.Plan {
			differs = true
			break
		}
	}
	if !differs {
		return MicroBatchChoice{Reading: WholeBatch}, whole, nil
	}
	c := MicroBatchChoice{Compared: true}
	for r, held := range [][]heldRow{whole, one} {
		samples := append([]perf.Sample(nil), base...)
		for _, i := range idx {
			samples = append(samples, held[i].sample)
		}
		_, st, err := perf.Fit(m, samples, perf.FitOptions{})
		if err != nil {
			return c, nil, err
		}
		c.RMSLE[r] = st.RMSLE
	}
	if c.RMSLE[MicroBatchOne] < MicroBatchMargin*c.RMSLE[WholeBatch] {
		c.Reading = MicroBatchOne
		return c, one, nil
	}
	return c, whole, nil
}

// allRows picks every row.
func allRows(rows []heldRow) []int {
	out := make([]int, len(rows))
	for i := range out {
		out[i] = i
	}
	return out
}
