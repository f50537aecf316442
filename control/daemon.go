package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/replan/replan/jobspec"
	"github.com/replan/replan/launch"
	"github.com/replan/replan/perf"
	"github.com/replan/replan/sched"
)

// ServerInfo is a server the daemon schedules onto.
type ServerInfo struct {
	Name    string  `json:"name"`
	Address string  `json:"address"`
	Rack    string  `json:"rack"`
	GPUs    int     `json:"gpus"`
	CPUs    int     `json:"cpus"`
	MemGB   float64 `json:"mem_gb"`
}

// TenantInfo is a tenant's quota for guaranteed jobs.
type TenantInfo struct {
	Name      string `json:"name"`
	QuotaGPUs int    `json:"quota_gpus"`
}

// Config wires a daemon.
type Config struct {
	Store   Store
	Exec    Executor
	Policy  sched.Policy
	Servers []ServerInfo
	Tenants []TenantInfo
	// Model returns the starting performance model of a model type (fitted
	// from data, or perf.DefaultModel); the daemon then refits it online
	// from the throughput its jobs report, and stores it.
	Model  func(perf.Arch) perf.Model
	Clock  func() time.Time
	Logger *slog.Logger
	// MaxRestarts is how often a job that exits non-zero is restarted from
	// its checkpoint before it is failed (default 3).
	MaxRestarts int
	// HeartbeatMisses is how many Observe rounds a server may miss before
	// its jobs return to the queue from their last checkpoint (default 2).
	HeartbeatMisses int
	// SpineGBps is each rack's uplink to the spine (the inventory's
	// smallest rack spine_gbps); 0: the A800 reference.
	SpineGBps float64
	// TimerWindow is how far back the delay-timer auto-tuner remembers
	// waits (default 7 days).
	TimerWindow time.Duration
	// ProgressEvery bounds how often a running job's progress is written
	// (checkpoints at most this often, plain progress at most four times
	// less often; default 10 s of the daemon's clock).
	ProgressEvery time.Duration
}

// Daemon is the control plane's state and loop.
type Daemon struct {
	cfg       Config
	log       *slog.Logger
	mu        sync.Mutex
	jobs      map[string]*jobState // every job not in a final state
	srvIdx    map[string]int
	owner     []serverDevices // per server: which job holds each GPU / CPU core
	nodes     []nodeState
	models    map[string]*perf.Online
	waits     map[string]string // job → why it waits (last round)
	lastRound RoundStats
	notify    notifier
	published atomic.Pointer[readView]
	links     sched.LinkReport           // the last round's time-shift report
	curves    perf.CurveCache            // sensitivity curves for the API
	history   sched.TimerHistory         // the delay-timer auto-tuner's memory
	timers    map[string]sched.JobTimers // last round's timers per waiting job
	eta       etaState                   // background start estimates (eta.go)
	telemetry map[int][]GPUStat          // per server: its GPUs as last observed (telemetry.go)
}

type jobState struct {
	saved   time.Time     // last progress write
	changed time.Time     // last start or reconfiguration (the policy's dwell)
	runFrom time.Time     // when it started holding resources (zero while waiting)
	ranFor  time.Duration // time it held resources before runFrom
	lastRun time.Time     // when it last stopped holding resources
	phase   time.Time     // a time an iteration began (start + shift)
	ckPlan  perf.Plan     // the plan its last checkpoint was written with
	shift   float64       // the time-shift of the current launch (seconds)
	predSPS float64       // throughput the policy predicted for the current plan
	measSPS float64       // latest measured throughput
	rec     JobRecord
	spec    *jobspec.Spec
	plan    perf.Plan
	servers []launch.Server // current placement with device ids; empty when not running
}

type nodeState struct {
	reachable bool
	missed    int
	drained   bool
}

// RoundStats describes the last scheduling round.
type RoundStats struct {
	At       time.Time     `json:"at"`
	Duration time.Duration `json:"duration"`
	Actions  int           `json:"actions"`
	Waiting  int           `json:"waiting"`
}

