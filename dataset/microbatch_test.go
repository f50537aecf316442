package dataset

import (
	"context"
	"strings"
	"testing"

	"github.com/replan/replan/perf"
)

// A table priced as one reading must be read that way: rows generated from
// a known model with micro-batch-1 pipelines are read as MicroBatchOne, the
// same rows priced as one micro-batch per replica as WholeBatch.
func TestMicroBatchingChosenByFit(t *testing.T) {
	a, _ := perf.Builtin("llama7b")
	a.GlobalBatch = 16
	truth := perf.DefaultModel(a, perf.A800)
	truth.Params.KMP, truth.Params.KTP = 1.1, 1.4
	codes := []struct{ code, pl string }{
		{"242", "4444"}, {"418", "8888"}, {"148", "8888"}, {"282", "8888"}, {"244", "8888"},
		{"228", "8888"}, {"224", "4444"}, {"221", "4"}, {"481", "8888"}, {"441", "4444"}, {"144", "4444"},
	}
	for _, want := range []MicroBatching{WholeBatch, MicroBatchOne} {
		var rows []PlacementRow
		for i, c := range codes {
			pl, err := ParsePlacementString(c.pl)
			if err != nil {
				t.Fatal(err)
			}
			p, err := PlanFromCodeAs(c.code, a, pl.GPUs(), want)
			if err != nil {
				t.Fatal(err)
			}
			b, err := truth.Predict(p, perf.Resources{Placement: pl, CPUsPerGPU: 2})
			if err != nil {
				t.Fatalf("%s@%s: %v", c.code, c.pl, err)
			}
			rows = append(rows, PlacementRow{Line: i + 2, ExecPlan: c.code, Placement: pl, CPUThreads: 2, IterS: b.Iter})
		}
		m := perf.Model{Arch: a, Forward: truth.Forward, Params: perf.DefaultParams, Env: perf.A800}
		got, held, err := chooseMicroBatching(m, nil, rows, a, allRows)
		if err != nil {
			t.Fatal(err)
		}
		if !got.Compared || got.Reading != want {
			t.Errorf("rows priced as %s read as %s", want, got)
		}
		if len(held) != len(rows) || (want == MicroBatchOne) != (held[0].sample.Plan.MicroBatch == 1) {
			t.Errorf("rows priced as %s came back as %v", want, held[0].sample.Plan)
		}
	}
}

// Pure data-parallel codes and named plans read the same either way: no
// second fit, and the reading stays the default.
func TestMicroBatchingNothingToCompare(t *testing.T) {
	a, _ := perf.Builtin("bert")
	m := perf.DefaultModel(a, perf.A800)
	rows := []PlacementRow{
		{Line: 2, ExecPlan: "ga", Placement: perf.Placement{4}, IterS: 0.3},
		{Line: 3, ExecPlan: "118", Placement: perf.Placement{8}, IterS: 0.2},
	}
	got, _, err := chooseMicroBatching(m, nil, rows, a, allRows)
	if err != nil || got.Compared || got.Reading != WholeBatch {
		t.Fatalf("got %s, %v", got, err)
	}
	p, _ := PlanFromCodeAs("118", a, 8, MicroBatchOne)
	if p.GA != 1 || p.MicroBatch != a.GlobalBatch/8 {
		t.Errorf("pure DP code read as %v under MicroBatchOne", p)
	}
}

// On the shared data: llama7b_bsz16's Megatron rows read as micro-batch 1
// (every batch-8 table as one micro-batch per replica), and its held-out
// model-parallel rows then come out within 15 % on average (52 % max, 14 %
// average as one micro-batch).
func TestMicroBatchingOnSharedData(t *testing.T) {
	dir := sharedData(t)
	rep, err := Validate(context.Background(), dir, nil, perf.A800)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range rep.Models {
		one := strings.HasPrefix(m.MicroBatching, MicroBatchOne.String())
		if one != (m.Model == "llama7b_bsz16") {
			t.Errorf("%s read as %q", m.Model, m.MicroBatching)
		}
		if m.Model != "llama7b_bsz16" {
			continue
		}
		for _, f := range m.Plans {
			if strings.Contains(f.Plan, "tp") || strings.Contains(f.Plan, "pp") {
				if f.AvgErrPct > 15 {
					t.Errorf("llama7b_bsz16 %s: %.1f %% average", f.Plan, f.AvgErrPct)
				}
			}
		}
	}
}

// FitModel reads each table at its own global batch: fitting llama7b_bsz16
// takes llama7's batch-8 rows and the batch-8 profile as batch-8 plans
// beside its own batch-16 rows (they were all converted at batch 16).
func TestFitModelTablesAtTheirOwnBatch(t *testing.T) {
	dir := sharedData(t)
	_, samples, err := modelSamples(context.Background(), dir, "llama7b_bsz16", perf.A800, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	rows8, err := LoadPlacement(context.Background(), dir, "llama7")
	if err != nil {
		t.Fatal(err)
	}
	prof, err := LoadProfile(context.Background(), dir, "llama7b")
	if err != nil {
		t.Fatal(err)
	}
	a, _ := perf.Builtin("llama7b")
	want8 := len(heldRows(rows8, a, WholeBatch)) + len(prof.Rows)
	n8, n16 := 0, 0
	for _, s := range samples {
		switch p := s.Plan; p.MicroBatch * p.GA * p.DP {
		case 8:
			n8++
		case 16:
			n16++
		}
	}
	if n8 != want8 || n16 == 0 {
		t.Errorf("%d batch-8 samples (want %d) and %d batch-16 ones of %d", n8, want8, n16, len(samples))
	}
}
