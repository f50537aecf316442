// Package jobdetail is the TUI's job detail screen (enter on a job): its plan
// history as a timeline, its resource sensitivity curve (throughput against
// GPUs, computed locally with perf from the job's architecture, the current
// GPU count marked), the memory estimate of its current plan, and the
// scheduler's decisions with their reasons.
package jobdetail

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"charm.land/bubbles/v2/key"
	tea "charm.land/bubbletea/v2"

	"github.com/replan/replan/perf"
	"github.com/replan/replan/tui/common"
	"github.com/replan/replan/tui/data"
	"github.com/replan/replan/tui/jobs"
)

// Curve parameters: GPUs on the x axis and CPU cores per GPU.
const (
	CurveGPUs       = 64
	CurveCPUsPerGPU = 8
)

// Model is the job detail screen.
type Model struct {
	st   common.Styles
	keys common.Keys

	width, height int
	detail        data.JobDetail
	loaded        bool
	curveKey      string
	curve         []perf.CurvePoint
	fitted        bool // the curve came from the backend's fitted model
	scroll        int
	// the queue as last polled (for a waiting job's "waiting" block),
	// when, and the backend clock's rate since
	queue         []data.QueueRow
	polledAt, now time.Time
	rate          float64
}

// New is an empty detail screen.
func New(st common.Styles, keys common.Keys) *Model { return &Model{st: st, keys: keys} }

// SetSize implements common.Screen.
func (m *Model) SetSize(w, h int) { m.width, m.height = w, h }

// Capturing implements common.Screen.
func (m *Model) Capturing() bool { return false }

// Help implements common.Screen.
func (m *Model) Help() []key.Binding {
	return []key.Binding{m.keys.Up, m.keys.Down, m.keys.PageUp, m.keys.PageDown, m.keys.Back, m.keys.Cancel}
}

// JobID is the job shown ("" before the first).
func (m *Model) JobID() string { return m.detail.Job.ID }

// CurveCmd computes a's curve off the Update loop.
func CurveCmd(jobID string, a perf.Arch) tea.Cmd {
	return func() tea.Msg {
		return data.CurveMsg{JobID: jobID, Points: perf.DefaultModel(a, perf.A800).Curve(CurveGPUs, CurveCPUsPerGPU)}
	}
}

func curveKey(j data.Job) string {
	if !j.HasArch {
		return ""
	}
	return fmt.Sprintf("%s/%d/%g", j.Arch.Name, j.Arch.GlobalBatch, j.Arch.Params)
}

// Update implements common.Screen.
func (m *Model) Update(msg tea.Msg) tea.Cmd {
	switch msg := msg.(type) {
	case data.JobDetailMsg:
		if msg.Err != nil {
			return nil
		}
		if msg.Detail.Job.ID != m.detail.Job.ID {
			m.scroll = 0
		}
		m.detail, m.loaded = msg.Detail, true
		if len(msg.Detail.Curve) > 0 {
			// the backend's fitted model: it changes with refits, so take
			// every fresh one
			m.curveKey, m.curve, m.fitted = curveKey(msg.Detail.Job), msg.Detail.Curve, true
			return nil
		}
		if k := curveKey(msg.Detail.Job); k != m.curveKey {
			m.fitted = false
			m.curveKey, m.curve = k, nil
			if k != "" {
				return CurveCmd(msg.Detail.Job.ID, msg.Detail.Job.Arch)
			}
		}
	case data.QueueMsg:
		if msg.Err == nil {
			m.queue, m.polledAt = msg.Rows, msg.At
			if msg.At.After(m.now) {
				m.now = msg.At
			}
		}
	case data.TickMsg:
		if msg.Now.After(m.now) {
			m.now = msg.Now
		}
		m.rate = msg.Rate
	case data.CurveMsg:
		if msg.JobID == m.detail.Job.ID {
			m.curve = msg.Points
		}
	case data.EventsMsg:
		for _, e := range msg.Events {
			if e.JobID == m.detail.Job.ID && e.Plan != "" {
				m.detail.Job.PlanString = e.Plan
			}
		}
	case tea.KeyPressMsg:
		switch {
		case key.Matches(msg, m.keys.Up):
			m.scroll--
		case key.Matches(msg, m.keys.Down):
			m.scroll++
		case key.Matches(msg, m.keys.PageUp):
			m.scroll -= m.height - 1
		case key.Matches(msg, m.keys.PageDown):
			m.scroll += m.height - 1
		case key.Matches(msg, m.keys.Top):
			m.scroll = 0
		case key.Matches(msg, m.keys.Back):
			return func() tea.Msg { return data.BackMsg{} }
		case key.Matches(msg, m.keys.Cancel):
			if id := m.detail.Job.ID; id != "" {
				return func() tea.Msg { return data.ActionMsg{Action: data.ActCancel, Target: id} }
			}
		}
		m.scroll = max(0, m.scroll)
	}
	return nil
}

