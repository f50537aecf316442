package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/replan/replan/perf"
)

func runCLI(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, errb bytes.Buffer
	err := run(context.Background(), args, &out, &errb)
	return out.String() + errb.String(), err
}

func sharedDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join("..", "..", "shared", "data", "morphling")
	if _, err := os.Stat(filepath.Join(dir, "profile")); err != nil {
		t.Skipf("skipped: ../shared/data/morphling is absent (%v)", err)
	}
	return dir
}

func TestPlanJSON(t *testing.T) {
	out, err := runCLI(t, "plan", "--model", "gpt2", "--gpus", "8", "--servers", "2", "--data", "", "--json")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var got planOutput
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("json: %v\n%s", err, out)
	}
	if got.GPUs != 8 || got.Placement.String() != "44" || len(got.Plans) == 0 || len(got.Rejected) == 0 {
		t.Fatalf("unexpected output: gpus %d placement %s plans %d rejected %d", got.GPUs, got.Placement, len(got.Plans), len(got.Rejected))
	}
	for i := 1; i < len(got.Plans); i++ {
		if got.Plans[i].Throughput > got.Plans[i-1].Throughput {
			t.Fatal("plans not ranked by throughput")
		}
	}
	for _, r := range got.Rejected {
		if r.Rule == "" || r.Reason == "" {
			t.Fatalf("rejection without reason: %+v", r)
		}
	}
}

