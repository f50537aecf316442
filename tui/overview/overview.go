// Package overview is the TUI's first screen: everything a newcomer asks
// about at once. A compact cluster grid (several servers per line, one
// cell per GPU lettered by its job), the head of the queue — soonest
// estimated start first, with each job's ETA, delay timers and reason,
// counted down every second — and the running jobs with their placement,
// plan, measured against predicted throughput and progress. It renders
// only what fits, so a 1,024-server cluster costs what a small one does.
package overview

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"charm.land/bubbles/v2/key"
	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/x/ansi"

	"github.com/replan/replan/cluster"
	"github.com/replan/replan/tui/common"
	"github.com/replan/replan/tui/data"
	"github.com/replan/replan/tui/queue"
)

// Model is the overview screen.
type Model struct {
	st  common.Styles
	pal *common.Palette

	width, height int
	nodes         []data.Node
	queue         []data.QueueRow
	jobs          []data.Job
	polledAt, now time.Time
	rate          float64
	haveNodes     bool
	haveQueue     bool
	haveJobs      bool
}

// New is an empty overview sharing the cluster screen's job palette.
func New(st common.Styles, pal *common.Palette) *Model { return &Model{st: st, pal: pal} }

// SetSize implements common.Screen.
func (m *Model) SetSize(w, h int) { m.width, m.height = w, h }

// Capturing implements common.Screen.
func (m *Model) Capturing() bool { return false }

// Help implements common.Screen: the overview has no keys of its own.
func (m *Model) Help() []key.Binding { return nil }

// Update implements common.Screen.
func (m *Model) Update(msg tea.Msg) tea.Cmd {
	switch msg := msg.(type) {
	case data.NodesMsg:
		if msg.Err == nil {
			m.nodes, m.haveNodes = msg.Nodes, true
		}
	case data.QueueMsg:
		if msg.Err == nil {
			m.queue, m.polledAt, m.haveQueue = append([]data.QueueRow(nil), msg.Rows...), msg.At, true
			if msg.At.After(m.now) {
				m.now = msg.At
			}
			sort.SliceStable(m.queue, func(a, b int) bool {
				x, y := m.queue[a], m.queue[b]
				if x.HasETA != y.HasETA {
					return x.HasETA
				}
				return x.HasETA && x.ETA < y.ETA
			})
		}
	case data.JobsMsg:
		if msg.Err == nil {
			// biggest first, sorted once per poll rather than per frame
			m.jobs, m.haveJobs = append([]data.Job(nil), msg.Jobs...), true
			gpus := make(map[string]int, len(m.jobs))
			for _, j := range m.jobs {
				gpus[j.ID] = j.GPUs()
			}
			sort.SliceStable(m.jobs, func(a, b int) bool {
				x, y := m.jobs[a], m.jobs[b]
				if gpus[x.ID] != gpus[y.ID] {
					return gpus[x.ID] > gpus[y.ID]
				}
				return x.ID < y.ID
			})
		}
	case data.TickMsg:
		if msg.Now.After(m.now) {
			m.now = msg.Now
		}
		m.rate = msg.Rate
	}
	return nil
}

// Counts are the running and waiting jobs of the last polls, as the
// overview lists them; ok is false until both were polled.
func (m *Model) Counts() (running, waiting int, ok bool) {
	return len(m.jobs), len(m.queue), m.haveJobs && m.haveQueue
}

// elapsed is the backend's time since the queue was polled.
func (m *Model) elapsed() time.Duration {
	if m.polledAt.IsZero() || m.now.Before(m.polledAt) {
		return 0
	}
	return data.TickMsg{Rate: m.rate}.Scale(m.now.Sub(m.polledAt))
}

// View implements common.Screen.
func (m *Model) View() string {
	h := max(m.height, 1)
	m.retainShown(max(2, h/3))
	grid := m.grid(max(2, h/3))
	rest := h - len(grid)
	qh := max(3, rest/2)
	lines := append(grid, m.queueHead(qh)...)
	lines = append(lines, m.running(h-len(lines))...)
	for i := range lines {
		lines[i] = common.Truncate(lines[i], m.width)
	}
	return common.FitLines(lines, h)
}

