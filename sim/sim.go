package sim

import (
	"container/heap"
	"context"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/replan/replan/dataset"
	"github.com/replan/replan/perf"
	"github.com/replan/replan/sched"
)

// Config is the simulated cluster and the simulator's rules.
type Config struct {
	Servers        int     // default 8
	GPUsPerServer  int     // default 8
	CPUsPerServer  int     // default 96
	MemGB          float64 // host memory per server, GiB (default 1600)
	ServersPerRack int     // 0: one rack
	// RestartCost is the seconds every start and every change of plan or
	// placement costs (0 means the default, 260; negative means none).
	RestartCost float64
	// QuotaGPUs is the GPU quota of the tenant that owns the trace's
	// guaranteed jobs (tenant "A"); 0 means the whole cluster. Best-effort
	// jobs belong to tenant "B", which has no quota.
	QuotaGPUs int
	// RoundInterval, when > 0, runs at most one scheduling round per
	// interval: arrivals and completions in between wait for the next
	// round. 0 runs a round on every arrival and completion (the paper's
	// rule).
	RoundInterval float64
	// HideMeasured keeps the measured tables from the policies: they then
	// see only the fitted models (the simulator still replays the tables).
	HideMeasured bool
	// Oracle shows the policies the whole measured tables, configurations
	// no job has run included. By default (false) they see, like a control
	// plane, the fitted models plus the measured speed of configurations
	// some job of the same model type has already run in.
	Oracle bool
	// NoShifts ignores the policies' time-shifts (Decision.Shift): the
	// same placements with every job starting as soon as it can.
	NoShifts bool
	// PriceUnshifted also prices every shared uplink as if no job had
	// been time-shifted (each job's phase less its shift), at the same
	// placements and progress: Result.CommSharedUnshifted, what the
	// shifts did with the trajectory held (a run with NoShifts takes
	// another one). It doubles the link pricing.
	PriceUnshifted bool
	// PinPlans pins every job's plan (sched.Job.PinPlan): it runs the
	// plan it asked for on the GPUs it asked for, so policies differ only
	// in when and where they place it.
	PinPlans bool
	// ServerLabels are the labels of the servers, by index (servers past
	// its end have none): a job with labels (the trace's labels column)
	// runs only on servers that carry them (sched.Job.Labels).
	ServerLabels []map[string]string
	// OnEvent, when set, sees every state change (tests use it to check
	// conservation).
	OnEvent func(Event)
}

func (c Config) withDefaults() Config {
	if c.Servers <= 0 {
		c.Servers = 8
	}
	if c.GPUsPerServer <= 0 {
		c.GPUsPerServer = 8
	}
	if c.CPUsPerServer <= 0 {
		c.CPUsPerServer = 96
	}
	if c.MemGB <= 0 {
		c.MemGB = 1600
	}
	if c.RestartCost < 0 {
		c.RestartCost = 0
	} else if c.RestartCost == 0 {
		c.RestartCost = 260
	}
	return c
}

// Event is one state change of a job.
type Event struct {
	Time      float64
	Job       string
	Kind      string // submit, start, reconfigure, preempt, finish
	ItersDone float64
	GPUs      int
	// AllocatedGPUs is the cluster's allocated GPUs after the change.
	AllocatedGPUs int
	Plan          string
	Placement     string
}

// JobResult is what happened to one job.
type JobResult struct {
	Name         string  `json:"name"`
	Class        string  `json:"class"`
	Submit       float64 `json:"submit_s"`
	FirstStart   float64 `json:"first_start_s"`
	Finish       float64 `json:"finish_s"`
	Restarts     int     `json:"restarts"`
	Preemptions  int     `json:"preemptions"`
	SLAViolation float64 `json:"sla_violation_s"`
	GPUSeconds   float64 `json:"gpu_s"`
	Finished     bool    `json:"finished"`
}

// ClassMetrics are the metrics of one class of jobs (or all of them).
type ClassMetrics struct {
	Jobs         int     `json:"jobs"`
	Finished     int     `json:"finished"`
	AvgJCT       float64 `json:"avg_jct_s"`
	P50JCT       float64 `json:"p50_jct_s"`
	P99JCT       float64 `json:"p99_jct_s"`
	Makespan     float64 `json:"makespan_s"`
	Queue        float64 `json:"queue_s"`
	Restarts     int     `json:"restarts"`
	SLAViolation float64 `json:"sla_violation_s"`
}

