package cli

import (
	"encoding/json"
	"io"
	"text/tabwriter"
)

// writeJSON prints v as indented JSON: every --json output goes through it,
// so every command's schema is printed the same way.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// newTable is the column writer of every table the CLI prints (flush it).
func newTable(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
}
