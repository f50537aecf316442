package sched_test

import (
	"math"
	"strings"
	"testing"

	"github.com/replan/replan/perf"
	"github.com/replan/replan/sched"
)

func TestTimerHistoryMeanPlusTwoStd(t *testing.T) {
	var h sched.TimerHistory
	if got := h.Timer(perf.TierServer, 8, 1000, 3600, 43200); got != 43200 {
		t.Fatalf("no history: timer %v, want the default 43200", got)
	}
	h.Add(
		sched.TimerObs{Tier: perf.TierServer, GPUs: 8, At: 900, Wait: 100},
		sched.TimerObs{Tier: perf.TierServer, GPUs: 8, At: 950, Wait: 200},
		sched.TimerObs{Tier: perf.TierServer, GPUs: 8, At: 990, Wait: 300},
		sched.TimerObs{Tier: perf.TierServer, GPUs: 4, At: 990, Wait: 9999},  // other demand
		sched.TimerObs{Tier: perf.TierRack, GPUs: 8, At: 990, Wait: 7777},    // other tier
		sched.TimerObs{Tier: perf.TierServer, GPUs: 8, At: -5000, Wait: 1e6}, // outside the window
	)
	// mean 200, sample std 100
	if got := h.Timer(perf.TierServer, 8, 1000, 3600, 43200); math.Abs(got-400) > 1e-9 {
		t.Fatalf("timer %v, want mean + 2 std = 400", got)
	}
	if got := h.Timer(perf.TierRack, 8, 1000, 3600, 43200); got != 7777 {
		t.Fatalf("one observation: timer %v, want 7777", got)
	}
	// The window slides: at t=4590 only the observation at 990 is left.
	if got := h.Timer(perf.TierServer, 8, 4590, 3600, 43200); got != 300 {
		t.Fatalf("window: timer %v, want 300", got)
	}
	h.Prune(4590, 3600)
	if len(h.Obs) != 3 {
		t.Fatalf("prune kept %d observations, want the 3 at t=990", len(h.Obs))
	}
	if w := sched.HistoryWindow(64); w != 24*3600 {
		t.Fatalf("window on 64 GPUs %v", w)
	}
	if sched.HistoryWindow(1024) >= sched.HistoryWindow(128) {
		t.Fatal("larger clusters need shorter windows")
	}
}

// halfFull is two servers in one rack, each with one running 4-GPU job:
// a waiting 8-GPU job can only get an offer spanning the servers.
func halfFull(t *testing.T, now float64, waitJob sched.Job) sched.Snapshot {
	m := model(t, "gpt2")
	srv := servers(2, 8)
	a := running(t, waiting(t, "a", m, 4, 0), 0, 4)
	b := running(t, waiting(t, "b", m, 4, 0), 1, 4)
	s := snapshot(srv, a, b, waitJob)
	s.Now = now
	return s
}

func TestDelayTimerRefusesThenAccepts(t *testing.T) {
	m := model(t, "gpt2")
	w := waiting(t, "w", m, 8, 0)
	p := sched.NewDally(false)
	d := p.Schedule(halfFull(t, 3600, w))
	if _, ok := find(d, "w"); ok {
		t.Fatal("started across servers before its server timer expired")
	}
	if r := reason(d, "w"); !strings.Contains(r, "delay scheduling") {
		t.Fatalf("reason %q", r)
	}
	if len(d.Timers) != 1 {
		t.Fatalf("timers %+v", d.Timers)
	}
	jt := d.Timers[0]
	if jt.Job != "w" || jt.ServerTimer != 12*3600 || jt.RackTimer != 12*3600 || jt.Starved != 3600 || jt.AcceptTier != perf.TierServer || jt.Why == "" {
		t.Fatalf("timer state %+v", jt)
	}
	if d.WakeAt != 12*3600 {
		t.Fatalf("WakeAt %v, want the server timer's expiry 43200", d.WakeAt)
	}
	// Past the server timer it accepts the rack-wide offer, and the wait
	// is an observation for the auto-tuner.
	d = p.Schedule(halfFull(t, 13*3600, w))
	a, ok := find(d, "w")
	if !ok || a.Tier != perf.TierRack {
		t.Fatalf("not started on the rack tier after the timer: %+v %v", a, d.Waiting)
	}
	if len(d.Observed) != 1 || d.Observed[0].Tier != perf.TierRack || d.Observed[0].Wait != 13*3600 || d.Observed[0].GPUs != 8 {
		t.Fatalf("observed %+v", d.Observed)
	}
	// A job that cannot fit one server has its server timer at zero.
	big := waiting(t, "big", m, 16, 0)
	s := snapshot(servers(2, 8), big)
	s.Now = 10
	d = p.Schedule(s)
	if a, ok := find(d, "big"); !ok || a.Tier != perf.TierRack {
		t.Fatalf("16-GPU job on two 8-GPU servers: %+v %v", a, d.Waiting)
	}
}