// Result is one policy's run over a trace.
type Result struct {
	Policy string `json:"policy"`
	ClassMetrics
	GPUUtil    float64                 `json:"gpu_util"`
	GPUSeconds float64                 `json:"gpu_s"`
	Rounds     int                     `json:"rounds"`
	Classes    map[string]ClassMetrics `json:"classes"`
	Jobs       []JobResult             `json:"-"`
	// MeasuredShare is the share of running job-seconds priced from a
	// measured table rather than predicted.
	MeasuredShare float64 `json:"measured_share"`
	// CommExposed is the total exposed communication time of all jobs in
	// seconds: per iteration, the time its placement adds over the same
	// plan on NVLink alone plus what link sharing adds.
	CommExposed float64 `json:"comm_exposed_s"`
	// CommShared is the part of CommExposed that link sharing added (the
	// part time-shifts can remove; the rest is the placement's own cost).
	CommShared float64 `json:"comm_shared_s"`
	// CommSharedUnshifted is what CommShared would be had no job been
	// time-shifted, at the same placements and progress
	// (Config.PriceUnshifted; 0 otherwise), and ShiftDelay the seconds
	// the shifts held jobs' starts back, summed over starts.
	CommSharedUnshifted float64 `json:"comm_shared_unshifted_s,omitempty"`
	ShiftDelay          float64 `json:"shift_delay_s"`
	// LinkInflation is the average iteration-time inflation of the jobs
	// that shared an inter-server link with another job (0.10: 10 %
	// slower than alone), time-weighted per job while sharing.
	LinkInflation float64 `json:"link_inflation"`
	// LinkSharing counts those jobs.
	LinkSharing int `json:"link_sharing_jobs"`
	// Error, when set, is why this policy's run failed (RunAll); the
	// other fields are then empty.
	Error string `json:"error,omitempty"`
}

type jstate int

const (
	pending jstate = iota
	waiting
	running
	finished
)

type job struct {
	w       dataset.WorkloadJob
	model   string
	m       *perf.Model
	reqPlan perf.Plan
	// labels are the server labels it requires (w.LabelList()).
	labels  []string
	class   sched.Class
	promise float64 // iterations per second at the request (the simulator's truth)
	// promised is the promise as the control plane knows it at the
	// latest round (promisedFor): handed to the policies as Job.Promise
	// and what SLA violations count against. fixedPromise: the control
	// plane's own (forward simulations); reqKnown: the request's measured
	// speed is known (knowledge only grows); predicted: the model's
	// prediction of the request (0: not computed yet, <0: none).
	promised     float64
	fixedPromise bool
	reqKnown     bool
	predicted    float64
	st           jstate
	alloc        []sched.Alloc
	plan         perf.Plan
	pl           perf.Placement
	cpg          int
	done         float64
	last         float64
	restart      float64 // no progress before this time
	rate         float64 // iterations per second while not restarting
	measured     bool
	version      int
	started      bool
	first        float64
	finish       float64
	restarts     int
	preempts     int
	sla          float64
	gpuSec       float64
	measSec      float64
	runSec       float64
	idealSec     float64 // seconds its iterations would take at idealIter
	idealIter    float64 // seconds per iteration of its plan packed, alone
	gpus         int
	changed      float64 // time of the last start or reconfiguration
	why          string  // the policy's last reason for keeping it waiting
	// network
	lastRun  float64 // when it last held resources
	phase    float64 // a time at which one of its iterations began
	baseIter float64 // seconds per iteration alone on its links
	comm     float64 // seconds per iteration on inter-server links
	expIter  float64 // exposed communication per iteration without sharing
	extra    float64 // seconds per iteration link sharing adds
	sharing  bool    // shares a link with another job now
	commExp  float64 // exposed communication seconds so far
	// commShared is the part of commExp that link sharing added
	commShared float64
	// shift is the time-shift of its last start, extra0 and rx0 what
	// sharing would add with no job shifted (Config.PriceUnshifted),
	// commShared0 its sum like commShared's, shiftSec the shifts' sum.
	shift       float64
	extra0      float64
	rx0         []float64
	commShared0 float64
	shiftSec    float64
	shareSec    float64 // progress seconds while sharing
	inflSum     float64 // ∫ inflation dt while sharing
	// racks are the uplinks a spread job crosses, rx what each one's
	// sharing adds to its iteration, circle and off its communication
	// on them and its phase (relink); seen is relink's pass mark.
	racks  []int
	rx     []float64
	circle sched.Circle
	off    float64
	seen   int
	// held is the progress at the last preemption or (re)start: a
	// waiting or restarting job must still be at it (checkProgress).
	held   float64
	tenant string // forward simulations: the job's tenant ("": A or B by class)
	// Forward simulations: the request's cores as the control plane
	// passes it (0: cpg × GPUs), and noIdeal: the control plane keeps no
	// IdealSeconds, so the policy is shown none either.
	reqCPUs int
	noIdeal bool
}

