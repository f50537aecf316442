// Package jobdetail is the TUI's job detail screen (enter on a job): its plan
// history as a timeline, its resource sensitivity curve (throughput against
// GPUs, computed locally with perf from the job's architecture, the current
// GPU count marked), the memory estimate of its current plan, its attempts
// (launches), throughput and GPU-utilisation sparklines over the last hour
// (kept from the polls), the tail of its log, and the scheduler's decisions
// with their reasons. `v` shows the job's spec and `l` a scrollable pane of
// its log instead.
package jobdetail

import (
	"fmt"
	"slices"
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
	// pane is what the screen shows: the detail, the spec or the log;
	// follow keeps the log pane at its end as new lines come.
	pane   pane
	follow bool
	// spark are the running jobs' samples of the last hour, by job, and
	// nodes the servers as last polled (for a job's GPU utilisation).
	spark map[string][]sample
	nodes []data.Node
}

type pane int

const (
	paneMain pane = iota
	paneSpec
	paneLog
)

// sample is one poll's throughput (samples/s, 0: not measured) and mean
// utilisation of the job's GPUs (-1: not reported).
type sample struct {
	at        time.Time
	sps, util float64
}

// SparkWindow is how far back the sparklines go; a job keeps a sample
// per sparkEvery at most (polls in between update the last one), so that
// a cluster of many jobs costs a bounded memory.
const (
	SparkWindow = time.Hour
	sparkEvery  = 30 * time.Second
)

// LogLines is how many of the log's last lines the detail shows; the log
// pane (l) shows all the backend gives.
const LogLines = 6

// New is an empty detail screen.
func New(st common.Styles, keys common.Keys) *Model { return &Model{st: st, keys: keys} }

// SetSize implements common.Screen.
func (m *Model) SetSize(w, h int) { m.width, m.height = w, h }

// Capturing implements common.Screen.
func (m *Model) Capturing() bool { return false }

// Help implements common.Screen.
func (m *Model) Help() []key.Binding {
	return []key.Binding{m.keys.Up, m.keys.Down, m.keys.PageUp, m.keys.PageDown, m.keys.Top, m.keys.Bottom, m.keys.Spec, m.keys.Log, m.keys.Back, m.keys.Cancel}
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
			m.scroll, m.pane = 0, paneMain
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
	case data.NodesMsg:
		if msg.Err == nil {
			m.nodes = msg.Nodes
		}
	case data.JobsMsg:
		if msg.Err == nil {
			m.record(msg.Jobs, msg.At)
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
			m.scroll, m.follow = 0, false
		case key.Matches(msg, m.keys.Bottom):
			m.scroll, m.follow = 1<<30, true // View clamps it
		case key.Matches(msg, m.keys.Spec):
			m.toggle(paneSpec)
		case key.Matches(msg, m.keys.Log):
			m.toggle(paneLog)
		case key.Matches(msg, m.keys.Back):
			if m.pane != paneMain {
				m.toggle(m.pane)
				break
			}
			return func() tea.Msg { return data.BackMsg{} }
		case key.Matches(msg, m.keys.Cancel):
			if id := m.detail.Job.ID; id != "" {
				return func() tea.Msg { return data.ActionMsg{Action: data.ActCancel, Target: id} }
			}
		}
		if key.Matches(msg, m.keys.Up) || key.Matches(msg, m.keys.PageUp) {
			m.follow = false
		}
		m.scroll = max(0, m.scroll)
	}
	return nil
}

// toggle shows p, or the detail when p is shown already; the log pane
// opens at its end and follows new lines.
func (m *Model) toggle(p pane) {
	if m.pane == p {
		m.pane, m.scroll = paneMain, 0
		return
	}
	m.pane, m.scroll, m.follow = p, 0, p == paneLog
}

// record keeps a sample of every running job from a poll and forgets
// those older than SparkWindow.
func (m *Model) record(js []data.Job, at time.Time) {
	if at.IsZero() {
		return
	}
	if m.spark == nil {
		m.spark = map[string][]sample{}
	}
	byName := make(map[string]*data.Node, len(m.nodes))
	for i := range m.nodes {
		byName[m.nodes[i].Name] = &m.nodes[i]
	}
	for _, j := range js {
		smp := sample{at: at, sps: j.MeasuredSPS, util: util(j, byName)}
		ss := m.spark[j.ID]
		if n := len(ss); n > 0 && at.Sub(ss[n-1].at) < sparkEvery {
			// a poll soon after the last sample replaces its figures: a
			// job keeps at most SparkWindow/sparkEvery samples
			ss[n-1].sps, ss[n-1].util = smp.sps, smp.util
			continue
		}
		m.spark[j.ID] = append(ss, smp)
	}
	for id, ss := range m.spark {
		i := 0
		for i < len(ss) && at.Sub(ss[i].at) > SparkWindow {
			i++
		}
		if i == len(ss) {
			delete(m.spark, id)
		} else if i > 0 {
			m.spark[id] = append(ss[:0:0], ss[i:]...)
		}
	}
}

