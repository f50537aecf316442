// Package common is what every screen of the TUI shares: the styles (with
// colours chosen for the terminal's colour profile, so they degrade on
// 16-colour terminals and vanish under NO_COLOR), the key bindings, the job
// palette, the Screen contract and small text helpers.
package common

import (
	"fmt"
	"strings"
	"time"

	"charm.land/bubbles/v2/key"
	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/x/ansi"
)

// Screen is one page of the TUI. The root model routes messages to it and
// gives it the space below the tab bar.
type Screen interface {
	// SetSize gives the screen its width and height in cells.
	SetSize(width, height int)
	// Update handles a message (keys only when the screen has focus).
	Update(msg tea.Msg) tea.Cmd
	// View renders exactly the screen's area (at most height lines).
	View() string
	// Help lists the screen's own keys, for the footer and the help page.
	Help() []key.Binding
	// Capturing reports whether the screen is reading text (a filter), so
	// the root must not treat letters as global keys.
	Capturing() bool
}

// Truncate cuts s to at most w cells, ending with "…" when cut.
func Truncate(s string, w int) string {
	if w <= 0 {
		return ""
	}
	return ansi.Truncate(s, w, "…")
}

// Pad truncates or right-pads s to exactly w cells.
func Pad(s string, w int) string {
	s = Truncate(s, w)
	if n := ansi.StringWidth(s); n < w {
		s += strings.Repeat(" ", w-n)
	}
	return s
}

// PadLeft truncates or left-pads s to exactly w cells.
func PadLeft(s string, w int) string {
	s = Truncate(s, w)
	if n := ansi.StringWidth(s); n < w {
		s = strings.Repeat(" ", w-n) + s
	}
	return s
}

// Duration formats d compactly: 45s, 12m03s, 3h07m, 2d04h.
func Duration(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	s := int64(d / time.Second)
	switch {
	case s < 60:
		return fmt.Sprintf("%ds", s)
	case s < 3600:
		return fmt.Sprintf("%dm%02ds", s/60, s%60)
	case s < 86400:
		return fmt.Sprintf("%dh%02dm", s/3600, s%3600/60)
	}
	return fmt.Sprintf("%dd%02dh", s/86400, s%86400/3600)
}

// Stamp is when something happened, in UTC with its date (month-day) so
// that yesterday's events do not read as today's: "11-27 14:13:46".
func Stamp(t time.Time) string { return t.UTC().Format("01-02 15:04:05") }

// Rate writes samples (or iterations) per second for a narrow column,
// never in exponent form: "0.82", "33.8", "1244", "10.7k", "2.3M".
func Rate(v float64) string {
	switch {
	case v >= 999_950:
		return fmt.Sprintf("%.1fM", v/1e6)
	case v >= 9_999.5:
		return fmt.Sprintf("%.1fk", v/1e3)
	case v >= 99.95:
		return fmt.Sprintf("%.0f", v)
	case v >= 9.995:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

// Window returns the first index of a window of height rows over n rows
// that keeps cursor visible, starting from the previous offset.
func Window(offset, cursor, height, n int) int {
	if height <= 0 {
		return 0
	}
	if cursor < offset {
		offset = cursor
	}
	if cursor >= offset+height {
		offset = cursor - height + 1
	}
	offset = min(offset, max(0, n-height))
	return max(0, offset)
}

// Clamp keeps v within [lo, hi] (lo when hi < lo).
func Clamp(v, lo, hi int) int {
	if v > hi {
		v = hi
	}
	if v < lo {
		v = lo
	}
	return v
}

// FitLines cuts or pads text to exactly h lines.
func FitLines(lines []string, h int) string {
	if len(lines) > h {
		lines = lines[:h]
	}
	for len(lines) < h {
		lines = append(lines, "")
	}
	return strings.Join(lines, "\n")
}

// Key matches a key message against bindings.
func Key(msg tea.Msg, b ...key.Binding) bool {
	k, ok := msg.(tea.KeyPressMsg)
	return ok && key.Matches(k, b...)
}