func gib(b float64) string { return fmt.Sprintf("%.1f", b/perf.GiB) }

// paramsText is a parameter count as people say it: "6.7B params",
// "86M params", "12K params"; "params unknown" without one.
func paramsText(n float64) string {
	switch {
	case n >= 999.5e6:
		return fmt.Sprintf("%.1fB params", n/1e9)
	case n >= 999.5e3:
		return fmt.Sprintf("%.0fM params", n/1e6)
	case n >= 999.5:
		return fmt.Sprintf("%.0fK params", n/1e3)
	case n > 0:
		return fmt.Sprintf("%.0f params", n)
	}
	return "params unknown"
}

// View implements common.Screen.
func (m *Model) View() string {
	if !m.loaded {
		return common.FitLines([]string{m.st.Faint.Render("no job chosen: press enter on a job in the jobs or queue screen")}, m.height)
	}
	lines := m.content()
	m.scroll = common.Clamp(m.scroll, 0, max(0, len(lines)-m.height))
	for i := range lines {
		lines[i] = common.Truncate(lines[i], m.width)
	}
	return common.FitLines(lines[m.scroll:], m.height)
}

func (m *Model) content() []string {
	d, j := m.detail, m.detail.Job
	var out []string
	section := func(s string) { out = append(out, "", m.st.Header.Render(s)) }
	title := fmt.Sprintf("%s %s · tenant %s · %s · %s", j.ID, j.Name, j.Tenant, j.Class, j.State)
	out = append(out, m.st.Title.Render(title))
	if d.Unavailable != "" {
		out = append(out, m.st.Bad.Render(d.Unavailable))
	}
	model := "model unknown"
	if j.HasArch {
		model = fmt.Sprintf("model %s (%s, %d layers, hidden %d, seq %d) · global batch %d", j.Arch.Name, paramsText(j.Arch.Params), j.Arch.Layers, j.Arch.Hidden, j.Arch.SeqLen, j.Arch.GlobalBatch)
	}
	out = append(out, model)
	plan := j.PlanString
	if plan == "" {
		plan = "none yet"
	}
	where := jobs.PlacementSummary(j.Placement)
	if where == "" {
		where = "nowhere"
	}
	out = append(out, fmt.Sprintf("plan %s on %d GPUs: %s", plan, j.GPUs(), where))
	prog := fmt.Sprintf("iterations %d", j.Iterations)
	if j.TotalIterations > 0 {
		prog = fmt.Sprintf("iterations %d/%d (%.0f%%)", j.Iterations, j.TotalIterations, 100*float64(j.Iterations)/float64(j.TotalIterations))
	}
	out = append(out, fmt.Sprintf("%s · restarts %d", prog, j.Restarts))
	if j.PredictedSPS > 0 {
		meas := "not measured yet"
		if j.MeasuredSPS > 0 {
			meas = fmt.Sprintf("measured %.2f (%+.0f%%)", j.MeasuredSPS, 100*(j.MeasuredSPS-j.PredictedSPS)/j.PredictedSPS)
		}
		out = append(out, fmt.Sprintf("throughput: predicted %.2f samples/s, %s", j.PredictedSPS, meas))
	}
	if w := m.waiting(j.ID); w != nil {
		out = append(out, w...)
	} else if j.Reason != "" {
		out = append(out, m.st.Faint.Render("why: "+j.Reason))
	}

	section("Memory (current plan)")
	if pl := j.PerfPlacement(); j.HasArch && j.PlanString != "" && len(pl) > 0 && j.Plan.GPUs() == pl.GPUs() {
		mem := perf.EstimateMemory(j.Arch, j.Plan, pl)
		fits := m.st.OK.Render("fits")
		if err := mem.Fits(perf.A800); err != nil {
			fits = m.st.Bad.Render("does not fit: " + err.Error())
		}
		host := "host memory: nothing offloaded"
		if mem.HostPerServer > 0 {
			host = fmt.Sprintf("host per server %s GiB (offloaded states)", gib(mem.HostPerServer))
		}
		out = append(out,
			fmt.Sprintf("per GPU %s GiB of %s: model states %s · activations %s · buffers %s — %s",
				gib(mem.GPU), fmt.Sprintf("%.0f", perf.A800.GPUMemGB), gib(mem.ModelStates), gib(mem.Activations), gib(mem.Buffers), fits),
			host)
	} else {
		out = append(out, m.st.Faint.Render("no current plan"))
	}

	source := fmt.Sprintf("unfitted model, A800, %d cores/GPU", CurveCPUsPerGPU)
	if m.fitted {
		source = "the daemon's fitted model"
	}
	section(fmt.Sprintf("Sensitivity: samples/s against GPUs (%s; ▲ = %d GPUs now)", source, j.GPUs()))
	switch {
	case !j.HasArch:
		out = append(out, m.st.Faint.Render("unknown architecture: no curve"))
	case m.curve == nil:
		out = append(out, m.st.Faint.Render("computing…"))
	default:
		out = append(out, Plot(m.st, m.curve, j.GPUs(), min(m.width, 90), 10)...)
		if n := j.GPUs(); n > 0 && n <= len(m.curve) {
			p := m.curve[n-1]
			out = append(out, m.st.Faint.Render(fmt.Sprintf("at %d GPUs: best plan %s, %.1f samples/s, slope %+.2f/GPU", n, p.PlanString, p.Throughput, p.Slope)))
		}
	}

	if len(d.Log) > 0 {
		section("Log (rank 0, latest lines; refreshed every poll)")
		for _, l := range d.Log {
			out = append(out, m.st.Faint.Render(l))
		}
	}

	section("Plan history")
	type item struct {
		at   time.Time
		line string
	}
	var items []item
	for _, dc := range d.Decisions {
		if dc.Kind == "wait" {
			continue
		}
		s := fmt.Sprintf("%s  %-11s", clock(dc.At), dc.Kind)
		if dc.Plan != "" {
			s += " " + dc.Plan
		}
		if dc.Placement != "" {
			s += " on " + dc.Placement
		}
		if dc.Throughput > 0 {
			s += fmt.Sprintf(" (%.1f samples/s)", dc.Throughput)
		}
		items = append(items, item{dc.At, s})
	}
	for _, t := range d.History {
		s := fmt.Sprintf("%s  %-11s %s → %s", clock(t.At), "state", orDash(t.From), t.To)
		if t.Reason != "" {
			s += ": " + t.Reason
		}
		items = append(items, item{t.At, m.st.Faint.Render(s)})
	}
	sort.SliceStable(items, func(a, b int) bool { return items[a].at.Before(items[b].at) })
	if len(items) == 0 {
		out = append(out, m.st.Faint.Render("nothing yet"))
	}
	for i, it := range items {
		mark := "├ "
		if i == len(items)-1 {
			mark = "└ "
		}
		out = append(out, mark+it.line)
	}

	section("Decisions (newest first)")
	if len(d.Decisions) == 0 {
		out = append(out, m.st.Faint.Render("none"))
	}
	for i := len(d.Decisions) - 1; i >= 0; i-- {
		dc := d.Decisions[i]
		out = append(out, fmt.Sprintf("%s  %-11s %s", clock(dc.At), dc.Kind, strings.TrimSpace(dc.Reason)))
	}
	return out
}