// Run simulates trace under policy p.
func Run(ctx context.Context, trace []dataset.WorkloadJob, models *Models, p sched.Policy, cfg Config) (*Result, error) {
	cfg = cfg.withDefaults()
	s := &simulator{cfg: cfg, p: p, models: models, r: &rates{m: models, cache: map[rateKey]rateVal{}}}
	if err := s.init(trace); err != nil {
		return nil, err
	}
	if !cfg.HideMeasured && models.Measured != nil && models.Measured.Len() > 0 {
		if cfg.Oracle {
			s.snap.Known = newKnown(s.r)
		} else {
			s.online = newOnline(s.r)
			s.snap.Known = s.online
		}
	}
	if err := s.loop(ctx); err != nil {
		return nil, err
	}
	return s.result(), nil
}

type simulator struct {
	cfg     Config
	p       sched.Policy
	models  *Models
	r       *rates
	jobs    []*job
	servers []sched.Server
	tenants []sched.Tenant
	now     float64
	heap    evHeap
	active  []*job // waiting or running at the round, in submission order
	live    []*job // submitted and not known finished (active plus finished since the last round)
	alloc   int
	rounds  int
	snap    sched.Snapshot
	wake    float64 // the policy's wake-up time (+Inf: none)
	hist    sched.TimerHistory
	spread  map[*job]bool // running jobs on two servers or more
	// online is what the policies know of measured speeds (nil: the
	// oracle's tables or nothing).
	online *online
	// uplinks are the rack uplinks with the spread jobs on them
	// (relink); rackOf maps a server to its uplink.
	uplinks []uplink
	rackOf  []int
	// dirty lists the uplinks whose jobs changed since the last relink
	// (arrivals and single-server jobs change no link).
	dirty []int
	stamp int      // relink's pass counter (job.seen)
	fwd   *forward // forward simulations from a live state (forward.go); nil for traces
}

// uplink is one rack's spine uplink: the spread jobs that cross it, in
// name order (the order LinkLoad sees them in).
type uplink struct {
	jobs  []*job
	dirty bool
}

func (s *simulator) init(trace []dataset.WorkloadJob) error {
	c := s.cfg
	s.servers = make([]sched.Server, c.Servers)
	for i := range s.servers {
		rack := "r0"
		if c.ServersPerRack > 0 {
			rack = "r" + strconv.Itoa(i/c.ServersPerRack)
		}
		s.servers[i] = sched.Server{ID: "s" + strconv.Itoa(i), Rack: rack, GPUs: c.GPUsPerServer, CPUs: c.CPUsPerServer, MemGB: c.MemGB,
			FreeGPUs: c.GPUsPerServer, FreeCPUs: c.CPUsPerServer, FreeMemGB: c.MemGB}
		if i < len(c.ServerLabels) {
			s.servers[i].Labels = c.ServerLabels[i]
		}
	}
	total := c.Servers * c.GPUsPerServer
	anySLA := false
	order := make([]int, len(trace))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return trace[order[a]].Submit < trace[order[b]].Submit })
	for _, k := range order {
		w := trace[k]
		name := perf.CanonicalName(w.Application)
		m, ok := s.models.Fitted[name]
		if !ok {
			return fmt.Errorf("%s:%d: application %q: no model for it", "trace", w.Line, w.Application)
		}
		if w.GPUs > total {
			return fmt.Errorf("trace:%d: job %s asks for %d GPUs, the cluster has %d", w.Line, w.Name, w.GPUs, total)
		}
		if err := s.checkLabels(w); err != nil {
			return err // labels.go
		}
		plan, err := dataset.PlanFromCode(w.ExecPlan, m.Arch, w.GPUs)
		if err != nil {
			return fmt.Errorf("trace:%d: job %s: %w", w.Line, w.Name, err)
		}
		if plan.MicroBatch == 0 {
			plan.MicroBatch = 1
		}
		if plan.TP > c.GPUsPerServer {
			// A TP group never spans servers: the daemon's admission
			// refuses this plan, and a policy that runs the user's plan
			// would leave the job waiting for ever.
			return fmt.Errorf("trace:%d: job %s: its plan %s has TP %d, a server has %d GPUs (--gpus-per-server): a tensor-parallel group never spans servers, it could never start", w.Line, w.Name, plan, plan.TP, c.GPUsPerServer)
		}
		j := &job{w: w, model: name, m: m, reqPlan: plan, class: sched.BestEffort, labels: w.LabelList()}
		if w.SLA && c.QuotaGPUs > 0 && w.GPUs > c.QuotaGPUs {
			return fmt.Errorf("trace:%d: guaranteed job %s asks for %d GPUs, its tenant's quota is %d: it could never start", w.Line, w.Name, w.GPUs, c.QuotaGPUs)
		}
		if w.SLA {
			j.class = sched.Guaranteed
			anySLA = true
		}
		cpg := max(1, w.CPUs/max(w.GPUs, 1))
		if cpg*c.GPUsPerServer > c.CPUsPerServer {
			cpg = max(1, c.CPUsPerServer/c.GPUsPerServer)
		}
		j.cpg = cpg
		// The promise is the request packed onto as few servers as
		// possible: inside one rack when it fits (measured when the table
		// has it); a request larger than a rack spans racks and is
		// promised its guaranteed share of the spine (the
		// oversubscription share the policies price), not the speed of a
		// job alone on the uplink.
		reqPl := perf.PackedPlacement(w.GPUs, c.GPUsPerServer)
		if c.ServersPerRack > 0 && w.GPUs > c.ServersPerRack*c.GPUsPerServer {
			if b, err := m.Predict(plan, perf.Resources{Placement: reqPl, CrossRack: true, CPUsPerGPU: float64(cpg)}); err == nil && b.Iter > 0 {
				j.promise = 1 / b.Iter
			}
		} else if it, _ := s.r.iter(name, plan, reqPl, false, cpg); it > 0 {
			j.promise = 1 / it
		}
		s.jobs = append(s.jobs, j)
	}
	if anySLA {
		q := c.QuotaGPUs
		if q <= 0 {
			q = total
		}
		s.tenants = []sched.Tenant{{Name: "A", QuotaGPUs: q}, {Name: "B", QuotaGPUs: 0}}
	}
	return nil
}

