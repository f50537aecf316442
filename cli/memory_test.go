package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/replan/replan/internal/waitfor"
)

// TestJobAndModelsShowMeasuredMemory: once a running job measured its
// GPUs' peak memory, `replan job ID` shows the peak, the estimate and its
// type's activation factor fitted from it, and `replan models` (and
// --json's act_scale) the factor (on the simulated cluster its jobs use
// what perf estimates: the factor is 1).
func TestJobAndModelsShowMeasuredMemory(t *testing.T) {
	sock, d, rec := startedLongJob(t)
	ctx := context.Background()
	waitfor.T(t, ctx, "a measured peak and a fitted factor", waitfor.Options{}, func() error {
		if err := d.Observe(ctx); err != nil {
			return err
		}
		if m, _ := d.JobMemory(rec.ID); m.PeakGPUGB <= 0 || m.ActScale <= 0 {
			return fmt.Errorf("memory %+v", m)
		}
		return nil
	})
	out, err := runCLI(t, "job", rec.ID, "--socket", sock)
	if err != nil {
		t.Fatalf("job: %v\n%s", err, out)
	}
	for _, want := range []string{"memory: peak ", " GiB on the busiest GPU, estimated ", "(activation factor 1.00, fitted from measured peaks)"} {
		if !strings.Contains(out, want) {
			t.Errorf("replan job lacks %q:\n%s", want, out)
		}
	}
	if out, err := runCLI(t, "models", "--socket", sock); err != nil || !strings.Contains(out, "act_scale=1.00") {
		t.Errorf("models: %v\n%s", err, out)
	}
	out, err = runCLI(t, "models", "--socket", sock, "--json")
	if err != nil {
		t.Fatal(err)
	}
	var ms []map[string]json.RawMessage
	if err := json.Unmarshal([]byte(out), &ms); err != nil || len(ms) != 1 || string(ms[0]["act_scale"]) != "1" || ms[0]["type"] == nil || ms[0]["err_pct"] == nil {
		t.Errorf("models --json: %v\n%s", err, out)
	}
}
