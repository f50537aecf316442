// Package demo is `replan demo`: the whole control plane in one process
// against a simulated 64-GPU A800 cluster (2 racks × 4 servers × 8 GPUs),
// replaying a cluster trace (the Morphling workload-base.csv when
// ../shared/data/morphling is present, a generated Philly-like trace
// otherwise) in accelerated time. The daemon, its store, the scheduling
// policy and the API are the real ones; only the executor is simulated,
// with measured A800 iteration times where the data has them.
package demo

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/replan/replan/control"
	"github.com/replan/replan/dataset"
	"github.com/replan/replan/jobspec"
	"github.com/replan/replan/perf"
	"github.com/replan/replan/sched"
	"github.com/replan/replan/sim"
)

// Epoch is the virtual time the replay starts at.
var Epoch = time.Date(2026, 1, 5, 9, 0, 0, 0, time.UTC)

// Clock is a virtual clock running Speed virtual seconds per real second;
// the speed can change while it runs.
type Clock struct {
	mu       sync.Mutex
	real     func() time.Time
	baseReal time.Time
	baseVirt time.Time
	speed    float64
	paused   bool
}

// NewClock starts a clock at start going speed× real time.
func NewClock(start time.Time, speed float64, real func() time.Time) *Clock {
	if real == nil {
		real = time.Now
	}
	return &Clock{real: real, baseReal: real(), baseVirt: start, speed: speed}
}

// Now is the virtual time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now()
}

func (c *Clock) now() time.Time {
	if c.paused {
		return c.baseVirt
	}
	d := c.real().Sub(c.baseReal)
	return c.baseVirt.Add(time.Duration(float64(d) * c.speed))
}

// SetSpeed changes the speed from now on (clamped to 1..100000).
func (c *Clock) SetSpeed(s float64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.baseVirt, c.baseReal = c.now(), c.real()
	c.speed = math.Min(math.Max(s, 1), 100000)
}

// Speed is the current speed.
func (c *Clock) Speed() float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.speed
}

// Options configure a demo.
type Options struct {
	DataDir     string        // Morphling data; "" uses a generated trace and unfitted models
	Trace       string        // workload CSV; default DataDir/workloads/workload-base.csv
	Jobs        int           // replay only the first N jobs (0: all)
	Speed       float64       // virtual seconds per real second (default 60)
	Policy      string        // default replan
	RestartCost time.Duration // default 260 s
	Tick        time.Duration // real time between rounds (default ≈30 virtual seconds, 5-200 ms)
	Dir         string        // where the store and socket live (default a temp dir)
	Logger      *slog.Logger
}

// Demo is a running demo.
type Demo struct {
	Clock  *Clock
	Daemon *control.Daemon
	Store  *control.SQLite
	Socket string
	Trace  []dataset.WorkloadJob
	Source string // where the trace came from

	dir       string
	tempDir   bool
	submitted atomic.Int64 // trace jobs submitted so far
	start     time.Time
	// gaps are the virtual seconds between consecutive rounds (watchRounds)
	// and gapTarget what the demo aims at (its tick at its speed).
	gapsMu    sync.Mutex
	gaps      []float64
	gapTarget float64
	errc      chan error
	cancel    context.CancelFunc
	wg        sync.WaitGroup
}

// Cluster is the demo's cluster: 2 racks × 4 servers × 8 A800 GPUs, 96
// cores and 1.6 TB each.
func Cluster() []control.ServerInfo {
	var out []control.ServerInfo
	for r := 0; r < 2; r++ {
		for s := 0; s < 4; s++ {
			n := r*4 + s + 1
			out = append(out, control.ServerInfo{Name: fmt.Sprintf("a800-%02d", n), Address: fmt.Sprintf("10.0.%d.%d", r+1, 10+s), Rack: fmt.Sprintf("rack-%c", 'a'+r), GPUs: 8, CPUs: 96, MemGB: 1600})
		}
	}
	return out
}

