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

// TestSortWithinRacks: o sorts each rack's servers by the next column
// (free GPUs, most first; a drained or down server has none to give),
// racks stay where they are, the cursor keeps
// its server and the header marks the column.
func TestSortWithinRacks(t *testing.T) {
	m := newModel(tuitest.Small().Nodes, 120, 22)
	press(m, "j") // srv-02
	press(m, "o")
	v := m.View()
	lines := strings.Split(v, "\n")
	if !strings.Contains(lines[1], "▼FREE") || !strings.Contains(lines[0], "by free GPUs ▼ in each rack") || m.Selected() != "srv-02" {
		t.Fatalf("by free GPUs (cursor on %s):\n%s", m.Selected(), v)
	}
	order := func() string {
		var out []string
		for _, l := range strings.Split(m.View(), "\n") {
			if f := strings.Fields(strings.TrimPrefix(l, "▸")); len(f) > 0 && (strings.HasPrefix(f[0], "srv-") || f[0] == "rack") {
				out = append(out, f[0]+map[bool]string{true: " " + f[1], false: ""}[f[0] == "rack"])
			}
		}
		return strings.Join(out, " ")
	}
	if got, want := order(), "rack r1 srv-02 srv-01 srv-03 srv-04 rack r2 srv-07 srv-06 srv-05 srv-08"; got != want {
		t.Errorf("order %q, want %q:\n%s", got, want, v)
	}
	press(m, "o", "o", "o", "o", "o") // GPUs held but idle, most first
	if got := order(); !strings.HasPrefix(got, "rack r1 srv-02") || !strings.Contains(strings.Split(m.View(), "\n")[1], "▼IDLE") {
		t.Errorf("by GPUs held but idle: %q\n%s", got, m.View())
	}
	press(m, "o") // back to the inventory's order
	if got := order(); got != "rack r1 srv-01 srv-02 srv-03 srv-04 rack r2 srv-05 srv-06 srv-07 srv-08" {
		t.Errorf("inventory order: %q", got)
	}
}

// TestCordonedGPUShown: a cordoned GPU is drawn "!" (the legend says
// so), its server's state says how many are cordoned, and with the
// cursor on that server the summary gives why.
func TestCordonedGPUShown(t *testing.T) {
	nodes := tuitest.Small().Nodes
	for i := range nodes {
		if nodes[i].Name == "srv-02" {
			nodes[i].Owners[5] = ""
			nodes[i].Cordoned = []data.Cordon{{GPU: 5, Why: "Xid 79 (GPU has fallen off the bus)"}}
		}
	}
	m := newModel(nodes, 160, 22)
	v := m.View()
	var row string
	for _, l := range strings.Split(v, "\n") {
		if strings.Contains(l, "srv-02") {
			row = l
		}
	}
	if !strings.Contains(row, "!") || !strings.Contains(row, "1 cord") {
		t.Errorf("srv-02's row %q lacks the cordoned GPU", row)
	}
	if !strings.Contains(v, "! cordoned") || strings.Contains(v, "cordoned: Xid") {
		t.Errorf("legend or summary before selecting srv-02:\n%s", v)
	}
	press(m, "j")
	if v := m.View(); !strings.Contains(strings.SplitN(v, "\n", 2)[0], "srv-02 GPU 5 cordoned: Xid 79 (GPU has fallen off the bus)") {
		t.Errorf("summary with srv-02 selected:\n%s", v)
	}
}

// TestSuspectServerShown: a suspect server's state says "susp", and with
// the cursor on it the summary gives why.
func TestSuspectServerShown(t *testing.T) {
	nodes := tuitest.Small().Nodes
	why := "srv-02 GPU 5: SM clock 0.705 of 1.41 GHz, thermal at 88 °C; j-12 ran at 50 % of its predicted 40 samples/s"
	for i := range nodes {
		if nodes[i].Name == "srv-02" {
			nodes[i].Suspect, nodes[i].SuspectWhy = true, why
		}
	}
	m := newModel(nodes, 220, 22)
	v := m.View()
	for _, l := range strings.Split(v, "\n") {
		if strings.Contains(l, "srv-02") && !strings.Contains(l, "susp") {
			t.Errorf("srv-02's row %q does not say suspect", l)
		}
		if strings.Contains(l, "srv-01") && strings.Contains(l, "susp") {
			t.Errorf("srv-01's row %q says suspect", l)
		}
	}
	if strings.Contains(v, "suspect: ") {
		t.Errorf("summary before selecting srv-02:\n%s", v)
	}
	press(m, "j")
	if v := m.View(); !strings.Contains(strings.SplitN(v, "\n", 2)[0], "srv-02 suspect: "+why) {
		t.Errorf("summary with srv-02 selected:\n%s", v)
	}
}

// TestRedeployingAndDownShown: a server whose agent the daemon starts
// again says "redep", one it gave up on says "down", and with the cursor
// on it the summary gives why (issue 26, servers that come back).
func TestRedeployingAndDownShown(t *testing.T) {
	nodes := tuitest.Small().Nodes
	why := "3 redeploys failed: ssh: handshake failed"
	for i := range nodes {
		switch nodes[i].Name {
		case "srv-02":
			nodes[i].Reachable, nodes[i].State = false, "redeploying"
		case "srv-03":
			nodes[i].Reachable, nodes[i].State, nodes[i].DownWhy = false, "down", why
		}
	}
	m := newModel(nodes, 220, 22)
	v := m.View()
	for _, l := range strings.Split(v, "\n") {
		if strings.Contains(l, "srv-02") && !strings.Contains(l, "redep") {
			t.Errorf("srv-02's row %q does not say redeploying", l)
		}
		if strings.Contains(l, "srv-03") && !strings.Contains(l, "down") {
			t.Errorf("srv-03's row %q does not say down", l)
		}
	}
	press(m, "j")
	if v := m.View(); !strings.Contains(strings.SplitN(v, "\n", 2)[0], "srv-02: starting its agent again") {
		t.Errorf("summary with srv-02 selected:\n%s", v)
	}
	press(m, "j")
	if v := m.View(); !strings.Contains(strings.SplitN(v, "\n", 2)[0], "srv-03 down: "+why) {
		t.Errorf("summary with srv-03 selected:\n%s", v)
	}
}
