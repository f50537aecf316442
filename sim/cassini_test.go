package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/replan/replan/cluster"
	"github.com/replan/replan/dataset"
	"github.com/replan/replan/perf"
)

// The CASSINI sweep's trace: pure data-parallel jobs larger than a rack of
// 3 servers (so every one crosses racks), each communicating 25-45 % of
// its iteration alone at 4:1, on 3 or 4 racks, the same trace for the same
// seed and another for another seed.
func TestCassiniWorkload(t *testing.T) {
	var traces [][]dataset.WorkloadJob
	for seed := uint64(1); seed <= 2; seed++ {
		for _, batch := range []bool{true, false} {
			g := CassiniWorkload(seed, batch)
			if r := g.Servers / cassiniPerRack; r != CassiniRacks(seed) || r < 3 || r > 4 {
				t.Fatalf("seed %d: %d servers, want 3 or 4 racks of %d", seed, g.Servers, cassiniPerRack)
			}
			a, err := Generate(g)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := Generate(CassiniWorkload(seed, batch))
			if !slices.Equal(a, b) {
				t.Fatalf("seed %d: same seed, different traces", seed)
			}
			types := map[string]bool{}
			for _, j := range a {
				if j.GPUs <= cassiniPerRack*8 {
					t.Fatalf("job %s: %d GPUs fit a rack of %d", j.Name, j.GPUs, cassiniPerRack*8)
				}
				arch, _ := perf.Builtin(j.Application)
				p, err := dataset.PlanFromCode(j.ExecPlan, arch, j.GPUs)
				if err != nil || p.DP != j.GPUs || p.TP != 1 || p.PP != 1 {
					t.Fatalf("job %s: plan %s on %d GPUs is not pure data parallelism (%v)", j.Name, j.ExecPlan, j.GPUs, err)
				}
				f := CassiniCommShare(perf.DefaultModel(arch, perf.A800), p, j.GPUs, cassiniPerRack, 4)
				if f < CassiniCommMin || f > CassiniCommMax {
					t.Fatalf("job %s (%s %s): communicates %.0f %% of its iteration alone at 4:1, want 25-45 %%", j.Name, j.Application, j.ExecPlan, 100*f)
				}
				if batch && j.Submit != 0 {
					t.Fatalf("batch trace: job %s submitted at %g", j.Name, j.Submit)
				}
				types[j.Application+" "+j.ExecPlan] = true
			}
			if len(types) < 3 {
				t.Fatalf("seed %d: %d job types, want a mix", seed, len(types))
			}
			traces = append(traces, a)
		}
	}
	if slices.Equal(traces[0], traces[2]) {
		t.Fatal("seeds 1 and 2 gave the same trace")
	}
}

