// Package cluster is the TUI's cluster screen: racks, their servers, and one
// cell per GPU coloured (and lettered) by the job holding it, with a legend
// job → colour. Free GPUs are dim dots, a drained server's free GPUs are
// dashes and an unreachable server's GPUs are crosses. It scrolls, and
// renders only the rows on screen, so 1,024 servers cost what 20 do.
package cluster

import (
	"fmt"
	"sort"
	"strings"

	"charm.land/bubbles/v2/key"
	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/x/ansi"

	"github.com/replan/replan/tui/common"
	"github.com/replan/replan/tui/data"
)

// Model is the cluster screen.
type Model struct {
	st   common.Styles
	keys common.Keys
	pal  *common.Palette

	width, height int

	nodes  []data.Node
	sorter common.Sorter[nodeAt]
	rows   []row // rack headers and servers, in display order
	srvRow []int // row index of each server in display order
	order  []int // node index of each server in display order
	cursor int   // index into order
	offset int   // first row on screen
	nameW  int
	gpuW   int
	loaded bool
}

type row struct {
	rack string // header when node < 0
	node int
	free int // rack header: free GPUs
	gpus int // rack header: GPUs
	n    int // rack header: servers
}

// New is an empty cluster screen.
func New(st common.Styles, keys common.Keys, pal *common.Palette) *Model {
	return &Model{st: st, keys: keys, pal: pal, sorter: common.Sorter[nodeAt]{Keys: sortKeys()}}
}

// nodeAt is a server and its place in the backend's (the inventory's)
// order, for sorting.
type nodeAt struct {
	i int
	n *data.Node
}

// usable is a server's free GPUs a job could get: none on a drained or
// unreachable server.
func usable(n *data.Node) int {
	if !n.Reachable || n.Drained {
		return 0
	}
	return n.FreeGPUs
}

// sortKeys are the orders "o" cycles through within each rack ("O"
// reverses): the inventory's, most free GPUs (usable ones), state (down, drained, ok),
// least utilised, hottest, most power, most GPUs held but idle.
func sortKeys() []common.SortKey[nodeAt] {
	state := func(n *data.Node) int {
		switch {
		case !n.Reachable:
			return 0
		case n.Drained:
			return 1
		}
		return 2
	}
	util := func(n *data.Node) float64 {
		if len(n.Stats) == 0 {
			return 101 // not reported: last
		}
		u, _ := n.Util()
		return u
	}
	hot := func(n *data.Node) (t, w float64) {
		for _, g := range n.Stats {
			t, w = max(t, g.TempC), w+g.PowerW
		}
		return t, w
	}
	return []common.SortKey[nodeAt]{
		{Title: "SERVER", Name: "inventory order", Less: func(a, b nodeAt) bool { return a.i < b.i }},
		{Title: "FREE", Right: true, Name: "free GPUs", Desc: true, Less: func(a, b nodeAt) bool { return usable(a.n) < usable(b.n) }},
		{Title: "STATE", Name: "state", Less: func(a, b nodeAt) bool { return state(a.n) < state(b.n) }},
		{Title: "UTIL", Right: true, Name: "utilisation", Less: func(a, b nodeAt) bool { return util(a.n) < util(b.n) }},
		{Title: "TEMP", Right: true, Name: "temperature", Desc: true, Less: func(a, b nodeAt) bool {
			x, _ := hot(a.n)
			y, _ := hot(b.n)
			return x < y
		}},
		{Title: "POWER", Right: true, Name: "power", Desc: true, Less: func(a, b nodeAt) bool {
			_, x := hot(a.n)
			_, y := hot(b.n)
			return x < y
		}},
		{Title: "IDLE", Right: true, Name: "GPUs held but idle", Desc: true, Less: func(a, b nodeAt) bool { return len(a.n.IdleHeld) < len(b.n.IdleHeld) }},
	}
}

// SetSize implements common.Screen.
func (m *Model) SetSize(w, h int) { m.width, m.height = w, h }

// Capturing implements common.Screen.
func (m *Model) Capturing() bool { return false }

// Help implements common.Screen.
func (m *Model) Help() []key.Binding {
	return append(m.keys.Moves(), m.keys.Drain, m.keys.Undrain, withHelp(m.keys.Enter, "first job's detail"), m.keys.SortHelp())
}

func withHelp(b key.Binding, desc string) key.Binding {
	b.SetHelp(b.Help().Key, desc)
	return b
}

