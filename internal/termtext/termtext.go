// Package termtext makes text that came from a user (job names, tenants,
// reasons, event messages, log lines) safe to print on a terminal: the CLI's
// tables and the TUI both pass such text through it.
package termtext

import (
	"fmt"
	"strings"
	"unicode"
)

// Clean removes terminal control sequences (CSI and OSC escapes, their C1
// forms), turns every other control character into a space and shows each
// invisible format character as <U+XXXX> (IsFormat), so nothing a user
// submits can move the cursor, retitle the terminal, break a table's
// columns or make text read other than it is (a right-to-left override).
func Clean(s string) string { return strip(s, false) }

// CleanLine is Clean for a line of a log: tabs and the newline stay.
func CleanLine(s string) string { return strip(s, true) }

// IsFormat reports whether r is an invisible character that changes how
// the text around it reads: Unicode's format characters (category Cf:
// bidirectional overrides and isolates U+202A-U+202E, U+2066-U+2069,
// zero-width spaces and joiners U+200B-U+200D, U+FEFF, the soft hyphen)
// and the line and paragraph separators U+2028, U+2029.
func IsFormat(r rune) bool {
	return unicode.Is(unicode.Cf, r) || r == '\u2028' || r == '\u2029'
}

// unsafe is a character Clean changes.
func unsafe(r rune) bool { return unicode.IsControl(r) || IsFormat(r) }

func strip(s string, keepLayout bool) string {
	if strings.IndexFunc(s, unsafe) < 0 {
		return s
	}
	var b strings.Builder
	rs := []rune(s)
	for i := 0; i < len(rs); i++ {
		r := rs[i]
		switch {
		case r == 0x1b && i+1 < len(rs) && rs[i+1] == '[', r == 0x9b:
			// CSI: parameters, then one final byte in @..~.
			if r == 0x1b {
				i++
			}
			for i+1 < len(rs) && !(rs[i+1] >= 0x40 && rs[i+1] <= 0x7e) {
				i++
			}
			i++
		case r == 0x1b && i+1 < len(rs) && strings.ContainsRune("]P_^X", rs[i+1]), r == 0x9d, r == 0x90, r == 0x9e, r == 0x9f, r == 0x98:
			// OSC, DCS, APC, PM, SOS: a string up to BEL or ST.
			if r == 0x1b {
				i++
			}
			for i+1 < len(rs) {
				i++
				if rs[i] == 0x07 || rs[i] == 0x9c {
					break
				}
				if rs[i] == 0x1b && i+1 < len(rs) && rs[i+1] == '\\' {
					i++
					break
				}
			}
		case r == 0x1b:
			i++ // a two-character escape
		case keepLayout && (r == '\t' || r == '\n'):
			b.WriteRune(r)
		case unicode.IsControl(r):
			if !keepLayout {
				b.WriteByte(' ')
			}
		case IsFormat(r):
			fmt.Fprintf(&b, "<U+%04X>", r)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}
