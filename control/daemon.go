package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"
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
	// Labels are the server's labels (node features, the inventory's):
	// a job whose spec's constraint.labels lists some runs only on
	// servers that carry them (labels.go).
	Labels map[string]string `json:"labels,omitempty"`
}

// TenantInfo is a tenant's quota for guaranteed jobs.
type TenantInfo struct {
	Name      string `json:"name"`
	QuotaGPUs int    `json:"quota_gpus"`
	// TimeLimitDefault is the time limit of the tenant's jobs whose spec
	// sets none, TimeLimitMax the longest a spec may set (0: none;
	// timelimit.go).
	TimeLimitDefault jobspec.Duration `json:"time_limit_default,omitempty"`
	TimeLimitMax     jobspec.Duration `json:"time_limit_max,omitempty"`
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
	// SuspectAfter is how many different jobs' launches must fail on one
	// server within SuspectWindow for it to become suspect (default 3,
	// within 30 minutes of the daemon's clock).
	SuspectAfter  int
	SuspectWindow time.Duration
	// LaunchBackoff keeps a job whose launch failed out of the rounds for
	// this long (doubling with each failure in a row, at most 32×), so the
	// server it failed on is offered to other jobs and the job is placed
	// elsewhere (default 30 s of the daemon's clock).
	LaunchBackoff time.Duration
	// GPUReadFailures is how many observations in a row a GPU's reads
	// may fail before it is cordoned (default 3; health.go).
	GPUReadFailures int
	// HangFactor and HangFloor bound how long a running job may log no
	// new iteration before it is restarted from its checkpoint: max(
	// HangFactor × its predicted iteration time, HangFloor) (defaults 20
	// and 10 minutes of the daemon's clock; a spec's hang: overrides them;
	// hang.go).
	HangFactor float64
	HangFloor  time.Duration
	// SlowFraction and SlowObservations: a running job measured below
	// SlowFraction of its predicted throughput for SlowObservations
	// observations in a row is examined for a slow server (defaults 0.7
	// and 3; a spec's slow: overrides them; failslow.go).
	SlowFraction     float64
	SlowObservations int
	// IdempotencyRetention is how long a submission's Idempotency-Key is
	// kept, of the daemon's clock (default 24 h): a retry within it gets
	// the job the key created, a later one creates a new job (idem.go).
	IdempotencyRetention time.Duration
	// Profile bounds the profiling phase of a model type never fitted
	// (profile.go; off when Enabled is false, unless a spec asks).
	Profile ProfileOptions
	// Redeploy bounds how the daemon starts the agent again on a server
	// that answers SSH but whose agent does not (redeploy.go).
	Redeploy RedeployOptions
	// Epoch, when not 0, is the daemon's epoch: a leader's election
	// revision (election.go). 0: the store hands one out (EpochStore).
	Epoch uint64
	// Background runs the executor calls of the loop (a round's starts,
	// reconfigurations and preemptions; the stops of node-down, cordon,
	// hang, fail-slow and time-limit moves) off the loop, each after its
	// job's new state was stored: a checkpoint wait of one job no longer
	// holds observation (heartbeats, Xid cordons, hang detection) and the
	// next rounds for every other job (background.go). `replan daemon`
	// sets it; false (tests that step the loop by hand) keeps them inline.
	Background bool
}

// HealthChecker is implemented by executors that can check a server
// (launch a trivial process there); a suspect server whose check passes
// is cleared.
type HealthChecker interface {
	Check(ctx context.Context, server string) error
}