func TestPlanTableAndErrors(t *testing.T) {
	out, err := runCLI(t, "plan", "--model", "llama7b", "--gpus", "16", "--data", "")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, want := range []string{"llama7b on 16 GPUs, 2 servers × 8 GPUs", "SAMPLES/s", "gpu-memory", "rejected"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if _, err := runCLI(t, "plan", "--model", "nope", "--gpus", "8", "--data", ""); err == nil || !strings.Contains(err.Error(), "unknown model type") {
		t.Errorf("unknown model: %v", err)
	}
	if _, err := runCLI(t, "plan", "--model", "gpt2", "--gpus", "0"); err == nil {
		t.Error("--gpus 0: want error")
	}
	if _, err := runCLI(t, "plan", "--model", "gpt2", "--gpus", "16", "--servers", "1", "--data", ""); err == nil || !strings.Contains(err.Error(), "servers have 8") {
		t.Errorf("16 GPUs on one server: %v", err)
	}
}

// Issue 28: `plan --gpus 100000` exited 0 with a 12,592-character line
// (the placement written as one digit per server). Now the placement is
// said as people say it, every line stays short, and a count with no
// feasible plan is an error.
func TestPlanNoFeasiblePlanFails(t *testing.T) {
	for _, args := range [][]string{{"--gpus", "100000"}, {"--gpus", "100000", "--servers", "99999"}} {
		out, err := runCLI(t, append([]string{"plan", "--model", "gpt2", "--data", ""}, args...)...)
		if err == nil || !strings.Contains(err.Error(), "no feasible plan for gpt2") {
			t.Errorf("%v: err %v, want no feasible plan", args, err)
		}
		for _, l := range strings.Split(out, "\n") {
			if len(l) > 300 {
				t.Errorf("%v: a %d-character line: %.120s…", args, len(l), l)
			}
		}
		if !strings.Contains(out, "servers × 8 GPUs") && !strings.Contains(out, "99998 × 1 GPU") {
			t.Errorf("%v: placement not said as people say it:\n%.300s", args, out)
		}
	}
}

func TestPerfValidateJSONContract(t *testing.T) {
	dir := sharedDir(t)
	out, err := runCLI(t, "perf", "validate", "--data", dir, "--models", "gpt2,bert", "--json")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var got struct {
		Protocol string `json:"protocol"`
		Models   []struct {
			Model     string   `json:"model"`
			Rows      int      `json:"held_out_rows"`
			AvgErrPct *float64 `json:"avg_err_pct"`
			MaxErrPct *float64 `json:"max_err_pct"`
			// the leave-one-model-out fields checks outside the project read
			LOOAvg     *float64 `json:"loo_avg_err_pct"`
			LOOMax     *float64 `json:"loo_max_err_pct"`
			RegretMean *float64 `json:"regret_mean_pct"`
			RegretMax  *float64 `json:"regret_max_pct"`
			LOORows    []struct {
				Placement  string   `json:"placement"`
				Plan       string   `json:"plan"`
				MeasuredS  *float64 `json:"measured_s"`
				PredictedS *float64 `json:"predicted_s"`
				Fit        *bool    `json:"fit"`
			} `json:"rows"`
			Plans []struct {
				Plan      string   `json:"plan"`
				Rows      int      `json:"rows"`
				AvgErrPct *float64 `json:"avg_err_pct"`
				MaxErrPct *float64 `json:"max_err_pct"`
			} `json:"plans"`
		} `json:"models"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("json: %v", err)
	}
	if got.Protocol == "" || len(got.Models) != 2 {
		t.Fatalf("protocol %q, %d models", got.Protocol, len(got.Models))
	}
	for _, m := range got.Models {
		if m.Rows == 0 || m.AvgErrPct == nil || m.MaxErrPct == nil || *m.MaxErrPct < *m.AvgErrPct || len(m.Plans) == 0 {
			t.Errorf("model %+v", m)
		}
		if m.LOOAvg == nil || m.LOOMax == nil || m.RegretMean == nil || m.RegretMax == nil || *m.LOOMax < *m.LOOAvg || *m.RegretMax < *m.RegretMean {
			t.Errorf("%s: leave-one-out fields %v %v %v %v", m.Model, m.LOOAvg, m.LOOMax, m.RegretMean, m.RegretMax)
		}
		fitted := 0
		for _, r := range m.LOORows {
			if r.Placement == "" || r.Plan == "" || r.MeasuredS == nil || r.PredictedS == nil || r.Fit == nil {
				t.Fatalf("%s: row %+v", m.Model, r)
			}
			if *r.Fit {
				fitted++
			}
		}
		if len(m.LOORows) != m.Rows+fitted || fitted == 0 {
			t.Errorf("%s: %d rows (%d fit), %d held out", m.Model, len(m.LOORows), fitted, m.Rows)
		}
		sum := 0
		for _, p := range m.Plans {
			if p.Plan == "" || p.AvgErrPct == nil || p.MaxErrPct == nil {
				t.Errorf("plan entry %+v", p)
			}
			sum += p.Rows
		}
		if sum != m.Rows {
			t.Errorf("%s: families hold %d rows, model %d", m.Model, sum, m.Rows)
		}
	}
	text, err := runCLI(t, "perf", "validate", "--data", dir, "--models", "llama7")
	if err != nil || !strings.Contains(text, "protocol:") || !strings.Contains(text, "llama7") {
		t.Errorf("table: %v\n%s", err, text)
	}
	bad := filepath.Join(t.TempDir(), "archs.yaml")
	if err := os.WriteFile(bad, []byte("version: 1\nmodels:\n  - name: opt\n    params: 1.3e9\n    layrs: 24\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := runCLI(t, "perf", "validate", "--data", dir, "--arch-file", bad); err == nil || !strings.Contains(err.Error(), "archs.yaml") || !strings.Contains(err.Error(), "line 5") || !strings.Contains(err.Error(), "layrs") {
		t.Errorf("--arch-file with a typo: %v", err)
	}
}

func TestPerfFitSaveAndReuse(t *testing.T) {
	dir := t.TempDir()
	samples := filepath.Join(dir, "s.csv")
	csv := "plan,placement,iter_s,fwd_s\n" +
		"\"dp=8,tp=1,pp=1,mb=2,ga=1,zero=2\",8,0.53,0.141\n" +
		"\"dp=4,tp=1,pp=1,mb=4,ga=1\",4,1.02,0.284\n" +
		"\"dp=2,tp=1,pp=1,mb=8,ga=1\",2,1.83,0.568\n" +
		"zero-offload,4,1.715,0.344\n" +
		"zero-offload,8,1.209,0.141\n" +
		"zero-offload,2,2.97,0.58\n" +
		"ga,44,0.821,\n"
	csv = strings.ReplaceAll(csv, ",\n", ",0\n")
	if err := os.WriteFile(samples, []byte(csv), 0o644); err != nil {
		t.Fatal(err)
	}
	model := filepath.Join(dir, "gpt2.json")
	out, err := runCLI(t, "perf", "fit", "--samples", samples, "--model", "gpt2", "--out", model)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !strings.Contains(out, "trusted: true") || !strings.Contains(out, "k_const") {
		t.Errorf("fit output:\n%s", out)
	}
	out, err = runCLI(t, "plan", "--model", "gpt2", "--gpus", "8", "--model-file", model, "--top", "3")
	if err != nil || !strings.Contains(out, "fitted model "+model) {
		t.Errorf("plan with saved model: %v\n%s", err, out)
	}
	out, err = runCLI(t, "perf", "curve", "--model", "gpt2", "--gpus", "16", "--model-file", model, "--json")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var c curveOutput
	if err := json.Unmarshal([]byte(out), &c); err != nil || len(c.Points) != 16 {
		t.Fatalf("curve json: %v, %d points", err, len(c.Points))
	}
	bad := filepath.Join(dir, "bad.csv")
	os.WriteFile(bad, []byte("plan,placement,iter_s\nga,44,zero\n"), 0o644)
	if _, err := runCLI(t, "perf", "fit", "--samples", bad, "--model", "gpt2"); err == nil || !strings.Contains(err.Error(), "bad.csv:2: iter_s") {
		t.Errorf("bad samples: %v", err)
	}
}

// TestPerfFitMicroBatch: `replan perf fit` on iteration times alone (no
// forward times) of GPT-2 XL measured on one H100 at global batch 16 (issue
// 25) gives a model that prices the three micro-batch sizes apart, in the
// measured order. Before, it predicted 1.22 s for all three.
func TestPerfFitMicroBatch(t *testing.T) {
	dir := t.TempDir()
	samples := filepath.Join(dir, "h100.csv")
	csv := "plan,placement,iter_s\n" +
		"\"dp=1,tp=1,pp=1,mb=1,ga=16\",1,2.20\n" +
		"\"dp=1,tp=1,pp=1,mb=2,ga=8\",1,1.29\n" +
		"\"dp=1,tp=1,pp=1,mb=4,ga=4\",1,0.97\n"
	if err := os.WriteFile(samples, []byte(csv), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := runCLI(t, "perf", "fit", "--samples", samples, "--model", "gpt2", "--json")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var res fitOutput
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatal(err)
	}
	prev := 0.0
	for _, c := range []struct {
		mb, ga int
		meas   float64
	}{{4, 4, 0.97}, {2, 8, 1.29}, {1, 16, 2.20}} {
		b, err := res.Model.Predict(perf.Plan{DP: 1, TP: 1, PP: 1, MicroBatch: c.mb, GA: c.ga}, perf.Resources{Placement: perf.Placement{1}, CPUsPerGPU: 8})
		if err != nil {
			t.Fatal(err)
		}
		if !(b.Iter > prev) || math.Abs(b.Iter-c.meas)/c.meas > 0.12 {
			t.Errorf("mb %d ga %d: predicted %.3fs (previous plan %.3fs), measured %.2fs", c.mb, c.ga, b.Iter, prev, c.meas)
		}
		prev = b.Iter
	}
}