// util is the mean utilisation of the GPUs j holds, from the servers as
// last polled (-1: none reported).
func util(j data.Job, nodes map[string]*data.Node) float64 {
	sum, n := 0.0, 0
	for _, s := range j.Placement {
		nd := nodes[s.Name]
		if nd == nil {
			continue
		}
		for _, g := range nd.Stats {
			if slices.Contains(s.GPUs, g.Index) {
				sum += g.UtilPct
				n++
			}
		}
	}
	if n == 0 {
		return -1
	}
	return sum / float64(n)
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
	// the spec and the log keep their title line at the top
	var head, lines []string
	switch m.pane {
	case paneSpec:
		head, lines = m.specView()
	case paneLog:
		head, lines = m.logView()
	default:
		lines = m.content()
	}
	h := max(1, m.height-len(head))
	last := max(0, len(lines)-h)
	if m.pane == paneLog && m.follow {
		m.scroll = last
	}
	m.scroll = common.Clamp(m.scroll, 0, last)
	if m.pane == paneLog && m.scroll == last {
		m.follow = true // scrolled back to the end: follow again
	}
	out := append(head, lines[m.scroll:]...)
	for i := range out {
		out[i] = common.Truncate(out[i], m.width)
	}
	return common.FitLines(out, m.height)
}

