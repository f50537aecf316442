package sim

import (
	"context"
	"math"
	"slices"
	"testing"

	"github.com/replan/replan/dataset"
	"github.com/replan/replan/perf"
	"github.com/replan/replan/sched"
)

// The contended sweep's trace: only the mix's GPU counts and model types,
// only data-parallel plans, the same trace for the same seed.
func TestCommWorkload(t *testing.T) {
	a, err := Generate(CommWorkload(60, 24, false))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Generate(CommWorkload(60, 24, false))
	if !slices.Equal(a, b) {
		t.Fatal("same seed, different traces")
	}
	big := 0
	for _, j := range a {
		if !slices.ContainsFunc(commMix, func(d GenDemand) bool { return d.GPUs == j.GPUs }) || !slices.Contains(commApps, j.Application) || !slices.Contains(commPlans, j.ExecPlan) {
			t.Fatalf("job %s: %d GPUs of %s with plan %s, outside the mix", j.Name, j.GPUs, j.Application, j.ExecPlan)
		}
		arch, _ := perf.Builtin(j.Application)
		p, err := dataset.PlanFromCode(j.ExecPlan, arch, j.GPUs)
		if err != nil || p.DP != j.GPUs {
			t.Fatalf("job %s: plan %s on %d GPUs is not data-parallel (%v)", j.Name, p, j.GPUs, err)
		}
		if j.GPUs > 24 {
			big++
		}
	}
	if big == 0 {
		t.Fatal("no job larger than a rack of 3 servers")
	}
}

// With plans pinned every job of the contended sweep runs its request
// (its GPUs and its plan) under morphling and replan, at 16:1 too, and
// every job finishes (a pinned job larger than a rack used to wait
// forever on an oversubscribed spine).
func TestCommWorkloadPinned(t *testing.T) {
	trace, err := Generate(CommWorkload(30, 24, false))
	if err != nil {
		t.Fatal(err)
	}
	req := map[string]dataset.WorkloadJob{}
	for _, j := range trace {
		req[j.Name] = j
	}
	for _, name := range []string{"morphling", "replan"} {
		models := DefaultModels(perf.A800)
		models.SetSpine(3*100/16.0, 3)
		p, _ := sched.New(name)
		var bad string
		cfg := Config{Servers: 24, ServersPerRack: 3, PinPlans: true, OnEvent: func(e Event) {
			if (e.Kind == "start" || e.Kind == "reconfigure") && bad == "" {
				w := req[e.Job]
				arch, _ := perf.Builtin(w.Application)
				want, _ := dataset.PlanFromCode(w.ExecPlan, arch, w.GPUs)
				if e.GPUs != w.GPUs || e.Plan != want.String() {
					bad = e.Job + ": " + e.Kind + " with " + e.Plan
				}
			}
		}}
		r, err := Run(context.Background(), trace, models, p, cfg)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if bad != "" {
			t.Fatalf("%s: pinned job changed: %s", name, bad)
		}
		if r.Finished != len(trace) || r.Restarts != 0 {
			t.Fatalf("%s: %d of %d finished, %d restarts", name, r.Finished, len(trace), r.Restarts)
		}
	}
}

// The bench's shift summary runs each seed's trace with and without the
// shifts: one value per seed and oversubscription, every one finite, the
// seeds' traces different, and the same figures twice.
func TestShiftSeeds(t *testing.T) {
	es, err := ShiftSeeds(context.Background(), 40, 4, 3, 3, []float64{4, 16}, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != 2 || es[0].Over != 4 || es[1].Over != 16 {
		t.Fatalf("effects %+v: want 4:1 and 16:1", es)
	}
	for _, e := range es {
		for _, v := range [][]float64{e.SharedRatio, e.ExposedCut, e.JCTRatio, e.VsMorphling, e.HeldShared, e.HeldCut, e.HeldNet, e.DallyAutoVsManual} {
			if len(v) != 3 {
				t.Fatalf("%g:1: %d values, want one per seed", e.Over, len(v))
			}
			for _, x := range v {
				if math.IsNaN(x) || math.IsInf(x, 0) {
					t.Fatalf("%g:1: value %v", e.Over, x)
				}
			}
		}
		if e.JCTRatio[0] <= 0 {
			t.Fatalf("%g:1: avg JCT ratio %v", e.Over, e.JCTRatio[0])
		}
	}
	a, _ := Generate(CommWorkload(40, 12, false))
	g := CommWorkload(40, 12, false)
	g.Seed = 2
	b, _ := Generate(g)
	if slices.Equal(a, b) {
		t.Fatal("seeds 1 and 2 gave the same trace")
	}
	again, _ := ShiftSeeds(context.Background(), 40, 4, 3, 3, []float64{4, 16}, false)
	for i := range es {
		if !slices.Equal(es[i].SharedRatio, again[i].SharedRatio) || !slices.Equal(es[i].JCTRatio, again[i].JCTRatio) {
			t.Fatalf("%g:1: two runs differ: %v / %v", es[i].Over, es[i].SharedRatio, again[i].SharedRatio)
		}
	}
}
