package jobdetail

import (
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/charmbracelet/colorprofile"

	"github.com/replan/replan/perf"
	"github.com/replan/replan/tui/common"
	"github.com/replan/replan/tui/data"
	"github.com/replan/replan/tui/tuitest"
)

var update = flag.Bool("update", false, "rewrite the golden files")

func TestGolden(t *testing.T) {
	m := New(common.NewStyles(colorprofile.NoTTY), common.DefaultKeys())
	m.SetSize(100, 60)
	cmd := m.Update(data.JobDetailMsg{Detail: tuitest.Small().Details["j-000003"]})
	if cmd == nil {
		t.Fatal("no curve command")
	}
	if !strings.Contains(m.View(), "computing…") {
		t.Errorf("no placeholder before the curve arrives")
	}
	m.Update(cmd())
	v := m.View()
	tuitest.CheckSize(t, v, 100, 60)
	for _, s := range []string{"Plan history", "Sensitivity", "Memory", "Decisions", "▲", "DP8·TP2·PP1 mb2 ga2 ZeRO-1", "grown from 8 to 16 GPUs", "11-22 15:06:00  start"} {
		if !strings.Contains(v, s) {
			t.Errorf("view lacks %q", s)
		}
	}
	tuitest.Golden(t, "t5", v, *update)

	// at 80×22 it scrolls
	m.SetSize(80, 22)
	tuitest.CheckSize(t, m.View(), 80, 22)
	tuitest.Golden(t, "t5-80-top", m.View(), *update)
	m.Update(tuitest.Key("end"))
	for range 40 {
		m.Update(tuitest.Key("j"))
	}
	v = m.View()
	if !strings.Contains(v, "Decisions") {
		t.Errorf("scrolled to the end, no decisions:\n%s", v)
	}
	if cmd := m.Update(tuitest.Key("esc")); cmd == nil || cmd() != (data.BackMsg{}) {
		t.Errorf("esc does not go back")
	}
}

func TestPlotMarksCurrent(t *testing.T) {
	st := common.NewStyles(colorprofile.NoTTY)
	d := tuitest.Small().Details["j-000003"]
	pts := CurveCmd("x", d.Job.Arch)().(data.CurveMsg).Points
	if len(pts) != CurveGPUs {
		t.Fatalf("%d points", len(pts))
	}
	lines := Plot(st, pts, 16, 60, 10)
	if len(lines) != 10 {
		t.Fatalf("%d lines", len(lines))
	}
	axis, labels := []rune(lines[len(lines)-2]), []rune(lines[len(lines)-1])
	pos := -1
	for i, r := range axis {
		if r == '▲' {
			pos = i
		}
	}
	// the marker sits under the last digit of the "16" label
	if pos < 0 || pos >= len(labels) || string(labels[pos-1:pos+1]) != "16" {
		t.Errorf("marker at %d:\n%s\n%s", pos, string(axis), string(labels))
	}
}

func TestBackendCurveIsUsed(t *testing.T) {
	m := New(common.NewStyles(colorprofile.NoTTY), common.DefaultKeys())
	m.SetSize(100, 60)
	det := tuitest.Small().Details["j-000003"]
	for g := 1; g <= 16; g++ {
		det.Curve = append(det.Curve, perf.CurvePoint{GPUs: g, Feasible: true, Throughput: float64(7 * g), PlanString: "DP1·TP1·PP1 mb1 ga1 ZeRO-0"})
	}
	if cmd := m.Update(data.JobDetailMsg{Detail: det}); cmd != nil {
		t.Error("a backend curve must not start a local computation")
	}
	v := m.View()
	if !strings.Contains(v, "the daemon's fitted model") || !strings.Contains(v, "at 16 GPUs") || !strings.Contains(v, "112.0 samples/s") {
		t.Errorf("fitted curve not shown:\n%s", v)
	}
}

