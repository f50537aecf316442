package data

import (
	"time"

	"github.com/replan/replan/perf"
)

// TickMsg is the one-second clock: countdowns move and polls are due.
// Rate is how many of the backend's seconds pass per real second (the
// demo's clock runs faster; 0 means 1): countdowns move by that much.
type TickMsg struct {
	Now  time.Time
	Rate float64
}

// Scale is d of real time in the backend's clock.
func (t TickMsg) Scale(d time.Duration) time.Duration {
	if t.Rate <= 0 {
		return d
	}
	return time.Duration(float64(d) * t.Rate)
}

// StatusMsg carries a polled Status.
type StatusMsg struct {
	Status Status
	At     time.Time
	Err    error
}

// NodesMsg carries polled servers.
type NodesMsg struct {
	Nodes []Node
	At    time.Time
	Err   error
}

// QueueMsg carries the polled queue.
type QueueMsg struct {
	Rows []QueueRow
	At   time.Time
	Err  error
}

// JobsMsg carries the polled running jobs.
type JobsMsg struct {
	Jobs []Job
	At   time.Time
	Err  error
}

// JobDetailMsg carries one job's detail.
type JobDetailMsg struct {
	Detail JobDetail
	Err    error
}

// CurveMsg carries a job's resource sensitivity curve, computed off the
// Update loop.
type CurveMsg struct {
	JobID  string
	Points []perf.CurvePoint
}

// EventsMsg carries events from the long poll (oldest first).
type EventsMsg struct {
	Events []Event
	At     time.Time
	Err    error
}

// ConnMsg reports the connection's state: Err non-nil when a call to the
// backend failed, nil when calls succeed again. RetryAt is when the next
// attempt is due.
type ConnMsg struct {
	Err     error
	Attempt int
	RetryAt time.Time
}

// OpenJobMsg asks the root to show a job's detail screen.
type OpenJobMsg struct{ ID string }

// BackMsg asks the root to go back to the previous screen.
type BackMsg struct{}

// Action is an operation a screen asks the root to run on the backend.
type Action int

// Actions.
const (
	ActCancel  Action = iota // cancel job Target
	ActDrain                 // drain server Target
	ActUndrain               // put server Target back in service
	ActHold                  // hold waiting job Target
	ActRelease               // release held job Target
)

// String names the action as the confirmation prompt does.
func (a Action) String() string {
	switch a {
	case ActCancel:
		return "cancel job"
	case ActDrain:
		return "drain server"
	case ActUndrain:
		return "undrain server"
	case ActHold:
		return "hold job"
	case ActRelease:
		return "release job"
	}
	return "?"
}

// ActionMsg asks the root to confirm and run an action.
type ActionMsg struct {
	Action Action
	Target string
}

// ResultMsg is the outcome of an action, shown in the footer.
type ResultMsg struct {
	Text string
	Err  error
}

// Replay is where a backend replaying a trace (the demo) stands: its
// simulated clock, how many of the trace's jobs were submitted and have
// ended, and whether the trace is over.
type Replay struct {
	Clock     time.Time
	Speed     float64
	Submitted int
	Ended     int
	Total     int
	Done      bool
}

// ReplayMsg carries a polled Replay.
type ReplayMsg struct {
	Replay Replay
	Err    error
}

// HistoryRow is a job that ended (finished, failed or cancelled).
type HistoryRow struct {
	ID, Name, Tenant, Class, State string
	// JCT is submission to end, Queued submission to first start.
	JCT, Queued          time.Duration
	Restarts, Iterations int
	Ended                time.Time
}

// HistoryMsg carries the polled history, newest first.
type HistoryMsg struct {
	Rows []HistoryRow
	Err  error
}
