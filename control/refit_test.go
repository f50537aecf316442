package control

import (
	"context"
	"encoding/json"
	"math"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/replan/replan/jobspec"
	"github.com/replan/replan/perf"
	"github.com/replan/replan/sched"
)

// TestRefitEventsOnePerModelChange: a job whose measured speed the model
// keeps missing by more than 10% does not produce a refit event on every
// observation; only when the fitted model changes.
func TestRefitEventsOnePerModelChange(t *testing.T) {
	st, _ := openTest(t)
	c := &clock{t: time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)}
	slow := func(a perf.Arch) perf.Model {
		m := perf.DefaultModel(a, perf.A800)
		m.Forward.Alpha *= 3
		m.Forward.Beta *= 3
		return m
	}
	ex := NewSimExecutor(c.now, []string{"a", "b"}, nil, slow, 0)
	d, _ := newDaemonWith(t, st, ex, "static", c)
	ctx := context.Background()
	for i, g := range []int{8, 4, 2, 1} {
		d.Submit(ctx, spec(t, "j"+string(rune('0'+i)), g, jobspec.BestEffort))
	}
	d.Round(ctx)
	for range 40 {
		c.advance(5 * time.Second)
		if err := d.Observe(ctx); err != nil {
			t.Fatal(err)
		}
	}
	evs, err := st.Events(ctx, 0, 10000)
	if err != nil {
		t.Fatal(err)
	}
	refits := 0
	for _, e := range evs {
		if e.Kind == "refit" {
			refits++
		}
	}
	if refits > 4 {
		t.Errorf("%d refit events in 40 observations of 4 jobs: one per observation, not per change of the model", refits)
	}
	t.Logf("%d refit events", refits)
}

// recordingPolicy remembers the model each job had in the last snapshot a
// round gave the policy.
type recordingPolicy struct {
	sched.Policy
	mu     sync.Mutex
	models map[string]*perf.Model
}

func (p *recordingPolicy) Schedule(s sched.Snapshot) sched.Decisions {
	p.mu.Lock()
	p.models = map[string]*perf.Model{}
	for _, j := range s.Jobs {
		p.models[j.ID] = j.Model
	}
	p.mu.Unlock()
	return p.Policy.Schedule(s)
}

// slowModel is the simulated cluster's truth in the refit tests: the A800
// default with a forward three times slower, so the starting model is far
// off and the daemon refits.
func slowModel(a perf.Arch) perf.Model {
	m := perf.DefaultModel(a, perf.A800)
	m.Forward.Alpha *= 3
	m.Forward.Beta *= 3
	return m
}

// frameworkSpec is spec with another framework.
func frameworkSpec(t *testing.T, name string, gpus int, fw jobspec.Framework) *jobspec.Spec {
	t.Helper()
	s := spec(t, name, gpus, jobspec.BestEffort)
	s.Framework = fw
	return s
}

// refitDaemon runs a daemon on st over the slow simulated cluster with a
// recording policy; it observes until the model of sp's type was refitted
// and another round ran.
func refitDaemon(t *testing.T, st Store, c *clock, ex *SimExecutor, sp *jobspec.Spec) (*Daemon, *recordingPolicy, string) {
	t.Helper()
	ctx := context.Background()
	p, err := sched.New("static")
	if err != nil {
		t.Fatal(err)
	}
	rp := &recordingPolicy{Policy: p}
	d, err := New(ctx, Config{Store: st, Exec: ex, Policy: rp, Clock: c.now,
		Servers: []ServerInfo{{Name: "a", Address: "10.0.0.1", Rack: "r1", GPUs: 8, CPUs: 64, MemGB: 1000}, {Name: "b", Address: "10.0.0.2", Rack: "r1", GPUs: 8, CPUs: 64, MemGB: 1000}},
		Tenants: []TenantInfo{{Name: "research", QuotaGPUs: 16}}})
	if err != nil {
		t.Fatal(err)
	}
	rec, err := d.Submit(ctx, sp)
	if err != nil {
		t.Fatal(err)
	}
	return d, rp, rec.ID
}

// observeUntilRefit observes every 5 s of the daemon's clock until the
// model of the job's type was refitted (at most 200 times).
func observeUntilRefit(t *testing.T, d *Daemon, c *clock, id string) {
	t.Helper()
	ctx := context.Background()
	for range 200 {
		c.advance(5 * time.Second)
		if err := d.Observe(ctx); err != nil {
			t.Fatal(err)
		}
		d.mu.Lock()
		js := d.jobs[id]
		refits := d.model(js.spec).Refits
		d.mu.Unlock()
		if refits > 0 {
			return
		}
	}
	t.Fatal("no refit after 200 observations of a model three times too fast")
}