func TestAutoTunedTimer(t *testing.T) {
	m := model(t, "gpt2")
	w := waiting(t, "w", m, 8, 0)
	s := halfFull(t, 3600, w)
	// Jobs of 8 GPUs got a server after 10-30 minutes lately.
	for _, wait := range []float64{600, 1200, 1800} {
		s.History.Add(sched.TimerObs{Tier: perf.TierServer, GPUs: 8, At: 3000, Wait: wait})
	}
	d := sched.NewDally(true).Schedule(s)
	a, ok := find(d, "w")
	if !ok || a.Tier != perf.TierRack {
		t.Fatalf("the tuned server timer (%.0f s) has expired after 3600 s: want a rack-wide start, got %+v %v", 1200+2*600.0, a, d.Waiting)
	}
	// The manual policy keeps waiting.
	if _, ok := find(sched.NewDally(false).Schedule(s), "w"); ok {
		t.Fatal("dally-manual ignores history")
	}
}

func TestNwSensOrder(t *testing.T) {
	m := model(t, "gpt2")
	// Both want the one free server; "slow" ran at a third of its ideal
	// speed before it was preempted, "fresh" never ran and came first.
	fresh := waiting(t, "fresh", m, 8, 0)
	slow := waiting(t, "slow", m, 8, 10)
	ideal := 1.0
	if b, err := m.Predict(slow.ReqPlan, perf.Resources{Placement: perf.Placement{8}, CPUsPerGPU: 8}); err == nil {
		ideal = b.Iter
	}
	slow.ItersDone, slow.RunSeconds, slow.LastRun = 100, 300*ideal, 20
	if ns := slow.NwSens(ideal); math.Abs(ns-1.0/3) > 1e-9 {
		t.Fatalf("Nw_sens %v, want 1/3", ns)
	}
	if ns := fresh.NwSens(ideal); ns != 1 {
		t.Fatalf("never ran: Nw_sens %v, want 1", ns)
	}
	s := snapshot(servers(1, 8), fresh, slow)
	d := sched.NewDally(true).Schedule(s)
	if _, ok := find(d, "slow"); !ok {
		t.Fatalf("lowest Nw_sens first: want slow started, got %v", d.Actions)
	}
	if _, ok := find(sched.NewStatic().Schedule(s), "fresh"); !ok {
		t.Fatal("FIFO starts the first submitted")
	}
}

func TestZeroValuesKeepMorphling(t *testing.T) {
	m := model(t, "gpt2")
	s := snapshot(servers(2, 8), waiting(t, "a", m, 8, 0), waiting(t, "b", m, 4, 5))
	d := sched.NewMorphling(sched.DefaultOptions()).Schedule(s)
	if len(d.Timers) != 0 || len(d.Observed) != 0 || d.Links.Shared != 0 {
		t.Fatalf("plain morphling reports network state: %+v", d)
	}
	for _, a := range d.Actions {
		if a.Shift != 0 {
			t.Fatalf("plain morphling shifts %v", a)
		}
	}
}

func TestRotationTwoJobs(t *testing.T) {
	c := sched.CommCircle(10, 5, 1) // arc [5, 10)
	cs := []sched.Circle{c, c}
	off, score := sched.Rotate(cs, []bool{true, false}, []float64{0, 0}, 1)
	if math.Abs(off[1]-5) > 1e-9 || score != 1 {
		t.Fatalf("two half-circles: offset %v score %v, want 5 and 1", off[1], score)
	}
	if got := sched.Compatibility(cs, []float64{0, 0}, 1); got != 0.5 {
		t.Fatalf("aligned: compatibility %v, want 0.5", got)
	}
	// Arcs of 6 s in 10 s cannot avoid 2 s of overlap: score 1 - 2/12.
	c6 := sched.CommCircle(10, 6, 1)
	_, score = sched.Rotate([]sched.Circle{c6, c6}, []bool{true, false}, []float64{0, 0}, 1)
	if math.Abs(score-(1-2.0/12)) > 1e-9 {
		t.Fatalf("score %v, want %v", score, 1-2.0/12)
	}
	_, _, extra := sched.LinkLoad([]sched.Circle{c, c}, []float64{0, 0}, 1)
	if math.Abs(extra[0]-5) > 1e-9 {
		t.Fatalf("aligned half-circles on a link of capacity 1: extra %v s, want 5 (twice the demand)", extra[0])
	}
}