// Daemon is the control plane's state and loop.
type Daemon struct {
	cfg Config
	log *slog.Logger
	// roundMu serialises rounds (a Policy is not safe for two goroutines);
	// mu guards the state below. A round holds mu only to copy its
	// snapshot and to apply each decision, never while the policy runs or
	// an executor works.
	roundMu   sync.Mutex
	mu        sync.Mutex
	jobs      map[string]*jobState // every job not in a final state
	srvIdx    map[string]int
	owner     []serverDevices // per server: which job holds each GPU / CPU core
	nodes     []nodeState
	models    map[ModelType]*perf.Online
	waits     map[string]string // job → why it waits (last round)
	lastRound RoundStats
	notify    notifier
	published atomic.Pointer[readView]
	// clientOps counts the client operations (submit, cancel, hold,
	// release, drain, undrain) applied to memory; a view carries the count
	// it includes, and an encoded read waits only for those (readcache.go).
	// Guarded by mu.
	clientOps uint64
	// otherOps is clientOps at the last client operation that was not a
	// submit (guarded by mu); subLog holds the last submits with the
	// clientOps each made (guarded by subMu): an encoded read that lacks
	// only submits appends them (readcache.go).
	otherOps uint64
	// evWrites counts the stored changes that carried events, submits
	// aside: every change a user can see in the event stream.
	evWrites atomic.Uint64
	subMu    sync.Mutex
	subLog   []submitted
	// lastPublish is when a view was last published (wall clock, Unix
	// nanoseconds; read without mu).
	lastPublish atomic.Int64
	// publishedAt is when the view was last rebuilt (wall clock).
	publishedAt time.Time
	stale       atomic.Bool                // the view misses changes (see publishSoon)
	announce    atomic.Bool                // events were stored since the last broadcast
	links       sched.LinkReport           // the last round's time-shift report
	curves      perf.CurveCache            // sensitivity curves for the API
	history     sched.TimerHistory         // the delay-timer auto-tuner's memory
	timers      map[string]sched.JobTimers // last round's timers per waiting job
	timerMarks  map[string]timerMark       // timers last told per waiting job (timerevents.go)
	// snapModels are immutable copies of d.models given to the policy
	// (replaced when a model is refitted, so the policy's caches keyed by
	// the pointer stay valid between rounds).
	snapModels map[snapKey]*perf.Model
	// modelSaved is when each model type was last stored (samples that do
	// not refit are stored at most every ProgressEvery).
	modelSaved map[ModelType]time.Time
	// pending holds observations whose store write failed (a finish seen
	// during a full disk): they are applied again at the next Observe.
	pending map[string]JobObservation
	// requeues are jobs whose launch failed but whose requeue could not be
	// stored: retried at the next Observe.
	requeues map[string]pendingRequeue
	// checked is when a suspect server was last health-checked.
	checked map[string]time.Time
	// launchFails are the recent launch failures per server (suspects).
	launchFails map[string][]launchFailure
	// counters for metrics
	dropped     atomic.Int64      // decisions dropped at apply (stale)
	storeErrors atomic.Int64      // store writes that failed
	eta         etaState          // background start estimates (eta.go)
	telemetry   map[int][]GPUStat // per server: its GPUs as last observed (telemetry.go)
	// gpuHealth is each GPU's health per server index and GPU (health.go);
	// guarded by mu.
	gpuHealth map[int]map[int]*gpuHealth
	enc       encCache     // encoded reads (readcache.go)
	fails     failureStats // failures observed (checkpoint.go); guarded by mu
	// idemPurged is when the loop last deleted expired idempotency keys
	// (idem.go; only the loop's goroutine touches it).
	idemPurged time.Time
	// profiles are the profiling phases in progress, per model type
	// (profile.go); profileSeq numbers the on-demand ones. Guarded by mu.
	profiles   map[ModelType]*profilePhase
	profileSeq int
	// agents is what is known of each server's agent, by server index
	// (redeploy.go; guarded by mu); redeploying counts the redeploys
	// under way.
	agents      map[int]*agentState
	redeploying sync.WaitGroup
	// busy counts each job's executor calls under way in the background
	// (background.go; guarded by mu); working counts them all.
	busy    map[string]int
	working sync.WaitGroup
	// epoch is the epoch the daemon's agent commands carry (fence.go).
	epoch uint64
	// fs follows running jobs' speed against their predictions and the
	// servers suspect for slowness (failslow.go); guarded by mu.
	fs failSlow
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
	// iters and ckpt are the progress last observed; rec holds what is
	// stored (progress is written at most every ProgressEvery).
	iters, ckpt int
	// stopping is set while the executor stops the job after its new
	// state was stored: its devices stay held and no round touches it.
	stopping bool
	// launchFails counts the job's failed launches in a row; backoff is
	// when it may be scheduled again, backoffWhy why (the queue's reason
	// until then).
	launchFails int
	backoff     time.Time
	backoffWhy  string
	// exec serialises the executor calls of this job; never taken while
	// holding d.mu.
	exec sync.Mutex

	// launching: the current launch is stored but the executor has not
	// taken it yet; launched is when it did (its restart runs from then).
	launching bool
	launched  time.Time
	// measAt is when measSPS and iters were last observed together.
	measAt time.Time
	// progressAt is when a new iteration was last observed; loggedIters
	// that one ever was (its log is one replan reads; hang.go).
	progressAt  time.Time
	loggedIters bool

	// ckptInfo is how often the current launch checkpoints (checkpoint.go).
	ckptInfo CheckpointInfo
	// peak is the current launch's measured peak GPU memory (mempeak.go).
	peak memPeak
	// deps is what is known of the jobs it waits for (deps.go).
	deps depState
}

