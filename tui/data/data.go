// Package data holds what the TUI shows, as its screens read it: the rows
// the backend returns (status, servers, queue, jobs, job detail, events) and
// the typed messages that carry them into the Bubble Tea program.
//
// The types are the TUI's own, not the control API's, so that the screens
// depend on nothing but perf for plans; the control adapter
// (tui/controlbackend) converts.
package data

import (
	"time"

	"github.com/replan/replan/perf"
)

// Status is the cluster summary in the title bar.
type Status struct {
	Version  string
	Policy   string
	Servers  int
	GPUs     int
	FreeGPUs int
	Jobs     int
	// Waiting is the number of jobs the last round left waiting.
	Waiting int
	// RoundAt is when the last scheduling round ran and RoundTook how long.
	RoundAt   time.Time
	RoundTook time.Duration
	// Now is the backend's clock when it answered (zero: unknown);
	// UnusableGPUs are idle GPUs on drained or unreachable servers.
	Now          time.Time
	UnusableGPUs int
	// Role is the answering daemon's ("leader" or "follower"), Leader the
	// leader's address, Members how many daemons there are and Epoch the
	// leader's (a highly available control plane, docs/ha.md).
	Role    string
	Leader  string
	Members int
	Epoch   uint64
}

// Node is one server.
type Node struct {
	Name      string
	Rack      string
	GPUs      int
	Reachable bool
	Drained   bool
	Missed    int // heartbeats missed in a row
	FreeGPUs  int
	// Owners is the job holding each GPU index ("" when free).
	Owners []string
	// GPUs are the GPUs' figures as last observed (nil: not reported);
	// IdleHeld the indices a job holds that do nothing.
	Stats    []GPUStat
	IdleHeld []int
	// Cordoned are the GPUs that get no new work, with why.
	Cordoned []Cordon
	// Suspect: the server gets no new starts (launches failed there, or
	// it ran jobs slow); SuspectWhy says why.
	Suspect    bool
	SuspectWhy string
	// State is the daemon's word for the server (up, drained, draining,
	// suspect, redeploying, down); DownWhy why its agent could not be
	// started again (control/redeploy.go), "" otherwise.
	State   string
	DownWhy string
}

// Cordon is a cordoned GPU and why (an Xid, an ECC error, ...).
type Cordon struct {
	GPU int
	Why string
}

// GPUStat is one GPU's telemetry.
type GPUStat struct {
	Index                          int
	UtilPct, MemUsedGB, MemTotalGB float64
	TempC, PowerW                  float64
	ECC, Xid                       int
	// Processes are the compute processes on the GPU (nil: none or not
	// reported).
	Processes []GPUProcess
}

// GPUProcess is a process on a GPU and the GPU memory it uses.
type GPUProcess struct {
	PID   int
	MemGB float64
}

// Util is the mean utilisation of a server's GPUs and how many report.
func (n Node) Util() (float64, int) {
	sum := 0.0
	for _, g := range n.Stats {
		sum += g.UtilPct
	}
	if len(n.Stats) == 0 {
		return 0, 0
	}
	return sum / float64(len(n.Stats)), len(n.Stats)
}

// DelayTimers are a waiting job's placement delay timers (Dally). Every
// field is optional: a backend that does not know one leaves it zero and
// the queue screen hides columns nobody provides.
type DelayTimers struct {
	// ServerTimer and RackTimer are what is left of each timer at the time
	// of the poll: while they run the job refuses offers that span servers
	// (resp. racks). They count down locally between polls.
	ServerTimer time.Duration
	RackTimer   time.Duration
	// Starved is the job's starvation time at the poll; it counts up.
	Starved time.Duration
	// AcceptTier is the widest tier the job accepts now: "server", "rack"
	// or "cluster".
	AcceptTier string
	// NwSens is (I_done/I_total)/(T_run/T_ideal); offers go in increasing
	// order of it. HasNwSens tells a real 0 from unknown.
	NwSens    float64
	HasNwSens bool
}

// QueueRow is a waiting job (queued, preempted or held) and why it waits.
type QueueRow struct {
	ID     string
	Name   string
	Class  string
	Tenant string
	State  string
	GPUs   int
	// Waited is how long it had waited at the poll.
	Waited time.Duration
	Reason string
	// Timers is nil when the backend does not report delay timers.
	Timers *DelayTimers
	// ETA is the estimated start, from the poll (HasETA false: none, and
	// ETAReason says why).
	ETA       time.Duration
	HasETA    bool
	ETAReason string
}

