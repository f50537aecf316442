// Package queue is the TUI's queue screen: the waiting jobs with their
// class, tenant, GPUs, how long they waited, their estimated start, their
// delay timers (server timer, rack timer, the tier accepted now, Nw_sens)
// and why they wait. Its columns never change with the data ("-" where a
// backend reports nothing); the figures count every second between polls
// at the backend clock's rate.
package queue

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"charm.land/bubbles/v2/key"
	tea "charm.land/bubbletea/v2"

	"github.com/replan/replan/tui/common"
	"github.com/replan/replan/tui/data"
)

// Model is the queue screen.
type Model struct {
	st   common.Styles
	keys common.Keys

	width, height int
	rows          []data.QueueRow
	polledAt, now time.Time
	rate          float64         // backend seconds per real second (TickMsg.Rate)
	all           []data.QueueRow // as polled; rows is what the filter and order show
	filter        common.Input
	filtering     bool
	order         common.Sorter[data.QueueRow]
	cursor        int
	offset        int
	loaded        bool
}

// New is an empty queue screen.
func New(st common.Styles, keys common.Keys) *Model {
	return &Model{st: st, keys: keys, filter: common.Input{Prompt: "filter: "}, order: common.Sorter[data.QueueRow]{Keys: sortKeys()}}
}

// sortKeys are the orders "o" cycles through ("O" reverses): submission
// first, then estimated start, wait, GPUs, tenant, name and Nw_sens.
func sortKeys() []common.SortKey[data.QueueRow] {
	return []common.SortKey[data.QueueRow]{
		{Title: "ID", Name: "submission", Less: func(a, b data.QueueRow) bool { return a.ID < b.ID }},
		{Title: "ETA", Right: true, Name: "estimated start", Less: func(a, b data.QueueRow) bool {
			if a.HasETA != b.HasETA {
				return a.HasETA
			}
			return a.HasETA && a.ETA < b.ETA
		}},
		{Title: "WAITED", Right: true, Name: "wait", Desc: true, Less: func(a, b data.QueueRow) bool { return a.Waited < b.Waited }},
		{Title: "GPUS", Right: true, Name: "GPUs", Desc: true, Less: func(a, b data.QueueRow) bool { return a.GPUs < b.GPUs }},
		{Title: "TENANT", Name: "tenant", Less: func(a, b data.QueueRow) bool { return a.Tenant < b.Tenant }},
		{Title: "NAME", Name: "name", Less: func(a, b data.QueueRow) bool { return a.Name < b.Name }},
		{Title: "NWSENS", Right: true, Name: "Nw_sens", Less: func(a, b data.QueueRow) bool { return nwSens(a) < nwSens(b) }},
	}
}

// nwSens is a row's Nw_sens for sorting (rows without one last).
func nwSens(r data.QueueRow) float64 {
	if r.Timers == nil || !r.Timers.HasNwSens {
		return 2
	}
	return min(max(r.Timers.NwSens, 0), 1)
}

// matches is the filter: every word must match; tenant:, state: and
// class: match that field's start, other words any field or the reason.
func matches(r data.QueueRow, q string) bool {
	return common.Match(q, map[string]string{"tenant": r.Tenant, "state": r.State, "class": r.Class}, r.ID, r.Name, r.Tenant, r.Class, r.State, r.Reason)
}

