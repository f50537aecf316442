package tui

import (
	"context"
	"time"

	"github.com/replan/replan/tui/data"
)

// Backend is what the TUI reads and asks. The control adapter
// (controlbackend.New) implements it over the daemon's API; `replan demo`
// implements it in process. Every method may block; the TUI only calls them
// from tea.Cmds.
type Backend interface {
	Status(ctx context.Context) (data.Status, error)
	Nodes(ctx context.Context) ([]data.Node, error)
	// Queue lists the waiting jobs (queued, preempted, held).
	Queue(ctx context.Context) ([]data.QueueRow, error)
	// Jobs lists the running jobs.
	Jobs(ctx context.Context) ([]data.Job, error)
	// Job is one job with its history and decisions.
	Job(ctx context.Context, id string) (data.JobDetail, error)
	// Events returns the events after id after, oldest first, waiting up to
	// wait for the first one.
	Events(ctx context.Context, after int64, wait time.Duration) ([]data.Event, error)
	Cancel(ctx context.Context, id string) error
	Drain(ctx context.Context, server string) error
	// Submit submits a job spec (YAML; file names it in errors) and returns
	// the new job's ID.
	Submit(ctx context.Context, file string, spec []byte) (string, error)
}

// Speeder is the optional capability of a backend whose clock can run
// faster (the demo's simulated cluster): SetSpeed multiplies the speed by
// factor and returns the new speed. "+" asks for ×2 and "-" for ×½; with a
// backend that is not a Speeder the keys do nothing.
type Speeder interface {
	SetSpeed(ctx context.Context, factor float64) (float64, error)
}

// LinksBackend is the optional capability of a backend that reports the
// links jobs share and their time-shifts (network-aware policies); the
// links screen polls it with the other data.
type LinksBackend interface {
	Links(ctx context.Context) (data.Links, error)
}

// Replayer is the optional capability of a backend that replays a trace
// on a simulated clock (`replan demo`): the title shows the simulated time
// and the trace's progress, and says when the trace has ended.
type Replayer interface {
	Replay(ctx context.Context) (data.Replay, error)
}

// Operator is the optional capability of a backend that undrains servers
// and holds and releases jobs (u, h and H).
type Operator interface {
	Undrain(ctx context.Context, server string) error
	Hold(ctx context.Context, id string) error
	Release(ctx context.Context, id string) error
}

// Historian is the optional capability of a backend that lists the jobs
// that ended (the history screen).
type Historian interface {
	History(ctx context.Context) ([]data.HistoryRow, error)
}
