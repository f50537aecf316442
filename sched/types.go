package sched

import (
	"fmt"
	"slices"
	"strings"

	"github.com/replan/replan/perf"
)

// Class is a job's service class.
type Class int

// Service classes. Guaranteed jobs consume their tenant's quota and are
// promised at least the throughput of their request; best-effort jobs use
// what is left and may be shrunk or preempted at any time.
const (
	BestEffort Class = iota
	Guaranteed
)

func (c Class) String() string {
	if c == Guaranteed {
		return "guaranteed"
	}
	return "best-effort"
}

// Server is one machine of the snapshot. Capacities are what the machine
// has; the Free fields are what no job of the snapshot holds (capacity minus
// the allocations of running jobs, minus anything held outside replan).
type Server struct {
	ID        string
	Rack      string
	GPUs      int
	CPUs      int
	MemGB     float64
	FreeGPUs  int
	FreeCPUs  int
	FreeMemGB float64
	// Labels are the server's labels (node features; the inventory's
	// labels): a job with Job.Labels runs only on servers that carry them.
	Labels map[string]string
}

// Tenant owns a GPU quota for its guaranteed jobs.
type Tenant struct {
	Name      string
	QuotaGPUs int
}

// Alloc is a job's share of one server. Server indexes Snapshot.Servers.
type Alloc struct {
	Server int
	GPUs   int
	CPUs   int
	MemGB  float64
}

// Job is a training job as the scheduler sees it.
type Job struct {
	ID     string
	Tenant string
	Class  Class
	// Model is the fitted performance model of the job's model type. Jobs of
	// one type share the pointer; caches are keyed by it.
	Model *perf.Model
	// The request: GPUs, CPU cores and the plan the user asked for. For a
	// guaranteed job it is the baseline its promised throughput is
	// measured on (packed onto as few servers as possible).
	ReqGPUs int
	ReqCPUs int
	ReqPlan perf.Plan
	// Promise is the throughput (samples/s) of the request when it is
	// known from measurements; 0 means the model's prediction of the
	// request is used. Guaranteed jobs are promised at least this much.
	Promise float64
	// Current allocation and plan; Alloc is empty while the job waits.
	Alloc []Alloc
	Plan  perf.Plan
	// Submit is the submission time in seconds (same clock as Snapshot.Now).
	Submit float64
	// Progress in iterations (the global batch is fixed, so iterations are
	// the unit of work).
	ItersDone  float64
	ItersTotal float64
	Restarts   int
	// LastChange is when the job last started or was reconfigured (same
	// clock as Snapshot.Now); jobs changed within Options.MinDwell are
	// left alone unless a guaranteed job below its minRes needs them.
	LastChange float64
	// LastRun is when the job last held resources (0: never; its
	// starvation time then runs from Submit). Delay scheduling.
	LastRun float64
	// RunSeconds is the time the job has held resources so far (for
	// Dally's Nw_sens; 0: unknown, Nw_sens 1).
	RunSeconds float64
	// IdealSeconds is how long the job's iterations so far would have
	// taken at the ideal speed of the GPUs it held (the same plan packed
	// onto as few servers as possible, no link sharing): Dally's Nw_sens
	// is IdealSeconds / RunSeconds (0: unknown, estimated from ItersDone).
	IdealSeconds float64
	// Phase is, for a running job, a time (Snapshot.Now's clock) at which
	// one of its iterations began: where its communication arcs sit for
	// the time-shifts of jobs that start next to it (0: unknown).
	Phase float64
	// PinPlan: the job always runs ReqPlan on ReqGPUs GPUs (its spec's
	// pin.plan). Tiers are the placement tiers it allows (pin.tiers; the
	// widest bounds its spread; empty: any). Policies offer only what
	// satisfies both (pin.go).
	PinPlan bool
	Tiers   []perf.Tier
	// Labels are the labels every server of the job's allocation must
	// carry (its spec's constraint.labels: "name" or "name=value"; empty:
	// any server). Policies offer only such servers (labels.go).
	Labels []string
}

// Running reports whether the job holds resources.
func (j *Job) Running() bool { return len(j.Alloc) > 0 }

// GPUs is the number of GPUs the job holds.
func (j *Job) GPUs() int {
	n := 0
	for _, a := range j.Alloc {
		n += a.GPUs
	}
	return n
}

// CPUs is the number of CPU cores the job holds.
func (j *Job) CPUs() int {
	n := 0
	for _, a := range j.Alloc {
		n += a.CPUs
	}
	return n
}

// Snapshot is everything one scheduling round sees.
type Snapshot struct {
	Now     float64
	Servers []Server
	Tenants []Tenant
	Jobs    []Job
	// Known, when set, gives measured throughputs the caller trusts more
	// than the performance model (observed runs, measured tables). The
	// policies prefer them to predictions wherever they exist.
	Known Known
	// History is the delay-timer auto-tuner's memory (network-aware
	// policies): the caller keeps it and adds each round's
	// Decisions.Observed. The zero value is no history (default timers).
	History TimerHistory
	// SpineGBps is each rack's uplink into the spine in GB/s (the
	// inventory's Rack.SpineGBps): the link cross-rack jobs share, on
	// which time-shifts interleave them. 0: the A800 reference value.
	SpineGBps float64
}