// New builds a daemon and recovers its state from the store: jobs that
// were running keep their devices (the executor re-attaches to them).
func New(ctx context.Context, cfg Config) (*Daemon, error) {
	if cfg.Store == nil || cfg.Exec == nil || cfg.Policy == nil {
		return nil, errors.New("control: store, executor and policy are required")
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Model == nil {
		cfg.Model = func(a perf.Arch) perf.Model { return perf.DefaultModel(a, perf.A800) }
	}
	if cfg.MaxRestarts <= 0 {
		cfg.MaxRestarts = 3
	}
	if cfg.HeartbeatMisses <= 0 {
		cfg.HeartbeatMisses = 2
	}
	if cfg.ProgressEvery <= 0 {
		cfg.ProgressEvery = 10 * time.Second
	}
	if cfg.TimerWindow <= 0 {
		cfg.TimerWindow = 7 * 24 * time.Hour
	}
	d := &Daemon{cfg: cfg, log: cfg.Logger, jobs: map[string]*jobState{}, srvIdx: map[string]int{}, models: map[string]*perf.Online{}, waits: map[string]string{}, timers: map[string]sched.JobTimers{}}
	for i, s := range cfg.Servers {
		if _, dup := d.srvIdx[s.Name]; dup {
			return nil, fmt.Errorf("control: server %s twice", s.Name)
		}
		d.srvIdx[s.Name] = i
		d.owner = append(d.owner, serverDevices{gpu: make([]string, s.GPUs), cpu: make([]string, s.CPUs)})
		d.nodes = append(d.nodes, nodeState{reachable: true})
	}
	if err := d.recover(ctx); err != nil {
		return nil, err
	}
	if err := d.adopt(ctx); err != nil {
		return nil, err
	}
	return d, nil
}

// adopt asks the executor to re-attach to every job the store says runs;
// those it cannot find go back to the queue from their last checkpoint.
func (d *Daemon) adopt(ctx context.Context) error {
	ids := make([]string, 0, len(d.jobs))
	for id, js := range d.jobs {
		if js.rec.State == StateRunning {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	for _, id := range ids {
		js := d.jobs[id]
		ok, err := d.cfg.Exec.Adopt(ctx, Launch{JobID: id, Spec: js.spec, Plan: js.plan, Servers: js.servers, Attempt: max(js.rec.Attempt-1, 0), Resume: true, From: js.rec.Checkpoint})
		if err != nil {
			return fmt.Errorf("adopt %s: %w", id, err)
		}
		if ok {
			d.event(ctx, "adopt", id, "", js.spec.Name+" still running: adopted", nil)
			continue
		}
		d.requeue(ctx, js, fmt.Sprintf("not running after the daemon restarted; back to the queue from checkpoint %d", js.rec.Checkpoint))
	}
	return nil
}

func (d *Daemon) recover(ctx context.Context) error {
	stored, err := d.cfg.Store.Models(ctx)
	if err != nil {
		return fmt.Errorf("recover models: %w", err)
	}
	for typ, raw := range stored {
		var o perf.Online
		if err := json.Unmarshal(raw, &o); err == nil {
			d.models[typ] = &o
		}
	}
	waits, err := d.cfg.Store.TimerWaits(ctx, d.now().Add(-d.cfg.TimerWindow))
	if err != nil {
		return fmt.Errorf("recover timer history: %w", err)
	}
	for _, w := range waits {
		d.history.Add(sched.TimerObs{Tier: tierOf(w.Tier), GPUs: w.GPUs, At: float64(w.At.UnixNano()) / 1e9, Wait: w.Wait.Seconds()})
	}
	nodes, err := d.cfg.Store.Nodes(ctx)
	if err != nil {
		return fmt.Errorf("recover nodes: %w", err)
	}
	for _, n := range nodes {
		if i, ok := d.srvIdx[n.Name]; ok {
			d.nodes[i].drained = n.Drained
		}
	}
	recs, err := d.cfg.Store.ListJobs(ctx, JobFilter{States: []JobState{StateQueued, StateHeld, StateRunning, StatePreempted}})
	if err != nil {
		return fmt.Errorf("recover jobs: %w", err)
	}
	for _, r := range recs {
		var spec jobspec.Spec
		if err := json.Unmarshal(r.Spec, &spec); err != nil {
			return fmt.Errorf("recover job %s: spec: %w", r.ID, err)
		}
		js := &jobState{rec: r, spec: &spec}
		if len(r.Plan) > 0 {
			json.Unmarshal(r.Plan, &js.plan)
			if r.State != StateRunning {
				js.ckPlan = js.plan // it last ran, and checkpointed, with this plan
			}
		}
		if r.State == StateRunning && len(r.Placement) > 0 {
			if err := json.Unmarshal(r.Placement, &js.servers); err != nil {
				return fmt.Errorf("recover job %s: placement: %w", r.ID, err)
			}
			d.take(r.ID, js.servers)
		}
		d.jobs[r.ID] = js
	}
	return nil
}

func (d *Daemon) now() time.Time { return d.cfg.Clock().UTC() }

func (d *Daemon) event(ctx context.Context, kind, job, node, msg string, data any) {
	var raw json.RawMessage
	if data != nil {
		raw, _ = json.Marshal(data)
	}
	if _, err := d.cfg.Store.AddEvent(ctx, Event{Kind: kind, JobID: job, Node: node, Msg: msg, Data: raw, At: d.now()}); err != nil {
		d.log.Error("store event", "err", err)
	}
	d.broadcast()
}

// save writes js.rec with a state transition reason; the record's version
// is refreshed from the store.
func (d *Daemon) save(ctx context.Context, js *jobState, reason string) error {
	v, err := d.cfg.Store.UpdateJob(ctx, js.rec, reason, d.now())
	if err != nil {
		return err
	}
	js.rec.Version = v
	return nil
}

// model returns the online model of a model type, creating it.
func (d *Daemon) model(a perf.Arch) *perf.Online {
	key := fmt.Sprintf("%s/%d", a.Name, a.GlobalBatch)
	if o, ok := d.models[key]; ok {
		return o
	}
	o := &perf.Online{Model: d.cfg.Model(a)}
	o.Model.Arch = a
	d.models[key] = o
	return o
}

// Submit validates nothing more than jobspec did, stores the job queued
// and returns its record. The next round schedules it.
func (d *Daemon) Submit(ctx context.Context, spec *jobspec.Spec) (JobRecord, error) {
	if spec == nil {
		return JobRecord{}, errors.New("submit: no spec")
	}
	raw, err := json.Marshal(spec)
	if err != nil {
		return JobRecord{}, err
	}
	id, err := d.cfg.Store.NextJobID(ctx)
	if err != nil {
		return JobRecord{}, fmt.Errorf("submit: %w", err)
	}
	rec := JobRecord{ID: id, Name: spec.Name, Tenant: spec.Tenant, Class: string(spec.Class), Spec: raw, State: StateQueued, SubmittedAt: d.now(), Version: 1}
	if err := d.cfg.Store.CreateJob(ctx, rec); err != nil {
		return JobRecord{}, fmt.Errorf("submit: %w", err)
	}
	d.mu.Lock()
	d.jobs[id] = &jobState{rec: rec, spec: spec}
	d.publish()
	d.mu.Unlock()
	d.event(ctx, "submit", id, "", fmt.Sprintf("%s submitted by tenant %s (%s, %d GPUs)", spec.Name, spec.Tenant, spec.Class, spec.Request.GPUs), nil)
	return rec, nil
}

// snapshot builds the scheduler's view: usable servers, tenants, and every
// queued, preempted or running job.
func (d *Daemon) snapshot() sched.Snapshot {
	s := sched.Snapshot{Now: float64(d.now().UnixNano()) / 1e9, History: d.history, SpineGBps: d.cfg.SpineGBps}
	for i, info := range d.cfg.Servers {
		sv := sched.Server{ID: info.Name, Rack: info.Rack, GPUs: info.GPUs, CPUs: info.CPUs, MemGB: info.MemGB}
		if n := d.nodes[i]; n.drained || n.missed >= d.cfg.HeartbeatMisses {
			sv.GPUs, sv.CPUs, sv.MemGB = 0, 0, 0
		}
		s.Servers = append(s.Servers, sv)
	}
	for _, t := range d.cfg.Tenants {
		s.Tenants = append(s.Tenants, sched.Tenant{Name: t.Name, QuotaGPUs: t.QuotaGPUs})
	}
	ids := make([]string, 0, len(d.jobs))
	for id, js := range d.jobs {
		if js.rec.State == StateQueued || js.rec.State == StatePreempted || js.rec.State == StateRunning {
			ids = append(ids, id)
		}
	}
	sort.Slice(ids, func(a, b int) bool {
		ja, jb := d.jobs[ids[a]].rec, d.jobs[ids[b]].rec
		if !ja.SubmittedAt.Equal(jb.SubmittedAt) {
			return ja.SubmittedAt.Before(jb.SubmittedAt)
		}
		return ids[a] < ids[b]
	})
	for _, id := range ids {
		js := d.jobs[id]
		o := d.model(js.spec.Arch)
		sj := sched.Job{ID: id, Tenant: js.spec.Tenant, Model: &o.Model, ReqGPUs: js.spec.Request.GPUs, ReqCPUs: js.spec.Request.CPUs,
			ReqPlan: js.spec.Request.Plan, Submit: float64(js.rec.SubmittedAt.UnixNano()) / 1e9,
			ItersDone: float64(js.rec.Iterations), ItersTotal: float64(js.spec.Iterations), Restarts: js.rec.Restarts}
		if js.spec.Class == jobspec.Guaranteed {
			sj.Class = sched.Guaranteed
		}
		if !js.spec.Request.HasPlan {
			sj.ReqPlan = defaultPlan(js.spec)
		}
		if js.rec.State != StateRunning {
			sj.RunSeconds = js.ranFor.Seconds()
			if !js.lastRun.IsZero() {
				sj.LastRun = float64(js.lastRun.UnixNano()) / 1e9
			}
		}
		if js.rec.State == StateRunning {
			sj.Plan = js.plan
			changed := js.changed
			if changed.IsZero() {
				changed = js.rec.StartedAt
			}
			sj.LastChange = float64(changed.UnixNano()) / 1e9
			sj.LastRun = sj.Submit
			if !js.runFrom.IsZero() {
				sj.RunSeconds = (js.ranFor + d.now().Sub(js.runFrom)).Seconds()
				sj.LastRun = float64(d.now().UnixNano()) / 1e9
			}
			if !js.phase.IsZero() {
				sj.Phase = float64(js.phase.UnixNano()) / 1e9
			}
			for _, srv := range js.servers {
				i := d.srvIdx[srv.Name]
				sj.Alloc = append(sj.Alloc, sched.Alloc{Server: i, GPUs: len(srv.GPUs), CPUs: len(srv.CPUs)})
			}
		}
		s.Jobs = append(s.Jobs, sj)
	}
	s.FillFree()
	return s
}

// defaultPlan is the request plan of a job that named none: plain data
// parallelism over its GPUs (accumulating when the batch does not split).
func defaultPlan(spec *jobspec.Spec) perf.Plan {
	g := max(spec.Request.GPUs, 1)
	mb := max(spec.GlobalBatch/g, 1)
	return perf.Plan{DP: g, TP: 1, PP: 1, MicroBatch: mb, GA: 1}
}

// Round runs one scheduling round and applies its decisions. Each change
// is written to the store before the executor carries it out.
func (d *Daemon) Round(ctx context.Context) (RoundStats, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	defer d.publish()
	start := time.Now()
	snap := d.snapshot()
	dec := d.cfg.Policy.Schedule(snap)
	elapsed := time.Since(start)
	var errs []error
	pinned := map[string]string{}
	for _, a := range dec.Actions {
		if why := d.breaksPin(a); why != "" {
			fixed, ok := d.pinnedStart(a)
			if !ok {
				pinned[a.Job] = why
				continue
			}
			a = fixed
		}
		if err := d.apply(ctx, a); err != nil {
			errs = append(errs, fmt.Errorf("%s %s: %w", a.Kind, a.Job, err))
		}
	}
	for id, why := range pinned {
		if js := d.jobs[id]; js != nil && js.rec.State != StateRunning {
			dec.Waiting = append(dec.Waiting, sched.Wait{Job: id, Reason: why})
		}
	}
	waiting := map[string]string{}
	for _, w := range dec.Waiting {
		waiting[w.Job] = w.Reason
		js := d.jobs[w.Job]
		if js == nil || d.waits[w.Job] == w.Reason {
			continue
		}
		js.rec.Reason = w.Reason
		if err := d.save(ctx, js, "wait"); err != nil {
			errs = append(errs, err)
		}
		d.cfg.Store.AddDecision(ctx, DecisionRecord{JobID: w.Job, Kind: "wait", Reason: w.Reason, At: d.now()})
	}
	d.waits = waiting
	d.links = dec.Links
	d.timers = map[string]sched.JobTimers{}
	for _, t := range dec.Timers {
		d.timers[t.Job] = t
	}
	for _, o := range dec.Observed {
		d.history.Add(o)
		at := time.Unix(0, int64(o.At*1e9)).UTC()
		if err := d.cfg.Store.AddTimerWait(ctx, TimerWait{Tier: o.Tier.String(), GPUs: o.GPUs, Wait: time.Duration(o.Wait * float64(time.Second)), At: at}); err != nil {
			errs = append(errs, err)
		}
	}
	d.history.Prune(snap.Now, d.cfg.TimerWindow.Seconds())
	d.lastRound = RoundStats{At: d.now(), Duration: elapsed, Actions: len(dec.Actions), Waiting: len(dec.Waiting)}
	return d.lastRound, errors.Join(errs...)
}

func (d *Daemon) apply(ctx context.Context, a sched.Decision) error {
	js := d.jobs[a.Job]
	if js == nil {
		return errors.New("unknown job")
	}
	detail, _ := json.Marshal(map[string]any{"plan": a.Plan, "placement": a.Placement, "throughput": a.Throughput})
	switch a.Kind {
	case sched.Preempt:
		d.stopRun(js)
		js.rec.State, js.rec.Reason = StatePreempted, a.Why
		js.rec.Placement = nil
		if err := d.save(ctx, js, "preempt: "+a.Why); err != nil {
			return err
		}
		d.release(a.Job)
		js.servers = nil
		d.cfg.Store.AddDecision(ctx, DecisionRecord{JobID: a.Job, Kind: "preempt", Reason: a.Why, At: d.now()})
		d.event(ctx, "preempt", a.Job, "", a.Why, nil)
		d.publish()
		ckpt, err := d.cfg.Exec.Stop(ctx, a.Job, true)
		if err == nil && ckpt > js.rec.Checkpoint {
			js.rec.Checkpoint = ckpt
			js.rec.Iterations = ckpt
			d.save(ctx, js, "checkpoint")
		}
		return err
	case sched.Start, sched.Reconfigure:
		old := Launch{JobID: a.Job, Spec: js.spec, Plan: js.plan, Servers: js.servers, Attempt: max(js.rec.Attempt-1, 0)}
		wasRunning := js.rec.State == StateRunning
		d.release(a.Job)
		servers, err := d.devicesFor(a.Alloc)
		if err != nil {
			d.take(a.Job, js.servers)
			return err
		}
		placement, _ := json.Marshal(servers)
		plan, _ := json.Marshal(a.Plan)
		js.rec.Plan, js.rec.Placement, js.rec.Reason = plan, placement, ""
		js.rec.State = StateRunning
		if js.rec.StartedAt.IsZero() {
			js.rec.StartedAt = d.now()
		}
		resume := js.rec.Checkpoint > 0 || js.rec.Attempt > 0
		if a.Kind == sched.Reconfigure || js.rec.Attempt > 0 {
			js.rec.Restarts++
		}
		js.rec.Attempt++
		if err := d.save(ctx, js, fmt.Sprintf("%s: %s", a.Kind, a.Why)); err != nil {
			d.take(a.Job, js.servers)
			return err
		}
		js.plan, js.servers, js.changed = a.Plan, servers, d.now()
		if js.runFrom.IsZero() {
			js.runFrom = d.now()
		}
		js.phase = d.now().Add(time.Duration(a.Shift * float64(time.Second)))
		js.predSPS, js.measSPS, js.shift = a.Throughput, 0, a.Shift
		d.take(a.Job, servers)
		delete(d.waits, a.Job)
		d.cfg.Store.AddDecision(ctx, DecisionRecord{JobID: a.Job, Kind: a.Kind.String(), Detail: detail, Reason: a.Why, At: d.now()})
		d.event(ctx, a.Kind.String(), a.Job, "", fmt.Sprintf("%s on %s with %s (%.2f samples/s predicted)", js.spec.Name, placementWords(servers), a.Plan, a.Throughput), map[string]any{"plan": a.Plan.String(), "placement": placementWords(servers)})
		next := Launch{JobID: a.Job, Spec: js.spec, Plan: a.Plan, Servers: servers, Attempt: js.rec.Attempt - 1, Resume: resume, From: js.rec.Checkpoint, Shift: a.Shift}
		if resume && js.ckPlan != a.Plan {
			next.CheckpointPlan = js.ckPlan
		}
		d.publish()
		if a.Kind == sched.Reconfigure && wasRunning {
			err = d.cfg.Exec.Reconfigure(ctx, old, next, js.rec.Iterations)
		} else {
			err = d.cfg.Exec.Start(ctx, next)
		}
		if err != nil {
			js.rec.Failures++
			d.requeue(ctx, js, fmt.Sprintf("launch failed: %v", err))
			return err
		}
		return nil
	}
	return fmt.Errorf("unknown decision kind %v", a.Kind)
}

// requeue returns a job to the queue (from its last checkpoint), or fails
// it when it has failed more than MaxRestarts times.
func (d *Daemon) requeue(ctx context.Context, js *jobState, why string) {
	d.stopRun(js)
	d.release(js.rec.ID)
	js.servers = nil
	js.rec.Placement = nil
	js.rec.Iterations = js.rec.Checkpoint
	if js.rec.Failures > d.cfg.MaxRestarts {
		js.rec.State, js.rec.Reason, js.rec.FinishedAt = StateFailed, why+fmt.Sprintf(" (failed %d times, restart limit %d)", js.rec.Failures, d.cfg.MaxRestarts), d.now()
		d.save(ctx, js, "failed: "+why)
		d.event(ctx, "fail", js.rec.ID, "", js.rec.Reason, nil)
		delete(d.jobs, js.rec.ID)
		return
	}
	js.rec.State, js.rec.Reason = StatePreempted, why
	d.save(ctx, js, "requeue: "+why)
	d.event(ctx, "requeue", js.rec.ID, "", why, nil)
}

// Observe asks the executor for news and applies it: progress, finished
// and failed jobs, throughput samples (refitting models that are more than
// 10% off), and server heartbeats.
func (d *Daemon) Observe(ctx context.Context) error {
	obs, err := d.cfg.Exec.Observe(ctx)
	if err != nil {
		return fmt.Errorf("observe: %w", err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	defer d.publish()
	for _, n := range obs.Nodes {
		i, ok := d.srvIdx[n.Name]
		if !ok {
			continue
		}
		ns := &d.nodes[i]
		d.keepTelemetry(i, n) // GPU figures (telemetry.go)
		was := ns.missed
		if n.Reachable {
			ns.missed, ns.reachable = 0, true
			if was >= d.cfg.HeartbeatMisses {
				d.event(ctx, "node-up", "", n.Name, n.Name+" answers again", nil)
			}
		} else {
			ns.missed++
			ns.reachable = false
			if ns.missed == d.cfg.HeartbeatMisses {
				d.event(ctx, "node-down", "", n.Name, fmt.Sprintf("%s missed %d heartbeats: %s", n.Name, ns.missed, n.Err), nil)
				for _, js := range d.jobsOn(n.Name) {
					d.cfg.Exec.Stop(ctx, js.rec.ID, false)
					d.requeue(ctx, js, fmt.Sprintf("server %s stopped answering; back to the queue from checkpoint %d", n.Name, js.rec.Checkpoint))
				}
			}
		}
		d.cfg.Store.PutNode(ctx, NodeRecord{Name: n.Name, Reachable: n.Reachable, Drained: ns.drained, Missed: ns.missed, UpdatedAt: d.now()})
	}
	for _, o := range obs.Jobs {
		js := d.jobs[o.JobID]
		if js == nil || js.rec.State != StateRunning {
			continue
		}
		ckptBefore := js.rec.Checkpoint
		js.rec.Iterations = max(js.rec.Iterations, o.Iterations)
		js.rec.Checkpoint = max(js.rec.Checkpoint, o.Checkpoint)
		if o.SamplesPerSec > 0 {
			js.measSPS = o.SamplesPerSec
			d.refit(ctx, js, o.SamplesPerSec)
		}
		switch {
		case js.rec.Iterations >= js.spec.Iterations || (o.Exited && o.ExitCode == 0):
			js.rec.State, js.rec.FinishedAt, js.rec.Reason = StateFinished, d.now(), ""
			js.rec.Placement = nil
			d.save(ctx, js, "finished")
			d.release(js.rec.ID)
			d.event(ctx, "finish", js.rec.ID, "", fmt.Sprintf("%s finished after %d iterations", js.spec.Name, js.rec.Iterations), nil)
			delete(d.jobs, js.rec.ID)
		case o.Exited:
			js.rec.Failures++
			d.requeue(ctx, js, fmt.Sprintf("exited with code %d%s; restarting from checkpoint %d", o.ExitCode, suffix(o.Err), js.rec.Checkpoint))
		default:
			// A new checkpoint is written at once (it is what a restart
			// resumes from); plain progress at most every ProgressEvery.
			if js.rec.Checkpoint != ckptBefore && d.now().Sub(js.saved) >= d.cfg.ProgressEvery || d.now().Sub(js.saved) >= 4*d.cfg.ProgressEvery {
				d.save(ctx, js, "progress")
				js.saved = d.now()
			}
		}
	}
	return nil
}

func suffix(s string) string {
	if s == "" {
		return ""
	}
	return " (" + s + ")"
}

func (d *Daemon) jobsOn(server string) []*jobState {
	var out []*jobState
	for _, js := range d.jobs {
		for _, s := range js.servers {
			if s.Name == server {
				out = append(out, js)
				break
			}
		}
	}
	sort.Slice(out, func(a, b int) bool { return out[a].rec.ID < out[b].rec.ID })
	return out
}

// refit feeds a measured throughput to the job's model type.
func (d *Daemon) refit(ctx context.Context, js *jobState, sps float64) {
	o := d.model(js.spec.Arch)
	pl := make(perf.Placement, 0, len(js.servers))
	cpus, gpus := 0, 0
	for _, s := range js.servers {
		pl = append(pl, len(s.GPUs))
		cpus += len(s.CPUs)
		gpus += len(s.GPUs)
	}
	if gpus == 0 {
		return
	}
	slices.SortFunc(pl, func(a, b int) int { return b - a })
	sample := perf.Sample{Plan: js.plan, Resources: perf.Resources{Placement: pl, CPUsPerGPU: float64(cpus) / float64(gpus)}, IterS: float64(js.spec.GlobalBatch) / sps}
	refitted, err := o.Observe(sample)
	if err != nil {
		d.log.Warn("refit", "job", js.rec.ID, "err", err)
		return
	}
	if refitted {
		raw, _ := json.Marshal(o)
		d.cfg.Store.SaveModel(ctx, js.spec.Arch.Name, raw, d.now())
		d.event(ctx, "refit", js.rec.ID, "", fmt.Sprintf("model %s refitted (measured %.2f samples/s)", js.spec.Arch.Name, sps), nil)
	}
}

// tierOf parses perf.Tier's String form.
func tierOf(s string) perf.Tier {
	switch s {
	case "rack":
		return perf.TierRack
	case "cross-rack":
		return perf.TierCrossRack
	}
	return perf.TierServer
}

// stopRun records that a job stopped holding resources now.
func (d *Daemon) stopRun(js *jobState) {
	if js.plan.DP > 0 {
		js.ckPlan = js.plan
	}
	if !js.runFrom.IsZero() {
		js.ranFor += d.now().Sub(js.runFrom)
		js.runFrom = time.Time{}
	}
	js.lastRun = d.now()
	js.phase = time.Time{}
}