// promisedFor is the speed (iterations per second) of j's request as the
// control plane knows it now: the measured speed with --oracle, or once
// some job has run the request's configuration (the online knowledge of
// the default); else, and always with --hide-measured, the fitted model's
// prediction, as the daemon promises (issue 29: the policies were handed
// the measured promise whatever they knew). A request larger than a rack
// is promised its predicted guaranteed share of the spine either way.
func (s *simulator) promisedFor(j *job) float64 {
	if j.reqKnown {
		return j.promise
	}
	reqPl := perf.PackedPlacement(j.w.GPUs, s.cfg.GPUsPerServer)
	known := false
	if j.predicted == 0 {
		// first look: a request larger than a rack, or one with no
		// measured row, is promised the model's prediction already
		_, measured := s.r.iter(j.model, j.reqPlan, reqPl, false, j.cpg)
		known = !measured || s.cfg.ServersPerRack > 0 && j.w.GPUs > s.cfg.ServersPerRack*s.cfg.GPUsPerServer
	}
	if !known && !s.cfg.HideMeasured {
		if s.cfg.Oracle {
			known = true
		} else if s.online != nil {
			_, known = s.online.Throughput(j.m, j.reqPlan, reqPl, j.cpg)
		}
	}
	if known {
		j.reqKnown = true
		return j.promise
	}
	if j.predicted == 0 {
		j.predicted = -1
		if b, err := j.m.Predict(j.reqPlan, perf.Resources{Placement: reqPl, CPUsPerGPU: float64(j.cpg)}); err == nil && b.Iter > 0 {
			j.predicted = 1 / b.Iter
		}
	}
	return max(j.predicted, 0) // 0: unknown, the policy predicts it itself
}

func (s *simulator) emit(j *job, kind string) {
	if s.cfg.OnEvent == nil {
		return
	}
	s.cfg.OnEvent(Event{Time: s.now, Job: j.w.Name, Kind: kind, ItersDone: j.done, GPUs: j.gpus, AllocatedGPUs: s.alloc, Plan: j.plan.String(), Placement: j.pl.String()})
}

// advance brings a running job's progress and counters to time t.
func (s *simulator) advance(j *job, t float64) {
	if j.st != running {
		j.last = t
		return
	}
	start := math.Max(j.last, j.restart)
	if t > start {
		d := t - start
		j.done += d * j.rate
		j.runSec += d
		j.idealSec += d * j.rate * j.idealIter
		j.commExp += d * j.rate * (j.expIter + j.extra)
		j.commShared += d * j.rate * j.extra
		j.commShared0 += d * j.rate * j.extra0
		if j.sharing && j.baseIter > 0 {
			j.shareSec += d
			j.inflSum += d * j.extra / j.baseIter
		}
		if j.measured {
			j.measSec += d
		}
		if j.class == sched.Guaranteed && j.rate < j.promised*(1-1e-9) {
			j.sla += d
		}
	}
	if t > j.last {
		j.gpuSec += (t - j.last) * float64(j.gpus)
	}
	j.last = t
}

func (s *simulator) finishTime(j *job) float64 {
	left := float64(j.w.Steps) - j.done
	if left <= 1e-9 {
		return math.Max(s.now, j.restart)
	}
	if j.rate <= 0 {
		return math.Inf(1)
	}
	return math.Max(s.now, j.restart) + left/j.rate
}

