package dataset

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/replan/replan/perf"
)

// sharedData is the Morphling data beside the checkout; tests that need it
// skip when it is absent.
func sharedData(t testing.TB) string {
	t.Helper()
	dir := filepath.Join("..", "..", "shared", "data", "morphling")
	if _, err := os.Stat(filepath.Join(dir, "profile")); err != nil {
		t.Skipf("skipped: ../shared/data/morphling is absent (%v); the measured A800 data lives there", err)
	}
	return dir
}

const cfg = "nodes,gpus,parameter_size,batch_size,seq_hid,num_cpu_threads,zero_type,is_tp,is_pp\n1,8,320.7,1,12582912,1,0,0,0\n1,4,320.7,1,12582912,4,1,0,0\n"
const dat = "forward_time,Tcc,Topt,iter_time,strategy\n40,83,25,157,1100\n63,158,148,376,1111\n"

func TestParseProfile(t *testing.T) {
	p, err := ParseProfile("bert", "config.csv", strings.NewReader("\ufeff"+cfg), "data.csv", strings.NewReader(dat))
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Rows) != 2 || p.Rows[1].ZeroType != 1 || p.Rows[0].IterMS != 157 {
		t.Fatalf("rows %+v", p.Rows)
	}
	a, _ := perf.Builtin("bert")
	s := p.Samples(a)
	if !s[1].Plan.Offload || s[1].Plan.ZeRO != 2 || s[1].Resources.CPUsPerGPU != 4 || s[0].IterS != 0.157 || s[0].FwdS != 0.04 {
		t.Errorf("samples %+v", s)
	}
}

func TestParseProfileErrorsNameFileLineField(t *testing.T) {
	badCfg := strings.Replace(cfg, "1,4,320.7", "1,four,320.7", 1)
	_, err := ParseProfile("bert", "config.csv", strings.NewReader(badCfg), "data.csv", strings.NewReader(dat))
	if err == nil || !strings.Contains(err.Error(), "config.csv:3: gpus") {
		t.Errorf("want config.csv:3: gpus error, got %v", err)
	}
	_, err = ParseProfile("bert", "config.csv", strings.NewReader(cfg), "data.csv", strings.NewReader(dat+"1,2,3,4,1100\n"))
	if err == nil || !strings.Contains(err.Error(), "joined row by row") {
		t.Errorf("row count mismatch: got %v", err)
	}
	_, err = ParseProfile("bert", "config.csv", strings.NewReader("nodes,gpus\n1,2\n"), "data.csv", strings.NewReader(dat))
	if err == nil || !strings.Contains(err.Error(), `missing column "parameter_size"`) {
		t.Errorf("missing column: got %v", err)
	}
}

