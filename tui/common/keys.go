package common

import (
	"charm.land/bubbles/v2/key"
	tea "charm.land/bubbletea/v2"
)

// Keys are every key binding of the TUI; screens use the ones they need.
type Keys struct {
	Up, Down, PageUp, PageDown, Top, Bottom key.Binding
	Enter, Back, Filter                     key.Binding
	Cancel, Drain, Submit                   key.Binding
	Undrain, Hold, Release, Sort, Reverse   key.Binding
	Faster, Slower                          key.Binding
	Spec, Log                               key.Binding
	NextTab, PrevTab                        key.Binding
	Tab1, Tab2, Tab3, Tab4, Tab5, Tab6      key.Binding
	Tab7, Tab8                              key.Binding
	Help, Quit                              key.Binding
}

// DefaultKeys are the bindings docs/tui.md lists.
func DefaultKeys() Keys {
	b := func(help, desc string, keys ...string) key.Binding {
		return key.NewBinding(key.WithKeys(keys...), key.WithHelp(help, desc))
	}
	return Keys{
		Up:       b("↑/k", "up", "up", "k"),
		Down:     b("↓/j", "down", "down", "j"),
		PageUp:   b("pgup", "page up", "pgup", "ctrl+u"),
		PageDown: b("pgdn", "page down", "pgdown", "ctrl+d"),
		Top:      b("home/g", "top", "home", "g"),
		Bottom:   b("end/G", "bottom", "end", "G"),
		Enter:    b("enter", "detail", "enter"),
		Back:     b("esc", "back", "esc"),
		Filter:   b("/", "filter", "/"),
		Cancel:   b("c", "cancel job", "c"),
		Drain:    b("d", "drain server", "d"),
		Undrain:  b("u", "undrain server", "u"),
		Hold:     b("h", "hold job", "h"),
		Release:  b("H", "release job", "H"),
		Sort:     b("o", "sort by the next column", "o"),
		Reverse:  b("O", "reverse the order", "O"),
		Submit:   b("s", "submit spec", "s"),
		Spec:     b("v", "spec", "v"),
		Log:      b("l", "log", "l"),
		Faster:   b("+", "faster", "+", "="),
		Slower:   b("-", "slower", "-"),
		NextTab:  b("tab", "next screen", "tab"),
		PrevTab:  b("shift+tab", "previous screen", "shift+tab"),
		Tab1:     b("1", "overview", "1"),
		Tab2:     b("2", "cluster", "2"),
		Tab3:     b("3", "queue", "3"),
		Tab4:     b("4", "jobs", "4"),
		Tab5:     b("5", "job detail", "5"),
		Tab6:     b("6", "events", "6"),
		Tab7:     b("7", "links", "7"),
		Tab8:     b("8", "history", "8"),
		Help:     b("?", "help", "?"),
		Quit:     b("q", "quit", "q", "ctrl+c"),
	}
}

// Moves are the cursor bindings every list screen shares.
func (k Keys) Moves() []key.Binding {
	return []key.Binding{k.Up, k.Down, k.PageUp, k.PageDown, k.Top, k.Bottom}
}

// Move applies a cursor key to a list of n rows shown page rows at a time:
// it returns the new cursor (clamped to the list) and whether msg was a
// move at all.
func (k Keys) Move(msg tea.KeyPressMsg, cursor, n, page int) (int, bool) {
	switch {
	case key.Matches(msg, k.Up):
		cursor--
	case key.Matches(msg, k.Down):
		cursor++
	case key.Matches(msg, k.PageUp):
		cursor -= max(page, 1)
	case key.Matches(msg, k.PageDown):
		cursor += max(page, 1)
	case key.Matches(msg, k.Top):
		cursor = 0
	case key.Matches(msg, k.Bottom):
		cursor = n - 1
	default:
		return cursor, false
	}
	return Clamp(cursor, 0, n-1), true
}
