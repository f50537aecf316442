package sim_test

import (
	"context"
	"testing"

	"github.com/replan/replan/perf"
	"github.com/replan/replan/sched"
	"github.com/replan/replan/sim"
)

func BenchmarkPhilly3k(b *testing.B) {
	jobs, err := sim.Generate(sim.GenConfig{Jobs: 3000, Servers: 1024, Seed: 1})
	if err != nil {
		b.Fatal(err)
	}
	models := sim.DefaultModels(perf.A800)
	for b.Loop() {
		p, _ := sched.New("replan")
		if _, err := sim.Run(context.Background(), jobs, models, p, sim.Config{Servers: 1024, ServersPerRack: 32}); err != nil {
			b.Fatal(err)
		}
	}
}
