package sched_test

import (
	"strings"
	"testing"

	"github.com/replan/replan/perf"
	"github.com/replan/replan/sched"
)

// nwCluster is a full rack of three 8-GPU servers and a starved 8-GPU job
// w that ran before at a third of its ideal speed (Nw_sens 1/3) and has
// waited past both 12 h timers. Running: a (8 GPUs, Nw_sens 0.8), b (8
// GPUs, Nw_sens 1.0), and on the third server c (4 GPUs, Nw_sens 1.5,
// frees too few) and d (4 GPUs, Nw_sens 0.4, too close to w's). Every
// running job started ran seconds before now.
func nwCluster(t *testing.T, ran float64) sched.Snapshot {
	m := model(t, "gpt2")
	ideal := func(j sched.Job) float64 {
		b, err := m.Predict(j.ReqPlan, perf.Resources{Placement: perf.PackedPlacement(j.ReqGPUs, 8), CPUsPerGPU: 8})
		if err != nil {
			t.Fatal(err)
		}
		return b.Iter
	}
	withNw := func(j sched.Job, nw float64) sched.Job {
		j.RunSeconds = 1e5
		j.ItersDone = nw * j.RunSeconds / ideal(j)
		return j
	}
	const now = 40 * 3600
	job := func(id string, g, srv int, nw float64) sched.Job {
		j := withNw(running(t, waiting(t, id, m, g, 0), srv, g), nw)
		j.LastChange, j.LastRun = now-ran, now
		return j
	}
	w := withNw(waiting(t, "w", m, 8, 0), 1.0/3)
	w.LastRun = 10 * 3600 // starved 30 h
	s := snapshot(servers(3, 8), job("a", 8, 0, 0.8), job("b", 8, 1, 1.0), job("c", 4, 2, 1.5), job("d", 4, 2, 0.4), w)
	s.Now = now
	return s
}

func TestDallyPreemptsHighestNwSens(t *testing.T) {
	for _, name := range []string{"dally", "dally-manual"} {
		p, _ := sched.New(name)
		s := nwCluster(t, 2*3600)
		d := p.Schedule(s)
		checkCapacity(t, s, d)
		var pre []string
		for _, a := range d.Actions {
			if a.Kind == sched.Preempt {
				pre = append(pre, a.Job)
				if !strings.Contains(a.Why, "Nw_sens") {
					t.Fatalf("%s: why %q", name, a.Why)
				}
			}
		}
		if len(pre) != 1 || pre[0] != "b" {
			t.Fatalf("%s: preempted %v, want only b (highest Nw_sens that frees 8 GPUs): %v", name, pre, d.Actions)
		}
		st, ok := find(d, "w")
		if !ok || st.Kind != sched.Start || len(st.Alloc) != 1 || st.Alloc[0].Server != 1 {
			t.Fatalf("%s: w not started on b's server: %+v", name, st)
		}
	}
}

func TestDallyPreemptionRespectsMinRun(t *testing.T) {
	p := sched.NewDally(true)
	s := nwCluster(t, 1800) // every running job started half an hour ago
	d := p.Schedule(s)
	for _, a := range d.Actions {
		if a.Kind == sched.Preempt {
			t.Fatalf("preempted %s before its minimum run time: %v", a.Job, d.Actions)
		}
	}
	if _, ok := find(d, "w"); ok {
		t.Fatal("w started on a full cluster")
	}
	if want := s.Now - 1800 + 3600; d.WakeAt != want {
		t.Fatalf("WakeAt %v, want %v: when b's minimum run time ends", d.WakeAt, want)
	}
}

func TestDallyNoPreemptionBeforeTimersExpire(t *testing.T) {
	s := nwCluster(t, 2*3600)
	s.Jobs[4].LastRun = s.Now - 3600 // starved 1 h: still waits for one server
	d := sched.NewDally(false).Schedule(s)
	for _, a := range d.Actions {
		if a.Kind == sched.Preempt {
			t.Fatalf("preempted %s for a job whose timers have not expired", a.Job)
		}
	}
	// Timers expired, but preemption switched off.
	s = nwCluster(t, 2*3600)
	off := sched.NewDally(false)
	off.Net.PreemptMinRun = -1
	for _, a := range off.Schedule(s).Actions {
		if a.Kind == sched.Preempt {
			t.Fatalf("PreemptMinRun < 0 preempted %s", a.Job)
		}
	}
}