type nodeState struct {
	reachable  bool
	missed     int
	drained    bool
	suspect    bool
	suspectWhy string
	drain      NodeDrain // why, by whom, when (drain.go)
	// drainSettled: the event that an after-jobs drain's last job ended
	// was written (drain.go's settleDrains).
	drainSettled bool
}

// RoundStats describes the last scheduling round.
type RoundStats struct {
	At       time.Time     `json:"at"`
	Duration time.Duration `json:"duration"`
	Actions  int           `json:"actions"`
	Waiting  int           `json:"waiting"`
	// Applied is how many decisions were carried out; Dropped how many no
	// longer held when they were applied (the job or the devices changed
	// since the snapshot) and were left to the next round.
	Applied int `json:"applied"`
	Dropped int `json:"dropped"`
	// Duration is the time the policy took (as before); Total is the
	// whole round: snapshot, plan and apply with the executor's work.
	Total time.Duration `json:"total_duration"`
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
	if cfg.SuspectAfter <= 0 {
		cfg.SuspectAfter = 3
	}
	if cfg.SuspectWindow <= 0 {
		cfg.SuspectWindow = 30 * time.Minute
	}
	if cfg.LaunchBackoff <= 0 {
		cfg.LaunchBackoff = 30 * time.Second
	}
	if cfg.GPUReadFailures <= 0 {
		cfg.GPUReadFailures = DefaultGPUReadFailures
	}
	if cfg.HangFactor <= 0 {
		cfg.HangFactor = DefaultHangFactor
	}
	if cfg.HangFloor <= 0 {
		cfg.HangFloor = DefaultHangFloor
	}
	if cfg.Redeploy.Tries == 0 {
		cfg.Redeploy.Tries = DefaultRedeployTries
	}
	if cfg.Redeploy.Backoff <= 0 {
		cfg.Redeploy.Backoff = DefaultRedeployBackoff
	}
	if cfg.SlowFraction <= 0 || cfg.SlowFraction >= 1 {
		cfg.SlowFraction = DefaultSlowFraction
	}
	if cfg.SlowObservations <= 0 {
		cfg.SlowObservations = DefaultSlowObservations
	}
	d := &Daemon{cfg: cfg, log: cfg.Logger, jobs: map[string]*jobState{}, srvIdx: map[string]int{}, models: map[ModelType]*perf.Online{}, waits: map[string]string{}, busy: map[string]int{}, timers: map[string]sched.JobTimers{},
		snapModels: map[snapKey]*perf.Model{}, modelSaved: map[ModelType]time.Time{}, pending: map[string]JobObservation{}, requeues: map[string]pendingRequeue{}, checked: map[string]time.Time{}, launchFails: map[string][]launchFailure{}}
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
	// A new epoch for this daemon before it commands any agent: agents
	// then refuse the commands of the daemon it replaces (fence.go).
	if err := d.takeEpoch(ctx); err != nil { // fence.go
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
			if err := d.write(ctx, nil, Batch{Events: []Event{d.ev("adopt", id, "", js.spec.Name+" still running: adopted", nil)}}, nil); err != nil {
				return fmt.Errorf("adopt %s: %w", id, err)
			}
			// The policy's prediction was not stored: the model's for the
			// plan and placement it runs with, until a round decides again.
			js.predSPS = d.predictRunning(js)
			// Nor was its checkpoint interval: chosen again as at a
			// launch (the job's own, or from today's figures).
			js.ckptInfo = d.chooseCheckpoint(js, len(js.servers), js.predSPS)
			continue
		}
		if err := d.requeue(ctx, js, fmt.Sprintf("not running after the daemon restarted; back to the queue: it resumes from its newest checkpoint (the last recorded: iteration %d)", js.rec.Checkpoint), false); err != nil {
			return fmt.Errorf("adopt %s: %w", id, err)
		}
		d.holdForFence(js)
	}
	return nil
}

