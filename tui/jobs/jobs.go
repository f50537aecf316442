// Package jobs is the TUI's jobs screen: the running jobs with their plan in
// compact form (DP2·TP4·PP1 mb2 ga4 ZeRO-1 ckpt), where they run, their
// progress and restarts. A start or reconfigure event updates a job's plan
// and placement at once, before the next poll.
package jobs

import (
	"fmt"
	"sort"
	"strings"

	"charm.land/bubbles/v2/key"
	tea "charm.land/bubbletea/v2"

	"github.com/replan/replan/cluster"
	"github.com/replan/replan/tui/common"
	"github.com/replan/replan/tui/data"
)

// Model is the jobs screen.
type Model struct {
	st   common.Styles
	keys common.Keys
	pal  *common.Palette

	width, height int
	jobs          []data.Job // what the filter shows
	all           []data.Job // as polled, by ID
	filter        common.Input
	filtering     bool
	order         common.Sorter[data.Job]
	cursor        int
	offset        int
	loaded        bool
}

// New is an empty jobs screen.
func New(st common.Styles, keys common.Keys, pal *common.Palette) *Model {
	return &Model{st: st, keys: keys, pal: pal, filter: common.Input{Prompt: "filter: "}, order: common.Sorter[data.Job]{Keys: sortKeys()}}
}

// sortKeys are the orders "o" cycles through ("O" reverses): by ID (the
// order of submission), name, GPUs, progress and restarts.
func sortKeys() []common.SortKey[data.Job] {
	return []common.SortKey[data.Job]{
		{Title: "ID", Name: "ID", Less: func(a, b data.Job) bool { return a.ID < b.ID }},
		{Title: "NAME", Name: "name", Less: func(a, b data.Job) bool { return a.Name < b.Name }},
		{Title: "GPUS", Right: true, Name: "GPUs", Desc: true, Less: func(a, b data.Job) bool { return a.GPUs() < b.GPUs() }},
		{Title: "ITER", Right: true, Name: "progress", Desc: true, Less: func(a, b data.Job) bool { return progress(a) < progress(b) }},
		{Title: "RST", Right: true, Name: "restarts", Desc: true, Less: func(a, b data.Job) bool { return a.Restarts < b.Restarts }},
	}
}

// progress is the share of a job's iterations done (0 when unknown).
func progress(j data.Job) float64 {
	if j.TotalIterations <= 0 {
		return 0
	}
	return float64(j.Iterations) / float64(j.TotalIterations)
}

// matches is the filter: every word must match; tenant: and class: match
// that field's start, other words the ID, name, tenant, class, plan or
// placement.
func matches(j data.Job, q string) bool {
	return common.Match(q, map[string]string{"tenant": j.Tenant, "class": j.Class}, j.ID, j.Name, j.Tenant, j.Class, j.PlanString, PlacementSummary(j.Placement))
}

// refilter shows the jobs the filter lets through in the order in force,
// keeping the cursor on the same job.
func (m *Model) refilter() {
	sel := m.Selected()
	m.jobs = m.jobs[:0]
	for _, j := range m.all {
		if matches(j, m.filter.Value()) {
			m.jobs = append(m.jobs, j)
		}
	}
	sort.SliceStable(m.jobs, func(a, b int) bool { return m.order.Less(m.jobs[a], m.jobs[b]) })
	m.cursor = 0
	for i, j := range m.jobs {
		if j.ID == sel {
			m.cursor = i
		}
	}
}

// Filter is the filter in force.
func (m *Model) Filter() string { return m.filter.Value() }

// SetSize implements common.Screen.
func (m *Model) SetSize(w, h int) { m.width, m.height = w, h }

// Capturing implements common.Screen: while the filter reads text.
func (m *Model) Capturing() bool { return m.filtering }

// Help implements common.Screen.
func (m *Model) Help() []key.Binding {
	return append(m.keys.Moves(), m.keys.Enter, m.keys.Cancel, m.keys.Filter, m.keys.SortHelp())
}

// Selected is the job under the cursor ("" when none).
func (m *Model) Selected() string {
	if len(m.jobs) == 0 {
		return ""
	}
	return m.jobs[m.cursor].ID
}

// Jobs are the jobs shown.
func (m *Model) Jobs() []data.Job { return m.jobs }

// Update implements common.Screen.
func (m *Model) Update(msg tea.Msg) tea.Cmd {
	switch msg := msg.(type) {
	case data.JobsMsg:
		if msg.Err == nil {
			m.all, m.loaded = append([]data.Job(nil), msg.Jobs...), true
			sort.SliceStable(m.all, func(a, b int) bool { return m.all[a].ID < m.all[b].ID })
			m.refilter()
		}
	case data.EventsMsg:
		for _, e := range msg.Events {
			if e.Plan == "" && e.Placement == "" {
				continue
			}
			for _, js := range [][]data.Job{m.all, m.jobs} {
				for i := range js {
					if js[i].ID == e.JobID {
						if e.Plan != "" {
							js[i].PlanString = e.Plan
						}
						if e.Placement != "" {
							js[i].PlacementString = e.Placement
						}
					}
				}
			}
		}
	case tea.KeyPressMsg:
		if m.filtering {
			m.filtering = m.filter.Edit(msg)
			m.refilter()
			return nil
		}
		if c, ok := m.keys.Move(msg, m.cursor, len(m.jobs), m.height-3); ok {
			m.cursor = c
			return nil
		}
		switch {
		case key.Matches(msg, m.keys.Filter):
			m.filtering = true
		case m.order.Update(msg, m.keys):
			m.refilter()
		case key.Matches(msg, m.keys.Back):
			if m.filter.Value() != "" {
				m.filter.SetValue("")
				m.refilter()
			}
		case key.Matches(msg, m.keys.Enter):
			if id := m.Selected(); id != "" {
				return func() tea.Msg { return data.OpenJobMsg{ID: id} }
			}
		case key.Matches(msg, m.keys.Cancel):
			if id := m.Selected(); id != "" {
				return func() tea.Msg { return data.ActionMsg{Action: data.ActCancel, Target: id} }
			}
		}
	}
	return nil
}