// grid is the cluster in at most maxLines lines: a summary line, then
// servers side by side; "+N more servers" when they do not fit.
func (m *Model) grid(maxLines int) []string {
	if !m.haveNodes {
		return []string{m.st.Faint.Render("waiting for the first poll of the servers…")}
	}
	gpus, free, unusable, down, drained := 0, 0, 0, 0, 0
	for _, n := range m.nodes {
		gpus += n.GPUs
		switch {
		case !n.Reachable:
			down++
			unusable += n.FreeGPUs
		case n.Drained:
			drained++
			unusable += n.FreeGPUs
		default:
			free += n.FreeGPUs
		}
	}
	busy := gpus - free - unusable
	sum := fmt.Sprintf("CLUSTER  %d/%d GPUs busy · %d free", busy, gpus, free)
	if unusable > 0 {
		sum += fmt.Sprintf(" · %d unusable", unusable)
	}
	utilSum, reported, idle := 0.0, 0, 0
	for _, n := range m.nodes {
		u, k := n.Util()
		utilSum += u * float64(k)
		reported += k
		idle += len(n.IdleHeld)
	}
	if reported > 0 {
		sum += fmt.Sprintf(" · GPU util %.0f%%", utilSum/float64(reported))
	}
	if idle > 0 {
		sum += " · " + m.st.Warn.Render(fmt.Sprintf("%d held idle", idle))
	}
	if drained+down > 0 {
		sum += fmt.Sprintf(" · %d servers drained, %d down", drained, down)
	}
	lines := []string{m.st.Header.Render(sum)}
	nameW, gpuW, per, rows, more := m.layout(maxLines)
	for r := 0; r < rows; r++ {
		var b strings.Builder
		b.WriteByte(' ')
		for c := 0; c < per; c++ {
			i := r*per + c
			if i >= len(m.nodes) {
				break
			}
			b.WriteString(m.server(m.nodes[i], nameW, gpuW))
			b.WriteString("  ")
		}
		lines = append(lines, b.String())
	}
	if more > 0 {
		lines = append(lines, m.st.Faint.Render(fmt.Sprintf(" +%d more servers: screen 2 (cluster)", more)))
	}
	return lines
}

// layout is how the grid fits maxLines: cell widths, servers per line,
// lines of servers, and how many servers do not fit.
func (m *Model) layout(maxLines int) (nameW, gpuW, per, rows, more int) {
	nameW, gpuW = 4, 1
	for _, n := range m.nodes {
		nameW = max(nameW, ansi.StringWidth(n.Name))
		gpuW = max(gpuW, n.GPUs, len(n.Owners))
	}
	per = max(1, (m.width-1)/(nameW+1+gpuW+2))
	rows = (len(m.nodes) + per - 1) / per
	if room := maxLines - 1; rows > room {
		rows = max(room-1, 0)
		more = len(m.nodes) - rows*per
	}
	return nameW, gpuW, per, rows, more
}

// retainShown gives letters to the jobs the grid shows (and the running
// jobs listed), so that no letter names two jobs on screen.
func (m *Model) retainShown(maxLines int) {
	_, _, per, rows, _ := m.layout(maxLines)
	seen := map[string]bool{}
	var ids []string
	for _, n := range m.nodes[:min(len(m.nodes), per*rows)] {
		for _, o := range n.Owners {
			if o != "" && !seen[o] {
				seen[o] = true
				ids = append(ids, o)
			}
		}
	}
	for _, j := range m.jobs {
		if !seen[j.ID] && len(ids) < 40 {
			seen[j.ID] = true
			ids = append(ids, j.ID)
		}
	}
	sort.Strings(ids)
	m.pal.Retain(ids)
}