// predictRunning is the throughput the model of js's type predicts for the
// plan and placement it runs with (0 when it cannot say).
func (d *Daemon) predictRunning(js *jobState) float64 {
	r, ok := d.runningResources(js)
	if !ok || js.spec.GlobalBatch <= 0 {
		return 0
	}
	b, err := d.model(js.spec).Model.Predict(js.plan, r)
	if err != nil || b.Iter <= 0 {
		return 0
	}
	return float64(js.spec.GlobalBatch) / b.Iter
}

// runningResources are the resources js runs on: its placement (fullest
// server first), whether it spans racks and its CPU cores per GPU; false
// when it holds no GPU.
func (d *Daemon) runningResources(js *jobState) (perf.Resources, bool) {
	pl := make(perf.Placement, 0, len(js.servers))
	gpus, cpus := 0, 0
	racks := map[string]bool{}
	for _, s := range js.servers {
		pl = append(pl, len(s.GPUs))
		gpus += len(s.GPUs)
		cpus += len(s.CPUs)
		if i, ok := d.srvIdx[s.Name]; ok {
			racks[d.cfg.Servers[i].Rack] = true
		}
	}
	if gpus == 0 {
		return perf.Resources{}, false
	}
	slices.SortFunc(pl, func(a, b int) int { return b - a })
	return perf.Resources{Placement: pl, CrossRack: len(racks) > 1, CPUsPerGPU: float64(cpus) / float64(gpus)}, true
}