// Start builds the control plane, serves its API on a unix socket and
// starts replaying the trace. Stop ends it.
func Start(ctx context.Context, o Options) (*Demo, error) {
	if o.Speed <= 0 {
		o.Speed = 60
	}
	if o.Policy == "" {
		o.Policy = "replan"
	}
	if o.RestartCost <= 0 {
		o.RestartCost = 260 * time.Second
	}
	if o.Tick <= 0 {
		// about 30 virtual seconds between rounds, 5-200 ms of real time
		o.Tick = time.Duration(float64(30*time.Second) / o.Speed)
		o.Tick = min(max(o.Tick, 5*time.Millisecond), 200*time.Millisecond)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	d := &Demo{errc: make(chan error, 4), start: time.Now()}
	trace, src, err := loadTrace(ctx, o)
	if err != nil {
		return nil, err
	}
	if o.Jobs > 0 && o.Jobs < len(trace) {
		trace = trace[:o.Jobs]
	}
	d.Trace, d.Source = trace, src
	d.dir = o.Dir
	if d.dir != "" {
		if err := os.MkdirAll(d.dir, 0o700); err != nil {
			return nil, err
		}
	}
	if d.dir == "" {
		if d.dir, err = os.MkdirTemp("", "replan-demo-"); err != nil {
			return nil, err
		}
		d.tempDir = true
	}
	d.Store, err = control.OpenSQLite(ctx, filepath.Join(d.dir, "demo.db"))
	if err != nil {
		return nil, err
	}
	models := dataset.ModelSource(ctx, o.DataDir, perf.A800)
	// Fit every model type of the trace before the clock starts: at high
	// speed a second of fitting would be hours of simulated time.
	for _, w := range trace {
		if a, ok := perf.Builtin(w.Application); ok {
			models(a)
		}
	}
	var measured *dataset.Measured
	if o.DataDir != "" {
		measured, _ = dataset.LoadMeasured(ctx, o.DataDir)
	}
	d.Clock = NewClock(Epoch, o.Speed, nil)
	servers := Cluster()
	names := make([]string, len(servers))
	for i, s := range servers {
		names[i] = s.Name
	}
	exec := control.NewSimExecutor(d.Clock.Now, names, measured, models, o.RestartCost)
	policy, err := sched.NewWithRestartCost(o.Policy, o.RestartCost.Seconds())
	if err != nil {
		return nil, err
	}
	d.Daemon, err = control.New(ctx, control.Config{Store: d.Store, Exec: exec, Policy: policy, Servers: servers,
		Tenants: []control.TenantInfo{{Name: "A", QuotaGPUs: 64}, {Name: "B"}}, Model: models, Clock: d.Clock.Now, Logger: o.Logger})
	if err != nil {
		return nil, err
	}
	d.Daemon.EnableETA(func() sched.Policy {
		p, _ := sched.NewWithRestartCost(o.Policy, o.RestartCost.Seconds())
		return p
	}, o.RestartCost, time.Duration(float64(o.Tick)*o.Speed))
	d.Clock.mu.Lock()
	d.Clock.baseReal = d.Clock.real()
	d.Clock.mu.Unlock()
	d.Socket = filepath.Join(d.dir, "replan.sock")
	l, err := control.ListenUnix(d.Socket)
	if err != nil {
		return nil, err
	}
	rctx, cancel := context.WithCancel(ctx)
	d.cancel = cancel
	api := &control.API{D: d.Daemon, Version: "demo"}
	d.gapTarget = o.Tick.Seconds() * o.Speed
	d.wg.Add(4)
	go func() { defer d.wg.Done(); d.watchRounds(rctx, o.Tick) }()
	go func() { defer d.wg.Done(); d.errc <- control.Serve(rctx, l, api.Handler()) }()
	go func() { defer d.wg.Done(); d.errc <- d.Daemon.Run(rctx, o.Tick) }()
	go func() { defer d.wg.Done(); d.errc <- d.replay(rctx, o.Tick) }()
	return d, nil
}

// Stop ends the demo and removes its temporary directory.
func (d *Demo) Stop() {
	d.cancel()
	d.wg.Wait()
	d.Store.Close()
	if d.tempDir {
		os.RemoveAll(d.dir)
	}
}

// loadTrace reads the trace: the given file, the data directory's
// workload-base.csv, or a generated one.
func loadTrace(ctx context.Context, o Options) ([]dataset.WorkloadJob, string, error) {
	path := o.Trace
	if path == "" && o.DataDir != "" {
		path = filepath.Join(o.DataDir, "workloads", "workload-base.csv")
	}
	if path != "" {
		t, err := dataset.LoadWorkload(ctx, path)
		return t, path, err
	}
	n := o.Jobs
	if n <= 0 {
		n = 200
	}
	t, err := sim.Generate(sim.GenConfig{Jobs: n, Servers: 8, GPUsPerServer: 8, Seed: 1, Load: 0.9, SLAShare: 0.3})
	return t, "generated Philly-like trace (../shared/data/morphling not found)", err
}

// Spec turns a trace row into the job spec a user would have submitted:
// guaranteed jobs (is_sla) belong to tenant A and are promised their
// requested plan; the others are best-effort jobs of tenant B.
func Spec(w dataset.WorkloadJob) (*jobspec.Spec, error) {
	arch, ok := perf.Builtin(w.Application)
	if !ok {
		return nil, fmt.Errorf("trace line %d: unknown model %q", w.Line, w.Application)
	}
	s := &jobspec.Spec{Name: w.Name, Tenant: "B", Class: jobspec.BestEffort, Model: arch.Name, Arch: arch,
		Framework: jobspec.DeepSpeed, WorkDir: "/data/" + arch.Name, Entrypoint: "train.py", Env: map[string]string{},
		GlobalBatch: arch.GlobalBatch, Iterations: max(w.Steps, 1), CheckpointDir: "/ckpt/" + w.Name,
		Request: jobspec.Request{GPUs: max(w.GPUs, 1), CPUs: max(w.CPUs, w.GPUs)}}
	if p, err := dataset.PlanFromCode(w.ExecPlan, arch, s.Request.GPUs); err == nil && p.MicroBatch > 0 && perf.Check(arch, p, perf.Placement{s.Request.GPUs}) == nil {
		s.Request.Plan, s.Request.HasPlan = p, true
	}
	if w.SLA {
		s.Tenant, s.Class = "A", jobspec.Guaranteed
	}
	return s, nil
}

// replay submits each trace job when the virtual clock reaches its
// submission time.
func (d *Demo) replay(ctx context.Context, tick time.Duration) error {
	order := make([]int, len(d.Trace))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return d.Trace[order[a]].Submit < d.Trace[order[b]].Submit })
	t := time.NewTicker(tick / 4)
	defer t.Stop()
	next := 0
	for next < len(order) {
		now := d.Clock.Now()
		submitted := false
		for next < len(order) {
			w := d.Trace[order[next]]
			if Epoch.Add(time.Duration(w.Submit * float64(time.Second))).After(now) {
				break
			}
			spec, err := Spec(w)
			next++
			d.submitted.Add(1)
			if err != nil {
				continue
			}
			if _, err := d.Daemon.Submit(ctx, spec); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("replay %s: %w", w.Name, err)
			}
			submitted = true
		}
		if submitted {
			d.Daemon.Kick()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
	return nil
}