func TestParsePlacement(t *testing.T) {
	rows, err := ParsePlacement("p.csv", strings.NewReader("exec_plan,placement,cpu_threads,iter_time\n242,4444,2,1.955\n182,4444,2,0\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 || rows[0].Placement.GPUs() != 16 || rows[0].CPUThreads != 2 || rows[1].IterS != 0 {
		t.Fatalf("rows %+v", rows)
	}
	_, err = ParsePlacement("p.csv", strings.NewReader("exec_plan,placement,iter_time\nga,4x4,1\nga,44,-1\n"))
	if err == nil || !strings.Contains(err.Error(), "p.csv:2: placement") || !strings.Contains(err.Error(), "p.csv:3: iter_time") {
		t.Errorf("want both bad rows named, got %v", err)
	}
}

func TestPlanFromCode(t *testing.T) {
	a, _ := perf.Builtin("llama7b")
	p, err := PlanFromCode("248", a, 64)
	if err != nil || p.PP != 2 || p.TP != 4 || p.DP != 8 || p.GA != 1 || p.MicroBatch != 1 {
		t.Fatalf("248: %+v %v", p, err)
	}
	if _, err := PlanFromCode("248", a, 32); err == nil {
		t.Error("248 on 32 GPUs: want error")
	}
	p, err = PlanFromCode("zero-offload+gc", a, 4)
	if err != nil || !p.Offload || !p.Ckpt || p.ZeRO != 2 || p.DP != 4 {
		t.Fatalf("zero-offload+gc: %+v %v", p, err)
	}
	if _, err := PlanFromCode("warp-drive", a, 4); err == nil {
		t.Error("unknown plan: want error")
	}
	for code, fam := range map[string]string{"248": "dp+tp+pp", "411": "pp", "181": "tp", "ga": "ga", "111": "single"} {
		if got := PlanFamily(code); got != fam {
			t.Errorf("family %s = %s, want %s", code, got, fam)
		}
	}
}

func TestChooseFitRowsIsFixedAndSpread(t *testing.T) {
	var rows []heldRow
	for i, fam := range []string{"ga", "ga", "ga", "ga", "gc", "gc", "zero-dp"} {
		pl := perf.Placement{i + 1}
		rows = append(rows, heldRow{row: PlacementRow{ExecPlan: fam, Placement: pl}, family: fam})
	}
	got := chooseFitRows(rows, 4)
	// ga (4 rows) first: middle (index 2), then gc's middle, zero-dp's only, then ga's first.
	want := []int{2, 5, 6, 0}
	if len(got) != len(want) {
		t.Fatalf("got %v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("got %v, want %v", got, want)
		}
	}
	if s := spread(5); len(s) != 5 || s[0] != 2 || s[1] != 0 || s[2] != 4 {
		t.Errorf("spread(5) = %v", s)
	}
}

func TestValidateOnSharedData(t *testing.T) {
	dir := sharedData(t)
	rep, err := Validate(context.Background(), dir, nil, perf.A800)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Models) < 5 {
		t.Fatalf("validated %d models, want the 5 with profile and placements", len(rep.Models))
	}
	for _, m := range rep.Models {
		if len(m.FitRows) > MaxFitRows {
			t.Errorf("%s fitted on %d rows", m.Model, len(m.FitRows))
		}
		if m.Rows == 0 || len(m.Plans) == 0 {
			t.Errorf("%s: no held-out rows", m.Model)
		}
		// A loose sanity bound, not the target (the target is a benchmark):
		// the model must beat a constant guess by a wide margin.
		if m.AvgErrPct > 40 {
			t.Errorf("%s: average error %.1f%%", m.Model, m.AvgErrPct)
		}
	}
	one, err := Validate(context.Background(), dir, []string{"gpt2"}, perf.A800)
	if err != nil || len(one.Models) != 1 || one.Models[0].Model != "gpt2" {
		t.Fatalf("--models gpt2: %+v %v", one.Models, err)
	}
	if _, err := Validate(context.Background(), dir, []string{"nope"}, perf.A800); err == nil {
		t.Error("unknown model: want error")
	}
}

func TestParseSamples(t *testing.T) {
	a, _ := perf.Builtin("gpt2")
	in := "plan,placement,iter_s,fwd_s\n\"dp=8,tp=1,pp=1,mb=2,ga=1,zero=2\",44,0.7,0.14\nzero-offload,8,1.2,0.14\n"
	s, err := ParseSamples("s.csv", strings.NewReader(in), a)
	if err != nil || len(s) != 2 || s[0].Plan.ZeRO != 2 || !s[1].Plan.Offload {
		t.Fatalf("%+v %v", s, err)
	}
	_, err = ParseSamples("s.csv", strings.NewReader("plan,placement,iter_s\n\"dp=2\",44,1\n"), a)
	if err == nil || !strings.Contains(err.Error(), "s.csv:2: plan") {
		t.Errorf("GPU mismatch: got %v", err)
	}
}

