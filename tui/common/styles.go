package common

import (
	"image/color"

	"charm.land/lipgloss/v2"
	"github.com/charmbracelet/colorprofile"
)

// Styles are the TUI's looks for one colour profile. Build them with
// NewStyles; the zero profile (colorprofile.NoTTY) gives plain text, which
// is what the golden tests and NO_COLOR get.
type Styles struct {
	Profile colorprofile.Profile

	Title, TabActive, TabInactive lipgloss.Style
	Header                        lipgloss.Style // table headers
	Selected                      lipgloss.Style // the cursor's row
	Dim, Faint                    lipgloss.Style // free GPUs, secondary text
	OK, Warn, Bad                 lipgloss.Style
	Banner                        lipgloss.Style // the lost-connection line
	Footer, Key                   lipgloss.Style
	Plot, Mark                    lipgloss.Style // the curve and the current GPU count

	jobs []lipgloss.Style
}

// Colour reports whether the styles draw colours at all.
func (s Styles) Colour() bool { return s.Profile > colorprofile.ASCII }

// NewStyles builds the styles for p (lipgloss's profile detection:
// colorprofile.Detect(os.Stdout, os.Environ()), which honours NO_COLOR).
// On ANSI (16 colours) it only uses the 16 basic colours, so nothing is
// left to the terminal's approximation; on ASCII it keeps bold and reverse
// only; on NoTTY it is plain text.
func NewStyles(p colorprofile.Profile) Styles {
	s := Styles{Profile: p}
	plain := lipgloss.NewStyle()
	if p <= colorprofile.NoTTY {
		s.Title, s.TabActive, s.TabInactive, s.Header, s.Selected = plain, plain, plain, plain, plain
		s.Dim, s.Faint, s.OK, s.Warn, s.Bad, s.Banner = plain, plain, plain, plain, plain, plain
		s.Footer, s.Key, s.Plot, s.Mark = plain, plain, plain, plain
		s.jobs = []lipgloss.Style{plain}
		return s
	}
	bold := plain.Bold(true)
	s.Title, s.Header, s.Key = bold, bold, bold
	s.TabActive = bold.Reverse(true)
	s.TabInactive, s.Footer, s.Dim, s.Faint, s.OK, s.Warn, s.Plot = plain, plain, plain, plain, plain, plain, plain
	s.Selected = plain.Reverse(true)
	s.Bad, s.Banner, s.Mark = bold, bold.Reverse(true), bold
	s.jobs = []lipgloss.Style{plain}
	if p == colorprofile.ASCII {
		return s
	}
	c := lipgloss.Complete(p)
	pick := func(ansiC, a256, hex string) color.Color {
		return c(lipgloss.Color(ansiC), lipgloss.Color(a256), lipgloss.Color(hex))
	}
	grey := pick("8", "240", "#5c6370")
	s.Dim = plain.Foreground(grey)
	s.Faint = plain.Foreground(pick("7", "246", "#9aa0a6"))
	s.OK = plain.Foreground(pick("2", "70", "#7ec16e"))
	s.Warn = plain.Foreground(pick("3", "214", "#e5c07b"))
	s.Bad = bold.Foreground(pick("9", "203", "#ef5f5f"))
	s.Banner = bold.Foreground(pick("15", "231", "#ffffff")).Background(pick("1", "160", "#c0392b"))
	s.TabActive = bold.Foreground(pick("0", "16", "#1e1e1e")).Background(pick("6", "73", "#56b6c2"))
	s.Title = bold.Foreground(pick("6", "73", "#56b6c2"))
	s.Selected = plain.Background(pick("8", "237", "#3a3f4b"))
	s.Plot = plain.Foreground(pick("6", "73", "#56b6c2"))
	s.Mark = bold.Foreground(pick("11", "220", "#ffd75f"))
	s.Key = bold.Foreground(pick("6", "73", "#56b6c2"))

	// Job colours: the 12 non-grey ANSI colours on 16-colour terminals,
	// 24 well separated ones otherwise (the renderer maps them onto 256
	// colours where that is all there is).
	s.jobs = nil
	if p == colorprofile.ANSI {
		for _, a := range []string{"1", "2", "3", "4", "5", "6", "9", "10", "11", "12", "13", "14"} {
			s.jobs = append(s.jobs, plain.Foreground(lipgloss.Color(a)))
		}
		return s
	}
	for _, h := range []string{
		"#e06c75", "#98c379", "#e5c07b", "#61afef", "#c678dd", "#56b6c2",
		"#d19a66", "#be5046", "#7ec699", "#f0a6ca", "#8fbcbb", "#ffcb6b",
		"#82aaff", "#c3e88d", "#f78c6c", "#89ddff", "#b48ead", "#a3be8c",
		"#ebcb8b", "#5e81ac", "#ff5370", "#addb67", "#7fdbca", "#f07178",
	} {
		s.jobs = append(s.jobs, plain.Foreground(lipgloss.Color(h)))
	}
	return s
}

// JobColours is how many jobs get distinct colours.
func (s Styles) JobColours() int { return len(s.jobs) }

// Job is the style of the job in colour slot i.
func (s Styles) Job(i int) lipgloss.Style {
	return s.jobs[((i%len(s.jobs))+len(s.jobs))%len(s.jobs)]
}
