package sim

import (
	"context"
	"fmt"
	"io"
)

// The communication-heavy workload of the contended sweep (issue 15):
// data-parallel jobs of 8-64 GPUs on racks of 3 servers, so that most
// jobs of 16 GPUs or more span racks or share a rack with another job.
var (
	commMix   = []GenDemand{{8, 0.2}, {16, 0.3}, {32, 0.3}, {64, 0.2}}
	commApps  = []string{"gpt2", "t5", "bert", "roberta"}
	commPlans = []string{"zero-dp", "ga"} // pure data parallelism
)

// CommWorkload is the generated trace of the contended sweep: jobs jobs
// (seed 1) on servers servers of 8 GPUs, drawn from commMix, commApps and
// commPlans (the unfitted model's feasible data-parallel plans).
func CommWorkload(jobs, servers int, batch bool) GenConfig {
	return GenConfig{Jobs: jobs, Servers: servers, Seed: 1, Batch: batch, Mix: commMix, Apps: commApps, Plans: commPlans}
}

// BenchOversubComm is the spine-oversubscription sweep where links are
// contended: racks of perRack servers × 8 A800 (default 8 racks of 3),
// CommWorkload, the same policies and oversubscriptions as BenchOversub.
// It runs twice: with every plan pinned (each job runs its data-parallel
// request, so all policies hold the same allocations and differ only in
// when and where they place them), then elastic (Morphling may change the
// GPU count and the plan).
func BenchOversubComm(ctx context.Context, w io.Writer, racks, perRack, jobs int) error {
	if racks <= 0 {
		racks = 8
	}
	if perRack <= 0 {
		perRack = 3
	}
	if jobs <= 0 {
		jobs = 200
	}
	for _, pin := range []bool{true, false} {
		how := "plans pinned"
		if !pin {
			how = "elastic (plans and GPU counts free)"
		}
		fmt.Fprintf(w, "\nspine oversubscription, communication-heavy, %s: %d racks of %d servers × 8 A800, %d generated data-parallel jobs of 8/16/32/64 GPUs (20/30/30/20 %%) of gpt2, t5, bert, roberta (seed 1), restart cost 260 s\n", how, racks, perRack, jobs)
		if err := oversubSweep(ctx, w, CommWorkload(jobs, racks*perRack, false), perRack, pin, []float64{1, 2, 4, 16}); err != nil {
			return err
		}
	}
	return nil
}