func FuzzProfile(f *testing.F) {
	f.Add(cfg, dat)
	f.Add("nodes,gpus\n", "forward_time\n")
	f.Add(cfg, "forward_time,Tcc,Topt,iter_time,strategy\n1,2,3,4,x\n")
	f.Fuzz(func(t *testing.T, c, d string) {
		p, err := ParseProfile("m", "c.csv", strings.NewReader(c), "d.csv", strings.NewReader(d))
		if err != nil {
			return
		}
		a, _ := perf.Builtin("bert")
		for _, s := range p.Samples(a) {
			if s.Plan.DP < 1 || s.Resources.Placement.GPUs() != s.Plan.DP {
				t.Fatalf("bad sample from accepted profile: %+v", s)
			}
		}
		// a model type known only by this profile: an architecture the
		// model can use, or an error saying why not
		if d, note, err := ArchFromProfile("m", p, nil, 0); err == nil {
			if verr := d.Validate(); verr != nil || note == "" || d.GlobalBatch < 1 {
				t.Fatalf("derived %+v from an accepted profile: %v", d, verr)
			}
		}
	})
}

func FuzzPlacement(f *testing.F) {
	f.Add("exec_plan,placement,iter_time\n248,88888888,0.6\n")
	f.Add("exec_plan,placement,cpu_threads,iter_time\nzero-offload+gc,1,2,46\n")
	f.Add("exec_plan,placement,iter_time\nga,16.16,1\n")
	f.Fuzz(func(t *testing.T, in string) {
		rows, err := ParsePlacement("p.csv", strings.NewReader(in))
		if err != nil {
			return
		}
		a, _ := perf.Builtin("llama7b")
		for _, r := range rows {
			if r.Placement.GPUs() < 1 {
				t.Fatalf("accepted empty placement: %+v", r)
			}
			for _, mb := range []MicroBatching{WholeBatch, MicroBatchOne} {
				if p, err := PlanFromCodeAs(r.ExecPlan, a, r.Placement.GPUs(), mb); err == nil && (p.GPUs() != r.Placement.GPUs() || p.GA < 1) {
					t.Fatalf("plan %v (%s) does not match placement %v", p, mb, r.Placement)
				}
			}
			if _, err := PlanFromCode(r.ExecPlan, a, r.Placement.GPUs()); err == nil && rowBatch(r) < 1 {
				t.Fatalf("row %+v runs no batch", r)
			}
		}
	})
}

// Fitted on the profile alone, as the scheduler serves a model with no
// measured placements: every placements row is held out, a model whose
// profile gives only its forward (llama30) is skipped with the reason,
// and the fits that see no sample across servers hold k_sync.
func TestValidateProfileOnly(t *testing.T) {
	dir := sharedData(t)
	rep, err := ValidateRows(context.Background(), dir, nil, perf.A800, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(rep.Protocol, "at most 0 placements rows") {
		t.Errorf("protocol %q does not say 0 rows", rep.Protocol)
	}
	if !slices.ContainsFunc(rep.Skipped, func(s string) bool { return strings.HasPrefix(s, "llama30: nothing to fit on") }) {
		t.Errorf("skipped %q: want llama30 with its reason", rep.Skipped)
	}
	all, err := Validate(context.Background(), dir, nil, perf.A800)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range rep.Models {
		if len(m.FitRows) != 0 {
			t.Errorf("%s fitted on rows %v", m.Model, m.FitRows)
		}
		for _, a := range all.Models {
			if a.Model == m.Model && m.Rows != a.Rows+len(a.FitRows) {
				t.Errorf("%s: %d rows held out profile-only, want %d + %d", m.Model, m.Rows, a.Rows, len(a.FitRows))
			}
		}
		if m.Params.KSync != perf.SyncUnseen {
			t.Errorf("%s: profile-only k_sync %.3f, want held at %g (its profile ran on one server)", m.Model, m.Params.KSync, perf.SyncUnseen)
		}
	}
	if _, err := ValidateRows(context.Background(), dir, nil, perf.A800, -1); err == nil {
		t.Error("fit rows -1: want an error")
	}
}
