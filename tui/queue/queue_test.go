package queue

import (
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/charmbracelet/colorprofile"

	"github.com/replan/replan/tui/common"
	"github.com/replan/replan/tui/data"
	"github.com/replan/replan/tui/tuitest"
)

var update = flag.Bool("update", false, "rewrite the golden files")

func newModel(rows []data.QueueRow, w int) *Model {
	m := New(common.NewStyles(colorprofile.NoTTY), common.DefaultKeys())
	m.SetSize(w, 22)
	m.Update(data.QueueMsg{Rows: rows, At: tuitest.T0})
	return m
}

func TestGolden(t *testing.T) {
	rows := tuitest.Small().Queue
	m := newModel(rows, 120)
	tuitest.CheckSize(t, m.View(), 120, 22)
	tuitest.Golden(t, "timers-120", m.View(), *update)

	// at 80 columns the timers push out tenant and name, not the reason
	m = newModel(rows, 80)
	v := m.View()
	tuitest.CheckSize(t, v, 80, 22)
	if !strings.Contains(v, "waits for a rack") || strings.Contains(v, "TENANT") {
		t.Errorf("timers at 80 columns:\n%s", v)
	}
	tuitest.Golden(t, "timers-80", v, *update)

	// without timers the columns stay where they were: "-" in the cells
	plain := append([]data.QueueRow(nil), rows...)
	for i := range plain {
		plain[i].Timers = nil
	}
	m = newModel(plain, 80)
	v = m.View()
	tuitest.CheckSize(t, v, 80, 22)
	if header(v) != header(newModel(rows, 80).View()) {
		t.Errorf("the header changed with the data:\n%s\nvs\n%s", header(v), header(newModel(rows, 80).View()))
	}
	tuitest.Golden(t, "plain-80", v, *update)
}

func header(v string) string { return strings.Split(v, "\n")[1] }

// TestColumnsFixedAndUncut: the same columns whatever the rows say, and
// long values (11h05m, cross-rack) are never cut.
func TestColumnsFixedAndUncut(t *testing.T) {
	rows := tuitest.Small().Queue
	full := newModel(rows, 160).View()
	for _, want := range []string{"11h05m", "cross-rack", "ETA", "SRV-T", "RACK-T", "NWSENS"} {
		if !strings.Contains(full, want) {
			t.Errorf("no %q at 160 columns:\n%s", want, full)
		}
	}
	if strings.Contains(full, "…  ") || strings.Contains(full, "11h0…") {
		t.Errorf("a value is cut off:\n%s", full)
	}
	for n := 0; n <= len(rows); n++ {
		if h := header(newModel(rows[:n], 160).View()); h != header(full) {
			t.Errorf("with %d rows the header is %q, want %q", n, h, header(full))
		}
	}
}

// TestNwSensIsAShare: Nw_sens is shown in [0, 1] whatever the backend
// sends.
func TestNwSensIsAShare(t *testing.T) {
	rows := tuitest.Small().Queue
	rows[0].Timers.NwSens = 64.88
	v := row(newModel(rows, 160).View(), "j-000006")
	if strings.Contains(v, "64.88") || !strings.Contains(v, "1.00") {
		t.Errorf("Nw_sens 64.88 shown as: %q", v)
	}
}

// TestCountdownAtTheBackendRate: the demo's clock runs 60× real time;
// one real second later the timers are a minute further on, so the next
// poll does not make them jump.
func TestCountdownAtTheBackendRate(t *testing.T) {
	m := newModel(tuitest.Small().Queue, 160)
	m.Update(data.TickMsg{Now: tuitest.T0.Add(time.Second), Rate: 60})
	r := row(m.View(), "j-000006")
	// rack timer 2m00s − 60 s; wait 1m35s + 60 s; ETA 11h05m − 1m
	for _, want := range []string{"1m00s", "2m35s", "11h04m"} {
		if !strings.Contains(r, want) {
			t.Errorf("after one second at 60×, row lacks %q: %q", want, r)
		}
	}
}

func row(v, id string) string {
	for _, l := range strings.Split(v, "\n") {
		if strings.Contains(l, id) {
			return l
		}
	}
	return ""
}