// server is one server's cell: its name and one glyph per GPU (the job's
// letter, · free, - drained, x down).
func (m *Model) server(n data.Node, nameW, gpuW int) string {
	var b, run strings.Builder
	b.WriteString(common.Pad(n.Name, nameW))
	b.WriteByte(' ')
	// cells in runs of the same look, one Render per run
	const none, blank, bad, warn, dim = -5, -4, -3, -2, -1
	style := none
	flush := func() {
		if run.Len() == 0 {
			return
		}
		switch style {
		case blank:
			b.WriteString(run.String())
		case bad:
			b.WriteString(m.st.Bad.Render(run.String()))
		case warn:
			b.WriteString(m.st.Warn.Render(run.String()))
		case dim:
			b.WriteString(m.st.Dim.Render(run.String()))
		default:
			b.WriteString(m.st.Job(style).Render(run.String()))
		}
		run.Reset()
	}
	for i := range gpuW {
		o := ""
		if i < len(n.Owners) {
			o = n.Owners[i]
		}
		st, glyph := dim, "·"
		switch {
		case i >= max(n.GPUs, len(n.Owners)):
			st, glyph = blank, " "
		case !n.Reachable:
			st, glyph = bad, "x"
		case o != "":
			st, glyph = m.pal.Slot(o), m.pal.Letter(o)
		case n.Drained:
			st, glyph = warn, "-"
		}
		if st != style {
			flush()
			style = st
		}
		run.WriteString(glyph)
	}
	flush()
	return b.String()
}

// queueHead is the waiting jobs in at most h lines, soonest start first.
func (m *Model) queueHead(h int) []string {
	if !m.haveQueue {
		return []string{"", m.st.Faint.Render("waiting for the first poll of the queue…")}
	}
	asked := 0
	for _, r := range m.queue {
		asked += r.GPUs
	}
	el := m.elapsed()
	title := fmt.Sprintf("WAITING  %d jobs asking for %s", len(m.queue), cluster.GPUCount(asked))
	if len(m.queue) > 0 && m.queue[0].HasETA {
		title += " · next start " + eta(m.queue[0], el)
	}
	lines := []string{"", m.st.Header.Render(title)}
	if len(m.queue) == 0 {
		return append(lines, m.st.Faint.Render("  nothing waits"))
	}
	lines = append(lines, m.st.Faint.Render("  "+common.Pad("ID", 9)+common.PadLeft("GPUS", 4)+" "+common.PadLeft("ETA", 9)+" "+common.PadLeft("SRV-T", 6)+" "+common.PadLeft("RACK-T", 6)+" REASON"))
	n := max(0, h-len(lines))
	if len(m.queue) > n && n > 0 {
		n-- // room for "+N more"
	}
	for _, r := range m.queue[:min(n, len(m.queue))] {
		srv, rack := "-", "-"
		if t := r.Timers; t != nil {
			srv, rack = common.Duration(max(t.ServerTimer-el, 0)), common.Duration(max(t.RackTimer-el, 0))
		}
		reason := r.Reason
		if r.State == "held" {
			reason = "held by the operator"
		}
		lines = append(lines, "  "+common.Pad(r.ID, 9)+common.PadLeft(fmt.Sprint(r.GPUs), 4)+" "+common.PadLeft(eta(r, el), 9)+" "+common.PadLeft(srv, 6)+" "+common.PadLeft(rack, 6)+" "+m.st.Faint.Render(reason))
	}
	if k := len(m.queue) - n; k > 0 && n >= 0 {
		lines = append(lines, m.st.Faint.Render(fmt.Sprintf("  +%d more: screen 3 (queue)", k)))
	}
	return lines
}

// roughly is a duration to the minute: "45s", "3m", "1h05m".
func roughly(d time.Duration) string {
	switch {
	case d < time.Minute:
		return common.Duration(d)
	case d < time.Hour:
		return fmt.Sprintf("%dm", int((d+time.Minute-1)/time.Minute))
	}
	return common.Duration(d)
}

