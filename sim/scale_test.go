package sim_test

import (
	"context"
	"testing"

	"github.com/replan/replan/perf"
	"github.com/replan/replan/sched"
	"github.com/replan/replan/sim"
)

// BenchmarkPhilly is a generated Philly-like trace on 1,024 servers in
// racks of 32 with a 60 s round interval, per policy (`sim bench` prints
// the full-size table).
func BenchmarkPhilly(b *testing.B) {
	jobs, err := sim.Generate(sim.GenConfig{Jobs: 20000, Servers: 1024, Seed: 1, Load: 1.5})
	if err != nil {
		b.Fatal(err)
	}
	models := sim.DefaultModels(perf.A800)
	for _, name := range []string{"tiresias", "morphling", "replan"} {
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				p, _ := sched.New(name)
				if _, err := sim.Run(context.Background(), jobs, models, p, sim.Config{Servers: 1024, ServersPerRack: 32, RoundInterval: 60}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