// Server is one server of a job's placement and the GPU indices it holds.
type Server struct {
	Name string
	GPUs []int
}

// Job is a job with its plan and placement.
type Job struct {
	ID     string
	Name   string
	Tenant string
	Class  string
	State  string
	Reason string
	// Arch is the model architecture from the job's spec; HasArch is false
	// when the spec could not be read.
	Arch    perf.Arch
	HasArch bool
	// Plan is the current execution plan; PlanString its compact form
	// (perf.Plan.String), "" when the job has none.
	Plan       perf.Plan
	PlanString string
	// Placement is where it runs; PlacementString a compact summary that an
	// event may update before the next poll.
	Placement       []Server
	PlacementString string
	RequestGPUs     int
	Iterations      int
	TotalIterations int
	Restarts        int
	SubmittedAt     time.Time
	StartedAt       time.Time
	// PredictedSPS and MeasuredSPS are samples/s: what the scheduler
	// predicted for the current plan and what the job last reported (0:
	// not yet). PromisedSPS is a guaranteed job's promise; SLA is "ok" or
	// "below" for guaranteed jobs, "" otherwise. Shift is the time-shift of
	// its launch (CASSINI).
	PredictedSPS, MeasuredSPS, PromisedSPS float64
	SLA                                    string
	Shift                                  time.Duration
	// RestartLeft is how long its checkpoint-restart still takes at the
	// poll (0: it runs).
	RestartLeft time.Duration
}

// GPUs is the number of GPUs the job holds.
func (j Job) GPUs() int {
	n := 0
	for _, s := range j.Placement {
		n += len(s.GPUs)
	}
	return n
}

// PerfPlacement is the placement as perf counts it (GPUs per server).
func (j Job) PerfPlacement() perf.Placement {
	var pl perf.Placement
	for _, s := range j.Placement {
		if len(s.GPUs) > 0 {
			pl = append(pl, len(s.GPUs))
		}
	}
	return pl
}

// Transition is one change of a job's state.
type Transition struct {
	From, To string
	Reason   string
	At       time.Time
}

// Decision is a scheduling decision about a job, with its reason.
type Decision struct {
	ID         int64
	Kind       string // start, reconfigure, preempt, wait
	Plan       string // compact plan, for start and reconfigure
	Placement  string // as people say it, e.g. "2 servers × 4 GPUs" (cluster.PlacementText)
	Throughput float64
	Reason     string
	At         time.Time
}

// JobDetail is one job with its history and decisions (oldest first).
type JobDetail struct {
	Job Job
	// Log is the tail of the job's training log (rank 0, at most the
	// backend's bound of lines, control sequences stripped), when the
	// backend can read it.
	Log []string
	// Spec is the job's spec as the backend gives it (the API redacts env
	// values for whoever may not see them), one line per element; nil when
	// it has none.
	Spec []string
	// Attempts are the job's launches, oldest first (nil: the backend does
	// not list them).
	Attempts []Attempt
	// Curve is the job's sensitivity curve from the backend's fitted model,
	// when it has one (else the screen computes the unfitted model's).
	Curve       []perf.CurvePoint
	History     []Transition
	Decisions   []Decision
	FetchedAt   time.Time
	Unavailable string // set when the job could not be fetched
}

// Attempt is one launch of a job, like a line of sacct: from a start (or a
// reconfiguration) to what ended it.
type Attempt struct {
	N          int    // 1 the first launch
	Kind       string // start or reconfigure
	Start, End time.Time
	// End is zero while it runs.
	GPUs      int
	Placement string // as people say it, e.g. "2 servers × 8 GPUs"
	Plan      string
	// State is how it ended: the state the job went to, "reconfigured",
	// or "running" while it runs.
	State    string
	ExitCode *int
	Reason   string
}

// Event is an entry of the event stream.
type Event struct {
	ID    int64
	Kind  string
	JobID string
	Node  string
	Msg   string
	// Plan and Placement are set by start and reconfigure events.
	Plan      string
	Placement string
	At        time.Time
}
