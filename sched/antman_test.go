package sched_test

import (
	"testing"

	"github.com/replan/replan/sched"
)

// antmanCase: two 8-GPU servers full of best-effort jobs, and a
// guaranteed 8-GPU job within its quota.
func antmanCase(t *testing.T, on0, on1 []sched.Job) (sched.Snapshot, sched.Decisions) {
	t.Helper()
	bert := model(t, "bert")
	g := waiting(t, "g", bert, 8, 5)
	g.Class, g.Tenant = sched.Guaranteed, "A"
	jobs := []sched.Job{g}
	jobs = append(jobs, on0...)
	jobs = append(jobs, on1...)
	s := snapshot(servers(2, 8), jobs...)
	s.Tenants = []sched.Tenant{{Name: "A", QuotaGPUs: 16}, {Name: "B"}}
	d := sched.NewAntMan().Schedule(s)
	checkCapacity(t, s, d)
	if a, ok := find(d, "g"); !ok || a.Kind != sched.Start {
		t.Fatalf("guaranteed job not started: %+v", d)
	}
	return s, d
}

// AntMan stops a best-effort job only when the guaranteed job takes its
// GPUs: the newest best-effort job, on the server the guaranteed job does
// not use, keeps running (before, it was preempted on the way and
// restarted later).
func TestAntManPreemptsOnlyWhatItNeeds(t *testing.T) {
	bert := model(t, "bert")
	a := running(t, waiting(t, "a", bert, 4, 3), 0, 4) // newest
	b := running(t, waiting(t, "b", bert, 4, 1), 0, 4)
	c := running(t, waiting(t, "c", bert, 6, 2), 1, 6) // server 1: 2 free
	_, d := antmanCase(t, []sched.Job{a, b}, []sched.Job{c})
	if x, ok := find(d, "c"); !ok || x.Kind != sched.Preempt {
		t.Errorf("c (whose GPUs the guaranteed job needs) not preempted: %+v", d.Actions)
	}
	for _, id := range []string{"a", "b"} {
		if x, ok := find(d, id); ok {
			t.Errorf("%s, whose GPUs nobody needs, got %s (%s)", id, x.Kind, x.Why)
		}
	}
}

// The guaranteed job goes where the fewest best-effort GPUs must stop:
// server 1 (one 6-GPU job) rather than server 0 (two 4-GPU jobs, the
// newest first).
func TestAntManStopsFewestGPUs(t *testing.T) {
	bert := model(t, "bert")
	a := running(t, waiting(t, "a", bert, 4, 3), 0, 4)
	b := running(t, waiting(t, "b", bert, 4, 2), 0, 4)
	c := running(t, waiting(t, "c", bert, 6, 1), 1, 6)
	_, d := antmanCase(t, []sched.Job{a, b}, []sched.Job{c})
	preempted := 0
	for _, x := range d.Actions {
		if x.Kind == sched.Preempt {
			preempted++
		}
	}
	if x, ok := find(d, "c"); !ok || x.Kind != sched.Preempt || preempted != 1 {
		t.Errorf("want only c preempted, got %d preemptions: %+v", preempted, d.Actions)
	}
}
