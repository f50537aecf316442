package sim_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/replan/replan/dataset"
	"github.com/replan/replan/perf"
	"github.com/replan/replan/sched"
	"github.com/replan/replan/sim"
)

// BenchmarkSixPoliciesBase runs all six policies on the 406-job base trace
// (target: <= 2 s in all, fitting included; models are fitted once
// outside the loop here, `replan sim bench` reports both).
func BenchmarkSixPoliciesBase(b *testing.B) {
	dir := filepath.Join("..", "..", "shared", "data", "morphling")
	ctx := context.Background()
	jobs, err := dataset.LoadWorkload(ctx, filepath.Join(dir, "workloads", "workload-base.csv"))
	if err != nil {
		b.Skipf("skipped: the Morphling data is not at %s: %v", dir, err)
	}
	apps := make([]string, 0, len(jobs))
	for _, j := range jobs {
		apps = append(apps, j.Application)
	}
	models, err := sim.LoadModels(ctx, dir, perf.A800, apps)
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		var ps []sched.Policy
		for _, n := range sched.Names() {
			p, _ := sched.New(n)
			ps = append(ps, p)
		}
		if _, err := sim.RunAll(ctx, jobs, models, ps, sim.Config{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkGenerated5k is Morphling on a generated 5,000-job trace on 128
// servers with a round on every event.
func BenchmarkGenerated5k(b *testing.B) {
	jobs, err := sim.Generate(sim.GenConfig{Jobs: 5000, Servers: 128, Seed: 1})
	if err != nil {
		b.Fatal(err)
	}
	models := sim.DefaultModels(perf.A800)
	for b.Loop() {
		if _, err := sim.Run(context.Background(), jobs, models, sched.NewMorphling(sched.DefaultOptions()), sim.Config{Servers: 128}); err != nil {
			b.Fatal(err)
		}
	}
}