func clock(t time.Time) string { return common.Stamp(t) }

func orDash(s string) string {
	if s == "" {
		return "—"
	}
	return s
}

// waiting is the "waiting" block of a job in the queue: its position by
// estimated start, its reason, its ETA, and each tier timer with the
// clock time it expires and what the job accepts then. nil when the job
// does not wait.
func (m *Model) waiting(id string) []string {
	rows := append([]data.QueueRow(nil), m.queue...)
	sort.SliceStable(rows, func(a, b int) bool {
		x, y := rows[a], rows[b]
		if x.HasETA != y.HasETA {
			return x.HasETA
		}
		return x.HasETA && x.ETA < y.ETA
	})
	el := time.Duration(0)
	if !m.polledAt.IsZero() && m.now.After(m.polledAt) {
		el = data.TickMsg{Rate: m.rate}.Scale(m.now.Sub(m.polledAt))
	}
	for i, r := range rows {
		if r.ID != id {
			continue
		}
		out := []string{"", m.st.Header.Render("Waiting"),
			fmt.Sprintf("position %d of %d by estimated start · waited %s", i+1, len(rows), common.Duration(r.Waited+el)),
			"reason: " + r.Reason}
		if r.HasETA {
			left := max(r.ETA-el, 0)
			out = append(out, fmt.Sprintf("estimated start: in %s (a simulation of the scheduler from now)", common.Duration(left)))
		} else {
			why := r.ETAReason
			if why == "" {
				why = "the backend gives none"
			}
			out = append(out, "estimated start: none — "+why)
		}
		if t := r.Timers; t != nil {
			for _, tm := range []struct {
				name string
				left time.Duration
				then string
			}{{"server timer", t.ServerTimer, "it accepts a placement within one rack"}, {"rack timer", t.RackTimer, "it accepts a placement across racks"}} {
				if left := tm.left - el; left > 0 {
					out = append(out, fmt.Sprintf("%s: %s left; then %s", tm.name, common.Duration(left), tm.then))
				} else {
					out = append(out, fmt.Sprintf("%s: expired; %s", tm.name, tm.then))
				}
			}
			if t.AcceptTier != "" {
				out = append(out, "accepts now: "+t.AcceptTier)
			}
		}
		return out
	}
	return nil
}