// TestWaitingBlock: a waiting job's detail says where it stands in the
// queue, why it waits, when it should start and when its timers expire.
func TestWaitingBlock(t *testing.T) {
	snap := tuitest.Small()
	m := New(common.NewStyles(colorprofile.NoTTY), common.DefaultKeys())
	m.SetSize(100, 40)
	m.Update(data.QueueMsg{Rows: snap.Queue, At: tuitest.T0})
	m.Update(data.JobDetailMsg{Detail: data.JobDetail{Job: data.Job{ID: "j-000006", Name: "llama7b-f", State: "queued"}}})
	v := m.View()
	for _, want := range []string{"Waiting", "position 2 of 3", "estimated start: in 11h05m", "server timer: 30s left", "rack timer: 2m00s left; then it accepts a placement across racks", "waits for a rack-local offer"} {
		if !strings.Contains(v, want) {
			t.Errorf("no %q in:\n%s", want, v)
		}
	}
}

// Issue 28: the detail said "0.0B params" for small models and "0.0 GiB
// (offloaded states)" for a plan that offloads nothing.
func TestParamsAndOffloadReadable(t *testing.T) {
	snap := tuitest.Small()
	for _, tc := range []struct {
		job       data.Job
		plan      string
		want, not []string
	}{
		{snap.Jobs[3], "", []string{"model vit (86M params,", "host memory: nothing offloaded"}, []string{"0.0B", "0.1B", "offloaded states"}},
		{snap.Jobs[0], "dp=2,tp=4,pp=1,mb=2,ga=4,zero=2,offload", []string{"model gpt2 (1.6B params,", "GiB (offloaded states)"}, []string{"nothing offloaded", "0.0 GiB (offloaded"}},
	} {
		j := tc.job
		if tc.plan != "" {
			p, err := perf.ParsePlanSpec(tc.plan)
			if err != nil {
				t.Fatal(err)
			}
			j.Plan, j.PlanString = p, p.String()
		}
		m := New(common.NewStyles(colorprofile.NoTTY), common.DefaultKeys())
		m.SetSize(120, 40)
		m.Update(data.JobDetailMsg{Detail: data.JobDetail{Job: j}})
		v := m.View()
		for _, s := range tc.want {
			if !strings.Contains(v, s) {
				t.Errorf("%s: no %q in:\n%s", j.ID, s, v)
			}
		}
		for _, s := range tc.not {
			if strings.Contains(v, s) {
				t.Errorf("%s: %q in:\n%s", j.ID, s, v)
			}
		}
	}
	for n, want := range map[float64]string{0: "params unknown", 12_000: "12K params", 86e6: "86M params", 999.6e6: "1.0B params", 6.74e9: "6.7B params"} {
		if got := paramsText(n); got != want {
			t.Errorf("paramsText(%g) = %q, want %q", n, got, want)
		}
	}
}

// TestSparkSamplesAreBounded: an hour of polls once a second keeps at
// most one sample per sparkEvery for each job, and none older than
// SparkWindow; a job no longer polled is forgotten after the window.
func TestSparkSamplesAreBounded(t *testing.T) {
	m := New(common.NewStyles(colorprofile.NoTTY), common.DefaultKeys())
	snap := tuitest.Small()
	m.Update(data.NodesMsg{Nodes: snap.Nodes, At: tuitest.T0})
	at := tuitest.T0
	for range 2 * 3600 {
		at = at.Add(time.Second)
		m.Update(data.JobsMsg{Jobs: snap.Jobs, At: at})
	}
	limit := int(SparkWindow/sparkEvery) + 1
	for _, j := range snap.Jobs {
		ss := m.spark[j.ID]
		if len(ss) == 0 || len(ss) > limit {
			t.Errorf("%s keeps %d samples, want 1…%d", j.ID, len(ss), limit)
		}
		if len(ss) > 0 && at.Sub(ss[0].at) > SparkWindow {
			t.Errorf("%s keeps a sample from %s, %s before the last poll", j.ID, ss[0].at, at.Sub(ss[0].at))
		}
	}
	if u := m.spark["j-000003"][0].util; u != 92 {
		t.Errorf("j-000003's GPUs at %.1f%%, want the servers' 92%%", u)
	}
	m.Update(data.JobsMsg{Jobs: snap.Jobs[:1], At: at.Add(SparkWindow + time.Second)})
	if len(m.spark) != 1 {
		t.Errorf("%d jobs kept after an hour without them, want 1", len(m.spark))
	}
}
