package control

import (
	"context"
	"encoding/json"
	"errors"
	"time"
)

// JobState is where a job is in its life.
type JobState string

// Job states. Queued jobs wait for the scheduler; Held ones are kept out of
// scheduling by an operator; Running ones have a placement; Preempted ones
// wait again from their last checkpoint; the last three are final.
const (
	StateQueued    JobState = "queued"
	StateHeld      JobState = "held"
	StateRunning   JobState = "running"
	StatePreempted JobState = "preempted"
	StateFinished  JobState = "finished"
	StateFailed    JobState = "failed"
	StateCancelled JobState = "cancelled"
)

// Final reports whether no further transition is possible.
func (s JobState) Final() bool {
	return s == StateFinished || s == StateFailed || s == StateCancelled
}

// JobRecord is a job as the store keeps it.
type JobRecord struct {
	ID          string          `json:"id"`
	Name        string          `json:"name"`
	Tenant      string          `json:"tenant"`
	Class       string          `json:"class"`
	Spec        json.RawMessage `json:"spec"` // the validated jobspec.Spec
	State       JobState        `json:"state"`
	Reason      string          `json:"reason,omitempty"` // why it waits, failed, ...
	Plan        json.RawMessage `json:"plan,omitempty"`
	Placement   json.RawMessage `json:"placement,omitempty"`
	SubmittedAt time.Time       `json:"submitted_at"`
	StartedAt   time.Time       `json:"started_at,omitzero"`
	FinishedAt  time.Time       `json:"finished_at,omitzero"`
	Iterations  int             `json:"iterations"` // done, as last measured
	Checkpoint  int             `json:"checkpoint"` // iteration of the last checkpoint
	Restarts    int             `json:"restarts"`   // relaunches (preemption, reconfiguration, failure)
	Failures    int             `json:"failures"`   // non-zero exits and failed launches
	Attempt     int             `json:"attempt"`
	Version     int64           `json:"version"` // bumped by every update (optimistic concurrency)
}

// Transition is one entry of a job's state history.
type Transition struct {
	JobID  string    `json:"job_id"`
	From   JobState  `json:"from"`
	To     JobState  `json:"to"`
	Reason string    `json:"reason"`
	At     time.Time `json:"at"`
}

// DecisionRecord is a scheduling decision with its reason, as applied.
type DecisionRecord struct {
	ID     int64           `json:"id"`
	JobID  string          `json:"job_id"`
	Kind   string          `json:"kind"` // start, reconfigure, preempt, wait
	Detail json.RawMessage `json:"detail"`
	Reason string          `json:"reason"`
	At     time.Time       `json:"at"`
}

// Event is an entry of the event stream the TUI and `replan events` follow.
type Event struct {
	ID    int64           `json:"id"`
	Kind  string          `json:"kind"`
	JobID string          `json:"job_id,omitempty"`
	Node  string          `json:"node,omitempty"`
	Msg   string          `json:"msg"`
	Data  json.RawMessage `json:"data,omitempty"`
	At    time.Time       `json:"at"`
	// User is who made the request that caused the event ("": the
	// daemon itself, e.g. a scheduling round).
	User string `json:"user,omitempty"`
}

// NodeRecord is the last known state of a server.
type NodeRecord struct {
	Name      string `json:"name"`
	Reachable bool   `json:"reachable"`
	Drained   bool   `json:"drained"`
	Missed    int    `json:"missed_heartbeats"`
	// Suspect is set when launches of several jobs failed there (no new
	// starts); SuspectWhy names the failures. Cleared by undrain or a
	// passing health check.
	Suspect    bool            `json:"suspect,omitempty"`
	SuspectWhy string          `json:"suspect_why,omitempty"`
	Status     json.RawMessage `json:"status,omitempty"` // the agent's last report
	UpdatedAt  time.Time       `json:"updated_at"`
}

// TimerWait is one delay-timer observation: a job of GPUs GPUs accepted an
// offer at tier after waiting Wait.
type TimerWait struct {
	Tier string        `json:"tier"`
	GPUs int           `json:"gpus"`
	Wait time.Duration `json:"wait"`
	At   time.Time     `json:"at"`
}

// JobFilter selects jobs; zero fields match all.
type JobFilter struct {
	States []JobState
	Tenant string
}

