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

	// without timers the countdown columns are not there at all
	plain := append([]data.QueueRow(nil), rows...)
	plain[0].Timers = nil
	m = newModel(plain, 80)
	v = m.View()
	tuitest.CheckSize(t, v, 80, 22)
	if strings.Contains(v, "SRV-T") || strings.Contains(v, "NWSENS") {
		t.Errorf("timer columns without timers:\n%s", v)
	}
	tuitest.Golden(t, "plain-80", v, *update)
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
