package events

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

func newModel() *Model {
	m := New(common.NewStyles(colorprofile.NoTTY), common.DefaultKeys())
	m.SetSize(80, 22)
	m.Update(data.EventsMsg{Events: tuitest.Small().Events, At: tuitest.T0})
	return m
}

func TestGolden(t *testing.T) {
	m := newModel()
	tuitest.CheckSize(t, m.View(), 80, 22)
	tuitest.Golden(t, "all", m.View(), *update)
}

func TestFilter(t *testing.T) {
	m := newModel()
	m.Update(tuitest.Key("/"))
	if !m.Capturing() {
		t.Fatal("/ did not start the filter")
	}
	for _, k := range []string{"j", "-", "0", "0", "0", "0", "0", "3"} {
		m.Update(tuitest.Key(k))
	}
	m.Update(tuitest.Key("enter"))
	if m.Capturing() || m.Filter() != "j-000003" {
		t.Fatalf("capturing %v, filter %q", m.Capturing(), m.Filter())
	}
	v := m.View()
	tuitest.Golden(t, "filtered", v, *update)
	if strings.Contains(v, "srv-04") || !strings.Contains(v, "t5-c submitted") {
		t.Errorf("filtered view:\n%s", v)
	}
	// new events that match appear, others do not
	m.Update(data.EventsMsg{Events: []data.Event{{ID: 20, Kind: "finish", JobID: "j-000003", Msg: "t5-c finished"}, {ID: 21, Kind: "finish", JobID: "j-000001", Msg: "gpt2-a finished"}}})
	v = m.View()
	if !strings.Contains(v, "t5-c finished") || strings.Contains(v, "gpt2-a finished") {
		t.Errorf("after new events:\n%s", v)
	}
	m.Update(tuitest.Key("esc"))
	if !strings.Contains(m.View(), "gpt2-a finished") {
		t.Errorf("esc did not clear the filter")
	}
}

func TestScrollAndOpen(t *testing.T) {
	m := newModel()
	m.Update(tuitest.Key("g"))
	cmd := m.Update(tuitest.Key("enter"))
	if cmd == nil {
		t.Fatal("enter on an event of a job gave no command")
	}
	if got := cmd(); got != (data.OpenJobMsg{ID: "j-000001"}) {
		t.Errorf("enter asked %v", got)
	}
}

// Issue 28: event times had no date, so yesterday's events read as
// today's. Each row says its date (UTC).
func TestEventTimesHaveDates(t *testing.T) {
	m := New(common.NewStyles(colorprofile.NoTTY), common.DefaultKeys())
	m.SetSize(80, 10)
	day := time.Date(2026, 11, 26, 23, 59, 30, 0, time.UTC)
	m.Update(data.EventsMsg{Events: []data.Event{
		{ID: 1, Kind: "submit", JobID: "j-000001", Msg: "before midnight", At: day},
		{ID: 2, Kind: "start", JobID: "j-000001", Msg: "after midnight", At: day.Add(time.Minute)},
		{ID: 3, Kind: "node-down", Node: "srv-01", Msg: "in another zone", At: day.Add(2 * time.Minute).In(time.FixedZone("X", 8*3600))},
	}})
	v := m.View()
	for _, want := range []string{"DATE  TIME", "11-26 23:59:30 submit", "11-27 00:00:30 start", "11-27 00:01:30 node-down"} {
		if !strings.Contains(v, want) {
			t.Errorf("no %q in:\n%s", want, v)
		}
	}
}
