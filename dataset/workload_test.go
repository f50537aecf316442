package dataset

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/replan/replan/perf"
)

const workloadHead = "name,submission_time,duration,application,num_gpus,num_cpus,bandwidth,exec_plan,steps,is_sla\n"

func TestParseWorkload(t *testing.T) {
	in := workloadHead + "vit-0,0,3163.09,vit,2,16,0,zero-dp,37239,0\nllama30-1,1639,142.2,llama30,48,384,1.25,344,64,1\n"
	jobs, err := ParseWorkload("w.csv", strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 2 || jobs[1].Name != "llama30-1" || jobs[1].GPUs != 48 || jobs[1].ExecPlan != "344" || !jobs[1].SLA || jobs[1].Submit != 1639 || jobs[0].Steps != 37239 {
		t.Fatalf("parsed %+v", jobs)
	}
	var sb strings.Builder
	if err := WriteWorkload(&sb, jobs); err != nil {
		t.Fatal(err)
	}
	back, err := ParseWorkload("w2.csv", strings.NewReader(sb.String()))
	if err != nil || len(back) != 2 || back[1] != (WorkloadJob{Line: 3, Name: "llama30-1", Submit: 1639, Duration: 142.2, Application: "llama30", GPUs: 48, CPUs: 384, Bandwidth: 1.25, ExecPlan: "344", Steps: 64, SLA: true}) {
		t.Fatalf("round trip: %v %+v", err, back)
	}
}

func TestParseWorkloadErrorsNameLineAndField(t *testing.T) {
	in := workloadHead + "a,0,1,vit,0,8,0,ga,10,0\na,x,1,vit,1,8,0,ga,10,2\n"
	_, err := ParseWorkload("bad.csv", strings.NewReader(in))
	if err == nil {
		t.Fatal("bad rows accepted")
	}
	for _, want := range []string{"bad.csv:2: num_gpus", "bad.csv:3: submission_time", "bad.csv:3: is_sla", "bad.csv:3: name: \"a\" already used on line 2"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if _, err := ParseWorkload("h.csv", strings.NewReader("name,steps\n")); err == nil || !strings.Contains(err.Error(), "missing column") {
		t.Errorf("missing columns: %v", err)
	}
}

func TestRotationKey(t *testing.T) {
	for _, c := range []struct {
		pl   perf.Placement
		want string
	}{{perf.Placement{6, 2}, "26"}, {perf.Placement{2, 1, 1}, "112"}, {perf.Placement{3, 3, 2}, "233"}, {perf.Placement{2, 2, 2, 1, 1}, "11222"}, {perf.Placement{8}, "8"}, {perf.Placement{2, 4, 2}, "224"}} {
		if got := RotationKey(c.pl); got != c.want {
			t.Errorf("RotationKey(%v) = %q, want %q", c.pl, got, c.want)
		}
	}
}

func TestPlanCodeRoundTrip(t *testing.T) {
	gpt2, _ := perf.Builtin("gpt2")
	for _, c := range []struct {
		code string
		gpus int
	}{{"ga", 8}, {"gc", 4}, {"zero-dp", 2}, {"zero-offload", 1}, {"151", 5}, {"248", 64}} {
		a := gpt2
		if c.code == "248" {
			a, _ = perf.Builtin("llama7b")
		}
		p, err := PlanFromCode(c.code, a, c.gpus)
		if err != nil {
			t.Fatal(err)
		}
		if got, ok := PlanCode(p, a); !ok || got != c.code {
			t.Errorf("PlanCode(%s) = %q, %v; want %q", p, got, ok, c.code)
		}
	}
	if _, ok := PlanCode(perf.Plan{DP: 2, TP: 1, PP: 1, MicroBatch: 2, GA: 4, ZeRO: 1}, gpt2); ok {
		t.Error("a plan no table names got a code")
	}
}

func TestMeasuredLookup(t *testing.T) {
	m := NewMeasured()
	m.Add("bert", []PlacementRow{{ExecPlan: "ga", Placement: perf.Placement{1, 1, 2}, IterS: 0.319}, {ExecPlan: "gc", Placement: perf.Placement{8}, IterS: 0}})
	bert, _ := perf.Builtin("bert")
	p, _ := PlanFromCode("ga", bert, 4)
	if v, ok := m.IterTime("bert", bert, p, perf.Placement{2, 1, 1}); !ok || v != 0.319 {
		t.Errorf("ga on 211 = %v, %v; want the 112 row", v, ok)
	}
	q, _ := PlanFromCode("gc", bert, 8)
	if _, ok := m.IterTime("bert", bert, q, perf.Placement{8}); ok {
		t.Error("a row that did not run (0 s) was returned")
	}
}

func TestLoadSharedWorkloadsAndTables(t *testing.T) {
	dir := filepath.Join("..", "..", "shared", "data", "morphling")
	if _, err := os.Stat(filepath.Join(dir, "workloads")); err != nil {
		t.Skipf("skipped: the Morphling data is not at %s", dir)
	}
	ctx := context.Background()
	for _, w := range []string{"base", "mt"} {
		jobs, err := LoadWorkload(ctx, filepath.Join(dir, "workloads", "workload-"+w+".csv"))
		if err != nil {
			t.Fatal(err)
		}
		if len(jobs) != 406 {
			t.Errorf("%s: %d jobs, want 406", w, len(jobs))
		}
		for _, j := range jobs {
			a, ok := perf.Builtin(j.Application)
			if !ok {
				t.Fatalf("%s: unknown application %q", j.Name, j.Application)
			}
			if _, err := PlanFromCode(j.ExecPlan, a, j.GPUs); err != nil {
				t.Errorf("%s: %v", j.Name, err)
			}
		}
	}
	m, err := LoadMeasured(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	llama, _ := perf.Builtin("llama7b")
	p, _ := PlanFromCode("244", llama, 32)
	if v, ok := m.IterTime("llama7b", llama, p, perf.Placement{8, 8, 8, 8}); !ok || v < 0.9 || v > 1 {
		t.Errorf("llama7 244 on 8888 = %v, %v; want 0.943", v, ok)
	}
}

func TestMeasuredPlans(t *testing.T) {
	m := NewMeasured()
	m.Add("bert", []PlacementRow{{ExecPlan: "ga", Placement: perf.Placement{4}, IterS: 0.22}, {ExecPlan: "zero-dp", Placement: perf.Placement{4}, IterS: 0.23}, {ExecPlan: "ga", Placement: perf.Placement{1, 1, 1, 1, 1}, IterS: 0.3}})
	bert, _ := perf.Builtin("bert")
	ps := m.Plans("bert", bert, perf.Placement{4})
	if len(ps) != 2 || ps[0].GA != NamedGASteps || ps[1].ZeRO != 2 {
		t.Errorf("plans on 4 = %v", ps)
	}
	if ps := m.Plans("bert", bert, perf.Placement{1, 1, 1, 1, 1}); len(ps) != 0 {
		t.Errorf("uneven batch split (32 on 5 GPUs) listed as a plan: %v", ps)
	}
}