func (s *simulator) loop(ctx context.Context) error {
	next := 0 // next arrival
	nextRound := math.Inf(-1)
	roundDue := false
	s.wake = math.Inf(1)
	if s.fwd != nil {
		next, s.wake = s.fwd.first, s.now // expected arrivals only; a round at once
	}
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		t := math.Inf(1)
		if next < len(s.jobs) {
			t = s.jobs[next].w.Submit
		}
		for s.heap.Len() > 0 {
			top := s.heap[0]
			if top.j.version != top.v || top.j.st != running {
				heap.Pop(&s.heap)
				continue
			}
			t = math.Min(t, top.t)
			break
		}
		if roundDue && nextRound < t {
			t = nextRound
		}
		wake := false
		if s.wake < t {
			t, wake = s.wake, true
		}
		if s.fwd != nil && s.fwd.done(s, t) {
			return nil
		}
		if math.IsInf(t, 1) {
			break
		}
		s.now = math.Max(s.now, t)
		changed := false
		// Completions.
		for s.heap.Len() > 0 {
			top := s.heap[0]
			if top.j.version != top.v || top.j.st != running {
				heap.Pop(&s.heap)
				continue
			}
			if top.t > s.now+1e-9 {
				break
			}
			heap.Pop(&s.heap)
			j := top.j
			s.advance(j, s.now)
			j.done = float64(j.w.Steps)
			j.st = finished
			j.finish = s.now
			s.release(j)
			s.emit(j, "finish")
			changed = true
		}
		// Arrivals.
		for next < len(s.jobs) && s.jobs[next].w.Submit <= s.now+1e-9 {
			j := s.jobs[next]
			j.st = waiting
			j.last = s.now
			s.live = append(s.live, j)
			s.emit(j, "submit")
			next++
			changed = true
		}
		if wake {
			// The policy asked to be woken up: a round with nothing new,
			// unless one is already due. Either way the wake-up is spent
			// (left set, it would hold the clock here forever).
			s.wake = math.Inf(1)
			if !changed && !roundDue {
				changed = true
			}
		}
		if changed {
			roundDue = true
			if s.cfg.RoundInterval <= 0 || nextRound < s.now {
				nextRound = s.now
				if s.cfg.RoundInterval > 0 {
					nextRound = math.Ceil(s.now/s.cfg.RoundInterval) * s.cfg.RoundInterval
				}
			}
		}
		if changed {
			s.relink()
		}
		if roundDue && nextRound <= s.now+1e-9 {
			roundDue = false
			if err := s.round(); err != nil {
				return err
			}
			s.relink()
			if s.cfg.RoundInterval > 0 {
				nextRound = s.now + s.cfg.RoundInterval
			}
		}
	}
	for _, j := range s.jobs {
		if j.st != finished {
			return fmt.Errorf("simulation ended with job %s unfinished (%s): no policy round could place it; last reason: %q", j.w.Name, map[jstate]string{pending: "never submitted", waiting: "waiting", running: "running"}[j.st], j.why)
		}
	}
	return nil
}

func (s *simulator) release(j *job) {
	for _, a := range j.alloc {
		sv := &s.servers[a.Server]
		sv.FreeGPUs += a.GPUs
		sv.FreeCPUs += a.CPUs
		sv.FreeMemGB += a.MemGB
		s.alloc -= a.GPUs
	}
	j.alloc = nil
	j.gpus = 0
	j.lastRun = s.now
	if s.spread[j] {
		s.unspread(j)
	}
	delete(s.spread, j)
	j.sharing, j.extra, j.extra0 = false, 0, 0
	j.version++
}

// round runs the policy once and applies its decisions.
func (s *simulator) round() error {
	s.rounds++
	// O(active jobs), not O(trace): live holds every submitted job not
	// yet seen finished, in submission order; drop the finished ones.
	n := 0
	for _, j := range s.live {
		if j.st == waiting || j.st == running {
			s.live[n] = j
			n++
		}
	}
	clear(s.live[n:])
	s.live = s.live[:n]
	s.active = s.live
	if len(s.active) == 0 {
		return nil
	}
	snap := &s.snap
	snap.Now = s.now
	snap.Servers = s.servers
	snap.Tenants = s.tenants
	snap.Jobs = snap.Jobs[:0]
	for _, j := range s.active {
		s.advance(j, s.now) // the last interval at the promise it ran under
		if !j.fixedPromise {
			j.promised = s.promisedFor(j)
		}
		tenant := "B"
		if j.class == sched.Guaranteed {
			tenant = "A"
		}
		if j.tenant != "" {
			tenant = j.tenant
		}
		reqCPUs, ideal := j.cpg*j.w.GPUs, j.idealSec
		if j.reqCPUs > 0 {
			reqCPUs = j.reqCPUs
		}
		if j.noIdeal {
			ideal = 0
		}
		snap.Jobs = append(snap.Jobs, sched.Job{
			ID: j.w.Name, Tenant: tenant, Class: j.class, Model: j.m,
			ReqGPUs: j.w.GPUs, ReqCPUs: reqCPUs, ReqPlan: j.reqPlan, Promise: j.promised * float64(j.m.Arch.GlobalBatch),
			Alloc: j.alloc, Plan: j.plan, Submit: j.w.Submit,
			ItersDone: j.done, ItersTotal: float64(j.w.Steps), Restarts: j.restarts, LastChange: j.changed,
			LastRun: j.lastRun, RunSeconds: j.runSec, IdealSeconds: ideal, Phase: j.phase,
			PinPlan: s.cfg.PinPlans, Labels: j.labels,
		})
	}
	servers := append([]sched.Server(nil), s.servers...)
	snap.Servers = servers
	s.hist.Prune(s.now, 7*24*3600)
	snap.History = s.hist
	snap.SpineGBps = s.models.SpineGBps
	d := s.p.Schedule(*snap)
	if err := sched.CheckInvariants(*snap, d); err != nil {
		return fmt.Errorf("policy %s at %.0f s: invariant violated: %w", s.p.Name(), s.now, err)
	}
	if err := s.checkProgress(); err != nil {
		return fmt.Errorf("policy %s at %.0f s: invariant violated: %w", s.p.Name(), s.now, err)
	}
	s.hist.Add(d.Observed...)
	for _, w := range d.Waiting {
		if w.Index >= 0 && w.Index < len(s.active) {
			s.active[w.Index].why = w.Reason
		}
	}
	s.wake = math.Inf(1)
	if d.WakeAt > s.now {
		s.wake = d.WakeAt
	}
	return s.apply(d)
}