// reshape applies the filter and the order to what was polled, keeping
// the cursor on the same job.
func (m *Model) reshape() {
	sel := m.Selected()
	m.rows = m.rows[:0]
	for _, r := range m.all {
		if matches(r, m.filter.Value()) {
			m.rows = append(m.rows, r)
		}
	}
	sort.SliceStable(m.rows, func(a, b int) bool { return m.order.Less(m.rows[a], m.rows[b]) })
	m.cursor = 0
	for i, r := range m.rows {
		if r.ID == sel {
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
	return append(m.keys.Moves(), m.keys.Enter, m.keys.Cancel, m.keys.Hold, m.keys.Release, m.keys.Filter, m.keys.SortHelp())
}

// Selected is the job under the cursor ("" when none).
func (m *Model) Selected() string {
	if len(m.rows) == 0 {
		return ""
	}
	return m.rows[m.cursor].ID
}

// Update implements common.Screen.
func (m *Model) Update(msg tea.Msg) tea.Cmd {
	switch msg := msg.(type) {
	case data.QueueMsg:
		if msg.Err == nil {
			m.all, m.polledAt, m.now, m.loaded = msg.Rows, msg.At, msg.At, true
			m.reshape()
		}
	case data.TickMsg:
		if msg.Now.After(m.now) {
			m.now = msg.Now
		}
		m.rate = msg.Rate
	case tea.KeyPressMsg:
		if m.filtering {
			m.filtering = m.filter.Edit(msg)
			m.reshape()
			return nil
		}
		if c, ok := m.keys.Move(msg, m.cursor, len(m.rows), m.height-3); ok {
			m.cursor = c
			return nil
		}
		switch {
		case key.Matches(msg, m.keys.Filter):
			m.filtering = true
		case m.order.Update(msg, m.keys):
			m.reshape()
		case key.Matches(msg, m.keys.Back):
			if m.filter.Value() != "" {
				m.filter.SetValue("")
				m.reshape()
			}
		case key.Matches(msg, m.keys.Enter):
			if id := m.Selected(); id != "" {
				return func() tea.Msg { return data.OpenJobMsg{ID: id} }
			}
		case key.Matches(msg, m.keys.Cancel):
			if id := m.Selected(); id != "" {
				return func() tea.Msg { return data.ActionMsg{Action: data.ActCancel, Target: id} }
			}
		case key.Matches(msg, m.keys.Hold):
			if id := m.Selected(); id != "" {
				return func() tea.Msg { return data.ActionMsg{Action: data.ActHold, Target: id} }
			}
		case key.Matches(msg, m.keys.Release):
			if id := m.Selected(); id != "" {
				return func() tea.Msg { return data.ActionMsg{Action: data.ActRelease, Target: id} }
			}
		}
	}
	return nil
}

// elapsed is the backend's time since the poll (the local time scaled by
// the backend clock's rate).
func (m *Model) elapsed() time.Duration {
	if m.polledAt.IsZero() || m.now.Before(m.polledAt) {
		return 0
	}
	return data.TickMsg{Rate: m.rate}.Scale(m.now.Sub(m.polledAt))
}

type column struct {
	title string
	width int
	right bool
	cell  func(r data.QueueRow) string
}

// columns are the same whatever the data: a column never appears or
// vanishes between polls (only a narrow terminal drops some, always the
// same ones), and every cell fits its width.
func (m *Model) columns() []column {
	el := m.elapsed()
	timer := func(get func(*data.DelayTimers) time.Duration) func(data.QueueRow) string {
		return func(r data.QueueRow) string {
			if r.Timers == nil {
				return "-"
			}
			left := get(r.Timers) - el
			if left <= 0 {
				return "0s"
			}
			return common.Duration(left)
		}
	}
	cols := []column{
		{"ID", 8, false, func(r data.QueueRow) string { return r.ID }},
		{"NAME", 12, false, func(r data.QueueRow) string { return r.Name }},
		{"CLASS", 11, false, func(r data.QueueRow) string { return r.Class }},
		{"TENANT", 8, false, func(r data.QueueRow) string { return r.Tenant }},
		{"GPUS", 4, true, func(r data.QueueRow) string { return fmt.Sprint(r.GPUs) }},
		{"WAITED", 6, true, func(r data.QueueRow) string { return common.Duration(r.Waited + el) }},
		{"ETA", 6, true, func(r data.QueueRow) string { return ETA(r, el) }},
		{"SRV-T", 6, true, timer(func(t *data.DelayTimers) time.Duration { return t.ServerTimer })},
		{"RACK-T", 6, true, timer(func(t *data.DelayTimers) time.Duration { return t.RackTimer })},
		{"TIER", 10, false, func(r data.QueueRow) string {
			if r.Timers == nil || r.Timers.AcceptTier == "" {
				return "-"
			}
			return r.Timers.AcceptTier
		}},
		{"NWSENS", 6, true, func(r data.QueueRow) string {
			if r.Timers == nil || !r.Timers.HasNwSens {
				return "-"
			}
			return fmt.Sprintf("%.2f", min(max(r.Timers.NwSens, 0), 1))
		}},
	}
	// on narrow terminals the reason keeps at least 20 cells: drop the
	// tenant, the name, the class, Nw_sens and the tier, in that order
	for _, drop := range []string{"TENANT", "NAME", "CLASS", "NWSENS", "TIER"} {
		if m.width == 0 || width(cols)+20 <= m.width {
			break
		}
		for i, c := range cols {
			if c.title == drop {
				cols = append(cols[:i:i], cols[i+1:]...)
				break
			}
		}
	}
	return cols
}

// ETA is a row's estimated start el after the poll: "-" without one,
// "now" when due.
func ETA(r data.QueueRow, el time.Duration) string {
	if !r.HasETA {
		return "-"
	}
	left := r.ETA - el
	if left < time.Second {
		return "now"
	}
	return common.Duration(left)
}

// width is the cells the columns take before the reason.
func width(cols []column) int {
	w := 2
	for _, c := range cols {
		w += c.width + 1
	}
	return w
}

// View implements common.Screen.
func (m *Model) View() string {
	if !m.loaded {
		return common.FitLines([]string{m.st.Faint.Render("waiting for the first poll of the queue…")}, m.height)
	}
	cols := m.columns()
	reasonW := max(10, m.width-width(cols))
	var hdr strings.Builder
	hdr.WriteString("  ")
	for _, c := range cols {
		if c.right {
			hdr.WriteString(common.PadLeft(c.title, c.width))
		} else {
			hdr.WriteString(common.Pad(c.title, c.width))
		}
		hdr.WriteByte(' ')
	}
	hdr.WriteString("REASON")
	lines := []string{
		common.Truncate(m.summary(), m.width),
		m.st.Header.Render(common.Truncate(m.order.Mark(hdr.String()), m.width)),
	}
	if len(m.rows) == 0 {
		lines = append(lines, m.st.Faint.Render("  nothing waits"))
	}
	lh := max(1, m.height-2)
	m.offset = common.Window(m.offset, m.cursor, lh, len(m.rows))
	for i := m.offset; i < len(m.rows) && i < m.offset+lh; i++ {
		r := m.rows[i]
		var b strings.Builder
		for _, c := range cols {
			if c.right {
				b.WriteString(common.PadLeft(c.cell(r), c.width))
			} else {
				b.WriteString(common.Pad(c.cell(r), c.width))
			}
			b.WriteByte(' ')
		}
		line := b.String()
		if i == m.cursor {
			line = "▸ " + m.st.Selected.Render(line)
		} else {
			line = "  " + line
		}
		reason := common.Truncate(r.Reason, reasonW)
		if r.State == "held" {
			reason = m.st.Warn.Render(reason)
		} else {
			reason = m.st.Faint.Render(reason)
		}
		lines = append(lines, common.Truncate(line+reason, m.width))
	}
	return common.FitLines(lines, m.height)
}

// summary is the first line: how many wait, how many the filter shows,
// the order; the filter being typed.
func (m *Model) summary() string {
	if m.filtering {
		return m.filter.View(m.width)
	}
	s := fmt.Sprintf("%d waiting", len(m.all))
	if f := m.filter.Value(); f != "" {
		s += fmt.Sprintf(" · %d match %q (esc clears)", len(m.rows), f)
	}
	if !m.order.Default() {
		s += " · " + m.order.Label()
	}
	return s
}
