package cluster

import (
	"flag"
	"strings"
	"testing"

	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/colorprofile"

	"github.com/replan/replan/tui/common"
	"github.com/replan/replan/tui/data"
	"github.com/replan/replan/tui/tuitest"
)

var update = flag.Bool("update", false, "rewrite the golden files")

func newModel(nodes []data.Node, w, h int) *Model {
	m := New(common.NewStyles(colorprofile.NoTTY), common.DefaultKeys(), common.NewPalette())
	m.SetSize(w, h)
	m.Update(data.NodesMsg{Nodes: nodes, At: tuitest.T0})
	return m
}

func press(m *Model, keys ...string) tea.Cmd {
	var cmd tea.Cmd
	for _, k := range keys {
		cmd = m.Update(tuitest.Key(k))
	}
	return cmd
}

// 8 servers × 8 GPUs fit the 22 lines an 80×24 terminal leaves the screen.
func TestGoldenSmall(t *testing.T) {
	m := newModel(tuitest.Small().Nodes, 80, 22)
	v := m.View()
	tuitest.CheckSize(t, v, 80, 22)
	for _, s := range []string{"srv-01", "srv-08", "rack r1", "rack r2"} {
		if !strings.Contains(v, s) {
			t.Errorf("view lacks %q", s)
		}
	}
	tuitest.Golden(t, "small", v, *update)
}

func TestGoldenLargeScrolled(t *testing.T) {
	m := newModel(tuitest.Large(1024), 80, 22)
	press(m, "end")
	v := m.View()
	tuitest.CheckSize(t, v, 80, 22)
	if !strings.Contains(v, "srv-1024") || !strings.Contains(v, "1024/1024") {
		t.Errorf("the end of the list is not on screen:\n%s", v)
	}
	tuitest.Golden(t, "large-end", v, *update)
}

func TestCursorAndDrain(t *testing.T) {
	m := newModel(tuitest.Small().Nodes, 80, 22)
	press(m, "j", "down", "k")
	if got := m.Selected(); got != "srv-02" {
		t.Fatalf("selected %s, want srv-02", got)
	}
	cmd := press(m, "d")
	if cmd == nil {
		t.Fatal("d gave no command")
	}
	if got, want := cmd(), (data.ActionMsg{Action: data.ActDrain, Target: "srv-02"}); got != want {
		t.Errorf("d asked %v, want %v", got, want)
	}
	// a new poll keeps the cursor on the same server
	m.Update(data.NodesMsg{Nodes: tuitest.Small().Nodes})
	if got := m.Selected(); got != "srv-02" {
		t.Errorf("after a poll selected %s, want srv-02", got)
	}
}

// Frames are measured with colours on (true colour), the costliest case.
func BenchmarkViewCluster64(b *testing.B) {
	m := newModel(tuitest.Small().Nodes, 80, 22)
	m.st = common.NewStyles(colorprofile.TrueColor)
	b.ReportAllocs()
	for b.Loop() {
		_ = m.View()
	}
}

func BenchmarkViewCluster1024(b *testing.B) {
	nodes := tuitest.Large(1024)
	m := newModel(nodes, 200, 60)
	m.st = common.NewStyles(colorprofile.TrueColor)
	press(m, "pgdown", "pgdown")
	b.ReportAllocs()
	for b.Loop() {
		// a poll and a frame, as every second brings
		m.Update(data.NodesMsg{Nodes: nodes})
		_ = m.View()
	}
}