func (s *simulator) apply(d sched.Decisions) error {
	// Release everything that changes, then take the new allocations, so
	// a decision may use GPUs another decision of the same round frees.
	for _, a := range d.Actions {
		if a.Index < 0 || a.Index >= len(s.active) || s.active[a.Index].w.Name != a.Job {
			return fmt.Errorf("policy %s: decision for unknown job %s", s.p.Name(), a.Job)
		}
		j := s.active[a.Index]
		switch a.Kind {
		case sched.Preempt, sched.Reconfigure:
			if j.st != running {
				return fmt.Errorf("policy %s: %s of job %s that is not running", s.p.Name(), a.Kind, j.w.Name)
			}
			s.advance(j, s.now)
			s.release(j)
		case sched.Start:
			if j.st != waiting {
				return fmt.Errorf("policy %s: start of job %s that is not waiting", s.p.Name(), j.w.Name)
			}
		}
	}
	for _, a := range d.Actions {
		j := s.active[a.Index]
		switch a.Kind {
		case sched.Preempt:
			j.st = waiting
			j.held = j.done
			j.preempts++
			j.plan = perf.Plan{}
			j.pl = nil
			s.emit(j, "preempt")
			continue
		case sched.Reconfigure:
			j.restarts++
		case sched.Start:
			if j.started {
				j.restarts++
			} else {
				j.started = true
				j.first = s.now
			}
		}
		if len(a.Alloc) == 0 {
			return fmt.Errorf("policy %s: %s of job %s with no GPUs", s.p.Name(), a.Kind, j.w.Name)
		}
		for _, al := range a.Alloc {
			if al.Server < 0 || al.Server >= len(s.servers) {
				return fmt.Errorf("policy %s: job %s on unknown server %d", s.p.Name(), j.w.Name, al.Server)
			}
			sv := &s.servers[al.Server]
			sv.FreeGPUs -= al.GPUs
			sv.FreeCPUs -= al.CPUs
			sv.FreeMemGB -= al.MemGB
			s.alloc += al.GPUs
			if sv.FreeGPUs < 0 || sv.FreeCPUs < 0 || sv.FreeMemGB < -1e-6 {
				return fmt.Errorf("policy %s: server %s over-committed by job %s (free GPUs %d, cores %d, memory %.0f GiB)", s.p.Name(), sv.ID, j.w.Name, sv.FreeGPUs, sv.FreeCPUs, sv.FreeMemGB)
			}
		}
		j.alloc = append([]sched.Alloc(nil), a.Alloc...)
		j.gpus = 0
		cpg := 1 << 30
		for _, al := range a.Alloc {
			j.gpus += al.GPUs
			if al.GPUs > 0 {
				cpg = min(cpg, al.CPUs/al.GPUs)
			}
		}
		j.plan = a.Plan
		j.pl = a.Placement
		if len(j.pl) == 0 {
			j.pl = placementFromAlloc(a.Alloc)
		}
		cross := false
		for _, al := range a.Alloc {
			if s.servers[al.Server].Rack != s.servers[a.Alloc[0].Server].Rack {
				cross = true
			}
		}
		it, meas := s.r.iter(j.model, j.plan, j.pl, cross, max(cpg, 1))
		if it <= 0 {
			return fmt.Errorf("policy %s: job %s: plan %s on %s cannot be priced", s.p.Name(), j.w.Name, j.plan, j.pl)
		}
		j.rate = 1 / it
		j.baseIter = it
		// Nw_sens's ideal: the same plan packed, alone on its links (never
		// slower than what it runs at).
		j.idealIter = it
		if packed := perf.PackedPlacement(j.gpus, s.cfg.GPUsPerServer); packed.String() != j.pl.String() {
			if ideal, _ := s.r.iter(j.model, j.plan, packed, false, max(cpg, 1)); ideal > 0 {
				j.idealIter = math.Min(ideal, it)
			}
		}
		j.comm, j.expIter = s.r.network(j.model, j.plan, j.pl, cross, max(cpg, 1), it)
		j.extra, j.sharing, j.extra0 = 0, false, 0
		j.measured = meas
		if meas && !cross && s.online != nil {
			// The control plane now knows this configuration's speed.
			if o := s.online.observe(j.model, j.plan, j.pl, max(cpg, 1)); o != s.online {
				s.online = o
				s.snap.Known = o
			}
		}
		j.st = running
		j.last = s.now
		shift := 0.0
		if !s.cfg.NoShifts && a.Kind != sched.Preempt {
			shift = math.Max(a.Shift, 0)
		}
		j.restart = s.now + s.cfg.RestartCost + shift
		j.shift = shift
		j.shiftSec += shift
		j.held = j.done
		j.phase = j.restart
		if cross && j.comm > 0 {
			s.addSpread(j)
		}
		j.changed = s.now
		j.version++
		heap.Push(&s.heap, ev{t: s.finishTime(j), j: j, v: j.version})
		if a.Kind == sched.Start {
			s.emit(j, "start")
		} else {
			s.emit(j, "reconfigure")
		}
	}
	return nil
}

