package common

import (
	"strings"

	tea "charm.land/bubbletea/v2"
)

// Input is a one-line text input for filters and paths: typing appends,
// backspace deletes, ctrl+u clears, ctrl+w deletes a word. (Bubbles'
// textinput would pull a clipboard module into the build for nothing.)
type Input struct {
	Prompt string
	value  []rune
}

// Value is the text typed.
func (in *Input) Value() string { return string(in.value) }

// SetValue replaces the text.
func (in *Input) SetValue(s string) { in.value = []rune(s) }

// Update edits the text with a key; it reports whether the key was used.
func (in *Input) Update(k tea.KeyPressMsg) bool {
	switch k.String() {
	case "backspace", "ctrl+h":
		if len(in.value) > 0 {
			in.value = in.value[:len(in.value)-1]
		}
		return true
	case "ctrl+u":
		in.value = in.value[:0]
		return true
	case "ctrl+w":
		s := strings.TrimRight(string(in.value), " ")
		if i := strings.LastIndexByte(s, ' '); i >= 0 {
			s = s[:i+1]
		} else {
			s = ""
		}
		in.value = []rune(s)
		return true
	case "space":
		in.value = append(in.value, ' ')
		return true
	}
	if k.Text != "" {
		in.value = append(in.value, []rune(k.Text)...)
		return true
	}
	return false
}

// View is the prompt, the text and a block cursor, cut to width cells
// (keeping the end of the text in view).
func (in *Input) View(width int) string {
	s := string(in.value)
	room := width - len([]rune(in.Prompt)) - 1
	if r := []rune(s); room > 0 && len(r) > room {
		s = "…" + string(r[len(r)-room+1:])
	}
	return Truncate(in.Prompt+s+"█", width)
}

// Match is every list's filter: each word of q must match. A word
// "field:value" whose field is a key of fields matches the start of that
// field's value; any other word matches anywhere in text. Case is ignored.
func Match(q string, fields map[string]string, text ...string) bool {
	all := ""
	for _, w := range strings.Fields(strings.ToLower(q)) {
		if field, val, ok := strings.Cut(w, ":"); ok {
			if v, known := fields[field]; known {
				if !strings.HasPrefix(strings.ToLower(v), val) {
					return false
				}
				continue
			}
		}
		if all == "" {
			all = strings.ToLower(strings.Join(text, " "))
		}
		if !strings.Contains(all, w) {
			return false
		}
	}
	return true
}

// Edit is a list's filter being typed: enter keeps the filter, esc clears
// it, any other key edits it. It reports whether typing goes on. Typed
// text is only ever the filter, never a command.
func (in *Input) Edit(k tea.KeyPressMsg) (editing bool) {
	switch k.String() {
	case "enter":
		return false
	case "esc":
		in.SetValue("")
		return false
	}
	in.Update(k)
	return true
}