// Known reports measured throughputs. Implementations must be comparable
// (a pointer) and return the same answers for the life of a Policy's use
// of them; policies reset their caches when the Known value changes.
type Known interface {
	// Throughput is the measured samples per second of plan p on
	// placement pl (fullest server first, within one rack) with cpg cores
	// per GPU.
	Throughput(m *perf.Model, p perf.Plan, pl perf.Placement, cpg int) (float64, bool)
	// Plans lists the plans with a measured throughput on pl.
	Plans(m *perf.Model, pl perf.Placement) []perf.Plan
}

// FillFree sets every server's Free fields to its capacity minus the
// allocations of the snapshot's jobs. Callers that track free resources
// themselves need not call it.
func (s *Snapshot) FillFree() {
	for i := range s.Servers {
		sv := &s.Servers[i]
		sv.FreeGPUs, sv.FreeCPUs, sv.FreeMemGB = sv.GPUs, sv.CPUs, sv.MemGB
	}
	for i := range s.Jobs {
		for _, a := range s.Jobs[i].Alloc {
			sv := &s.Servers[a.Server]
			sv.FreeGPUs -= a.GPUs
			sv.FreeCPUs -= a.CPUs
			sv.FreeMemGB -= a.MemGB
		}
	}
}

// Kind is the kind of a decision.
type Kind int

// Decision kinds.
const (
	// Start launches a waiting job with Plan on Alloc.
	Start Kind = iota
	// Reconfigure checkpoints a running job and relaunches it with a new
	// plan and/or allocation.
	Reconfigure
	// Preempt checkpoints a running job and returns it to the queue.
	Preempt
)

func (k Kind) String() string {
	switch k {
	case Start:
		return "start"
	case Reconfigure:
		return "reconfigure"
	case Preempt:
		return "preempt"
	}
	return "unknown"
}

// Decision is one change to apply. For Preempt only Job, Index and Why are
// set.
type Decision struct {
	Kind  Kind
	Job   string
	Index int // index into Snapshot.Jobs
	Plan  perf.Plan
	Alloc []Alloc
	// Placement is the GPU count per server of Alloc, fullest first: the
	// form the performance model and the measured tables use.
	Placement perf.Placement
	// Throughput is the predicted samples per second of Plan on Alloc.
	Throughput float64
	Why        string
	// Shift, for a Start or Reconfigure of a policy with time-shifts
	// (replan, WithShifts), is the delay in seconds to add to the job's
	// start (after the checkpoint-restart the policy assumes) so its
	// communication interleaves with the jobs that share its links
	// (CASSINI); 0 otherwise.
	Shift float64
	// Tier is the widest network tier Alloc spans.
	Tier perf.Tier
}

func (d Decision) String() string {
	if d.Kind == Preempt {
		return fmt.Sprintf("preempt %s (%s)", d.Job, d.Why)
	}
	return fmt.Sprintf("%s %s on %s with %s: %.2f samples/s (%s)", d.Kind, d.Job, d.Placement, d.Plan, d.Throughput, d.Why)
}

// Wait is a job left waiting and why, in words a user understands.
type Wait struct {
	Job    string
	Index  int
	Reason string
}

// Decisions is the outcome of one round: changes, in the order to apply
// them (preemptions and shrinks before the starts they make room for), and
// the reason for every waiting job.
type Decisions struct {
	Actions []Decision
	Waiting []Wait
	// WakeAt, when > 0, is a time (Snapshot.Now's clock) at which the
	// policy would decide differently even if nothing else happened (a
	// job's MinDwell ends): the caller should run a round then.
	WakeAt float64
	// Timers is every waiting job's delay-timer state (network-aware
	// policies only), for the queue view.
	Timers []JobTimers
	// Observed are the auto-tuner observations of this round's starts: the
	// caller adds them to the TimerHistory of the next snapshot.
	Observed []TimerObs
	// Links reports the time-shift computation (network-aware policies).
	Links LinkReport
}

// Policy is a scheduling policy. Schedule must not modify the snapshot.
// Policies keep caches of pure computations (curves, best plans) between
// rounds, so a Policy value must not be used by two goroutines at once.
type Policy interface {
	Name() string
	Schedule(s Snapshot) Decisions
}

// placementOf returns the GPU counts of allocs, fullest server first.
func placementOf(allocs []Alloc) perf.Placement {
	pl := make(perf.Placement, 0, len(allocs))
	for _, a := range allocs {
		if a.GPUs > 0 {
			pl = append(pl, a.GPUs)
		}
	}
	// insertion sort, fullest first: placements are short
	for i := 1; i < len(pl); i++ {
		for k := i; k > 0 && pl[k] > pl[k-1]; k-- {
			pl[k], pl[k-1] = pl[k-1], pl[k]
		}
	}
	return pl
}