// `sim bench --oversub-only --json`: every cell of both sweeps is one
// object with exactly the contract's fields (the comm sweep's with
// dally_auto_vs_manual besides), one per oversubscription, arrivals and
// seed. One seed and a 16-job comm trace keep it short.
func TestSweepJSON(t *testing.T) {
	var buf bytes.Buffer
	cfg := BenchConfig{OversubOnly: true, JSON: true, NetworkJobs: 16, OversubSeeds: 1}
	if err := Bench(context.Background(), &buf, cfg); err != nil {
		t.Fatal(err)
	}
	var cells []map[string]json.RawMessage
	dec := json.NewDecoder(&buf)
	dec.UseNumber()
	if err := dec.Decode(&cells); err != nil {
		t.Fatalf("not a JSON array of objects: %v\n%s", err, buf.String())
	}
	if dec.More() {
		t.Fatal("more than one JSON value")
	}
	base := []string{"arrivals", "oversub", "replan_vs_morphling", "seed", "shift_exposed_cut_pct", "sweep"}
	seen := map[string]int{}
	for _, c := range cells {
		var keys []string
		for k := range c {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var sweep, arrivals string
		var over, seed, vs, cut float64
		for k, dst := range map[string]any{"sweep": &sweep, "arrivals": &arrivals, "oversub": &over, "seed": &seed, "replan_vs_morphling": &vs, "shift_exposed_cut_pct": &cut} {
			if err := json.Unmarshal(c[k], dst); err != nil {
				t.Fatalf("cell %v: field %s: %v", keys, k, err)
			}
		}
		want := base
		if sweep == "comm" {
			want = append(slices.Clone(base[:1]), append([]string{"dally_auto_vs_manual"}, base[1:]...)...)
			var d float64
			if err := json.Unmarshal(c["dally_auto_vs_manual"], &d); err != nil || d <= 0 {
				t.Fatalf("comm cell: dally_auto_vs_manual %s (%v), want a positive ratio", c["dally_auto_vs_manual"], err)
			}
		}
		if !slices.Equal(keys, want) {
			t.Fatalf("%s cell: fields %v, want exactly %v", sweep, keys, want)
		}
		if sweep != "cassini" && sweep != "comm" || arrivals != "batch" && arrivals != "poisson" || !slices.Contains([]float64{2, 4, 16}, over) || seed != 1 || vs <= 0 || cut <= -100 || cut >= 100 {
			t.Fatalf("cell sweep %q, arrivals %q, oversub %g, seed %g, replan_vs_morphling %g, shift_exposed_cut_pct %g", sweep, arrivals, over, seed, vs, cut)
		}
		seen[sweep]++
	}
	if seen["cassini"] != 6 || seen["comm"] != 6 {
		t.Fatalf("cells per sweep %v, want 6 each (3 oversubscriptions × 2 arrivals × 1 seed)", seen)
	}
	if err := Bench(context.Background(), &buf, BenchConfig{JSON: true}); err == nil || !strings.Contains(err.Error(), "--oversub-only") {
		t.Fatalf("--json without --oversub-only: %v, want an error naming --oversub-only", err)
	}
}

// On one small trace of the sweep (seed 2: 3 racks, 4:1, batch, 20 jobs),
// with the trajectory held, the shifts remove much of what link sharing
// adds: in the run with them, sharing adds under two thirds of what it
// would with every job unshifted at the same placements and progress.
// (With 20 jobs the 3-rack seeds 2, 4 and 6 give 0.09×, 0.12× and 0.31×;
// on 4 racks three jobs run at once and some uplink carries two or more
// whose periods differ: seeds 1, 3, 5 give 0.18×, 0.61×, 0.83×.)
func TestCassiniShiftsRemoveSharing(t *testing.T) {
	r := cassiniSharing(t, CassiniWorkload(2, true))
	t.Logf("sharing %.3f h with the shifts, %.3f h unshifted", r.CommShared/3600, r.CommSharedUnshifted/3600)
	if x := r.CommShared / r.CommSharedUnshifted; x > 2.0/3 {
		t.Fatalf("sharing adds %.2f h with the shifts, %.2f h unshifted (%.2f×): want under 2/3", r.CommShared/3600, r.CommSharedUnshifted/3600, x)
	}
}

// cassiniSharing replays 20 jobs of the CASSINI workload g under replan at
// 4:1 (3 servers a rack), pinned plans, pricing every job unshifted too;
// it fails unless some link was shared (else there is nothing to remove).
func cassiniSharing(t *testing.T, g GenConfig) *Result {
	t.Helper()
	g.Jobs = 20
	trace, err := Generate(g)
	if err != nil {
		t.Fatal(err)
	}
	models := DefaultModels(perf.A800)
	models.SetSpine(3*cluster.A800RDMAGBps/4, 3)
	p, _ := policyNamed("replan")
	r, err := Run(context.Background(), trace, models, p, Config{Servers: g.Servers, ServersPerRack: 3, PinPlans: true, PriceUnshifted: true})
	if err != nil {
		t.Fatal(err)
	}
	if r.CommSharedUnshifted <= 0 {
		t.Fatal("no link sharing to remove: not the case under test")
	}
	return r
}

// Issue 29 ("look at the order"): in batch every pinned job's slope ties,
// and replan's shortest-first order among ties lowers avg JCT against the
// same policy in Morphling's order (submission) on the CASSINI trace;
// the longest jobs pay a little: the last one finishes at most a quarter
// later (measured 2026-11-27: seed 2 at 4:1, avg JCT 0.81×, makespan
// 1.08×).
func TestShortestFirstLowersBatchJCT(t *testing.T) {
	trace, err := Generate(CassiniWorkload(2, true))
	if err != nil {
		t.Fatal(err)
	}
	racks := CassiniRacks(2)
	var r [2]*Result
	for k, name := range []string{"replan", "replan slope-order"} {
		models := DefaultModels(perf.A800)
		models.SetSpine(float64(cassiniPerRack)*cluster.A800RDMAGBps/4, cassiniPerRack)
		p, err := policyNamed(name)
		if err != nil {
			t.Fatal(err)
		}
		if r[k], err = Run(context.Background(), trace, models, p, Config{Servers: racks * cassiniPerRack, ServersPerRack: cassiniPerRack, PinPlans: true}); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("avg JCT %.0f s against %.0f s in Morphling's order (%.2f×); makespan %.0f s against %.0f s", r[0].AvgJCT, r[1].AvgJCT, r[0].AvgJCT/r[1].AvgJCT, r[0].Makespan, r[1].Makespan)
	if r[0].AvgJCT > 0.9*r[1].AvgJCT {
		t.Errorf("shortest first: avg JCT %.0f s, want at most 0.9× the %.0f s of Morphling's order", r[0].AvgJCT, r[1].AvgJCT)
	}
	if r[0].Makespan > 1.25*r[1].Makespan {
		t.Errorf("shortest first: makespan %.0f s, want at most 1.25× the %.0f s of Morphling's order", r[0].Makespan, r[1].Makespan)
	}
}
