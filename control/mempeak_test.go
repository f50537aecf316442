package control

import (
	"context"
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/replan/replan/jobspec"
	"github.com/replan/replan/perf"
)

// leanScale is the share of perf's activation count that a BERT-large
// with memory-efficient attention keeps at sequence 512: 34 of 74 bytes
// per token and hidden unit (no attention scores).
const leanScale = 34.0 / 74

// leanSpec is a BERT-large-shaped model type replan has never seen, at
// global batch 96, with a request block.
func leanSpec(t *testing.T, name, request string) *jobspec.Spec {
	t.Helper()
	return unseenSpec(t, name, "{name: lean, params: 336e6, layers: 24, hidden: 1024, heads: 16, seq_len: 512, vocab: 30522}", 96, 100000, request, "")
}

// bigPlan asks for the whole batch on one GPU without checkpointing: the
// unscaled estimate needs about 98 GiB, the lean implementation about 50.
const bigPlan = "{gpus: 1, plan: 'dp=1,tp=1,pp=1,mb=96,ga=1,zero=0'}"

// TestMeasuredPeaksAdmitPlanThatFits (issue 25: BERT-large's estimates were
// 35-58 % above the measured peak, so plans that fit were refused): a
// model type whose runs use less GPU memory than perf counts (the
// simulated GPUs report its plans' memory with 0.46 of the activations)
// is profiled; the profile runs' measured peaks fit its activation
// factor, stored with its model; a plan admission refused before is then
// admitted, the scheduler's model of the type carries the factor, and so
// does a daemon restarted on the same store.
func TestMeasuredPeaksAdmitPlanThatFits(t *testing.T) {
	ctx := context.Background()
	st, path := openTest(t) // the restart below reopens path
	c := &clock{t: t0}
	sim := NewSimExecutor(c.now, []string{"a", "b"}, nil, nil, 5*time.Second)
	sim.ActScale = leanScale
	d, _ := newDaemonWith(t, st, sim, "replan", c)
	d.cfg.Profile = ProfileOptions{Enabled: true, Iterations: 10, RunTimeout: 2 * time.Minute, PhaseTimeout: 10 * time.Minute}

	big := leanSpec(t, "big", bigPlan)
	err := d.Admit(ctx, big, nil)
	if err == nil || !strings.Contains(err.Error(), "request.plan") || !strings.Contains(err.Error(), "GiB per GPU") {
		t.Fatalf("before any measurement: admission of the mb 96 plan on one GPU: %v, want refused for GPU memory", err)
	}

	rec, err := d.Submit(ctx, leanSpec(t, "lean-1", "{gpus: 4, plan: 'dp=4,tp=1,pp=1,mb=24,ga=1,zero=1'}\npin: {plan: true}"))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 400; i++ {
		if err := d.Observe(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := d.Round(ctx); err != nil {
			t.Fatal(err)
		}
		if j, _ := st.GetJob(ctx, rec.ID); j.State == StateRunning {
			break
		}
		c.advance(5 * time.Second)
	}
	samples, err := st.ProfileSamples(ctx, "lean/96/deepspeed")
	if err != nil {
		t.Fatal(err)
	}
	peaks := 0
	for _, s := range samples {
		if s.Fits && s.PeakGPUGB > 0 {
			peaks++
		}
	}
	if len(samples) == 0 || peaks == 0 {
		t.Fatalf("%d profile samples, %d with a measured peak: %+v", len(samples), peaks, samples)
	}
	d.mu.Lock()
	typ := modelTypeOf(big)
	o := d.models[typ]
	scale := o.Model.Arch.ActScale
	snap := d.snapModel(big).Arch.ActScale
	d.mu.Unlock()
	t.Logf("%d profile samples, %d with a peak: activation factor %.2f", len(samples), peaks, scale)
	if math.Abs(scale-leanScale) > 0.05 || snap != scale {
		t.Fatalf("activation factor %.3f (the scheduler's model %.3f), want %.3f", scale, snap, leanScale)
	}
	if err := d.Admit(ctx, big, nil); err != nil {
		t.Errorf("after profiling: admission of a plan that fits: %v", err)
	}
	// The scheduler runs it: the plan pinned, its memory priced with the
	// factor.
	pinned := leanSpec(t, "big-pinned", bigPlan+"\npin: {plan: true}")
	br, err := d.Submit(ctx, pinned)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		d.Observe(ctx)
		d.Round(ctx)
		c.advance(5 * time.Second)
	}
	j, _ := st.GetJob(ctx, br.ID)
	var plan perf.Plan
	if err := json.Unmarshal(j.Plan, &plan); j.State != StateRunning || err != nil || plan.MicroBatch != 96 {
		t.Errorf("the pinned mb 96 job: %s (%s), plan %s: want running", j.State, j.Reason, j.Plan)
	}
	// replan models shows it.
	var mi *ModelInfo
	for _, m := range d.Models(false) {
		if m.Type == typ.String() {
			mi = &m
		}
	}
	if mi == nil || mi.ActScale != scale || mi.PeakSamples < peaks {
		t.Errorf("replan models: %+v, want act_scale %.2f from at least the %d profile samples", mi, scale, peaks)
	}
	st.Close()

	// A daemon restarted on the store admits it too.
	st2, err := OpenSQLite(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer st2.Close()
	d2, _ := newDaemonWith(t, st2, NewSimExecutor(c.now, []string{"a", "b"}, nil, nil, 5*time.Second), "replan", c)
	d2.mu.Lock()
	got := d2.typeActScale(big)
	d2.mu.Unlock()
	if got != scale {
		t.Fatalf("after a restart the activation factor is %g, before it %g", got, scale)
	}
	if err := d2.Admit(ctx, big, nil); err != nil {
		t.Errorf("after a restart: %v", err)
	}
}

// TestRunningPeaksCalibrate: without profiling, a running job's measured
// peak joins the samples its type stores; the type's factor is fitted
// from them (a "memory" event says so), the scheduler's model of the type
// gets it, and `replan job ID` shows the job's measured peak, its
// estimate and the factor.
func TestRunningPeaksCalibrate(t *testing.T) {
	ctx := context.Background()
	st, _ := openTest(t)
	c := &clock{t: time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)}
	sim := NewSimExecutor(c.now, []string{"a", "b"}, nil, nil, 5*time.Second)
	sim.ActScale = leanScale
	d, _ := newDaemonWith(t, st, sim, "replan", c)
	rec, err := d.Submit(ctx, leanSpec(t, "lean-run", "{gpus: 2, plan: 'dp=2,tp=1,pp=1,mb=48,ga=1,zero=1'}\npin: {plan: true}"))
	if err != nil {
		t.Fatal(err)
	}
	typ := modelTypeOf(leanSpec(t, "x", "{gpus: 1}"))
	var scale float64
	for i := 0; i < 60 && scale == 0; i++ {
		if err := d.Observe(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := d.Round(ctx); err != nil {
			t.Fatal(err)
		}
		c.advance(5 * time.Second)
		d.mu.Lock()
		scale = d.typeActScale(leanSpec(t, "x", "{gpus: 1}"))
		d.mu.Unlock()
	}
	if math.Abs(scale-leanScale) > 0.05 {
		t.Fatalf("activation factor %.3f after the job ran, want %.3f", scale, leanScale)
	}
	stored, _ := st.Models(ctx)
	var o perf.Online
	if err := json.Unmarshal(stored[typ.String()], &o); err != nil || o.Model.Arch.ActScale != scale {
		t.Fatalf("stored model %s: act_scale %g (%v), want %g", typ, o.Model.Arch.ActScale, err, scale)
	}
	evs, _ := st.Events(ctx, 0, 1000)
	told := false
	for _, e := range evs {
		told = told || (e.Kind == "memory" && e.JobID == rec.ID && strings.Contains(e.Msg, "activation factor"))
	}
	if !told {
		t.Error("no memory event told the factor")
	}
	d.mu.Lock()
	snap := d.snapModel(leanSpec(t, "x", "{gpus: 1}")).Arch.ActScale
	d.mu.Unlock()
	if snap != scale {
		t.Errorf("the scheduler's model has factor %g, the type %g", snap, scale)
	}
	d.Observe(ctx)
	rr := httptest.NewRecorder()
	(&API{D: d}).Handler().ServeHTTP(rr, httptest.NewRequest(http.MethodGet, "/v1/jobs/"+rec.ID, nil))
	var jd JobDetail
	if err := json.Unmarshal(rr.Body.Bytes(), &jd); err != nil || jd.Memory == nil {
		t.Fatalf("GET /v1/jobs/%s: %v %s", rec.ID, err, rr.Body)
	}
	if m := jd.Memory; m.PeakGPUGB <= 0 || m.ActScale != scale || math.Abs(m.EstimateGPUGB-m.PeakGPUGB)/m.PeakGPUGB > 0.05 {
		t.Errorf("job memory %+v: want the measured peak, an estimate within 5%% of it and the factor %g", m, scale)
	}
}
