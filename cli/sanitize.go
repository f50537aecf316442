package cli

import "github.com/replan/replan/internal/termtext"

// clean makes text that came from a user (job names, tenants, reasons,
// event messages) safe to print in a table: terminal control sequences
// (CSI and OSC escapes, their C1 forms) are removed, and every other
// control character becomes a space, so nothing a user submits can move
// the cursor, retitle the terminal or break a table's columns.
func clean(s string) string { return termtext.Clean(s) }

// cleanLine is clean for a line of a log: tabs and the newline stay.
func cleanLine(s string) string { return termtext.CleanLine(s) }
