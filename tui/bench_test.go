package tui

import (
	"context"
	"fmt"
	"testing"
	"time"

	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/colorprofile"

	"github.com/replan/replan/tui/data"
	"github.com/replan/replan/tui/tuitest"
)

// big is the root model at 160×48 over 1,024 servers and 5,000 jobs
// (2,500 running, 2,500 waiting), every poll delivered.
func big(b *testing.B) *model {
	b.Helper()
	small := tuitest.Small()
	nodes := tuitest.Large(1024)
	var jobs []data.Job
	var queue []data.QueueRow
	for i := range 2500 {
		j := small.Jobs[i%len(small.Jobs)]
		j.ID = fmt.Sprintf("j-%06d", i)
		jobs = append(jobs, j)
		q := small.Queue[i%len(small.Queue)]
		q.ID = fmt.Sprintf("q-%06d", i)
		queue = append(queue, q)
	}
	m := newModel(context.Background(), &tuitest.Fake{Snap: small}, Options{Profile: colorprofile.TrueColor})
	m.tick = func() tea.Cmd { return nil }
	m.Update(tea.WindowSizeMsg{Width: 160, Height: 48})
	m.Update(data.StatusMsg{Status: small.Status, At: tuitest.T0})
	m.Update(data.NodesMsg{Nodes: nodes, At: tuitest.T0})
	m.Update(data.QueueMsg{Rows: queue, At: tuitest.T0})
	m.Update(data.JobsMsg{Jobs: jobs, At: tuitest.T0})
	return m
}

// BenchmarkFrame1024Servers5000Jobs is one frame of each screen (the
// issue's bound: 16 ms).
func BenchmarkFrame1024Servers5000Jobs(b *testing.B) {
	m := big(b)
	for _, s := range []screen{scOverview, scCluster, scQueue, scJobs} {
		b.Run(screenNames[s], func(b *testing.B) {
			m.active = s
			for b.Loop() {
				_ = m.View()
			}
		})
	}
}

// BenchmarkKeyToFrame1024Servers5000Jobs is a cursor key and the frame
// after it, on each list screen, and a tick (countdowns) with its frame.
func BenchmarkKeyToFrame1024Servers5000Jobs(b *testing.B) {
	m := big(b)
	down := tuitest.Key("j")
	for _, s := range []screen{scCluster, scQueue, scJobs} {
		b.Run(screenNames[s], func(b *testing.B) {
			m.active = s
			for b.Loop() {
				m.Update(down)
				_ = m.View()
			}
		})
	}
	b.Run("tick-overview", func(b *testing.B) {
		m.active = scOverview
		now := tuitest.T0
		m.pending = 4 // no polls: the fake answers nothing here
		for b.Loop() {
			now = now.Add(time.Second)
			m.Update(data.TickMsg{Now: now})
			_ = m.View()
		}
	})
}