// eta is "in 3m20s", "now" or "no estimate".
func eta(r data.QueueRow, el time.Duration) string {
	s := queue.ETA(r, el)
	switch s {
	case "-":
		return "none"
	case "now":
		return s
	}
	return "in " + s
}

// running is the running jobs in at most h lines, biggest first.
func (m *Model) running(h int) []string {
	if h <= 0 {
		return nil
	}
	if !m.haveJobs {
		return []string{"", m.st.Faint.Render("waiting for the first poll of the jobs…")}
	}
	gpus := 0
	for _, j := range m.jobs {
		for _, s := range j.Placement {
			gpus += len(s.GPUs)
		}
	}
	el := m.elapsed()
	lines := []string{"", m.st.Header.Render(fmt.Sprintf("RUNNING  %d jobs on %s", len(m.jobs), cluster.GPUCount(gpus)))}
	if len(m.jobs) == 0 {
		return append(lines, m.st.Faint.Render("  nothing runs"))
	}
	// the placement goes first when narrow (the grid shows it)
	placeW := 21
	if m.width < 110 {
		placeW = 0
	}
	planW := min(40, max(10, m.width-2-11-5-placeW-13-5-22))
	lines = append(lines, m.st.Faint.Render("  "+common.Pad("  ID", 11)+common.PadLeft("GPUS", 4)+" "+common.Pad("PLACEMENT", placeW)+common.Pad("PLAN", planW)+common.PadLeft("MEAS/PRED/s", 13)+common.PadLeft("UTIL", 5)+"  PROGRESS"))
	stats := map[string]data.Node{}
	for _, n := range m.nodes {
		stats[n.Name] = n
	}
	utilOf := func(j data.Job) string {
		sum, k := 0.0, 0
		for _, s := range j.Placement {
			n := stats[s.Name]
			for _, g := range s.GPUs {
				for _, st := range n.Stats {
					if st.Index == g {
						sum += st.UtilPct
						k++
					}
				}
			}
		}
		if k == 0 {
			return "-"
		}
		return fmt.Sprintf("%.0f%%", sum/float64(k))
	}
	jobs := m.jobs
	n := max(0, h-len(lines))
	if len(jobs) > n && n > 0 {
		n--
	}
	for _, j := range jobs[:min(n, len(jobs))] {
		place := cluster.PlacementText(j.PerfPlacement())
		if len(j.Placement) == 1 {
			place = cluster.ServerGPUs(j.Placement[0].Name, j.Placement[0].GPUs)
		}
		tp := "-"
		if j.PredictedSPS > 0 {
			meas := "?"
			if j.MeasuredSPS > 0 {
				meas = fmt.Sprintf("%.1f", j.MeasuredSPS)
			}
			tp = fmt.Sprintf("%s/%.1f", meas, j.PredictedSPS)
		}
		done := "-"
		if j.TotalIterations > 0 {
			done = fmt.Sprintf("%3d%%", min(100, j.Iterations*100/j.TotalIterations))
		}
		if left := j.RestartLeft - el; j.RestartLeft > 0 && left > 0 {
			done = m.st.Warn.Render("restarting, " + roughly(left) + " left")
		}
		plan := j.PlanString
		if plan == "" {
			plan = "-"
		}
		lines = append(lines, "  "+m.st.Job(m.pal.Slot(j.ID)).Render(m.pal.Letter(j.ID))+" "+common.Pad(j.ID, 9)+common.PadLeft(fmt.Sprint(j.GPUs()), 4)+" "+common.Pad(place, placeW)+common.Pad(plan, planW)+common.PadLeft(tp, 13)+common.PadLeft(utilOf(j), 5)+"  "+done)
	}
	if k := len(jobs) - n; k > 0 {
		lines = append(lines, m.st.Faint.Render(fmt.Sprintf("  +%d more: screen 4 (jobs)", k)))
	}
	return lines
}
