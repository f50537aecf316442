// Package events is the TUI's event screen: the daemon's event stream —
// submissions, starts, reconfigurations with their plans, preemptions,
// failures, drains — newest at the bottom, following the tail unless the
// cursor was moved up, and filtered with "/" (a case-insensitive substring
// of kind, job, server or message).
package events

import (
	"strings"

	"charm.land/bubbles/v2/key"
	tea "charm.land/bubbletea/v2"

	"github.com/replan/replan/tui/common"
	"github.com/replan/replan/tui/data"
)

// MaxEvents bounds the events kept in memory.
const MaxEvents = 5000

// Model is the events screen.
type Model struct {
	st   common.Styles
	keys common.Keys

	width, height int
	all           []data.Event
	shown         []int // indices into all that pass the filter
	cursor        int   // index into shown
	offset        int
	follow        bool

	filter    common.Input
	filtering bool
}

// New is an empty events screen.
func New(st common.Styles, keys common.Keys) *Model {
	return &Model{st: st, keys: keys, follow: true, filter: common.Input{Prompt: "filter: "}}
}

// SetSize implements common.Screen.
func (m *Model) SetSize(w, h int) {
	m.width, m.height = w, h
}

// Capturing implements common.Screen.
func (m *Model) Capturing() bool { return m.filtering }

// Help implements common.Screen.
func (m *Model) Help() []key.Binding {
	return append(m.keys.Moves(), m.keys.Enter, m.keys.Filter, withHelp(m.keys.Back, "clear filter"))
}

func withHelp(b key.Binding, desc string) key.Binding {
	b.SetHelp(b.Help().Key, desc)
	return b
}

// Filter is the filter in force.
func (m *Model) Filter() string { return m.filter.Value() }

// Update implements common.Screen.
func (m *Model) Update(msg tea.Msg) tea.Cmd {
	switch msg := msg.(type) {
	case data.EventsMsg:
		if msg.Err == nil && len(msg.Events) > 0 {
			m.all = append(m.all, msg.Events...)
			if n := len(m.all) - MaxEvents; n > 0 {
				m.all = append(m.all[:0:0], m.all[n:]...)
			}
			m.refilter()
		}
	case tea.PasteMsg:
		if m.filtering {
			m.filter.SetValue(m.filter.Value() + strings.TrimSpace(msg.Content))
			m.follow = true
			m.refilter()
		}
	case tea.KeyPressMsg:
		if m.filtering {
			switch msg.String() {
			case "enter":
				m.filtering = false
				return nil
			case "esc":
				m.filtering = false
				m.filter.SetValue("")
				m.refilter()
				return nil
			}
			if m.filter.Update(msg) {
				m.follow = true
				m.refilter()
			}
			return nil
		}
		if c, ok := m.keys.Move(msg, m.cursor, len(m.shown), m.listHeight()-1); ok {
			m.cursor = c
			m.follow = m.cursor >= len(m.shown)-1
			return nil
		}
		switch {
		case key.Matches(msg, m.keys.Filter):
			m.filtering = true
			return nil
		case key.Matches(msg, m.keys.Back):
			if m.filter.Value() != "" {
				m.filter.SetValue("")
				m.refilter()
			}
			return nil
		case key.Matches(msg, m.keys.Enter):
			if m.cursor < len(m.shown) {
				if id := m.all[m.shown[m.cursor]].JobID; id != "" {
					return func() tea.Msg { return data.OpenJobMsg{ID: id} }
				}
			}
			return nil
		}
	}
	return nil
}

func (m *Model) refilter() {
	q := strings.ToLower(strings.TrimSpace(m.filter.Value()))
	m.shown = m.shown[:0]
	for i, e := range m.all {
		if q == "" || matches(e, q) {
			m.shown = append(m.shown, i)
		}
	}
	if m.follow {
		m.cursor = len(m.shown) - 1
	}
	m.cursor = common.Clamp(m.cursor, 0, len(m.shown)-1)
}

func matches(e data.Event, q string) bool {
	for _, s := range []string{e.Kind, e.JobID, e.Node, e.Msg, e.Plan} {
		if strings.Contains(strings.ToLower(s), q) {
			return true
		}
	}
	return false
}

func (m *Model) listHeight() int { return max(1, m.height-2) }

// View implements common.Screen.
func (m *Model) View() string {
	head := common.Truncate(
		func() string {
			s := "events"
			if f := m.filter.Value(); f != "" {
				s += " matching \"" + f + "\""
			}
			return s + " · " + itoa(len(m.shown)) + " of " + itoa(len(m.all))
		}(), m.width)
	if m.filtering {
		head = m.filter.View(m.width)
	}
	lines := []string{head, m.st.Header.Render(common.Truncate("  DATE  TIME     KIND         JOB/SERVER  MESSAGE", m.width))}
	if len(m.all) == 0 {
		lines = append(lines, m.st.Faint.Render("  no events yet"))
	}
	lh := m.listHeight()
	m.offset = common.Window(m.offset, m.cursor, lh, len(m.shown))
	for i := m.offset; i < len(m.shown) && i < m.offset+lh; i++ {
		e := m.all[m.shown[i]]
		who := e.JobID
		if who == "" {
			who = e.Node
		}
		kind := common.Pad(e.Kind, 12)
		switch e.Kind {
		case "fail", "node-down", "preempt":
			kind = m.st.Bad.Render(kind)
		case "reconfigure", "drain", "requeue":
			kind = m.st.Warn.Render(kind)
		case "start", "finish", "node-up":
			kind = m.st.OK.Render(kind)
		}
		line := common.Stamp(e.At) + " " + kind + " " + common.Pad(who, 11) + " " + e.Msg
		if i == m.cursor {
			line = "▸ " + m.st.Selected.Render(common.Truncate(line, m.width-2))
		} else {
			line = "  " + line
		}
		lines = append(lines, common.Truncate(line, m.width))
	}
	return common.FitLines(lines, m.height)
}

func itoa(n int) string {
	var b [20]byte
	i := len(b)
	if n == 0 {
		return "0"
	}
	for n > 0 {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
	}
	return string(b[i:])
}
