package jobs

import (
	"flag"
	"strings"
	"testing"

	"github.com/charmbracelet/colorprofile"

	"github.com/replan/replan/tui/common"
	"github.com/replan/replan/tui/data"
	"github.com/replan/replan/tui/tuitest"
)

var update = flag.Bool("update", false, "rewrite the golden files")

func newModel(w int) *Model {
	m := New(common.NewStyles(colorprofile.NoTTY), common.DefaultKeys(), common.NewPalette())
	m.SetSize(w, 22)
	m.Update(data.JobsMsg{Jobs: tuitest.Small().Jobs, At: tuitest.T0})
	return m
}

func TestGolden(t *testing.T) {
	for _, w := range []int{80, 140} {
		m := newModel(w)
		m.Update(tuitest.Key("j"))
		v := m.View()
		tuitest.CheckSize(t, v, w, 22)
		if !strings.Contains(v, "DP2·TP4·PP1 mb2 ga4 ZeRO-1 ckpt") {
			t.Errorf("width %d: the plan of j-000001 is not shown:\n%s", w, v)
		}
		tuitest.Golden(t, map[int]string{80: "jobs-80", 140: "jobs-140"}[w], v, *update)
	}
}

// A reconfigure event changes the job's plan before the next poll.
func TestEventChangesPlan(t *testing.T) {
	m := newModel(140)
	old := "DP4·TP1·PP1 mb16 ga1 ZeRO-2"
	if !strings.Contains(m.View(), old) {
		t.Fatalf("view lacks %q", old)
	}
	m.Update(data.EventsMsg{Events: []data.Event{{ID: 9, Kind: "reconfigure", JobID: "j-000002", Plan: "DP8·TP1·PP1 mb8 ga1 ZeRO-2"}}})
	v := m.View()
	if strings.Contains(v, old) || !strings.Contains(v, "DP8·TP1·PP1 mb8 ga1 ZeRO-2") {
		t.Errorf("after the event:\n%s", v)
	}
}

func TestPlacementSummary(t *testing.T) {
	got := PlacementSummary([]data.Server{{Name: "a", GPUs: []int{3, 0, 1, 2, 6}}, {Name: "b", GPUs: []int{7}}})
	if want := "a [0-3,6], b [7]"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

// TestFilter: "/" filters the running jobs (typed text is never a
// command); esc clears it.
func TestFilter(t *testing.T) {
	m := New(common.NewStyles(colorprofile.NoTTY), common.DefaultKeys(), common.NewPalette())
	m.SetSize(140, 20)
	m.Update(data.JobsMsg{Jobs: tuitest.Small().Jobs, At: tuitest.T0})
	m.Update(tuitest.Key("/"))
	for _, k := range "tenant:vision" {
		if cmd := m.Update(tuitest.Key(string(k))); cmd != nil {
			t.Fatalf("typing %q ran a command", k)
		}
	}
	m.Update(tuitest.Key("enter"))
	v := m.View()
	if !strings.Contains(v, "j-000001") || !strings.Contains(v, "j-000004") || strings.Contains(v, "j-000003") || !strings.Contains(v, "5 running on 34 GPUs · 2 match") {
		t.Errorf("tenant:vision shows:\n%s", v)
	}
	m.Update(tuitest.Key("esc"))
	if v := m.View(); !strings.Contains(v, "j-000003") {
		t.Errorf("esc did not clear the filter:\n%s", v)
	}
}

// TestSortKeys: o cycles the sort column (name, then GPUs: most first), O
// reverses, the header marks the column and the cursor keeps its job.
func TestSortKeys(t *testing.T) {
	m := newModel(140)
	if h := strings.Split(m.View(), "\n")[1]; !strings.Contains(h, "ID▲") {
		t.Errorf("default header %q", h)
	}
	m.Update(tuitest.Key("j"))
	sel := m.Selected()
	m.Update(tuitest.Key("o"))
	m.Update(tuitest.Key("o")) // by GPUs, most first
	jobs := m.Jobs()
	for i := 1; i < len(jobs); i++ {
		if jobs[i-1].GPUs() < jobs[i].GPUs() {
			t.Fatalf("not most GPUs first: %s has %d, %s %d", jobs[i-1].ID, jobs[i-1].GPUs(), jobs[i].ID, jobs[i].GPUs())
		}
	}
	v := strings.Split(m.View(), "\n")
	if !strings.Contains(v[1], "▼GPUS") || !strings.Contains(v[0], "by GPUs ▼") || m.Selected() != sel {
		t.Errorf("by GPUs (cursor on %s, was %s):\n%s", m.Selected(), sel, m.View())
	}
	m.Update(tuitest.Key("O"))
	jobs = m.Jobs()
	if jobs[0].GPUs() > jobs[len(jobs)-1].GPUs() || !strings.Contains(strings.Split(m.View(), "\n")[1], "▲GPUS") {
		t.Errorf("O does not reverse:\n%s", m.View())
	}
}

// Issue 28: MEAS/PRED showed "1.07e+03/1.24e+03"; rates print as numbers.
func TestThroughputReadable(t *testing.T) {
	for _, w := range []int{80, 140} {
		m := New(common.NewStyles(colorprofile.NoTTY), common.DefaultKeys(), common.NewPalette())
		m.SetSize(w, 22)
		js := tuitest.Small().Jobs
		js[0].MeasuredSPS, js[0].PredictedSPS = 1070.4, 1244.3
		js[1].MeasuredSPS, js[1].PredictedSPS = 0, 52_340
		m.Update(data.JobsMsg{Jobs: js, At: tuitest.T0})
		v := m.View()
		if strings.Contains(v, "e+") {
			t.Errorf("width %d: a rate in exponent form:\n%s", w, v)
		}
		want := map[int][]string{80: {" 1070 ", " ~52.3k "}, 140: {" 1070/1244 ", " ?/52.3k "}}[w]
		for _, s := range want {
			if !strings.Contains(v, s) {
				t.Errorf("width %d: no %q:\n%s", w, s, v)
			}
		}
	}
}
