package sim_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/replan/replan/dataset"
	"github.com/replan/replan/perf"
	"github.com/replan/replan/sched"
	"github.com/replan/replan/sim"
)

// A trace may name a model type that is not built in: with its profile in
// the data directory it is fitted on an architecture derived from it, with
// an --arch-file architecture and no profile it runs on that
// architecture's defaults, and with neither the error says what to give.
// The simulator refused every such type ("not a known architecture").
func TestTraceOfModelTypeNotBuiltIn(t *testing.T) {
	shared := dataDir(t)
	dir := t.TempDir()
	for _, sub := range []string{"profile", "placements"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	abs, _ := filepath.Abs(filepath.Join(shared, "profile", "gpt2"))
	if err := os.Symlink(abs, filepath.Join(dir, "profile", "opt13b")); err != nil {
		t.Fatal(err)
	}
	trace := []dataset.WorkloadJob{
		{Name: "a", Application: "OPT13b", GPUs: 8, CPUs: 64, ExecPlan: "zero-dp", Steps: 2000, Line: 2},
		{Name: "b", Application: "mine", GPUs: 4, CPUs: 32, ExecPlan: "ga", Steps: 2000, Line: 3},
	}
	ctx := context.Background()
	mine := perf.Arch{Name: "mine", Params: 1.3e9, Layers: 24, Hidden: 2048, Heads: 16, SeqLen: 2048, GlobalBatch: 16}
	models, err := sim.LoadModelsWith(ctx, dir, perf.A800, []string{"OPT13b", "mine"}, perf.Catalog{"mine": mine})
	if err != nil {
		t.Fatal(err)
	}
	opt, ok := models.Fitted["opt13b"]
	if !ok || opt.Params == perf.DefaultParams || opt.Arch.Name != "opt13b" || opt.Arch.Params != 1485.5255126953125*(1<<20) {
		t.Fatalf("opt13b: %+v", opt)
	}
	if m := models.Fitted["mine"]; m == nil || m.Arch != mine || m.Params != perf.DefaultParams {
		t.Fatalf("mine: %+v", m)
	}
	p, err := sched.New("morphling")
	if err != nil {
		t.Fatal(err)
	}
	r, err := sim.Run(ctx, trace, models, p, sim.Config{Servers: 2})
	if err != nil || r.Finished != 2 {
		t.Fatalf("run: %v, %d finished", err, r.Finished)
	}
	if _, err := sim.LoadModelsWith(ctx, dir, perf.A800, []string{"nosuch"}, nil); err == nil || !strings.Contains(err.Error(), "--arch-file") {
		t.Errorf("no architecture: %v", err)
	}
}