// Selected is the server under the cursor ("" when none).
func (m *Model) Selected() string {
	if len(m.order) == 0 {
		return ""
	}
	return m.nodes[m.order[m.cursor]].Name
}

// Update implements common.Screen.
func (m *Model) Update(msg tea.Msg) tea.Cmd {
	switch msg := msg.(type) {
	case data.NodesMsg:
		if msg.Err == nil {
			m.setNodes(msg.Nodes)
		}
	case tea.KeyPressMsg:
		return m.key(msg)
	}
	return nil
}

func (m *Model) key(k tea.KeyPressMsg) tea.Cmd {
	n := len(m.order)
	if c, ok := m.keys.Move(k, m.cursor, n, m.listHeight()-1); ok {
		m.cursor = c
		return nil
	}
	switch {
	case m.sorter.Update(k, m.keys):
		m.setNodes(m.nodes)
		return nil
	case key.Matches(k, m.keys.Drain):
		if s := m.Selected(); s != "" {
			return func() tea.Msg { return data.ActionMsg{Action: data.ActDrain, Target: s} }
		}
	case key.Matches(k, m.keys.Undrain):
		if s := m.Selected(); s != "" {
			return func() tea.Msg { return data.ActionMsg{Action: data.ActUndrain, Target: s} }
		}
	case key.Matches(k, m.keys.Enter):
		if n > 0 {
			for _, o := range m.nodes[m.order[m.cursor]].Owners {
				if o != "" {
					return func() tea.Msg { return data.OpenJobMsg{ID: o} }
				}
			}
		}
	}
	m.cursor = common.Clamp(m.cursor, 0, n-1)
	return nil
}

// setNodes groups servers by rack (racks in order of first appearance,
// servers in the order in force, the backend's by default) and keeps the
// cursor on the same server.
func (m *Model) setNodes(nodes []data.Node) {
	prev := m.Selected()
	m.nodes, m.loaded = nodes, true
	var racks []string
	byRack := map[string][]int{}
	m.nameW, m.gpuW = 7, 4 // SERVER and room for the sort arrow
	for i, n := range nodes {
		if _, ok := byRack[n.Rack]; !ok {
			racks = append(racks, n.Rack)
		}
		byRack[n.Rack] = append(byRack[n.Rack], i)
		m.nameW = max(m.nameW, ansi.StringWidth(n.Name))
		m.gpuW = max(m.gpuW, len(n.Owners), n.GPUs)
	}
	m.rows, m.order, m.srvRow = m.rows[:0], m.order[:0], m.srvRow[:0]
	m.cursor = 0
	if !m.sorter.Default() {
		for _, r := range racks {
			ix := byRack[r]
			sort.SliceStable(ix, func(a, b int) bool {
				return m.sorter.Less(nodeAt{ix[a], &nodes[ix[a]]}, nodeAt{ix[b], &nodes[ix[b]]})
			})
		}
	}
	for _, r := range racks {
		h := row{rack: r, node: -1}
		for _, i := range byRack[r] {
			h.n++
			h.gpus += nodes[i].GPUs
			if nodes[i].Reachable && !nodes[i].Drained {
				h.free += nodes[i].FreeGPUs
			}
		}
		m.rows = append(m.rows, h)
		for _, i := range byRack[r] {
			if nodes[i].Name == prev {
				m.cursor = len(m.order)
			}
			m.srvRow = append(m.srvRow, len(m.rows))
			m.order = append(m.order, i)
			m.rows = append(m.rows, row{node: i})
		}
	}
}

// legendLines is the room the legend gets.
const legendLines = 2

func (m *Model) listHeight() int { return max(1, m.height-2-legendLines) }