// Errors callers branch on.
var (
	// ErrStore wraps every error of a store write the daemon could not
	// make (full disk, I/O error, closed database): nothing changed, the
	// caller may retry (the API answers 503).
	ErrStore    = errors.New("store unavailable")
	ErrNotFound = errors.New("not found")
	ErrConflict = errors.New("conflict: the record changed since it was read")
	ErrExists   = errors.New("already exists")
)

// Store is the control plane's truth. Every state change is written here
// before it is acted on. The SQLite implementation serves one daemon; the
// interface is kept small so an etcd-backed store with leader election can
// serve a highly available control plane.
type Store interface {
	// CreateJob stores a new job; its ID must be unique.
	CreateJob(ctx context.Context, j JobRecord) error
	GetJob(ctx context.Context, id string) (JobRecord, error)
	ListJobs(ctx context.Context, f JobFilter) ([]JobRecord, error)
	// UpdateJob writes j if the stored version is still j.Version
	// (ErrConflict otherwise) and records a transition when the state
	// changes. It returns the new version.
	UpdateJob(ctx context.Context, j JobRecord, reason string, at time.Time) (int64, error)
	History(ctx context.Context, jobID string) ([]Transition, error)
	NextJobID(ctx context.Context) (string, error)

	AddDecision(ctx context.Context, d DecisionRecord) (int64, error)
	Decisions(ctx context.Context, jobID string, limit int) ([]DecisionRecord, error)

	AddEvent(ctx context.Context, e Event) (int64, error)
	// Events returns events with ID > after, oldest first, at most limit.
	Events(ctx context.Context, after int64, limit int) ([]Event, error)

	PutNode(ctx context.Context, n NodeRecord) error
	Nodes(ctx context.Context) ([]NodeRecord, error)
	// GPUHealth lists every GPU's stored health (cordons; health.go).
	GPUHealth(ctx context.Context) ([]GPUHealthRecord, error)
	// SlowServers lists the servers suspect for slowness (failslow.go).
	SlowServers(ctx context.Context) ([]SlowServerRecord, error)

	// SaveModel stores a fitted performance model (perf.Online as JSON)
	// under its model type; Models returns them all.
	SaveModel(ctx context.Context, modelType string, data json.RawMessage, at time.Time) error
	Models(ctx context.Context) (map[string]json.RawMessage, error)

	AddTimerWait(ctx context.Context, w TimerWait) error
	TimerWaits(ctx context.Context, since time.Time) ([]TimerWait, error)

	// Commit writes a batch in one transaction: all of it or nothing.
	// It returns the new version of every job of b.Jobs, in order.
	Commit(ctx context.Context, b Batch) ([]int64, error)

	Close() error
}

// Batch is one state change of the daemon: the job records it creates or
// updates and what it records about them, written together.
type Batch struct {
	Jobs       []JobWrite
	Nodes      []NodeRecord
	Decisions  []DecisionRecord
	Events     []Event
	TimerWaits []TimerWait
	Models     []ModelWrite
	// GPUHealth are GPUs' cordons and uncordons (health.go).
	GPUHealth []GPUHealthRecord
	// Drains are servers' drain records (drain.go): set, or cleared
	// (Mode "").
	Drains []NodeDrain
	// ProfileSamples are runs of profiling phases (profile.go).
	ProfileSamples []ProfileSample
	// SlowServers are servers made suspect for slowness, or cleared
	// (failslow.go).
	SlowServers []SlowServerRecord
}

// JobWrite is one job of a Batch: created (Create) or updated with the
// optimistic version check of UpdateJob; Reason names the transition.
type JobWrite struct {
	Rec    JobRecord
	Create bool
	Reason string
	At     time.Time
}

// ModelWrite is a fitted model of a Batch.
type ModelWrite struct {
	Type string
	Data json.RawMessage
	At   time.Time
}

// empty reports whether b writes nothing.
func (b *Batch) empty() bool {
	return len(b.Jobs)+len(b.Nodes)+len(b.Decisions)+len(b.Events)+len(b.TimerWaits)+len(b.Models)+len(b.GPUHealth)+len(b.Drains)+len(b.ProfileSamples)+len(b.SlowServers) == 0
}