// crossRack reports whether allocs span racks.
func crossRack(servers []Server, allocs []Alloc) bool {
	for _, a := range allocs[min(1, len(allocs)):] {
		if servers[a.Server].Rack != servers[allocs[0].Server].Rack {
			return true
		}
	}
	return false
}

// Names lists the policy names New accepts, in table order.
func Names() []string {
	return []string{"static", "plan-only", "resources-only", "synergy", "antman", "morphling", "tiresias", "gandiva", "dally-manual", "dally", "replan"}
}

// New returns the policy called name with default options.
func New(name string) (Policy, error) {
	switch name {
	case "static":
		return NewStatic(), nil
	case "plan-only":
		return NewPlanOnly(), nil
	case "resources-only":
		return NewResourcesOnly(DefaultOptions()), nil
	case "synergy":
		return NewSynergy(), nil
	case "antman":
		return NewAntMan(), nil
	case "morphling":
		return NewMorphling(DefaultOptions()), nil
	case "tiresias":
		return NewTiresias(), nil
	case "gandiva":
		return NewGandiva(), nil
	case "dally-manual":
		return NewDally(false), nil
	case "dally":
		return NewDally(true), nil
	case "replan":
		return NewReplan(DefaultOptions(), DefaultNetOptions()), nil
	}
	return nil, fmt.Errorf("unknown policy %q (want %s)", name, strings.Join(Names(), ", "))
}

// NewWithRestartCost is New with the checkpoint-restart cost the
// curve-driven policies (and synergy's core re-tuning) weigh
// reconfigurations against (the other FIFO baselines never reconfigure and
// ignore it).
func NewWithRestartCost(name string, restartCost float64) (Policy, error) {
	o := DefaultOptions()
	switch {
	case restartCost > 0:
		o.RestartCost = restartCost
	case restartCost < 0: // free restarts
		o.RestartCost = 1e-6
	}
	switch name {
	case "synergy":
		f := NewSynergy()
		f.opt = o
		return f, nil
	case "resources-only":
		return NewResourcesOnly(o), nil
	case "morphling":
		return NewMorphling(o), nil
	case "replan":
		return NewReplan(o, DefaultNetOptions()), nil
	}
	return New(name)
}

// Orders are the values SetOrder takes: "shortest" (replan's default,
// NetOptions.ShortestFirst) and "submission" (Morphling's order).
var Orders = []string{"shortest", "submission"}

// SetOrder sets the order among the jobs whose slopes tie of a policy
// New or NewWithRestartCost made (`--order` of replan daemon and replan
// sim): "shortest" (the earliest submission + predicted remaining run
// first) or "submission". Only replan has the choice; "" leaves every
// policy's own order, and any other value is an error naming the policy.
func SetOrder(p Policy, order string) error {
	n, err := replanChoice(p, "order", order, Orders, "only replan takes an order (policy %s has its own)")
	if n != nil {
		n.ShortestFirst = order == "shortest"
	}
	return err
}

// replanChoice checks value, a choice of what among choices for replan
// (SetOrder, SetHold): replan's network options to set, or nil with no
// error when value is "", or an error (notReplan names the policy when p
// is not replan).
func replanChoice(p Policy, what, value string, choices []string, notReplan string) (*NetOptions, error) {
	if value == "" {
		return nil, nil
	}
	if !slices.Contains(choices, value) {
		return nil, fmt.Errorf("%s %q: want one of %s", what, value, strings.Join(choices, ", "))
	}
	m, ok := p.(*Morphling)
	if !ok || m.net == nil {
		return nil, fmt.Errorf("%s %q: "+notReplan, what, value, p.Name())
	}
	return m.net, nil
}

// Holds are the values SetHold takes: "priced" (replan's default: the
// uplink hold, priced against the shortest-first order where the uplink's
// load fits it, NetOptions.UplinkHoldSwap), "unpriced" (the hold without
// that price: fewer jobs start beside ones they do not interleave with,
// at a cost in average JCT; docs/network.md "The hold priced against the
// order") and "off" (no uplink hold).
var Holds = []string{"priced", "unpriced", "off"}

// SetHold sets replan's uplink hold (`--hold` of replan daemon and replan
// sim) of a policy New or NewWithRestartCost made. Only replan has one; ""
// leaves it as it is, and any other value is an error naming the policy.
func SetHold(p Policy, hold string) error {
	n, err := replanChoice(p, "hold", hold, Holds, "only replan has an uplink hold (policy %s has none)")
	if n == nil {
		return err
	}
	d := DefaultNetOptions()
	n.UplinkHold, n.UplinkHoldSwap = d.UplinkHold, d.UplinkHoldSwap
	switch hold {
	case "unpriced":
		n.UplinkHoldSwap = -1
	case "off":
		n.UplinkHold = -1
	}
	return nil
}
