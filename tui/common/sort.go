package common

import (
	"strings"

	"charm.land/bubbles/v2/key"
	tea "charm.land/bubbletea/v2"
)

// SortKey is one column a list can be sorted by.
type SortKey[T any] struct {
	// Title is the column's header title (the arrow goes next to it);
	// Right says the title is right-aligned (the arrow goes before it).
	Title string
	Right bool
	// Name is the order in words, for the summary line: "wait", "GPUs".
	Name string
	// Desc: the natural direction is descending (most GPUs first).
	Desc bool
	// Less orders two rows ascending.
	Less func(a, b T) bool
}

// Sorter is a list's order: one of its keys and a direction. `o` moves to
// the next key (in its natural direction), `O` reverses the order.
type Sorter[T any] struct {
	Keys []SortKey[T]
	at   int
	flip bool
}

// Update applies the sort keys; it reports whether msg changed the order.
func (s *Sorter[T]) Update(msg tea.KeyPressMsg, k Keys) bool {
	switch {
	case len(s.Keys) == 0:
		return false
	case key.Matches(msg, k.Sort):
		s.at, s.flip = (s.at+1)%len(s.Keys), false
	case key.Matches(msg, k.Reverse):
		s.flip = !s.flip
	default:
		return false
	}
	return true
}

// Key is the key in force.
func (s *Sorter[T]) Key() SortKey[T] { return s.Keys[s.at] }

// Descending reports whether the order runs high to low.
func (s *Sorter[T]) Descending() bool { return s.Keys[s.at].Desc != s.flip }

// Default reports whether the order is the list's first key, its natural
// direction.
func (s *Sorter[T]) Default() bool { return s.at == 0 && !s.flip }

// Less orders two rows as the list shows them; rows equal under the key
// keep their order in a stable sort.
func (s *Sorter[T]) Less(a, b T) bool {
	if s.Descending() {
		return s.Keys[s.at].Less(b, a)
	}
	return s.Keys[s.at].Less(a, b)
}

// Arrow is ▲ for an ascending order, ▼ for a descending one.
func (s *Sorter[T]) Arrow() string {
	if s.Descending() {
		return "▼"
	}
	return "▲"
}

// Label is the order for the summary line: "by wait ▼".
func (s *Sorter[T]) Label() string { return "by " + s.Key().Name + " " + s.Arrow() }

// Mark puts the arrow next to the sorted column's title in a header line
// without moving any column: in the padding after a left-aligned title,
// in the gap before a right-aligned one. A header without the title (a
// narrow terminal dropped the column) or without room for the arrow is
// returned as it is (the summary line still names the order).
func (s *Sorter[T]) Mark(hdr string) string {
	if len(s.Keys) == 0 {
		return hdr
	}
	k := s.Key()
	i := wordIndex(hdr, k.Title)
	if i < 0 {
		return hdr
	}
	if k.Right {
		if i > 0 && hdr[i-1] == ' ' {
			return hdr[:i-1] + s.Arrow() + hdr[i:]
		}
		return hdr
	}
	// a left-aligned title keeps a space between the arrow and the next
	// column's title
	j := i + len(k.Title)
	switch {
	case j == len(hdr):
		return hdr + s.Arrow()
	case j+1 == len(hdr) && hdr[j] == ' ', j+1 < len(hdr) && hdr[j] == ' ' && hdr[j+1] == ' ':
		return hdr[:j] + s.Arrow() + hdr[j+1:]
	}
	return hdr
}

// wordIndex is where w stands in s as a whole word (between spaces or
// the ends), -1 when it does not.
func wordIndex(s, w string) int {
	for off := 0; ; {
		i := strings.Index(s[off:], w)
		if i < 0 {
			return -1
		}
		i += off
		j := i + len(w)
		if (i == 0 || s[i-1] == ' ') && (j == len(s) || s[j] == ' ') {
			return i
		}
		off = i + 1
	}
}

// SortHelp is the sort keys as one help entry: "o/O sort, reverse".
func (k Keys) SortHelp() key.Binding {
	return key.NewBinding(key.WithKeys("o", "O"), key.WithHelp("o/O", "sort column, reverse"))
}
