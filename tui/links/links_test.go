package links

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

func report() data.Links {
	return data.Links{Shared: 2, Score: 0.93, Dropped: []string{"spine:rack-c"}, Links: []data.LinkRow{
		{Name: "spine:rack-a", Score: 1, Jobs: []string{"j-000003", "j-000007"}, Shifts: []time.Duration{0, 1800 * time.Millisecond}},
		{Name: "spine:rack-b", Score: 0.86, Jobs: []string{"j-000003", "j-000007", "j-000009"}, Shifts: []time.Duration{0, 1800 * time.Millisecond, 700 * time.Millisecond}},
	}}
}

func newModel() *Model {
	m := New(common.NewStyles(colorprofile.NoTTY), common.DefaultKeys())
	m.SetSize(80, 22)
	m.Update(data.LinksMsg{Links: report(), At: tuitest.T0})
	return m
}

func TestGolden(t *testing.T) {
	m := newModel()
	tuitest.CheckSize(t, m.View(), 80, 22)
	tuitest.Golden(t, "links", m.View(), *update)
	v := m.View()
	for _, want := range []string{"2 shared links", "0.93", "spine:rack-b", "j-000009 +0.7s", "not optimised: spine:rack-c"} {
		if !strings.Contains(v, want) {
			t.Errorf("view lacks %q:\n%s", want, v)
		}
	}
}

func TestCursorAndEmpty(t *testing.T) {
	m := newModel()
	m.Update(tuitest.Key("j"))
	if !strings.Contains(m.View(), "▸ spine:rack-b") {
		t.Errorf("cursor did not move:\n%s", m.View())
	}
	m.Update(tuitest.Key("j"))
	if !strings.Contains(m.View(), "▸ spine:rack-b") {
		t.Errorf("cursor went past the end:\n%s", m.View())
	}
	m.Update(data.LinksMsg{Links: data.Links{}})
	if v := m.View(); !strings.Contains(v, "no link is shared") {
		t.Errorf("empty report:\n%s", v)
	}
	fresh := New(common.NewStyles(colorprofile.NoTTY), common.DefaultKeys())
	if !strings.Contains(fresh.View(), "waiting") {
		t.Error("an unloaded screen should say it waits")
	}
}