// PlacementSummary is a job's placement compactly: "srv-01[0-3] srv-02[0-7]".
func PlacementSummary(servers []data.Server) string {
	parts := make([]string, 0, len(servers))
	for _, s := range servers {
		parts = append(parts, cluster.ServerGPUs(s.Name, s.GPUs))
	}
	return strings.Join(parts, ", ")
}

// View implements common.Screen.
func (m *Model) View() string {
	if !m.loaded {
		return common.FitLines([]string{m.st.Faint.Render("waiting for the first poll of the jobs…")}, m.height)
	}
	// Wide terminals get every column; 80 columns get the essentials
	// (placement and shift are on the cluster, detail and links screens).
	wide := m.width >= 110
	const idW, nameW, gpuW, planW, rstW, slaW = 8, 10, 4, 31, 3, 5
	iterW, tputW, shiftW := 9, 12, 6
	if !wide {
		iterW, tputW = 4, 7
	}
	placeW := max(8, m.width-(2+idW+1+nameW+1+gpuW+1+planW+1+iterW+1+rstW+1+tputW+1+slaW+1+shiftW+1))
	hdr := "  " + common.Pad("ID", idW) + " " + common.Pad("NAME", nameW) + " " + common.PadLeft("GPUS", gpuW) + " " +
		common.Pad("PLAN", planW) + " " + common.PadLeft("ITER", iterW) + " " + common.PadLeft("RST", rstW) + " "
	if wide {
		hdr += common.PadLeft("MEAS/PRED/s", tputW) + " " + common.Pad("SLA", slaW) + " " + common.PadLeft("SHIFT", shiftW) + " PLACEMENT"
	} else {
		hdr += common.PadLeft("SMPL/s", tputW) + " SLA"
	}
	total := 0
	for _, j := range m.all {
		total += j.GPUs()
	}
	lines := []string{
		common.Truncate(m.summary(total), m.width),
		m.st.Header.Render(common.Truncate(m.order.Mark(hdr), m.width)),
	}
	if len(m.jobs) == 0 {
		lines = append(lines, m.st.Faint.Render("  nothing runs"))
	}
	lh := max(1, m.height-2)
	m.offset = common.Window(m.offset, m.cursor, lh, len(m.jobs))
	for i := m.offset; i < len(m.jobs) && i < m.offset+lh; i++ {
		j := m.jobs[i]
		iter := fmt.Sprint(j.Iterations)
		if j.TotalIterations > 0 {
			iter = fmt.Sprintf("%d/%d", j.Iterations, j.TotalIterations)
			if !wide {
				iter = fmt.Sprintf("%d%%", 100*j.Iterations/j.TotalIterations)
			}
		}
		place := j.PlacementString
		if place == "" {
			place = PlacementSummary(j.Placement)
		}
		plan := j.PlanString
		if plan == "" {
			plan = "—"
		}
		tput := "-"
		switch {
		case wide && j.PredictedSPS > 0:
			meas := "?"
			if j.MeasuredSPS > 0 {
				meas = common.Rate(j.MeasuredSPS)
			}
			tput = meas + "/" + common.Rate(j.PredictedSPS)
		case j.MeasuredSPS > 0:
			tput = common.Rate(j.MeasuredSPS)
		case j.PredictedSPS > 0:
			tput = "~" + common.Rate(j.PredictedSPS)
		}
		sla := j.SLA
		if sla == "" {
			sla = "-"
		}
		id := common.Pad(j.ID, idW)
		id = m.st.Job(m.pal.Slot(j.ID)).Render(id)
		rest := common.Pad(j.Name, nameW) + " " + common.PadLeft(fmt.Sprint(j.GPUs()), gpuW) + " " +
			common.Pad(plan, planW) + " " + common.PadLeft(iter, iterW) + " " + common.PadLeft(fmt.Sprint(j.Restarts), rstW) + " " +
			common.PadLeft(tput, tputW) + " "
		if !wide {
			if sla == "below" {
				sla = "low"
			}
			rest += sla
		} else {
			shift := "-"
			if j.Shift > 0 {
				shift = fmt.Sprintf("+%.1fs", j.Shift.Seconds())
			}
			rest += common.Pad(sla, slaW) + " " + common.PadLeft(shift, shiftW) + " "
		}
		line := id + " " + rest
		if i == m.cursor {
			line = "▸ " + m.st.Selected.Render(line)
		} else {
			line = "  " + line
		}
		if wide {
			line += m.st.Faint.Render(common.Truncate(place, placeW))
		}
		lines = append(lines, common.Truncate(line, m.width))
	}
	return common.FitLines(lines, m.height)
}

// summary is the first line: the running jobs and GPUs, what the filter
// shows; the filter being typed.
func (m *Model) summary(total int) string {
	if m.filtering {
		return m.filter.View(m.width)
	}
	s := fmt.Sprintf("%d running on %d GPUs", len(m.all), total)
	if f := m.filter.Value(); f != "" {
		s += fmt.Sprintf(" · %d match %q (esc clears)", len(m.jobs), f)
	}
	if !m.order.Default() {
		s += " · " + m.order.Label()
	}
	return s
}
