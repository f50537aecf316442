package control

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/replan/replan/jobspec"
	"github.com/replan/replan/perf"
)

// slowStops is a recorder whose checkpointing stops take stopTook of the
// daemon's clock and report checkpoint 10.
type slowStops struct {
	recorder
	c        *clock
	stopTook time.Duration
}

func (s *slowStops) Stop(ctx context.Context, id string, ckpt bool) (int, error) {
	s.recorder.Stop(ctx, id, ckpt)
	if !ckpt {
		return 0, nil
	}
	s.c.advance(s.stopTook)
	return 10, nil
}

// TestCheckpointIntervalFromCostAndFailures: a job whose args set no
// checkpoint interval is launched with Young/Daly's (perf.SaveInterval):
// first from the model's size and the default MTBF, then, after a
// checkpointing stop took 40 s and a server failed, from the measured
// cost and the observed failure; `replan job ID`'s figures are the
// launch's.
func TestCheckpointIntervalFromCostAndFailures(t *testing.T) {
	ctx := context.Background()
	st, _ := openTest(t)
	c := &clock{t: time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)}
	ex := &slowStops{c: c, stopTook: 40 * time.Second}
	d, _ := newDaemonWith(t, st, ex, "static", c)
	sp := spec(t, "j", 8, jobspec.BestEffort)
	sp.Iterations = 1_000_000
	rec, err := d.Submit(ctx, sp)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Round(ctx); err != nil {
		t.Fatal(err)
	}
	if len(ex.starts) != 1 {
		t.Fatalf("%d starts", len(ex.starts))
	}
	iterS := float64(sp.GlobalBatch) / d.JobThroughput(rec.ID).PredictedSPS
	want, wantS := perf.SaveInterval(perf.CheckpointCostEstimate(sp.Arch.Params), perf.DefaultServerMTBF, iterS, sp.Iterations)
	if got := ex.starts[0].SaveInterval; got != want || want <= 1 {
		t.Fatalf("first launch: save interval %d, want %d (Young/Daly from an estimated cost and the default MTBF)", got, want)
	}
	info, ok := d.JobCheckpointing(rec.ID)
	if !ok || info.IntervalIters != want || info.Source != "replan" || info.CostMeasured || math.Abs(info.IntervalS-wantS) > 1e-6 || info.MTBFS != perf.DefaultServerMTBF {
		t.Errorf("shown: %+v %v; want %d iterations (%.0f s) from replan, cost estimated, MTBF %.0f", info, ok, want, wantS, perf.DefaultServerMTBF)
	}
	t.Logf("first launch: every %d iterations (%.0f s), cost %.1f s estimated, MTBF %.0f s", info.IntervalIters, info.IntervalS, info.CostS, info.MTBFS)

	// The other server fails (misses two heartbeats) and comes back.
	on := ex.starts[0].Servers[0].Name
	other := map[string]string{"a": "b", "b": "a"}[on]
	for _, up := range []bool{false, false, true} {
		ex.mu.Lock()
		ex.next = Observation{Nodes: []NodeObservation{{Name: other, Reachable: up}}}
		ex.mu.Unlock()
		c.advance(5 * time.Second)
		if err := d.Observe(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// The job's server is drained: it stops with a checkpoint (40 s).
	if _, err := d.Drain(ctx, on); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Round(ctx); err != nil {
		t.Fatal(err)
	}
	if len(ex.starts) != 2 {
		t.Fatalf("%d starts after the drain", len(ex.starts))
	}
	// Exposure counts from the first observation: one server up in the
	// 5 s to each of the next two (the other is unreachable from its
	// first missed heartbeat): 10 server-seconds.
	mtbf := perf.MTBF(1, 5+5, 1)
	iterS = float64(sp.GlobalBatch) / d.JobThroughput(rec.ID).PredictedSPS
	want2, _ := perf.SaveInterval(40, mtbf, iterS, sp.Iterations)
	if got := ex.starts[1].SaveInterval; got != want2 || want2 >= want {
		t.Errorf("after a failure and a 40 s checkpoint: save interval %d, want %d (less than the first, %d)", got, want2, want)
	}
	info, _ = d.JobCheckpointing(rec.ID)
	if info.CostS != 40 || !info.CostMeasured || math.Abs(info.MTBFS-mtbf) > 1e-6 {
		t.Errorf("shown: %+v; want a measured 40 s cost and MTBF %.0f s", info, mtbf)
	}
	t.Logf("relaunch: every %d iterations (%.0f s), cost %.1f s measured, MTBF %.0f s", info.IntervalIters, info.IntervalS, info.CostS, info.MTBFS)
}

// TestCheckpointIntervalOfTheArgsIsKept: a job whose args set their own
// interval is launched without one of replan's, and shows its own.
func TestCheckpointIntervalOfTheArgsIsKept(t *testing.T) {
	ctx := context.Background()
	st, _ := openTest(t)
	ex := &recorder{}
	d, _ := newDaemon(t, st, ex, "static")
	sp := spec(t, "j", 8, jobspec.BestEffort)
	sp.Args = []string{"--save-interval", "50"}
	rec, err := d.Submit(ctx, sp)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Round(ctx); err != nil {
		t.Fatal(err)
	}
	if len(ex.starts) != 1 || ex.starts[0].SaveInterval != 0 {
		t.Fatalf("starts %+v: want one without replan's interval", ex.starts)
	}
	if info, ok := d.JobCheckpointing(rec.ID); !ok || info.IntervalIters != 50 || info.Source != "args" {
		t.Errorf("shown: %+v %v; want the args' 50", info, ok)
	}
}