// TestRefitReachesTheNextRound: for a DeepSpeed and a Megatron job, the
// model the policy gets in the round after a refit is the refitted one
// (Megatron models were cached under another key than the refit cleared,
// so every round kept the unfitted model).
func TestRefitReachesTheNextRound(t *testing.T) {
	for _, fw := range []jobspec.Framework{jobspec.DeepSpeed, jobspec.Megatron} {
		t.Run(string(fw), func(t *testing.T) {
			ctx := context.Background()
			st, _ := openTest(t)
			c := &clock{t: time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)}
			ex := NewSimExecutor(c.now, []string{"a", "b"}, nil, slowModel, 0)
			d, rp, id := refitDaemon(t, st, c, ex, frameworkSpec(t, "j", 8, fw))
			if _, err := d.Round(ctx); err != nil {
				t.Fatal(err)
			}
			before := *rp.models[id]
			observeUntilRefit(t, d, c, id)
			if _, err := d.Round(ctx); err != nil {
				t.Fatal(err)
			}
			d.mu.Lock()
			fitted := d.model(d.jobs[id].spec).Model.Params
			d.mu.Unlock()
			got := rp.models[id]
			if got.Params == before.Params {
				t.Fatalf("the round after the refit gave the policy the unfitted model (params %+v)", got.Params)
			}
			if got.Params != fitted {
				t.Errorf("policy's model params %+v, the refitted model's %+v", got.Params, fitted)
			}
			if fw == jobspec.Megatron && got.Space != perf.MegatronSpace {
				t.Errorf("a Megatron job's model has space %+v", got.Space)
			}
		})
	}
}

// TestRefittedModelSurvivesRestart: a model refitted from a job's
// measurements, with its samples, is the one a daemon restarted on the
// same SQLite store uses for that job's type (it was stored under the
// model name and looked up under name/batch: forgotten).
func TestRefittedModelSurvivesRestart(t *testing.T) {
	for _, fw := range []jobspec.Framework{jobspec.DeepSpeed, jobspec.Megatron} {
		t.Run(string(fw), func(t *testing.T) {
			ctx := context.Background()
			path := filepath.Join(t.TempDir(), "replan.db")
			st, err := OpenSQLite(ctx, path)
			if err != nil {
				t.Fatal(err)
			}
			c := &clock{t: time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)}
			ex := NewSimExecutor(c.now, []string{"a", "b"}, nil, slowModel, 0)
			sp := frameworkSpec(t, "j", 8, fw)
			d, _, id := refitDaemon(t, st, c, ex, sp)
			if _, err := d.Round(ctx); err != nil {
				t.Fatal(err)
			}
			observeUntilRefit(t, d, c, id)
			// Samples that did not refit are stored too (at most every
			// ProgressEvery): observe a little longer.
			for range 5 {
				c.advance(5 * time.Second)
				if err := d.Observe(ctx); err != nil {
					t.Fatal(err)
				}
			}
			d.mu.Lock()
			typ := modelTypeOf(d.jobs[id].spec)
			want := *d.model(d.jobs[id].spec)
			d.mu.Unlock()
			st.Close()

			st2, err := OpenSQLite(ctx, path)
			if err != nil {
				t.Fatal(err)
			}
			defer st2.Close()
			d2, rp2, _ := refitDaemon(t, st2, c, ex, frameworkSpec(t, "k", 8, fw))
			d2.mu.Lock()
			got := *d2.model(sp)
			d2.mu.Unlock()
			if got.Model.Params != want.Model.Params {
				t.Fatalf("after a restart the model of %s has params %+v, before it %+v", typ, got.Model.Params, want.Model.Params)
			}
			if len(got.Samples) < len(want.Samples)-1 || len(got.Samples) == 0 {
				t.Errorf("after a restart %d samples of %s, before it %d", len(got.Samples), typ, len(want.Samples))
			}
			if _, err := d2.Round(ctx); err != nil {
				t.Fatal(err)
			}
			for jid, m := range rp2.models {
				if m.Params != want.Model.Params {
					t.Errorf("the restarted daemon's policy got %s's model with params %+v, the stored refit %+v", jid, m.Params, want.Model.Params)
				}
			}
		})
	}
}

// skewed is a simulated cluster where one job runs slower than the model
// type can explain (a noisy neighbour, a slow disk): its measured
// throughput is divided by factor.
type skewed struct {
	*SimExecutor
	job    string
	factor float64
}

func (e *skewed) Observe(ctx context.Context) (Observation, error) {
	o, err := e.SimExecutor.Observe(ctx)
	for i := range o.Jobs {
		if o.Jobs[i].JobID == e.job {
			o.Jobs[i].SamplesPerSec /= e.factor
		}
	}
	return o, err
}