// Between polls the timers count down (and waits count up) with the tick.
func TestTickCountsDown(t *testing.T) {
	m := newModel(tuitest.Small().Queue, 120)
	before := row(m.View(), "j-000006")
	if !strings.Contains(before, "  30s") || !strings.Contains(before, "2m00s") || !strings.Contains(before, "1m35s") {
		t.Fatalf("before the tick: %q", before)
	}
	m.Update(data.TickMsg{Now: tuitest.T0.Add(10 * time.Second)})
	after := row(m.View(), "j-000006")
	for _, want := range []string{"  20s", "1m50s", "1m45s", "0.82", "server"} {
		if !strings.Contains(after, want) {
			t.Errorf("after 10 s, row lacks %q: %q", want, after)
		}
	}
	// a timer never goes below zero
	m.Update(data.TickMsg{Now: tuitest.T0.Add(time.Hour)})
	if after := row(m.View(), "j-000006"); !strings.Contains(after, "   0s") {
		t.Errorf("after an hour: %q", after)
	}
	// a new poll resets the base
	m.Update(data.QueueMsg{Rows: tuitest.Small().Queue, At: tuitest.T0.Add(time.Hour)})
	if got := row(m.View(), "j-000006"); !strings.Contains(got, "  30s") {
		t.Errorf("after a new poll: %q", got)
	}
}

func TestCursorCancel(t *testing.T) {
	m := newModel(tuitest.Small().Queue, 80)
	m.Update(tuitest.Key("j"))
	cmd := m.Update(tuitest.Key("c"))
	if cmd == nil {
		t.Fatal("c gave no command")
	}
	if got, want := cmd(), (data.ActionMsg{Action: data.ActCancel, Target: "j-000007"}); got != want {
		t.Errorf("c asked %v, want %v", got, want)
	}
}

// TestFilterAndSort: "/" filters (typed text is never a command), tenant:
// and state: pick a field, "o" changes the order, esc clears.
func TestFilterAndSort(t *testing.T) {
	m := newModel(tuitest.Small().Queue, 160)
	m.Update(tuitest.Key("/"))
	if !m.Capturing() {
		t.Fatal("/ does not start the filter")
	}
	for _, k := range "tenant:ads pre" {
		if cmd := m.Update(tuitest.Key(string(k))); cmd != nil {
			t.Fatalf("typing %q ran a command", k)
		}
	}
	m.Update(tuitest.Key("enter"))
	v := m.View()
	if !strings.Contains(v, "j-000007") || strings.Contains(v, "j-000006") || strings.Contains(v, "j-000008") {
		t.Errorf("tenant:ads pre shows:\n%s", v)
	}
	m.Update(tuitest.Key("esc"))
	m.Update(tuitest.Key("/"))
	for _, k := range "state:held" {
		m.Update(tuitest.Key(string(k)))
	}
	m.Update(tuitest.Key("enter"))
	if v := m.View(); !strings.Contains(v, "j-000008") || strings.Contains(v, "j-000007") {
		t.Errorf("state:held shows:\n%s", v)
	}
	m.Update(tuitest.Key("esc"))
	m.Update(tuitest.Key("o")) // by estimated start: j-000007 (25m) first
	if got := m.Selected(); got == "" {
		t.Fatal("no selection")
	}
	lines := strings.Split(m.View(), "\n")
	if !strings.Contains(lines[2], "j-000007") || !strings.Contains(lines[0], "by estimated start") {
		t.Errorf("sorted by ETA:\n%s", m.View())
	}
}

// TestSortKeysReverseAndHeader: O reverses the order in force, o moves
// to the next column; the header's arrow follows and the cursor stays on
// its job.
func TestSortKeysReverseAndHeader(t *testing.T) {
	m := newModel(tuitest.Small().Queue, 160)
	if h := header(m.View()); !strings.Contains(h, "ID▲") {
		t.Errorf("default header %q", h)
	}
	m.Update(tuitest.Key("O")) // newest submission first
	lines := strings.Split(m.View(), "\n")
	if !strings.Contains(lines[2], "j-000008") || !strings.Contains(lines[1], "ID▼") || !strings.Contains(lines[0], "by submission ▼") {
		t.Errorf("O:\n%s", m.View())
	}
	if m.Selected() != "j-000006" {
		t.Errorf("the cursor left j-000006 for %s", m.Selected())
	}
	m.Update(tuitest.Key("o"))
	m.Update(tuitest.Key("o")) // longest wait first: j-000008 (3h)
	lines = strings.Split(m.View(), "\n")
	if !strings.Contains(lines[2], "j-000008") || !strings.Contains(lines[1], "▼WAITED") || strings.Contains(lines[1], "ID▲") {
		t.Errorf("by wait:\n%s", m.View())
	}
	m.Update(tuitest.Key("o")) // most GPUs first: j-000006 (16)
	if lines = strings.Split(m.View(), "\n"); !strings.Contains(lines[2], "j-000006") || !strings.Contains(lines[1], "▼GPUS") {
		t.Errorf("by GPUs:\n%s", m.View())
	}
}