func TestRotationThreeJobs(t *testing.T) {
	// A fixed 8 s arc in a 16 s iteration, two 4 s arcs to fit in the gap.
	cs := []sched.Circle{sched.CommCircle(16, 8, 1), sched.CommCircle(16, 4, 1), sched.CommCircle(16, 4, 1)}
	off, score := sched.Rotate(cs, []bool{true, false, false}, []float64{0, 0, 0}, 1)
	if score != 1 {
		t.Fatalf("score %v, want 1 (offsets %v)", score, off)
	}
	got := map[float64]bool{off[1]: true, off[2]: true}
	if !got[4] || !got[8] {
		t.Fatalf("offsets %v, want {4, 8}", off)
	}
	// Unlike periods: a 8 s job with a 2 s arc and a 16 s job with a 4 s
	// arc on a unified 16 s circle fit without overlap.
	cs = []sched.Circle{sched.CommCircle(8, 2, 1), sched.CommCircle(16, 4, 1)}
	off, score = sched.Rotate(cs, []bool{true, false}, []float64{0, 0}, 1)
	if score != 1 {
		t.Fatalf("unlike periods: score %v offsets %v", score, off)
	}
}

func TestShiftsBFSConsistentOnTree(t *testing.T) {
	c := sched.CommCircle(10, 5, 1)
	// A path a-b-c-d (a tree): every link can interleave its two jobs.
	links := []sched.Link{
		{Name: "ab", Capacity: 1, Jobs: []sched.LinkJob{{Job: 0, Circle: c}, {Job: 1, Circle: c}}},
		{Name: "bc", Capacity: 1, Jobs: []sched.LinkJob{{Job: 1, Circle: c}, {Job: 2, Circle: c}}},
		{Name: "cd", Capacity: 1, Jobs: []sched.LinkJob{{Job: 2, Circle: c}, {Job: 3, Circle: c}}},
	}
	off := map[int]float64{}
	rep := sched.Shifts(links, nil, off)
	if rep.Shared != 3 || len(rep.Dropped) != 0 || rep.Score != 1 {
		t.Fatalf("report %+v", rep)
	}
	for _, l := range links {
		cs := []sched.Circle{l.Jobs[0].Circle, l.Jobs[1].Circle}
		if got := sched.Compatibility(cs, []float64{off[l.Jobs[0].Job], off[l.Jobs[1].Job]}, 1); got != 1 {
			t.Fatalf("link %s: compatibility %v with the one shift per job %v", l.Name, got, off)
		}
	}
	// The report details every shared link with its jobs and their shifts.
	if len(rep.Links) != 3 {
		t.Fatalf("details of %d links, want 3", len(rep.Links))
	}
	for _, d := range rep.Links {
		if d.Score != 1 || len(d.Index) != 2 || len(d.Offsets) != 2 {
			t.Fatalf("link detail %+v", d)
		}
		for k, j := range d.Index {
			if math.Abs(d.Offsets[k]-off[j]) > 1e-9 {
				t.Errorf("link %s: job %d offset %v, the job's shift is %v", d.Name, j, d.Offsets[k], off[j])
			}
		}
	}
	// A running job keeps its phase.
	off = map[int]float64{1: 2}
	sched.Shifts(links, map[int]bool{1: true}, off)
	if off[1] != 2 || math.Abs(math.Mod(off[0]-2+10, 10)-5) > 1e-9 || math.Abs(math.Mod(off[2]-2+10, 10)-5) > 1e-9 {
		t.Fatalf("anchored on the running job: %v", off)
	}
	// Closing the path into a cycle drops one link's constraint.
	links = append(links, sched.Link{Name: "da", Capacity: 1, Jobs: []sched.LinkJob{{Job: 3, Circle: c}, {Job: 0, Circle: c}}})
	rep = sched.Shifts(links, nil, map[int]float64{})
	if len(rep.Dropped) != 1 {
		t.Fatalf("cycle: dropped %v, want one link", rep.Dropped)
	}
}

func BenchmarkShifts1000Jobs1024Servers(b *testing.B) {
	links := sched.ShiftBenchLinks(1000, 128) // 128 racks of 8 servers
	for b.Loop() {
		sched.Shifts(links, nil, map[int]float64{})
	}
}

// TestNwSensInUnitInterval: Nw_sens is a share of the ideal speed, in
// [0, 1] as documented. Estimated from the demand's ideal iteration, a
// job that ran on more GPUs than its demand exceeded 1 (3.46 and 64.88
// appeared in the queue view).
func TestNwSensInUnitInterval(t *testing.T) {
	grown := sched.Job{RunSeconds: 100, ItersDone: 6488}
	if v := grown.NwSens(1); v < 0 || v > 1 {
		t.Errorf("grown job: Nw_sens %.2f outside [0, 1]", v)
	}
	slow := sched.Job{RunSeconds: 100, ItersDone: 50, IdealSeconds: 40}
	if v := slow.NwSens(1); v != 0.4 {
		t.Errorf("with IdealSeconds 40 of 100 s: Nw_sens %.3f, want 0.4", v)
	}
	if v := (&sched.Job{}).NwSens(1); v != 1 {
		t.Errorf("never ran: Nw_sens %.2f, want 1", v)
	}
}