// TestRefitEventOnlyWhenPredictionsMove: two jobs of one type with the
// same plan and placement measure 3× apart, so every observation misses
// by more than 10% and refits; the refits barely move the predictions
// (the fit stays between the two), and a "refit" event is told only for
// refits that moved them by more than perf.RefitMoved (one event per
// observation before).
func TestRefitEventOnlyWhenPredictionsMove(t *testing.T) {
	ctx := context.Background()
	st, _ := openTest(t)
	c := &clock{t: time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)}
	ex := &skewed{SimExecutor: NewSimExecutor(c.now, []string{"a", "b"}, nil, nil, 0), factor: 3}
	d, _ := newDaemonWith(t, st, ex, "static", c)
	// A job at a third of its peer's speed would be found slow and its
	// server suspect (failslow.go): this test is about the refits its
	// samples make, so the fail-slow bound is set below it.
	d.cfg.SlowFraction = 0.2
	a, err := d.Submit(ctx, spec(t, "fast", 8, jobspec.BestEffort))
	if err != nil {
		t.Fatal(err)
	}
	b, err := d.Submit(ctx, spec(t, "slow", 8, jobspec.BestEffort))
	if err != nil {
		t.Fatal(err)
	}
	ex.job = b.ID
	if _, err := d.Round(ctx); err != nil {
		t.Fatal(err)
	}
	for range 30 {
		c.advance(5 * time.Second)
		if err := d.Observe(ctx); err != nil {
			t.Fatal(err)
		}
	}
	d.mu.Lock()
	o := d.model(d.jobs[a.ID].spec)
	refits := o.Refits
	d.mu.Unlock()
	evs, err := st.Events(ctx, 0, 10000)
	if err != nil {
		t.Fatal(err)
	}
	var told []string
	for _, e := range evs {
		if e.Kind == "refit" {
			told = append(told, e.Msg)
		}
	}
	t.Logf("%d refits, %d refit events: %q", refits, len(told), told)
	if refits < 10 {
		t.Fatalf("%d refits in 30 observations of two jobs 3× apart: the test needs the model to keep refitting", refits)
	}
	// The first refits move the model from its start; later ones move
	// it by about one sample's weight (1/n): told while that is more
	// than RefitMoved, then quiet.
	if 5*len(told) > refits {
		t.Errorf("%d refit events for %d refits that mostly kept the predictions where they were", len(told), refits)
	}
}

// TestRunningPredictionFollowsRefit: once the model of a running job's
// type is refitted, the prediction the job shows (its throughput in the
// view: `replan job ID`, the TUI) is the refitted model's, not the one the
// policy made when it started the job (which stayed 3× off for the whole
// run).
func TestRunningPredictionFollowsRefit(t *testing.T) {
	ctx := context.Background()
	st, _ := openTest(t)
	c := &clock{t: time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)}
	ex := NewSimExecutor(c.now, []string{"a", "b"}, nil, slowModel, 0)
	d, _, id := refitDaemon(t, st, c, ex, frameworkSpec(t, "j", 8, jobspec.DeepSpeed))
	if _, err := d.Round(ctx); err != nil {
		t.Fatal(err)
	}
	started := d.JobThroughput(id).PredictedSPS
	observeUntilRefit(t, d, c, id)
	c.advance(5 * time.Second)
	if err := d.Observe(ctx); err != nil {
		t.Fatal(err)
	}
	tp := d.JobThroughput(id)
	t.Logf("predicted at start %.2f samples/s; after the refit %.2f, measured %.2f", started, tp.PredictedSPS, tp.MeasuredSPS)
	if tp.MeasuredSPS <= 0 || started <= 0 {
		t.Fatalf("throughput %+v (predicted at start %.2f): nothing to compare", tp, started)
	}
	if e := math.Abs(started-tp.MeasuredSPS) / tp.MeasuredSPS; e < 0.5 {
		t.Fatalf("the starting model is only %.0f%% off: the test needs a model far off", 100*e)
	}
	if e := math.Abs(tp.PredictedSPS-tp.MeasuredSPS) / tp.MeasuredSPS; e > perf.RefitThreshold {
		t.Errorf("after the refit the job shows %.2f samples/s predicted against %.2f measured (%.0f%% off)", tp.PredictedSPS, tp.MeasuredSPS, 100*e)
	}
}

