package control

import (
	"context"

	"github.com/replan/replan/jobspec"
	"github.com/replan/replan/launch"
	"github.com/replan/replan/perf"
)

// Launch is everything an executor needs to start a job with a plan.
type Launch struct {
	JobID   string          `json:"job_id"`
	Spec    *jobspec.Spec   `json:"spec"`
	Plan    perf.Plan       `json:"plan"`
	Servers []launch.Server `json:"servers"` // rank order, with device and core ids
	Attempt int             `json:"attempt"`
	Resume  bool            `json:"resume"`         // start from the last checkpoint
	From    int             `json:"from_iteration"` // the checkpoint's iteration when resuming
	// Shift delays the job's first iteration by this many seconds (CASSINI:
	// its communication then interleaves with the jobs sharing its links).
	Shift float64 `json:"shift_s,omitempty"`
	// CheckpointPlan is the plan the checkpoint was written with when it
	// differs from Plan (a job requeued and started with another plan):
	// DeepSpeed checkpoints are converted to the universal format first.
	CheckpointPlan perf.Plan `json:"checkpoint_plan,omitzero"`
	// SaveInterval is the checkpoint interval in iterations replan chose
	// (launch.Input.SaveInterval; 0: the job's args set their own, or
	// none was chosen).
	SaveInterval int `json:"save_interval,omitempty"`
}

// JobObservation is what an executor saw of a job since the last Observe.
type JobObservation struct {
	JobID         string  `json:"job_id"`
	Iterations    int     `json:"iterations"`      // done so far
	Checkpoint    int     `json:"checkpoint"`      // iteration of the last checkpoint
	SamplesPerSec float64 `json:"samples_per_sec"` // latest measured throughput, 0 if none
	Exited        bool    `json:"exited"`
	ExitCode      int     `json:"exit_code"`
	Err           string  `json:"err,omitempty"`
}

// NodeObservation is a server's heartbeat.
type NodeObservation struct {
	Name      string `json:"name"`
	Reachable bool   `json:"reachable"`
	Err       string `json:"err,omitempty"`
	// BootID is the server's boot id as its agent reports it ("" when
	// unknown): a change means the server rebooted (redeploy.go).
	BootID string `json:"boot_id,omitempty"`
	// GPUs are the server's GPU figures, when the executor reports them
	// (telemetry.go).
	GPUs []GPUStat `json:"gpus,omitempty"`
}

// Observation is one Observe's worth of news.
type Observation struct {
	Jobs  []JobObservation  `json:"jobs"`
	Nodes []NodeObservation `json:"nodes"`
}

// Executor carries decisions out. Two implement it: the real one (launch/
// + ssh/ + the agent on every server) and a simulated one (measured
// iteration times on a virtual clock) used by tests and `replan demo`. The
// daemon writes every state change to the store before it calls an
// executor, so an executor may be restarted at any moment.
type Executor interface {
	// Start launches l (from its checkpoint when l.Resume).
	Start(ctx context.Context, l Launch) error
	// Reconfigure moves a running job from one launch to another with
	// launch.Reconfigure's sequence (checkpoint, stop, convert, relaunch,
	// verify), keeping the global batch.
	Reconfigure(ctx context.Context, from, to Launch, lastIteration int) error
	// Stop ends a job; with checkpoint it first asks for a checkpoint.
	// It returns the iteration the job can resume from.
	Stop(ctx context.Context, jobID string, checkpoint bool) (int, error)
	// Observe reports progress, exits and heartbeats.
	Observe(ctx context.Context) (Observation, error)
	// Adopt re-attaches to a job the store says is running (after the
	// daemon restarted). It reports false when the job is not running
	// there any more; the daemon then returns it to the queue from its
	// last checkpoint.
	Adopt(ctx context.Context, l Launch) (bool, error)
}