func (d *Daemon) recover(ctx context.Context) error {
	stored, err := d.cfg.Store.Models(ctx)
	if err != nil {
		return fmt.Errorf("recover models: %w", err)
	}
	d.recoverModels(stored)
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
			d.nodes[i].suspect, d.nodes[i].suspectWhy = n.Suspect, n.SuspectWhy
		}
	}
	if err := d.recoverHealth(ctx); err != nil { // health.go
		return err
	}
	if err := d.recoverSlow(ctx); err != nil { // failslow.go
		return err
	}
	if err := d.recoverDrains(ctx); err != nil { // drain.go
		return err
	}
	recs, err := d.cfg.Store.ListJobs(ctx, JobFilter{States: []JobState{StateQueued, StateHeld, StateRunning, StatePreempted, StateUnschedulable}})
	if err != nil {
		return fmt.Errorf("recover jobs: %w", err)
	}
	for _, r := range recs {
		var spec jobspec.Spec
		if err := json.Unmarshal(r.Spec, &spec); err != nil {
			return fmt.Errorf("recover job %s: spec: %w", r.ID, err)
		}
		js := &jobState{rec: r, spec: &spec, iters: r.Iterations, ckpt: r.Checkpoint}
		if !r.StartedAt.IsZero() {
			if h, err := d.cfg.Store.History(ctx, r.ID); err == nil {
				if r.State != StateRunning {
					// It ran before and waits again: since its last stop,
					// as its history says (waiting_s counts from there).
					js.lastRun = lastStop(h)
				}
				// The time it held resources, as its time limit counts it
				// (timelimit.go).
				js.ranFor, js.runFrom = runTimeOf(h)
			}
		}
		if len(r.Plan) > 0 {
			if err := json.Unmarshal(r.Plan, &js.plan); err != nil {
				return fmt.Errorf("recover job %s: plan: %w", r.ID, err)
			}
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

// snapModel is the immutable copy of the model of a job's type the
// policy gets (one pointer per type: the policy's caches are keyed by it;
// a refit drops it).
func (d *Daemon) snapModel(s *jobspec.Spec) *perf.Model {
	k := snapKey{modelTypeOf(s), jobSpace(s)}
	if m, ok := d.snapModels[k]; ok {
		return m
	}
	m := d.model(s).Model
	m.Space = k.Space
	d.snapModels[k] = &m
	return &m
}

// frameworkSpace is the plans a framework runs (launch refuses others).
func frameworkSpace(fw jobspec.Framework) perf.Space {
	if fw == jobspec.Megatron {
		return perf.MegatronSpace
	}
	return perf.Space{}
}

// model returns the online model of a job's type, creating it from the
// starting model (Config.Model) with the framework's plan space.
func (d *Daemon) model(s *jobspec.Spec) *perf.Online {
	t := modelTypeOf(s)
	if o, ok := d.models[t]; ok {
		return o
	}
	o := &perf.Online{Model: d.cfg.Model(s.Arch)}
	o.Model.Arch = s.Arch
	o.Model.Space = t.Space()
	d.models[t] = o
	return o
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

// DaemonGCPercent is the garbage collector's target that `replan daemon`
// runs with unless GOGC is set: with rounds back to back on a large queue
// the daemon allocates about 1 GB/s (snapshots, views, encodings) over a
// live heap of ~200 MB, and at Go's default (100) it collected 13 times a
// second; the collector's share of two cores showed as read latency (the
// control-plane benchmark's queue read: p99 31 ms at 100, 24-26 ms at
// 400). The heap may grow to about five times the live data; GOMEMLIMIT
// caps it. `replan sim` and `replan sim bench` use it too: an 80,000-job
// replay spent a quarter of its CPU collecting (tiresias 49 → 40 s,
// replan 49 → 43 s at 400).
const DaemonGCPercent = 400

// TuneGC applies DaemonGCPercent unless the GOGC environment variable
// chooses; it reports the percent in force.
func TuneGC() int {
	if v := os.Getenv("GOGC"); v != "" {
		old := debug.SetGCPercent(100)
		debug.SetGCPercent(old)
		return old
	}
	debug.SetGCPercent(DaemonGCPercent)
	return DaemonGCPercent
}

// submitted is a submit in Daemon.subLog: the clientOps it made, the job's
// record as stored and its GPU request.
type submitted struct {
	ops  uint64
	rec  JobRecord
	gpus int
}

// maxSubLog bounds Daemon.subLog.
const maxSubLog = 1024

// clientOp counts a client operation other than a submit; the caller
// holds d.mu.
func (d *Daemon) clientOp() {
	d.clientOps++
	d.otherOps = d.clientOps
}

// logSubmit counts a submit and keeps it in subLog; the caller holds d.mu.
func (d *Daemon) logSubmit(rec JobRecord, gpus int) {
	d.clientOps++
	d.subMu.Lock()
	if len(d.subLog) >= maxSubLog {
		d.subLog = append(d.subLog[:0], d.subLog[len(d.subLog)-maxSubLog/2:]...)
	}
	d.subLog = append(d.subLog, submitted{ops: d.clientOps, rec: rec, gpus: gpus})
	d.subMu.Unlock()
}

// submitsIn returns the submits that made clientOps lo+1 … hi, in order;
// false when the log does not hold them all (or one was not a submit).
func (d *Daemon) submitsIn(lo, hi uint64) ([]submitted, bool) {
	d.subMu.Lock()
	defer d.subMu.Unlock()
	i := sort.Search(len(d.subLog), func(i int) bool { return d.subLog[i].ops > lo })
	j := sort.Search(len(d.subLog), func(i int) bool { return d.subLog[i].ops > hi })
	if uint64(j-i) != hi-lo {
		return nil, false
	}
	return slices.Clone(d.subLog[i:j]), true
}
