// Package links is the TUI's links screen: the links that jobs share (the
// racks' uplinks to the spine), each link's compatibility score, and the
// time-shift every job on it was given so their communication interleaves
// (CASSINI).
package links

import (
	"fmt"
	"strings"

	"charm.land/bubbles/v2/key"
	tea "charm.land/bubbletea/v2"

	"github.com/replan/replan/tui/common"
	"github.com/replan/replan/tui/data"
)

// Model is the links screen.
type Model struct {
	st            common.Styles
	keys          common.Keys
	width, height int
	rep           data.Links
	loaded        bool
	cursor        int
	offset        int
}

// New is an empty links screen.
func New(st common.Styles, keys common.Keys) *Model { return &Model{st: st, keys: keys} }

// SetSize implements common.Screen.
func (m *Model) SetSize(w, h int) { m.width, m.height = w, h }

// Capturing implements common.Screen.
func (m *Model) Capturing() bool { return false }

// Help implements common.Screen.
func (m *Model) Help() []key.Binding { return m.keys.Moves() }

// Update implements common.Screen.
func (m *Model) Update(msg tea.Msg) tea.Cmd {
	switch msg := msg.(type) {
	case data.LinksMsg:
		if msg.Err == nil {
			m.rep, m.loaded = msg.Links, true
			m.cursor = min(m.cursor, max(len(m.rep.Links)-1, 0))
		}
	case tea.KeyPressMsg:
		m.cursor, _ = m.keys.Move(msg, m.cursor, len(m.rep.Links), m.height-3)
	}
	return nil
}

// View implements common.Screen: every line within the screen's width,
// at most its height.
func (m *Model) View() string {
	if m.width <= 0 {
		return m.view() // not sized yet
	}
	lines := strings.Split(m.view(), "\n")
	for i := range lines {
		lines[i] = common.Truncate(lines[i], m.width)
	}
	return common.FitLines(lines, max(m.height, 1))
}

func (m *Model) view() string {
	if !m.loaded {
		return m.st.Dim.Render("waiting for the first report…")
	}
	var lines []string
	lines = append(lines, fmt.Sprintf("%d shared links · compatibility %.2f", m.rep.Shared, m.rep.Score))
	if len(m.rep.Dropped) > 0 {
		lines = append(lines, m.st.Dim.Render("cycle in the affinity graph, not optimised: "+strings.Join(m.rep.Dropped, ", ")))
	}
	lines = append(lines, m.st.Header.Render(common.Pad("  LINK", 18)+common.Pad("SCORE", 7)+"JOBS (TIME-SHIFT)"))
	if len(m.rep.Links) == 0 {
		lines = append(lines, m.st.Dim.Render("  no link is shared: no two jobs span racks together (or the policy is not network-aware)"))
		return strings.Join(lines, "\n")
	}
	rows := max(m.height-len(lines), 1)
	if m.cursor < m.offset {
		m.offset = m.cursor
	}
	if m.cursor >= m.offset+rows {
		m.offset = m.cursor - rows + 1
	}
	for i := m.offset; i < len(m.rep.Links) && i < m.offset+rows; i++ {
		l := m.rep.Links[i]
		jobs := make([]string, len(l.Jobs))
		for k, j := range l.Jobs {
			s := ""
			if k < len(l.Shifts) {
				s = fmt.Sprintf(" +%.1fs", l.Shifts[k].Seconds())
			}
			jobs[k] = j + s
		}
		mark := "  "
		if i == m.cursor {
			mark = "▸ "
		}
		line := mark + common.Pad(l.Name, 16) + common.Pad(fmt.Sprintf("%.2f", l.Score), 7) + strings.Join(jobs, "  ")
		if m.width > 0 {
			line = common.Truncate(line, m.width)
		}
		if i == m.cursor {
			line = m.st.Selected.Render(line)
		}
		lines = append(lines, line)
	}
	return strings.Join(lines, "\n")
}