// View implements common.Screen.
func (m *Model) View() string {
	if !m.loaded {
		return common.FitLines([]string{m.st.Faint.Render("waiting for the first poll of the servers…")}, m.height)
	}
	lines := make([]string, 0, m.height)
	hdr := m.sorter.Mark("  " + common.Pad("SERVER", m.nameW) + " " + common.Pad("GPUS", m.gpuW) + "  FREE STATE  UTIL TEMP POWER  IDLE JOBS")
	if len(m.order) > 0 {
		pos := fmt.Sprintf("%d/%d", m.cursor+1, len(m.order))
		hdr = common.Pad(hdr, max(0, m.width-len(pos))) + pos
	}
	lines = append(lines, m.summary(), m.st.Header.Render(common.Truncate(hdr, m.width)))
	lh := m.listHeight()
	cur := -1
	if len(m.order) > 0 {
		cur = m.srvRow[m.cursor]
		// keep the rack header of the first server visible when scrolling up
		want := cur
		if m.cursor == 0 {
			want = 0
		}
		m.offset = common.Window(m.offset, cur, lh, len(m.rows))
		m.offset = min(m.offset, want)
	}
	// letters go to the jobs on screen, so that none repeats however
	// many jobs the cluster runs
	var visible []string
	vseen := map[string]bool{}
	for r := m.offset; r < len(m.rows) && r < m.offset+lh; r++ {
		if rw := m.rows[r]; rw.node >= 0 {
			for _, o := range m.nodes[rw.node].Owners {
				if o != "" && !vseen[o] {
					vseen[o] = true
					visible = append(visible, o)
				}
			}
		}
	}
	sort.Strings(visible)
	m.pal.Retain(visible)
	for r := m.offset; r < len(m.rows) && r < m.offset+lh; r++ {
		rw := m.rows[r]
		if rw.node < 0 {
			lines = append(lines, m.st.Faint.Render(common.Truncate(fmt.Sprintf("rack %s · %d servers · %d/%d GPUs free", rw.rack, rw.n, rw.free, rw.gpus), m.width)))
			continue
		}
		lines = append(lines, m.server(m.nodes[rw.node], r == cur))
	}
	for len(lines) < 2+lh {
		lines = append(lines, "")
	}
	sort.Strings(visible)
	lines = append(lines, m.legend(visible)...)
	return common.FitLines(lines, m.height)
}

func (m *Model) summary() string {
	gpus, free, drained, down := 0, 0, 0, 0
	for _, n := range m.nodes {
		gpus += n.GPUs
		if n.Reachable && !n.Drained {
			free += n.FreeGPUs // a drained or dead server's GPUs are not free
		}
		if n.Drained {
			drained++
		}
		if !n.Reachable {
			down++
		}
	}
	busy := 0
	for _, n := range m.nodes {
		for _, o := range n.Owners {
			if o != "" {
				busy++
			}
		}
	}
	s := fmt.Sprintf("%d servers · %d GPUs · %d busy · %d free", len(m.nodes), gpus, busy, free)
	if drained > 0 {
		s += fmt.Sprintf(" · %d drained", drained)
	}
	if down > 0 {
		s += " · " + m.st.Bad.Render(fmt.Sprintf("%d unreachable", down))
	}
	if !m.sorter.Default() {
		s += " · " + m.sorter.Label() + " in each rack"
	}
	// the selected server's suspicion and cordoned GPUs, with why
	if len(m.order) > 0 && m.cursor < len(m.order) {
		n := m.nodes[m.order[m.cursor]]
		if n.Suspect {
			s += " · " + m.st.Warn.Render(fmt.Sprintf("%s suspect: %s", n.Name, n.SuspectWhy))
		}
		if !n.Reachable && n.State == "redeploying" {
			s += " · " + m.st.Warn.Render(fmt.Sprintf("%s: starting its agent again", n.Name))
		}
		if n.DownWhy != "" {
			s += " · " + m.st.Bad.Render(fmt.Sprintf("%s down: %s", n.Name, n.DownWhy))
		}
		for _, c := range n.Cordoned {
			s += " · " + m.st.Bad.Render(fmt.Sprintf("%s GPU %d cordoned: %s", n.Name, c.GPU, c.Why))
		}
	}
	return common.Truncate(s, m.width)
}

