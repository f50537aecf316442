package sim_test

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/replan/replan/sim"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

// TestWriteTableGolden pins the table people read (hand-made results, so
// it does not move with the performance model).
func TestWriteTableGolden(t *testing.T) {
	cm := func(avg, p50, p99, mk, q float64, rst int, sla float64) sim.ClassMetrics {
		return sim.ClassMetrics{Jobs: 10, Finished: 10, AvgJCT: avg * 3600, P50JCT: p50 * 3600, P99JCT: p99 * 3600, Makespan: mk * 3600, Queue: q * 3600, Restarts: rst, SLAViolation: sla * 3600}
	}
	rs := []*sim.Result{
		{Policy: "static", ClassMetrics: cm(1.5, 0.3, 9.4, 20.5, 1.3, 0, 0.01), GPUUtil: 0.71, Classes: map[string]sim.ClassMetrics{
			"guaranteed": cm(1.7, 0.3, 11.1, 20.5, 1.4, 0, 0.01), "best-effort": cm(1.3, 0.3, 9.3, 20.1, 1.1, 0, 0)}},
		{Policy: "morphling", ClassMetrics: cm(0.4, 0.2, 3.4, 14.1, 0.2, 245, 0), GPUUtil: 0.74, Classes: map[string]sim.ClassMetrics{
			"guaranteed": cm(0.5, 0.2, 4.0, 14.1, 0.3, 40, 0), "best-effort": cm(0.3, 0.1, 3.0, 13.9, 0.1, 205, 0)}},
	}
	var buf bytes.Buffer
	if err := sim.WriteTable(&buf, rs); err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "table.golden")
	if *update {
		if err := os.WriteFile(golden, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test ./sim -run Golden -update)", err)
	}
	if !bytes.Equal(buf.Bytes(), want) {
		t.Errorf("table differs from %s (go test ./sim -run Golden -update):\n%s", golden, buf.String())
	}
}