// watchRounds records the virtual time between consecutive rounds: the
// demo runs in real time, so a machine slower than its speed asks for
// rounds further apart in virtual time than replan sim, which runs one at
// every arrival and completion, and jobs wait longer.
func (d *Demo) watchRounds(ctx context.Context, tick time.Duration) {
	t := time.NewTicker(max(tick/4, time.Millisecond))
	defer t.Stop()
	var last time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		at := d.Daemon.LastRound().At
		if at.IsZero() || !at.After(last) {
			continue
		}
		if !last.IsZero() {
			d.gapsMu.Lock()
			d.gaps = append(d.gaps, at.Sub(last).Seconds())
			d.gapsMu.Unlock()
		}
		last = at
	}
}

// lagFactor is how many times further apart than the demo's tick rounds
// ran (p90) before the summary notes that JCTs are longer than `replan
// sim`'s: at 1.9× (56 s against 30 at --speed 3000 on a loaded 2-core
// machine) the avg JCT was 0.33 h against sim's 0.29 h.
const lagFactor = 1.5

// roundLag fills s's round figures and, when rounds ran much further
// apart than the demo aims at, says so and what it costs.
func (d *Demo) roundLag(s *Summary) {
	d.gapsMu.Lock()
	gaps := slices.Clone(d.gaps)
	d.gapsMu.Unlock()
	s.RoundGapTargetS = d.gapTarget
	if len(gaps) == 0 {
		return
	}
	slices.Sort(gaps)
	s.RoundGapP90S = gaps[int(0.9*float64(len(gaps)-1))]
	if s.RoundGapP90S > lagFactor*d.gapTarget {
		s.Note = fmt.Sprintf("rounds ran %.0f virtual seconds apart (p90), against the %.0f s this speed aims at: this machine is slower than --speed %g asks, so jobs waited longer for decisions than in `replan sim` on the same trace (which decides at every arrival and completion); lower --speed to compare", s.RoundGapP90S, d.gapTarget, d.Clock.Speed())
	}
}

