package sim_test

import (
	"context"
	"encoding/json"
	"math"
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

// Pricing the links unshifted beside the run measures without steering:
// the two-job run's shifts remove sharing that the unshifted pricing
// still sees; with the shifts ignored both pricings agree; and on a
// contended trace the flag changes no other figure.
func TestPriceUnshifted(t *testing.T) {
	jobs := []dataset.WorkloadJob{
		{Name: "a", Application: "gpt2", GPUs: 12, CPUs: 96, ExecPlan: "zero-dp", Steps: 20000, Line: 1},
		{Name: "b", Application: "gpt2", GPUs: 12, CPUs: 96, ExecPlan: "zero-dp", Steps: 20000, Line: 2},
	}
	run := func(trace []dataset.WorkloadJob, p sched.Policy, cfg sim.Config, spine float64, perRack int) *sim.Result {
		t.Helper()
		models := sim.DefaultModels(perf.A800)
		models.SetSpine(spine, perRack)
		r, err := sim.Run(context.Background(), trace, models, p, cfg)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	gandiva := func() sched.Policy { return sched.WithShifts(sched.NewGandiva(), 260) }
	with := run(jobs, gandiva(), sim.Config{Servers: 3, ServersPerRack: 1, PriceUnshifted: true}, 100, 1)
	if with.CommSharedUnshifted <= 1.2*with.CommShared || with.ShiftDelay <= 0 {
		t.Fatalf("shifted run: sharing added %.0f s, %.0f s priced unshifted; shift delay %.0f s", with.CommShared, with.CommSharedUnshifted, with.ShiftDelay)
	}
	none := run(jobs, gandiva(), sim.Config{Servers: 3, ServersPerRack: 1, PriceUnshifted: true, NoShifts: true}, 100, 1)
	if none.CommShared <= 0 || math.Abs(none.CommSharedUnshifted-none.CommShared) > 1e-9*none.CommShared || none.ShiftDelay != 0 {
		t.Fatalf("no shifts: sharing added %.3f s, %.3f s priced unshifted, delay %.0f s", none.CommShared, none.CommSharedUnshifted, none.ShiftDelay)
	}

	trace, err := sim.Generate(sim.CommWorkload(120, 24, false))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"replan", "dally"} {
		p1, _ := sched.New(name)
		p2, _ := sched.New(name)
		cfg := sim.Config{Servers: 24, ServersPerRack: 3, PinPlans: true}
		plain := run(trace, p1, cfg, 3*100/4.0, 3)
		cfg.PriceUnshifted = true
		priced := run(trace, p2, cfg, 3*100/4.0, 3)
		if priced.CommSharedUnshifted <= 0 {
			t.Errorf("%s: nothing priced unshifted on a contended trace", name)
		}
		priced.CommSharedUnshifted = 0
		a, _ := json.Marshal(plain)
		b, _ := json.Marshal(priced)
		if string(a) != string(b) {
			t.Errorf("%s: pricing unshifted changed the run:\n%s\n%s", name, a, b)
		}
	}
}
