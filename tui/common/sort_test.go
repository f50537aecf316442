package common

import (
	"testing"

	"charm.land/bubbles/v2/key"
	tea "charm.land/bubbletea/v2"
)

func press(s string) tea.KeyPressMsg { return tea.KeyPressMsg{Code: rune(s[0]), Text: s} }

// TestSorterKeysAndHeader: o moves to the next key in its natural
// direction, O reverses; the arrow stands next to the sorted column's
// title without moving a column.
func TestSorterKeysAndHeader(t *testing.T) {
	type row struct {
		id   string
		gpus int
	}
	s := Sorter[row]{Keys: []SortKey[row]{
		{Title: "ID", Name: "ID", Less: func(a, b row) bool { return a.id < b.id }},
		{Title: "GPUS", Right: true, Name: "GPUs", Desc: true, Less: func(a, b row) bool { return a.gpus < b.gpus }},
	}}
	k := DefaultKeys()
	hdr := "  ID       GPUS REASON"
	if got := s.Mark(hdr); got != "  ID▲      GPUS REASON" || !s.Default() {
		t.Errorf("default: %q", got)
	}
	if !s.Update(press("o"), k) || s.Default() || !s.Descending() || s.Label() != "by GPUs ▼" {
		t.Fatalf("o: %+v %q", s, s.Label())
	}
	if got := s.Mark(hdr); got != "  ID      ▼GPUS REASON" || len([]rune(got)) != len([]rune(hdr)) {
		t.Errorf("by GPUs: %q", got)
	}
	a, b := row{"a", 8}, row{"b", 16}
	if !s.Less(b, a) || s.Less(a, b) {
		t.Error("most GPUs first")
	}
	if !s.Update(press("O"), k) || s.Descending() || !s.Less(a, b) || s.Label() != "by GPUs ▲" {
		t.Errorf("O does not reverse: %+v", s)
	}
	if !s.Update(press("o"), k) || !s.Default() {
		t.Errorf("o after the last key is back to the first: %+v", s)
	}
	if s.Update(press("x"), k) {
		t.Error("x changed the order")
	}
	// a title without room for the arrow, or a dropped column, is left as it is
	s.Update(press("o"), k)
	if got := s.Mark("  ID REASON"); got != "  ID REASON" {
		t.Errorf("dropped column: %q", got)
	}
	if !key.Matches(press("O"), k.SortHelp()) || k.SortHelp().Help().Key != "o/O" {
		t.Error("the help entry is not o/O")
	}
}