// Summary is what a demo run did.
type Summary struct {
	Source      string        `json:"source"`
	Jobs        int           `json:"jobs"`
	Finished    int           `json:"finished"`
	Failed      int           `json:"failed"`
	AvgJCTH     float64       `json:"avg_jct_h"`
	P50JCTH     float64       `json:"p50_jct_h"`
	P99JCTH     float64       `json:"p99_jct_h"`
	MakespanH   float64       `json:"makespan_h"`
	AvgQueueH   float64       `json:"avg_queue_h"`
	Restarts    int           `json:"restarts"`
	VirtualH    float64       `json:"virtual_h"`
	RealElapsed time.Duration `json:"real_elapsed_ns"`
	// ETAErrP50 and ETAErrP90 measure the start estimates: for every job
	// that waited (ETAMinWait or more), |first estimate − actual start| /
	// actual wait. ETAJobs counts those jobs, ETANoEstimate the ones that
	// waited that long without ever getting an estimate.
	ETAErrP50     float64 `json:"eta_err_p50"`
	ETAErrP90     float64 `json:"eta_err_p90"`
	ETAJobs       int     `json:"eta_jobs"`
	ETANoEstimate int     `json:"eta_no_estimate"`
	// ETAErrP90Undisturbed is a diagnostic, not the target: the same p90
	// over the ETAJobsUndisturbed jobs that no later job overtook (none
	// submitted after the state of the job's first estimate was taken
	// started before it). What the others add is mostly the arrivals no
	// estimate can know of.
	ETAErrP90Undisturbed float64 `json:"eta_err_p90_undisturbed"`
	ETAJobsUndisturbed   int     `json:"eta_jobs_undisturbed"`
	// RoundGapP90S is the 90th percentile of the virtual seconds between
	// consecutive scheduling rounds, RoundGapTargetS what the demo aims at
	// (its tick times its speed). Note says when the first is more than
	// lagFactor times the second: the demo then decided less often than
	// replan sim and its JCTs are longer.
	RoundGapP90S    float64 `json:"round_gap_p90_s"`
	RoundGapTargetS float64 `json:"round_gap_target_s"`
	Note            string  `json:"note,omitempty"`
}

// ETAMinWait is the shortest wait the ETA accuracy counts: below it the
// ratio measures the round interval, not the estimate.
const ETAMinWait = time.Minute

// etaErrors fills the ETA accuracy from each job's first estimate (and
// when the state it was simulated from was taken, asOf).
func (s *Summary) etaErrors(jobs []control.JobRecord, first, asOf map[string]time.Time) {
	var errs, undisturbed []float64
	for _, j := range jobs {
		if j.StartedAt.IsZero() {
			continue
		}
		wait := j.StartedAt.Sub(j.SubmittedAt)
		if wait < ETAMinWait {
			continue
		}
		at, ok := first[j.ID]
		if !ok {
			s.ETANoEstimate++
			continue
		}
		e := math.Abs(at.Sub(j.StartedAt).Seconds()) / wait.Seconds()
		errs = append(errs, e)
		if t, ok := asOf[j.ID]; ok && !overtaken(jobs, j, t) {
			undisturbed = append(undisturbed, e)
		}
	}
	s.ETAJobs, s.ETAJobsUndisturbed = len(errs), len(undisturbed)
	s.ETAErrP50, s.ETAErrP90 = quantile(errs, 0.5), quantile(errs, 0.9)
	s.ETAErrP90Undisturbed = quantile(undisturbed, 0.9)
}

// overtaken reports whether a job submitted after t started before j.
func overtaken(jobs []control.JobRecord, j control.JobRecord, t time.Time) bool {
	for _, o := range jobs {
		if o.ID != j.ID && o.SubmittedAt.After(t) && !o.StartedAt.IsZero() && o.StartedAt.Before(j.StartedAt) {
			return true
		}
	}
	return false
}

// quantile is the p-quantile of xs (nearest rank; 0 when empty); it sorts
// xs.
func quantile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	sort.Float64s(xs)
	return xs[min(len(xs)-1, max(int(math.Ceil(p*float64(len(xs))))-1, 0))]
}

// Progress is how many of the trace's jobs were submitted and have ended
// (finished, failed or cancelled), of how many.
func (d *Demo) Progress(ctx context.Context) (submitted, ended, total int, err error) {
	done, err := d.Store.ListJobs(ctx, control.JobFilter{States: []control.JobState{control.StateFinished, control.StateFailed, control.StateCancelled}})
	return int(d.submitted.Load()), len(done), len(d.Trace), err
}