func (m *Model) content() []string {
	d, j := m.detail, m.detail.Job
	var out []string
	section := func(s string) { out = append(out, "", m.st.Header.Render(s)) }
	title := fmt.Sprintf("%s %s · tenant %s · %s · %s", j.ID, j.Name, j.Tenant, j.Class, j.State)
	out = append(out, m.st.Title.Render(title)+m.st.Faint.Render("  (v spec · l log)"))
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

	out = append(out, m.sparklines(j.ID)...)

	section("Attempts (launches, oldest first)")
	out = append(out, m.attempts()...)

	if len(d.Log) > 0 {
		section(fmt.Sprintf("Log (rank 0, last %d of %d lines; l: the whole log)", min(LogLines, len(d.Log)), len(d.Log)))
		for _, l := range d.Log[max(0, len(d.Log)-LogLines):] {
			out = append(out, m.st.Faint.Render(l))
		}
	}

	out = append(out, m.gpus(j)...)

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

// specView is the job's spec as the backend gives it (env values redacted
// by the API for whoever may not see them).
func (m *Model) specView() (head, body []string) {
	j := m.detail.Job
	head = []string{m.st.Title.Render(fmt.Sprintf("%s %s · spec", j.ID, j.Name)) + m.st.Faint.Render("  (v or esc: back)")}
	if len(m.detail.Spec) == 0 {
		return head, []string{m.st.Faint.Render("the backend gives no spec for this job")}
	}
	return head, slices.Clone(m.detail.Spec)
}

// logView is the log pane: every line the backend gives, refreshed with
// each poll, at its end unless scrolled up.
func (m *Model) logView() (head, body []string) {
	j, d := m.detail.Job, m.detail
	title := fmt.Sprintf("%s %s · log (rank 0, newest attempt, last %d lines)", j.ID, j.Name, len(d.Log))
	head = []string{m.st.Title.Render(title) + m.st.Faint.Render("  (pgup/pgdn/home/end scroll · l or esc: back)")}
	if len(d.Log) == 0 {
		return head, []string{m.st.Faint.Render("no log to show (the job has not started, or the backend cannot read it)")}
	}
	return head, slices.Clone(d.Log)
}

// attempts are the job's launches, one line each: number, start → end,
// GPUs and plan, how it ended.
func (m *Model) attempts() []string {
	as := m.detail.Attempts
	if len(as) == 0 {
		return []string{m.st.Faint.Render("none yet")}
	}
	var out []string
	for _, a := range as {
		start := clock(a.Start)
		end := "now"
		if !a.End.IsZero() {
			end = clock(a.End)
		}
		s := fmt.Sprintf("#%-2d %s → %-*s %3d GPUs", a.N, start, len([]rune(start)), end, a.GPUs)
		if a.Plan != "" {
			s += " " + a.Plan
		}
		if a.Placement != "" {
			s += " on " + a.Placement
		}
		how := a.State
		if a.ExitCode != nil {
			how += fmt.Sprintf(" (exit %d)", *a.ExitCode)
		}
		s += " · " + how
		if a.Reason != "" && a.State != "running" {
			s += ": " + a.Reason
		}
		if a.State == "failed" {
			s = m.st.Bad.Render(s)
		}
		out = append(out, s)
	}
	return out
}

// sparkBlocks are the sparklines' levels, lowest first.
var sparkBlocks = []rune("▁▂▃▄▅▆▇█")

// sparklines are the job's measured throughput and its GPUs' mean
// utilisation over the last SparkWindow, one column per equal slice of
// it (the mean of the polls in the slice; blank where none measured).
// Nothing when no poll saw the job running.
func (m *Model) sparklines(id string) []string {
	ss := m.spark[id]
	if len(ss) == 0 {
		return nil
	}
	width := max(10, min(60, m.width-34))
	end := ss[len(ss)-1].at
	start := end.Add(-SparkWindow)
	col := func(t time.Time) int {
		return min(width-1, max(0, int(float64(width)*float64(t.Sub(start))/float64(SparkWindow))))
	}
	// line draws get's values (ok false: not measured at that poll)
	// against top (0: the highest value)
	line := func(get func(sample) (float64, bool), top float64, unit string) string {
		sum, n := make([]float64, width), make([]int, width)
		hi, last, have := 0.0, 0.0, false
		for _, s := range ss {
			v, ok := get(s)
			if !ok {
				continue
			}
			c := col(s.at)
			sum[c] += v
			n[c]++
			hi, last, have = max(hi, v), v, true
		}
		if !have {
			return m.st.Faint.Render("not measured yet")
		}
		if top <= 0 {
			top = hi
		}
		var b strings.Builder
		for c := range width {
			if n[c] == 0 {
				b.WriteRune(' ')
				continue
			}
			v := sum[c] / float64(n[c])
			lvl := 0
			if top > 0 {
				lvl = min(len(sparkBlocks)-1, max(0, int(v/top*float64(len(sparkBlocks)-1)+0.5)))
			}
			b.WriteRune(sparkBlocks[lvl])
		}
		return fmt.Sprintf("%s now %.1f%s (top %.1f)", b.String(), last, unit, top)
	}
	span := common.Duration(end.Sub(ss[0].at))
	return []string{"", m.st.Header.Render(fmt.Sprintf("Last hour (kept from the polls since this TUI started: %s)", span)),
		"samples/s  " + line(func(s sample) (float64, bool) { return s.sps, s.sps > 0 }, 0, ""),
		"GPU util   " + line(func(s sample) (float64, bool) { return s.util, s.util >= 0 }, 100, "%"),
	}
}

// gpus is one line per GPU the job holds, as the servers were last
// polled: utilisation, memory used of total, temperature, power and the
// processes on it with the memory each uses (like nvitop). Nothing when
// the job holds none or no server reports figures.
func (m *Model) gpus(j data.Job) []string {
	var out []string
	for _, s := range j.Placement {
		for _, nd := range m.nodes {
			if nd.Name != s.Name {
				continue
			}
			for _, g := range nd.Stats {
				if !slices.Contains(s.GPUs, g.Index) {
					continue
				}
				l := fmt.Sprintf("%s GPU %d  %3.0f%%  %5.1f/%.0f GiB  %3.0f°C %4.0fW", nd.Name, g.Index, g.UtilPct, g.MemUsedGB, g.MemTotalGB, g.TempC, g.PowerW)
				if len(g.Processes) == 0 {
					l += m.st.Faint.Render("  no process reported")
				}
				for _, p := range g.Processes {
					l += fmt.Sprintf("  pid %d %.1f GiB", p.PID, p.MemGB)
				}
				out = append(out, l)
			}
		}
	}
	if len(out) == 0 {
		return nil
	}
	return append([]string{"", m.st.Header.Render("GPUs (as last polled: utilisation, memory, temperature, power, processes)")}, out...)
}