// checkProgress is the simulator's half of the invariants: a waiting job
// (never started or preempted) and a running job inside its restart make
// no progress, and no job runs past its total or backwards.
func (s *simulator) checkProgress() error {
	for _, j := range s.active {
		switch {
		case j.done < -1e-9 || j.done > float64(j.w.Steps)*(1+1e-9)+1e-9:
			return fmt.Errorf("job %s at %.3f of %d iterations", j.w.Name, j.done, j.w.Steps)
		case j.st == waiting && j.done != j.held:
			return fmt.Errorf("job %s progressed from %.3f to %.3f iterations while waiting", j.w.Name, j.held, j.done)
		case j.st == running && s.now < j.restart && j.done != j.held:
			return fmt.Errorf("job %s progressed from %.3f to %.3f iterations while restarting", j.w.Name, j.held, j.done)
		case j.st == running && j.done < j.held:
			return fmt.Errorf("job %s went back from %.3f to %.3f iterations", j.w.Name, j.held, j.done)
		}
	}
	return nil
}

func placementFromAlloc(a []sched.Alloc) perf.Placement {
	var pl perf.Placement
	for _, x := range a {
		pl = append(pl, x.GPUs)
	}
	sort.Sort(sort.Reverse(sort.IntSlice(pl)))
	return pl
}

type ev struct {
	t float64
	j *job
	v int
}

type evHeap []ev