func (m *Model) server(n data.Node, selected bool) string {
	var b strings.Builder
	mark := "  "
	if selected {
		mark = "▸ "
	}
	name := common.Pad(n.Name, m.nameW)
	if selected {
		name = m.st.Selected.Render(name)
	}
	b.WriteString(mark)
	b.WriteString(name)
	b.WriteByte(' ')
	// cells in runs of the same look, one Render per run
	var run strings.Builder
	runStyle := -2 // -1 dim, -3 bad, ≥0 job slot
	flush := func() {
		if run.Len() == 0 {
			return
		}
		switch {
		case runStyle == -3:
			b.WriteString(m.st.Bad.Render(run.String()))
		case runStyle == -1:
			b.WriteString(m.st.Dim.Render(run.String()))
		default:
			b.WriteString(m.st.Job(runStyle).Render(run.String()))
		}
		run.Reset()
	}
	cordoned := map[int]bool{}
	for _, c := range n.Cordoned {
		cordoned[c.GPU] = true
	}
	for i := range max(n.GPUs, len(n.Owners)) {
		o := ""
		if i < len(n.Owners) {
			o = n.Owners[i]
		}
		style, glyph := -1, "·"
		switch {
		case !n.Reachable:
			style, glyph = -3, "x"
		case o != "":
			style, glyph = m.pal.Slot(o), m.pal.Letter(o)
		case cordoned[i]:
			style, glyph = -3, "!"
		case n.Drained:
			glyph = "-"
		}
		if style != runStyle {
			flush()
			runStyle = style
		}
		run.WriteString(glyph)
	}
	flush()
	b.WriteString(strings.Repeat(" ", m.gpuW-max(n.GPUs, len(n.Owners))))
	fmt.Fprintf(&b, " %s ", common.PadLeft(fmt.Sprintf("%d/%d", n.FreeGPUs, n.GPUs), 5))
	switch {
	case !n.Reachable && n.State == "redeploying":
		b.WriteString(m.st.Warn.Render(common.Pad("redep", 6)))
	case !n.Reachable:
		b.WriteString(m.st.Bad.Render(common.Pad("down", 6)))
	case n.Drained:
		b.WriteString(m.st.Warn.Render(common.Pad("drain", 6)))
	case n.Suspect:
		b.WriteString(m.st.Warn.Render(common.Pad("susp", 6)))
	case len(n.Cordoned) > 0:
		b.WriteString(m.st.Warn.Render(common.Pad(fmt.Sprintf("%d cord", len(n.Cordoned)), 6)))
	default:
		b.WriteString(m.st.OK.Render(common.Pad("ok", 6)))
	}
	b.WriteString(telemetry(n))
	// IDLE: the GPUs a job holds that do nothing
	if k := len(n.IdleHeld); k > 0 {
		b.WriteString(m.st.Warn.Render(common.PadLeft(fmt.Sprint(k), 4)) + " ")
	} else {
		b.WriteString(common.PadLeft("-", 4) + " ")
	}
	seen := map[string]bool{}
	var jobs []string
	for _, o := range n.Owners {
		if o != "" && !seen[o] {
			seen[o] = true
			jobs = append(jobs, o)
		}
	}
	b.WriteString(strings.Join(jobs, " "))
	return common.Truncate(b.String(), m.width)
}

// legend lists job → letter/colour for the jobs on screen, wrapped into
// legendLines lines, "+N more" when they do not fit.
func (m *Model) legend(ids []string) []string {
	free := m.st.Dim.Render("·") + " free  " + m.st.Dim.Render("-") + " drained  " + m.st.Bad.Render("x") + " down"
	for _, n := range m.nodes {
		if len(n.Cordoned) > 0 {
			free += "  " + m.st.Bad.Render("!") + " cordoned"
			break
		}
	}
	lines := []string{""}
	add := func(item string) bool {
		last := &lines[len(lines)-1]
		w := ansi.StringWidth(*last)
		if w > 0 && w+2+ansi.StringWidth(item) > m.width {
			if len(lines) == legendLines {
				return false
			}
			lines = append(lines, "")
			last = &lines[len(lines)-1]
		} else if w > 0 {
			*last += "  "
		}
		*last += item
		return true
	}
	add(free)
	for i, id := range ids {
		item := m.st.Job(m.pal.Slot(id)).Render(m.pal.Letter(id) + " " + id)
		if !add(item) {
			more := fmt.Sprintf("+%d more", len(ids)-i)
			last := &lines[len(lines)-1]
			*last = common.Truncate(*last, max(0, m.width-len(more)-2)) + "  " + more
			break
		}
	}
	return lines
}

// telemetry is a server's GPU figures in fixed columns: mean utilisation,
// hottest GPU, total power ("-" when not reported).
func telemetry(n data.Node) string {
	if len(n.Stats) == 0 {
		return common.PadLeft("-", 4) + " " + common.PadLeft("-", 4) + " " + common.PadLeft("-", 5) + "  "
	}
	util, _ := n.Util()
	hot, watts := 0.0, 0.0
	for _, g := range n.Stats {
		hot = max(hot, g.TempC)
		watts += g.PowerW
	}
	return common.PadLeft(fmt.Sprintf("%.0f%%", util), 4) + " " + common.PadLeft(fmt.Sprintf("%.0f°C", hot), 4) + " " + common.PadLeft(fmt.Sprintf("%.1fkW", watts/1000), 5) + "  "
}