// TestModelStoredUnderItsNameIsRecovered: a model stored before model
// types carried the global batch and framework (under the model name)
// seeds its type for both frameworks at a restart, and a row of the type
// itself wins over it.
func TestModelStoredUnderItsNameIsRecovered(t *testing.T) {
	ctx := context.Background()
	st, _ := openTest(t)
	ds := spec(t, "j", 8, jobspec.BestEffort)
	old := perf.Online{Model: perf.DefaultModel(ds.Arch, perf.A800)}
	old.Model.Params.KSync = 1.25
	mine := old
	mine.Model.Params.KSync = 1.5
	for key, o := range map[string]perf.Online{"gpt2": old, newModelType(ds.Arch, jobspec.Megatron).String(): mine, "junk/x": old} {
		raw, err := json.Marshal(&o)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.SaveModel(ctx, key, raw, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	d, _ := newDaemon(t, st, &recorder{}, "static")
	d.mu.Lock()
	defer d.mu.Unlock()
	if got := d.model(ds).Model; got.Params.KSync != 1.25 || got.Space != (perf.Space{}) {
		t.Errorf("deepspeed: k_sync %v space %+v, want the row stored under the name (1.25) with every plan", got.Params.KSync, got.Space)
	}
	mg := frameworkSpec(t, "k", 8, jobspec.Megatron)
	if got := d.model(mg).Model; got.Params.KSync != 1.5 || got.Space != perf.MegatronSpace {
		t.Errorf("megatron: k_sync %v space %+v, want its own row (1.5) with Megatron's plans", got.Params.KSync, got.Space)
	}
}

func TestParseModelType(t *testing.T) {
	for _, s := range []string{"gpt2/16/deepspeed", "my/model/32/megatron"} {
		typ, err := ParseModelType(s)
		if err != nil || typ.String() != s {
			t.Errorf("%q: %+v %v", s, typ, err)
		}
	}
	for _, s := range []string{"gpt2", "gpt2/16", "gpt2/0/deepspeed", "gpt2/16/jax", "/16/megatron"} {
		if typ, err := ParseModelType(s); err == nil || !strings.Contains(err.Error(), s) {
			t.Errorf("%q: %+v %v, want an error naming it", s, typ, err)
		}
	}
}

// TestStartEstimatesUseEachTypesModel: the start-time estimator keeps its
// own copies of the models, one per model type, and its policy (whose
// caches are keyed by the copies) while no model changes. Copies were kept
// per architecture name: two types of one architecture (another global
// batch, another framework) replaced each other's copy at every estimate,
// which threw the estimator's policy and its caches away every time.
func TestStartEstimatesUseEachTypesModel(t *testing.T) {
	ctx := context.Background()
	st, _ := openTest(t)
	d, _ := newDaemon(t, st, &recorder{}, "static")
	specs := map[string]*jobspec.Spec{}
	for i, fw := range []jobspec.Framework{jobspec.DeepSpeed, jobspec.Megatron, jobspec.DeepSpeed} {
		sp := frameworkSpec(t, "j", 8, fw) // no round: they wait
		if i == 2 {
			sp.GlobalBatch, sp.Arch.GlobalBatch = 32, 32
		}
		rec, err := d.Submit(ctx, sp)
		if err != nil {
			t.Fatal(err)
		}
		specs[rec.ID] = sp
	}
	d.mu.Lock()
	d.eta.mu.Lock()
	d.eta.newPolicy = func() sched.Policy { p, _ := sched.New("static"); return p } // no background estimates
	d.eta.mu.Unlock()
	in := d.etaInputLocked()
	d.mu.Unlock()
	d.eta.mu.Lock()
	first := d.eta.policy
	d.eta.mu.Unlock()
	d.mu.Lock()
	in = d.etaInputLocked()
	d.mu.Unlock()
	d.eta.mu.Lock()
	again := d.eta.policy
	d.eta.mu.Unlock()
	if again != first {
		t.Error("a second estimate with no model changed made a new policy (its caches lost)")
	}
	if len(in.snap.Jobs) != 3 {
		t.Fatalf("%d jobs in the estimator's snapshot", len(in.snap.Jobs))
	}
	for _, sj := range in.snap.Jobs {
		sp := specs[sj.ID]
		if sj.Model == nil || sj.Model.Arch.GlobalBatch != sp.GlobalBatch || sj.Model.Space != frameworkSpace(sp.Framework) {
			t.Errorf("%s (%s, batch %d): the estimator's model has batch %d and space %+v", sj.ID, sp.Framework, sp.GlobalBatch, sj.Model.Arch.GlobalBatch, sj.Model.Space)
		}
		if got := snapModelType(sj.Model); got != modelTypeOf(sp) {
			t.Errorf("%s: the model's type reads %s, the job's is %s", sj.ID, got, modelTypeOf(sp))
		}
	}
}
