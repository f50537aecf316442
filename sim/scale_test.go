package sim_test

import (
	"context"
	"os"
	"strconv"
	"testing"

	"github.com/replan/replan/perf"
	"github.com/replan/replan/sched"
	"github.com/replan/replan/sim"
)

// BenchmarkPhilly is a generated Philly-like trace on 1,024 servers in
// racks of 32 with a 60 s round interval, per policy (`sim bench` prints
// the full-size table).
func BenchmarkPhilly(b *testing.B) {
	gen := sim.GenConfig{Jobs: 20000, Servers: 1024, Seed: 1, Load: 1.5}
	// REPLAN_PHILLY_JOBS=N: make bench's trace of N jobs instead (its
	// default load), e.g. 80000 for its largest row.
	if v, err := strconv.Atoi(os.Getenv("REPLAN_PHILLY_JOBS")); err == nil && v > 0 {
		gen = sim.GenConfig{Jobs: v, Servers: 1024, Seed: 1}
	}
	jobs, err := sim.Generate(gen)
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