func (h evHeap) Len() int { return len(h) }
func (h evHeap) Less(a, b int) bool {
	if h[a].t != h[b].t {
		return h[a].t < h[b].t
	}
	return h[a].j.w.Name < h[b].j.w.Name
}
func (h evHeap) Swap(a, b int) { h[a], h[b] = h[b], h[a] }
func (h *evHeap) Push(x any)   { *h = append(*h, x.(ev)) }
func (h *evHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// relink prices link sharing: jobs whose communication arcs overlap on a
// rack's spine uplink beyond its capacity slow down in proportion (their
// arcs placed by their phases, sched.LinkLoad); a job's iteration grows by
// the most any of its links adds. Inside a rack nothing is shared: each
// GPU pair has its own NIC and the top-of-rack switch is non-blocking.
//
// Only the uplinks whose jobs changed since the last call are priced
// again (a start, a change, a finish on them), and only their jobs'
// slowdowns are revisited: the work follows what changed, not how many
// jobs span racks.
func (s *simulator) relink() {
	if len(s.dirty) == 0 {
		return
	}
	s.stamp++
	var touched []*job
	for _, r := range s.dirty {
		u := &s.uplinks[r]
		u.dirty = false
		var extra, extra0 []float64
		if len(u.jobs) >= 2 && !underCapacity(u.jobs) {
			cs := make([]sched.Circle, len(u.jobs))
			offs := make([]float64, len(u.jobs))
			for k, j := range u.jobs {
				cs[k], offs[k] = j.circle, j.off
			}
			_, _, extra = sched.LinkLoad(cs, offs, 1)
			if s.cfg.PriceUnshifted {
				for k, j := range u.jobs {
					offs[k] = math.Mod(j.phase-j.shift, j.baseIter)
				}
				_, _, extra0 = sched.LinkLoad(cs, offs, 1)
			}
		}
		for k, j := range u.jobs {
			x, x0 := 0.0, 0.0
			if extra != nil {
				x = extra[k]
			}
			if extra0 != nil {
				x0 = extra0[k]
			}
			n := slices.Index(j.racks, r)
			j.rx[n], j.rx0[n] = x, x0
			if j.seen != s.stamp {
				j.seen = s.stamp
				touched = append(touched, j)
			}
		}
	}
	s.dirty = s.dirty[:0]
	for _, j := range touched {
		e, e0, shared := 0.0, 0.0, false
		for n, r := range j.racks {
			if len(s.uplinks[r].jobs) >= 2 {
				shared = true
				e = math.Max(e, j.rx[n])
				e0 = math.Max(e0, j.rx0[n])
			}
		}
		if e0 != j.extra0 {
			s.advance(j, s.now)
			j.extra0 = e0
		}
		if math.Abs(e-j.extra) > 1e-12 || shared != j.sharing {
			s.setExtra(j, e, shared)
		}
	}
	if relinkHook != nil {
		relinkHook(s)
	}
}

// underCapacity reports whether the jobs' arc demands on an uplink sum
// below its capacity (1) by more than rounding: then no slot of any
// rotation is over capacity and sched.LinkLoad would slow nobody, so
// relink need not build the ring. The margin keeps the answer exact: an
// arc adds at most its demand (up to rounding) to any slot.
func underCapacity(js []*job) bool {
	sum := 0.0
	for _, j := range js {
		for _, a := range j.circle.Arcs {
			if !(a.Demand >= 0) {
				return false
			}
			sum += a.Demand
		}
	}
	return sum <= 1-1e-9
}

// relinkHook, when set (tests), runs after every relink that priced
// something.
var relinkHook func(*simulator)

// addSpread puts a running job that spans servers on its racks' uplinks.
func (s *simulator) addSpread(j *job) {
	if s.spread == nil {
		s.spread = map[*job]bool{}
	}
	if s.spread[j] {
		s.unspread(j)
	}
	s.spread[j] = true
	if s.rackOf == nil {
		idx := map[string]int{}
		s.rackOf = make([]int, len(s.servers))
		for i, sv := range s.servers {
			r, ok := idx[sv.Rack]
			if !ok {
				r = len(idx)
				idx[sv.Rack] = r
			}
			s.rackOf[i] = r
		}
		s.uplinks = make([]uplink, len(idx))
	}
	j.circle = sched.CommCircle(j.baseIter, j.comm, sched.SpineDemand(s.models.Env, j.pl[0], s.models.SpineGBps))
	j.off = math.Mod(j.phase, j.baseIter)
	j.racks = j.racks[:0]
	for _, a := range j.alloc {
		r := s.rackOf[a.Server]
		if !slices.Contains(j.racks, r) {
			j.racks = append(j.racks, r)
		}
	}
	j.rx = append(j.rx[:0], make([]float64, len(j.racks))...)
	j.rx0 = append(j.rx0[:0], make([]float64, len(j.racks))...)
	for _, r := range j.racks {
		u := &s.uplinks[r]
		k := u.index(j)
		u.jobs = slices.Insert(u.jobs, k, j)
		s.markDirty(r)
	}
}

// unspread takes a job off its racks' uplinks.
func (s *simulator) unspread(j *job) {
	for _, r := range j.racks {
		u := &s.uplinks[r]
		if k := u.find(j); k >= 0 {
			u.jobs = slices.Delete(u.jobs, k, k+1)
		}
		s.markDirty(r)
	}
	j.racks = j.racks[:0]
}

func (s *simulator) markDirty(r int) {
	if !s.uplinks[r].dirty {
		s.uplinks[r].dirty = true
		s.dirty = append(s.dirty, r)
	}
}

// index is where job j would go in the uplink's name order.
func (u *uplink) index(j *job) int {
	k, _ := slices.BinarySearchFunc(u.jobs, j, func(a, b *job) int { return strings.Compare(a.w.Name, b.w.Name) })
	return k
}

// find is where job j is on the uplink (-1: not there).
func (u *uplink) find(j *job) int {
	for k := u.index(j); k < len(u.jobs) && u.jobs[k].w.Name == j.w.Name; k++ {
		if u.jobs[k] == j {
			return k
		}
	}
	return -1
}

// setExtra changes a running job's link-sharing slowdown from now on.
func (s *simulator) setExtra(j *job, extra float64, sharing bool) {
	s.advance(j, s.now)
	j.extra, j.sharing = extra, sharing
	if j.baseIter > 0 {
		j.rate = 1 / (j.baseIter + extra)
	}
	j.version++
	heap.Push(&s.heap, ev{t: s.finishTime(j), j: j, v: j.version})
}
