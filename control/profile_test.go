package control

import (
	"context"
	"errors"
	"fmt"
	"math"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/replan/replan/jobspec"
	"github.com/replan/replan/perf"
)

// mineSpec is a job of a model type replan has never seen (an
// architecture block), of gpus GPUs, with extra YAML appended.
func mineSpec(t *testing.T, name string, gpus int, extra string) *jobspec.Spec {
	t.Helper()
	return unseenSpec(t, name, "{name: mine, params: 1.3e9, layers: 24, hidden: 2048, heads: 16, seq_len: 1024, vocab: 50257}",
		32, 2000, fmt.Sprintf("{gpus: %d}", gpus), extra)
}

// unseenSpec is a best-effort DeepSpeed job of name whose model block is
// model (a type replan has never seen), at global batch batch for iters
// iterations, with its request block and extra YAML appended.
func unseenSpec(t *testing.T, name, model string, batch, iters int, request, extra string) *jobspec.Spec {
	t.Helper()
	data := fmt.Sprintf(`version: 1
name: %s
tenant: research
class: best-effort
model: %s
framework: deepspeed
workdir: /w
entrypoint: train.py
global_batch: %d
iterations: %d
checkpoint_dir: /ckpt/%s
request: %s
%s`, name, model, batch, iters, name, request, extra)
	s, err := jobspec.Parse(name+".yaml", []byte(data), nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// mineTruth is how "mine" really runs on the simulated cluster: slower
// compute and other overheads than the unfitted defaults say.
func mineTruth(a perf.Arch) perf.Model {
	m := perf.DefaultModel(a, perf.A800)
	if a.Name == "mine" {
		m.Forward.Alpha *= 1.6
		m.Forward.Beta *= 1.6
		m.Params.KBwd, m.Params.KSync, m.Params.KConst, m.Params.KOptOff = 2.4, 1.3, 0.05, 1.8
	}
	return m
}

// failingSim is the simulated cluster where launches of plans with TP > 1
// fail the way an out-of-memory launch does.
type failingSim struct {
	*SimExecutor
	failed []string
}

func (f *failingSim) Start(ctx context.Context, l Launch) error {
	if l.Plan.TP > 1 {
		f.failed = append(f.failed, l.JobID)
		return errors.New("CUDA out of memory (simulated)")
	}
	return f.SimExecutor.Start(ctx, l)
}

// TestProfileOnArrival: a job of a model type with no profile gets a
// profiling phase before its first start (at most 7 configurations, each
// a stored sample, one that fails recorded as "does not fit" and not as
// a job failure), the model is fitted on them and the job starts with
// the fitted model's prediction, close to what it then measures.
func TestProfileOnArrival(t *testing.T) {
	ctx := context.Background()
	st, _ := openTest(t)
	c := &clock{t: time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)}
	sim := NewSimExecutor(c.now, []string{"a", "b"}, nil, mineTruth, 5*time.Second)
	ex := &failingSim{SimExecutor: sim}
	d, _ := newDaemonWith(t, st, ex, "replan", c)
	d.cfg.Profile = ProfileOptions{Enabled: true, Iterations: 10, RunTimeout: 2 * time.Minute, PhaseTimeout: 10 * time.Minute}
	rec, err := d.Submit(ctx, mineSpec(t, "mine-1", 8, ""))
	if err != nil {
		t.Fatal(err)
	}
	began := c.now()
	reasonRE := regexp.MustCompile(`^profiling (\d)/(\d): (.+)$`)
	reasons, queued := map[string]bool{}, map[string]bool{}
	var started time.Time
	for i := 0; i < 400 && started.IsZero(); i++ {
		if err := d.Observe(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := d.Round(ctx); err != nil {
			t.Fatal(err)
		}
		j, err := st.GetJob(ctx, rec.ID)
		if err != nil {
			t.Fatal(err)
		}
		if m := reasonRE.FindStringSubmatch(j.Reason); m != nil {
			reasons[j.Reason] = true
		}
		for _, e := range d.Queue() { // what replan queue and the TUI show
			if e.Job.ID == rec.ID && reasonRE.MatchString(e.Reason) {
				queued[e.Reason] = true
			}
		}
		if j.State == StateRunning {
			started = c.now()
			break
		}
		if j.Failures != 0 || j.State.Final() {
			t.Fatalf("job %s during profiling: %s, %d failures (%s)", rec.ID, j.State, j.Failures, j.Reason)
		}
		c.advance(5 * time.Second)
	}
	if started.IsZero() {
		t.Fatal("the job never started")
	}
	samples, err := st.ProfileSamples(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(samples) < 4 || len(samples) > perf.MaxProfileConfigs {
		t.Fatalf("%d profile samples, want 4..7", len(samples))
	}
	typ := "mine/32/deepspeed"
	ok, bad := 0, 0
	for _, s := range samples {
		if s.Type != typ || s.JobID != rec.ID || s.Config == "" || len(s.Servers) == 0 || s.At.IsZero() || len(s.Placement) == 0 {
			t.Errorf("sample %+v: want type, job, config, servers and time", s)
		}
		if s.Fits {
			ok++
			if s.IterS <= 0 {
				t.Errorf("sample %s: measured %.3f s", s.Config, s.IterS)
			}
		} else {
			bad++
			if s.Plan.TP < 2 || !strings.Contains(s.Err, "out of memory") {
				t.Errorf("sample %s (%s) does not fit: %s", s.Config, s.Plan.Spec(), s.Err)
			}
		}
	}
	if bad != 1 || len(ex.failed) != 1 {
		t.Errorf("%d samples did not fit (launches failed: %v), want the one TP run", bad, ex.failed)
	}
	if len(reasons) < 3 || len(queued) < 3 {
		t.Errorf("the job's reason said the profiling step %d times (%v), the queue %d times (%v), want one per run", len(reasons), reasons, len(queued), queued)
	}
	// Every run ran in the phase, one after another, each within its bound.
	if took := started.Sub(began); took > 10*time.Minute+10*time.Second {
		t.Errorf("the phase took %s, bound 10m", took)
	}
	// The events name each configuration and its measured time.
	evs, _ := st.Events(ctx, 0, 1000)
	timed := 0
	var profiled string
	for _, e := range evs {
		if e.Kind == "profile" && regexp.MustCompile(`: [0-9.]+ s per iteration`).MatchString(e.Msg) {
			timed++
		}
		if e.Kind == "profiled" {
			profiled = e.Msg
		}
		if e.Kind == "start" && profiled == "" {
			t.Errorf("the job started before its model was fitted: %s", e.Msg)
		}
	}
	if timed != ok {
		t.Errorf("%d events give a measured time, %d samples fit", timed, ok)
	}
	if !strings.Contains(profiled, "fitted") {
		t.Errorf("profiled event: %q", profiled)
	}
	// The model is stored fitted on the samples, and the job's prediction
	// is the fitted model's: within 15% of what the cluster gives it.
	models, _ := st.Models(ctx)
	if _, ok := models[typ]; !ok {
		t.Fatalf("no stored model %s: %v", typ, models)
	}
	d.mu.Lock()
	js := d.jobs[rec.ID]
	pred := js.predSPS
	o := d.models[modelTypeOf(js.spec)]
	fitted, nsamples := !o.FittedAt.IsZero(), len(o.Samples)
	truthIter, err := mineTruth(js.spec.Arch).Predict(js.plan, perf.Resources{Placement: placementOf(js), CPUsPerGPU: serversCPUsPerGPU(js.servers)})
	d.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	if !fitted || nsamples != ok {
		t.Errorf("model fitted %v on %d samples, want on the %d measured", fitted, nsamples, ok)
	}
	meas := float64(js.spec.GlobalBatch) / truthIter.Iter
	def, _ := perf.DefaultModel(js.spec.Arch, perf.A800).Predict(js.plan, perf.Resources{Placement: placementOf(js), CPUsPerGPU: serversCPUsPerGPU(js.servers)})
	t.Logf("%d configs, %d fit; started after %s on %s: predicted %.2f samples/s, measured %.2f (unfitted %.2f)", len(samples), ok, started.Sub(began), js.plan, pred, meas, float64(js.spec.GlobalBatch)/def.Iter)
	if math.Abs(pred-meas)/meas > 0.15 {
		t.Errorf("predicted %.2f samples/s, the cluster gives %.2f", pred, meas)
	}
	// A second job of the type is not profiled again.
	r2, _ := d.Submit(ctx, mineSpec(t, "mine-2", 4, ""))
	d.Observe(ctx)
	d.Round(ctx)
	if d.profiling(modelTypeOf(js.spec)) {
		t.Errorf("job %s: its type is profiled again", r2.ID)
	}
}

// placementOf is js's placement, largest server first.
func placementOf(js *jobState) perf.Placement {
	var pl perf.Placement
	for _, s := range js.servers {
		pl = append(pl, len(s.GPUs))
	}
	for i := range pl {
		for j := i + 1; j < len(pl); j++ {
			if pl[j] > pl[i] {
				pl[i], pl[j] = pl[j], pl[i]
			}
		}
	}
	return pl
}

// TestProfileBounds: a phase ends at its bound whatever is left, a run
// that measures nothing within its time is a "does not fit" sample, and
// the spec's profile block overrides the daemon's options (here: turning
// profiling on, and its bounds).
func TestProfileBounds(t *testing.T) {
	ctx := context.Background()
	st, _ := openTest(t)
	c := &clock{t: time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)}
	// every launch takes 40 s before its first iteration
	sim := NewSimExecutor(c.now, []string{"a", "b"}, nil, mineTruth, 40*time.Second)
	d, _ := newDaemonWith(t, st, sim, "replan", c)
	rec, err := d.Submit(ctx, mineSpec(t, "mine-b", 4, "profile: {enabled: true, iterations: 1000000, run_seconds: 30, phase_seconds: 100}\n"))
	if err != nil {
		t.Fatal(err)
	}
	began := c.now()
	var started time.Time
	for i := 0; i < 200; i++ {
		d.Observe(ctx)
		d.Round(ctx)
		j, _ := st.GetJob(ctx, rec.ID)
		if j.State == StateRunning {
			started = c.now()
			break
		}
		c.advance(5 * time.Second)
	}
	if started.IsZero() {
		t.Fatal("the job never started")
	}
	if took := started.Sub(began); took > 105*time.Second {
		t.Errorf("the phase took %s, bound 100 s", took)
	}
	samples, _ := st.ProfileSamples(ctx, "mine/32/deepspeed")
	if len(samples) == 0 || len(samples) > 4 {
		t.Fatalf("%d samples in a 100 s phase of 30 s runs", len(samples))
	}
	for i, s := range samples {
		want := "no iteration measured within 30s"
		if i == len(samples)-1 && !strings.Contains(s.Err, want) {
			want = "the phase's 1m40s ran out"
		}
		if s.Fits || !strings.Contains(s.Err, want) {
			t.Errorf("sample %s: fits %v, %q: want %q", s.Config, s.Fits, s.Err, want)
		}
	}
	if !d.models[modelTypeOf(mineSpec(t, "x", 4, ""))].ProfiledAt.After(began) {
		t.Error("a phase that measured nothing must still mark the type profiled (no phase again)")
	}
	if n := len(sim.Running()); n != 1 {
		t.Errorf("%d launches running, want the job's only: %v", n, sim.Running())
	}
	j, _ := st.GetJob(ctx, rec.ID)
	if j.Failures != 0 {
		t.Errorf("the job counts %d failures", j.Failures)
	}
}

// TestProfileOffByDefault: a daemon without profiling starts the job of
// a new type at once (the behaviour of every test before profiling).
func TestProfileOffByDefault(t *testing.T) {
	ctx := context.Background()
	st, _ := openTest(t)
	c := &clock{t: time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)}
	sim := NewSimExecutor(c.now, []string{"a", "b"}, nil, mineTruth, 5*time.Second)
	d, _ := newDaemonWith(t, st, sim, "replan", c)
	rec, _ := d.Submit(ctx, mineSpec(t, "mine-c", 4, ""))
	d.Observe(ctx)
	d.Round(ctx)
	j, _ := st.GetJob(ctx, rec.ID)
	if j.State != StateRunning {
		t.Errorf("job %s: %s (%s), want running", rec.ID, j.State, j.Reason)
	}
}

// TestProfileUsesFreeGPUsOnly: a phase never touches a running job: its
// configurations are chosen on the free GPUs and its runs take only free
// devices.
func TestProfileUsesFreeGPUsOnly(t *testing.T) {
	ctx := context.Background()
	st, _ := openTest(t)
	c := &clock{t: time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)}
	sim := NewSimExecutor(c.now, []string{"a", "b"}, nil, mineTruth, 5*time.Second)
	d, _ := newDaemonWith(t, st, sim, "replan", c)
	busy := spec(t, "busy", 8, jobspec.BestEffort)
	busy.Iterations = 1000000
	busy.Pin.Plan = true // stays on its 8 GPUs: the other server is free
	br, _ := d.Submit(ctx, busy)
	d.Observe(ctx)
	d.Round(ctx)
	if j, _ := st.GetJob(ctx, br.ID); j.State != StateRunning {
		t.Fatalf("busy job: %s (%s)", j.State, j.Reason)
	}
	rec, _ := d.Submit(ctx, mineSpec(t, "mine-f", 4, "profile: {enabled: true, iterations: 5}\n"))
	for i := 0; i < 300; i++ {
		c.advance(5 * time.Second)
		d.Observe(ctx)
		d.Round(ctx)
		d.mu.Lock()
		for si := range d.owner {
			held := map[string]int{}
			for _, o := range d.owner[si].gpu {
				held[o]++
			}
			if held[br.ID] != 0 && held[br.ID] != 8 {
				t.Fatalf("server %d: the busy job holds %d GPUs", si, held[br.ID])
			}
		}
		d.mu.Unlock()
		if j, _ := st.GetJob(ctx, rec.ID); j.State == StateRunning {
			break
		}
	}
	samples, _ := st.ProfileSamples(ctx, "mine/32/deepspeed")
	if len(samples) < 3 {
		t.Fatalf("%d samples", len(samples))
	}
	for _, s := range samples {
		if len(s.Servers) != 1 || !s.Fits {
			t.Errorf("sample %s on %v (fits %v, %s): want one server, the free one", s.Config, s.Servers, s.Fits, s.Err)
		}
	}
	if j, _ := st.GetJob(ctx, br.ID); j.State != StateRunning || j.Restarts != 0 {
		t.Errorf("busy job: %s after %d restarts", j.State, j.Restarts)
	}
}

// TestProfileRunThroughputMedian: a run's throughput is the median of its
// measurements after the warm-up one, so one odd iteration does not make
// the sample (before: the latest measurement alone).
func TestProfileRunThroughputMedian(t *testing.T) {
	r := &profileRun{sps: 30, seen: []float64{5, 10, 30, 10.5}}
	if got := r.throughput(); got != 10.5 {
		t.Errorf("median of 10, 30, 10.5 after a 5 warm-up: got %g", got)
	}
	r = &profileRun{sps: 12, seen: []float64{4, 12}}
	if got := r.throughput(); got != 12 {
		t.Errorf("two measurements: the latest, got %g", got)
	}
}
