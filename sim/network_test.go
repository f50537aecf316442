package sim_test

import (
	"context"
	"testing"

	"github.com/replan/replan/dataset"
	"github.com/replan/replan/perf"
	"github.com/replan/replan/sched"
	"github.com/replan/replan/sim"
)

// Two 12-GPU jobs on three one-server racks: both cross the middle rack's
// spine uplink. Time-shifts interleave their communication there.
func TestShiftsInterleaveOnSharedUplink(t *testing.T) {
	jobs := []dataset.WorkloadJob{
		{Name: "a", Application: "gpt2", GPUs: 12, CPUs: 96, ExecPlan: "zero-dp", Steps: 20000, Line: 1},
		{Name: "b", Application: "gpt2", GPUs: 12, CPUs: 96, ExecPlan: "zero-dp", Steps: 20000, Line: 2},
	}
	run := func(noShifts bool) *sim.Result {
		models := sim.DefaultModels(perf.A800)
		models.SetSpine(100, 1)
		r, err := sim.Run(context.Background(), jobs, models, sched.WithShifts(sched.NewGandiva(), 260), sim.Config{Servers: 3, ServersPerRack: 1, NoShifts: noShifts})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	with, without := run(false), run(true)
	if without.LinkSharing != 2 || without.LinkInflation <= 0 {
		t.Fatalf("no sharing without shifts: %d jobs, inflation %.3f", without.LinkSharing, without.LinkInflation)
	}
	if g := (1 + without.LinkInflation) / (1 + with.LinkInflation); g < 1.2 {
		t.Fatalf("shifts did not help: inflation %.3f with, %.3f without (%.2f×)", with.LinkInflation, without.LinkInflation, g)
	}
	if with.CommExposed >= without.CommExposed {
		t.Fatalf("exposed communication %.0f s with shifts, %.0f s without", with.CommExposed, without.CommExposed)
	}
	t.Logf("link inflation %.3f with shifts, %.3f without; exposed %.0f s vs %.0f s", with.LinkInflation, without.LinkInflation, with.CommExposed, without.CommExposed)
}