// Summary summarises the run so far from the store.
func (d *Demo) Summary(ctx context.Context) (Summary, error) {
	done, err := d.Store.ListJobs(context.WithoutCancel(ctx), control.JobFilter{States: []control.JobState{control.StateFinished, control.StateFailed, control.StateCancelled}})
	if err != nil {
		return Summary{}, err
	}
	s := summarise(done, d.Source)
	s.etaErrors(done, d.Daemon.FirstETAs(), d.Daemon.FirstETAsAsOf())
	s.Jobs = len(d.Trace)
	s.RealElapsed = time.Since(d.start)
	s.VirtualH = d.Clock.Now().Sub(Epoch).Hours()
	d.roundLag(&s)
	return s, nil
}

// Wait blocks until every trace job is in a final state (or ctx ends) and
// summarises the run from the store.
func (d *Demo) Wait(ctx context.Context) (Summary, error) {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	final := func() (Summary, error) { return d.Summary(ctx) }
	for {
		if ctx.Err() != nil {
			s, err := final()
			if err != nil {
				return s, err
			}
			return s, ctx.Err()
		}
		done, err := d.Store.ListJobs(ctx, control.JobFilter{States: []control.JobState{control.StateFinished, control.StateFailed, control.StateCancelled}})
		if err == nil && len(done) >= len(d.Trace) {
			return final()
		}
		select {
		case <-ctx.Done():
		case err := <-d.errc:
			if err != nil {
				return Summary{}, err
			}
		case <-t.C:
		}
	}
}

func summarise(jobs []control.JobRecord, src string) Summary {
	s := Summary{Source: src}
	var jcts []float64
	var queue float64
	end := Epoch
	for _, j := range jobs {
		switch j.State {
		case control.StateFinished:
			s.Finished++
		case control.StateFailed:
			s.Failed++
		}
		s.Restarts += j.Restarts
		jct := j.FinishedAt.Sub(j.SubmittedAt).Hours()
		jcts = append(jcts, jct)
		if !j.StartedAt.IsZero() {
			queue += j.StartedAt.Sub(j.SubmittedAt).Hours()
		}
		if j.FinishedAt.After(end) {
			end = j.FinishedAt
		}
	}
	if n := len(jcts); n > 0 {
		sort.Float64s(jcts)
		sum := 0.0
		for _, v := range jcts {
			sum += v
		}
		s.AvgJCTH = sum / float64(n)
		s.P50JCTH = jcts[n/2]
		s.P99JCTH = jcts[min(n-1, int(math.Ceil(0.99*float64(n)))-1)]
		s.AvgQueueH = queue / float64(n)
	}
	s.MakespanH = end.Sub(Epoch).Hours()
	return s
}

// Print writes the summary as a few lines.
func (s Summary) Print(w io.Writer) error {
	_, err := fmt.Fprintf(w, "replan demo: %s\n  jobs %d: %d finished, %d failed\n  avg JCT %.2f h (p50 %.2f h, p99 %.2f h), avg queueing %.2f h, makespan %.2f h\n  restarts %d; %.1f virtual hours in %s\n",
		s.Source, s.Jobs, s.Finished, s.Failed, s.AvgJCTH, s.P50JCTH, s.P99JCTH, s.AvgQueueH, s.MakespanH, s.Restarts, s.VirtualH, s.RealElapsed.Round(time.Millisecond))
	if err == nil && s.ETAJobs > 0 {
		_, err = fmt.Fprintf(w, "  start estimates: |first ETA − start| / wait p50 %.2f, p90 %.2f over %d jobs that waited %s or more (%d without an estimate); p90 %.2f over the %d no later job overtook\n",
			s.ETAErrP50, s.ETAErrP90, s.ETAJobs, ETAMinWait, s.ETANoEstimate, s.ETAErrP90Undisturbed, s.ETAJobsUndisturbed)
	}
	if err == nil && s.RoundGapTargetS > 0 {
		_, err = fmt.Fprintf(w, "  rounds %.0f virtual seconds apart (p90; aimed at %.0f); `replan sim` decides at every arrival and completion\n", s.RoundGapP90S, s.RoundGapTargetS)
	}
	if err == nil && s.Note != "" {
		_, err = fmt.Fprintf(w, "  note: %s\n", s.Note)
	}
	return err
}
