// Package history is the TUI's history screen, like sacct: the jobs that
// ended (finished, failed, cancelled), newest first, with their
// completion time, queueing time, restarts and iterations. It renders only
// the rows on screen.
package history

import (
	"fmt"
	"sort"
	"strings"

	"charm.land/bubbles/v2/key"
	tea "charm.land/bubbletea/v2"

	"github.com/replan/replan/tui/common"
	"github.com/replan/replan/tui/data"
)

// Model is the history screen.
type Model struct {
	st   common.Styles
	keys common.Keys

	width, height int
	rows          []data.HistoryRow
	order         common.Sorter[data.HistoryRow]
	cursor        int
	offset        int
	loaded        bool
	missing       string // why there is no history (a backend without it)
}

// New is an empty history screen.
func New(st common.Styles, keys common.Keys) *Model {
	return &Model{st: st, keys: keys, order: common.Sorter[data.HistoryRow]{Keys: sortKeys()}}
}

// sortKeys are the orders "o" cycles through ("O" reverses): newest
// first, then by ID, name, tenant, state, completion time, queueing time
// and restarts.
func sortKeys() []common.SortKey[data.HistoryRow] {
	return []common.SortKey[data.HistoryRow]{
		{Title: "ENDED", Name: "end", Desc: true, Less: func(a, b data.HistoryRow) bool { return a.Ended.Before(b.Ended) }},
		{Title: "ID", Name: "ID", Less: func(a, b data.HistoryRow) bool { return a.ID < b.ID }},
		{Title: "NAME", Name: "name", Less: func(a, b data.HistoryRow) bool { return a.Name < b.Name }},
		{Title: "TENANT", Name: "tenant", Less: func(a, b data.HistoryRow) bool { return a.Tenant < b.Tenant }},
		{Title: "STATE", Name: "state", Less: func(a, b data.HistoryRow) bool { return a.State < b.State }},
		{Title: "JCT", Right: true, Name: "completion time", Desc: true, Less: func(a, b data.HistoryRow) bool { return a.JCT < b.JCT }},
		{Title: "QUEUED", Right: true, Name: "queueing time", Desc: true, Less: func(a, b data.HistoryRow) bool { return a.Queued < b.Queued }},
		{Title: "RST", Right: true, Name: "restarts", Desc: true, Less: func(a, b data.HistoryRow) bool { return a.Restarts < b.Restarts }},
	}
}

// reorder sorts the rows in the order in force, keeping the cursor on the
// same job.
func (m *Model) reorder(sel string) {
	sort.SliceStable(m.rows, func(a, b int) bool { return m.order.Less(m.rows[a], m.rows[b]) })
	m.cursor = 0
	for i, r := range m.rows {
		if r.ID == sel {
			m.cursor = i
		}
	}
}

// SetSize implements common.Screen.
func (m *Model) SetSize(w, h int) { m.width, m.height = w, h }

// Capturing implements common.Screen.
func (m *Model) Capturing() bool { return false }

// Help implements common.Screen.
func (m *Model) Help() []key.Binding {
	return append(m.keys.Moves(), m.keys.Enter, m.keys.SortHelp())
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
	case data.HistoryMsg:
		if msg.Err != nil {
			m.missing = msg.Err.Error()
			return nil
		}
		sel := m.Selected()
		m.rows, m.loaded, m.missing = append(m.rows[:0], msg.Rows...), true, ""
		m.reorder(sel)
	case tea.KeyPressMsg:
		if c, ok := m.keys.Move(msg, m.cursor, len(m.rows), m.height-3); ok {
			m.cursor = c
			return nil
		}
		if m.order.Update(msg, m.keys) {
			m.reorder(m.Selected())
			return nil
		}
		if key.Matches(msg, m.keys.Enter) {
			if id := m.Selected(); id != "" {
				return func() tea.Msg { return data.OpenJobMsg{ID: id} }
			}
		}
	}
	return nil
}

// View implements common.Screen.
func (m *Model) View() string {
	h := max(m.height, 1)
	if !m.loaded {
		s := "waiting for the first poll of the history…"
		if m.missing != "" {
			s = "no history: " + m.missing
		}
		return common.FitLines([]string{common.Truncate(m.st.Faint.Render(s), m.width)}, h)
	}
	finished, failed, cancelled := 0, 0, 0
	for _, r := range m.rows {
		switch r.State {
		case "finished":
			finished++
		case "failed":
			failed++
		case "cancelled":
			cancelled++
		}
	}
	summary := fmt.Sprintf("%d ended: %d finished · %d failed · %d cancelled", len(m.rows), finished, failed, cancelled)
	if !m.order.Default() {
		summary += " · " + m.order.Label()
	}
	hdr := "  " + common.Pad("ID", 9) + common.Pad("NAME", 13) + common.Pad("TENANT", 9) + common.Pad("STATE", 10) +
		common.PadLeft("JCT", 7) + common.PadLeft("QUEUED", 7) + common.PadLeft("RST", 4) + common.PadLeft("ITERS", 8) + "  ENDED"
	lines := []string{
		common.Truncate(summary, m.width),
		m.st.Header.Render(common.Truncate(m.order.Mark(hdr), m.width)),
	}
	if len(m.rows) == 0 {
		lines = append(lines, m.st.Faint.Render("  no job has ended yet"))
	}
	lh := max(1, h-2)
	m.offset = common.Window(m.offset, m.cursor, lh, len(m.rows))
	for i := m.offset; i < len(m.rows) && i < m.offset+lh; i++ {
		r := m.rows[i]
		var b strings.Builder
		b.WriteString(common.Pad(r.ID, 9))
		b.WriteString(common.Pad(r.Name, 13))
		b.WriteString(common.Pad(r.Tenant, 9))
		b.WriteString(common.Pad(r.State, 10))
		b.WriteString(common.PadLeft(common.Duration(r.JCT), 7))
		b.WriteString(common.PadLeft(common.Duration(r.Queued), 7))
		b.WriteString(common.PadLeft(fmt.Sprint(r.Restarts), 4))
		b.WriteString(common.PadLeft(fmt.Sprint(r.Iterations), 8))
		ended := r.Ended.UTC().Format("15:04") // never cut: the date only where it fits
		if m.width >= 100 {
			ended = r.Ended.UTC().Format("01-02 15:04")
		}
		b.WriteString("  " + ended)
		line := b.String()
		if r.State == "failed" {
			line = m.st.Bad.Render(line)
		}
		if i == m.cursor {
			line = "▸ " + m.st.Selected.Render(line)
		} else {
			line = "  " + line
		}
		lines = append(lines, common.Truncate(line, m.width))
	}
	return common.FitLines(lines, h)
}
