package tui

import (
	"strings"
	"testing"

	tea "charm.land/bubbletea/v2"

	"github.com/replan/replan/tui/data"
)

// The title bar names the leader, the members and the epoch of a highly
// available control plane (and says when the TUI reads a follower); a
// single daemon's title is unchanged.
func TestTitleBarShowsLeader(t *testing.T) {
	h := newHarness(t)
	h.send(tea.WindowSizeMsg{Width: 200, Height: 24})
	st := h.m.status
	if strings.Contains(h.m.titleBar(), "leader") {
		t.Fatalf("a single daemon's title names a leader: %q", h.m.titleBar())
	}
	st.Role, st.Leader, st.Members, st.Epoch = "follower", "https://head-2:7070", 3, 42
	h.send(data.StatusMsg{Status: st, At: h.now})
	title := h.m.titleBar()
	if want := "via a follower · leader https://head-2:7070 (3 members, epoch 42)"; !strings.Contains(title, want) {
		t.Errorf("title %q lacks %q", title, want)
	}
}
