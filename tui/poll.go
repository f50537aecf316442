package tui

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	tea "charm.land/bubbletea/v2"

	"github.com/replan/replan/tui/data"
)

// caller turns a backend call into a tea.Cmd that runs it under the
// program's context with a timeout. (It closes over the context so that no
// model holds one.)
type caller func(timeout time.Duration, fn func(ctx context.Context) tea.Msg) tea.Cmd

func newCaller(ctx context.Context) caller {
	return func(timeout time.Duration, fn func(ctx context.Context) tea.Msg) tea.Cmd {
		return func() tea.Msg {
			cctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			return fn(cctx)
		}
	}
}

// Messages only the root sees.
type (
	speedMsg struct {
		speed float64
		err   error
	}
	submitMsg struct {
		file, id string
		err      error
	}
)

func tick() tea.Cmd {
	return tea.Tick(time.Second, func(t time.Time) tea.Msg { return data.TickMsg{Now: t} })
}

// pollRound fetches status, servers, queue and jobs: four typed messages.
func (m *model) pollRound() tea.Cmd {
	b, t, now := m.b, m.opts.CallTimeout, m.clock
	m.pending, m.roundErr = 4, nil
	return tea.Batch(
		m.call(t, func(ctx context.Context) tea.Msg {
			s, err := b.Status(ctx)
			return data.StatusMsg{Status: s, At: now(), Err: err}
		}),
		m.call(t, func(ctx context.Context) tea.Msg {
			n, err := b.Nodes(ctx)
			return data.NodesMsg{Nodes: n, At: now(), Err: err}
		}),
		m.call(t, func(ctx context.Context) tea.Msg {
			q, err := b.Queue(ctx)
			return data.QueueMsg{Rows: q, At: now(), Err: err}
		}),
		m.call(t, func(ctx context.Context) tea.Msg {
			j, err := b.Jobs(ctx)
			return data.JobsMsg{Jobs: j, At: now(), Err: err}
		}),
	)
}

// pollReplay fetches the replay's progress when the backend replays a
// trace (the demo).
func (m *model) pollReplay() tea.Cmd {
	rb, ok := m.b.(Replayer)
	if !ok {
		return nil
	}
	return m.call(m.opts.CallTimeout, func(ctx context.Context) tea.Msg {
		r, err := rb.Replay(ctx)
		return data.ReplayMsg{Replay: r, Err: err}
	})
}

// pollHistory fetches the jobs that ended when the backend lists them.
func (m *model) pollHistory() tea.Cmd {
	hb, ok := m.b.(Historian)
	if !ok {
		return func() tea.Msg { return data.HistoryMsg{Err: errors.New("this backend keeps no history")} }
	}
	return m.call(m.opts.CallTimeout, func(ctx context.Context) tea.Msg {
		rows, err := hb.History(ctx)
		return data.HistoryMsg{Rows: rows, Err: err}
	})
}

// pollLinks fetches the link report when the backend has one (it does not
// count in the poll round: a backend without it is no less connected).
func (m *model) pollLinks() tea.Cmd {
	lb, ok := m.b.(LinksBackend)
	if !ok {
		return nil
	}
	now := m.clock
	return m.call(m.opts.CallTimeout, func(ctx context.Context) tea.Msg {
		l, err := lb.Links(ctx)
		return data.LinksMsg{Links: l, At: now(), Err: err}
	})
}

func (m *model) pollEvents() tea.Cmd {
	b, after, wait, now := m.b, m.eventsAfter, m.opts.EventWait, m.clock
	m.eventsInFlight = true
	return m.call(wait+m.opts.CallTimeout, func(ctx context.Context) tea.Msg {
		evs, err := b.Events(ctx, after, wait)
		return data.EventsMsg{Events: evs, At: now(), Err: err}
	})
}

func (m *model) fetchJob(id string) tea.Cmd {
	b, now := m.b, m.clock
	return m.call(m.opts.CallTimeout, func(ctx context.Context) tea.Msg {
		d, err := b.Job(ctx, id)
		d.FetchedAt = now()
		return data.JobDetailMsg{Detail: d, Err: err}
	})
}

func (m *model) runAction(a data.ActionMsg) tea.Cmd {
	b := m.b
	return m.call(m.opts.CallTimeout, func(ctx context.Context) tea.Msg {
		var err error
		switch a.Action {
		case data.ActCancel:
			err = b.Cancel(ctx, a.Target)
		case data.ActDrain:
			err = b.Drain(ctx, a.Target)
		case data.ActUndrain, data.ActHold, data.ActRelease:
			op, ok := b.(Operator)
			if !ok {
				err = errors.New("this backend cannot do that")
				break
			}
			switch a.Action {
			case data.ActUndrain:
				err = op.Undrain(ctx, a.Target)
			case data.ActHold:
				err = op.Hold(ctx, a.Target)
			default:
				err = op.Release(ctx, a.Target)
			}
		}
		if err != nil {
			return data.ResultMsg{Err: fmt.Errorf("%s %s: %w", a.Action, a.Target, err)}
		}
		done := map[data.Action]string{data.ActCancel: "cancelled", data.ActDrain: "drained", data.ActUndrain: "back in service", data.ActHold: "held", data.ActRelease: "released"}[a.Action]
		return data.ResultMsg{Text: a.Target + " " + done}
	})
}

// submit reads the spec file (in the command, not in Update) and sends it.
func (m *model) submit(path string) tea.Cmd {
	b := m.b
	return m.call(m.opts.CallTimeout, func(ctx context.Context) tea.Msg {
		spec, err := os.ReadFile(path)
		if err != nil {
			return submitMsg{file: path, err: err}
		}
		id, err := b.Submit(ctx, filepath.Base(path), spec)
		return submitMsg{file: path, id: id, err: err}
	})
}

func (m *model) setSpeed(factor float64) tea.Cmd {
	sp, ok := m.b.(Speeder)
	if !ok {
		return nil
	}
	return m.call(m.opts.CallTimeout, func(ctx context.Context) tea.Msg {
		s, err := sp.SetSpeed(ctx, factor)
		return speedMsg{speed: s, err: err}
	})
}

// backoff is the delay before retry attempt n (1, 2, 4, … seconds, capped).
func backoff(n int, limit time.Duration) time.Duration {
	d := time.Second
	for i := 1; i < n && d < limit; i++ {
		d *= 2
	}
	return min(d, limit)
}
