package control

import (
	"context"
	"testing"
	"time"

	"github.com/replan/replan/internal/etcdtest"
	"github.com/replan/replan/jobspec"
)

// A daemon runs on the etcd store exactly as on SQLite: submit, rounds,
// a job finishing on the simulated cluster; then a new daemon on the same
// etcd (a new client: the old daemon is gone) recovers every job, adopts
// the one still running, starts nothing twice and reuses no ID.
func TestDaemonOnEtcdSubmitRoundFinishRestart(t *testing.T) {
	ctx := context.Background()
	eps := etcdtest.Start(t)
	st := openEtcdTest(t, eps, "/replan/")
	c := &clock{t: time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)}
	ex := NewSimExecutor(c.now, []string{"a", "b"}, nil, nil, 30*time.Second)
	d, _ := newDaemonWith(t, st, ex, "static", c)
	short := spec(t, "short", 8, jobspec.BestEffort)
	short.Iterations = 50
	long := spec(t, "long", 8, jobspec.BestEffort)
	long.Iterations = 1_000_000
	j1, err := d.Submit(ctx, short)
	if err != nil {
		t.Fatal(err)
	}
	j2, err := d.Submit(ctx, long)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Round(ctx); err != nil {
		t.Fatal(err)
	}
	if got := len(ex.Running()); got != 2 {
		t.Fatalf("%d jobs run after the round, want 2", got)
	}
	for i := 0; ; i++ {
		rec, err := st.GetJob(ctx, j1.ID)
		if err != nil {
			t.Fatal(err)
		}
		if rec.State == StateFinished {
			break
		}
		if i > 1000 {
			t.Fatalf("%s never finished: %+v", j1.ID, rec)
		}
		c.advance(20 * time.Second)
		if err := d.Observe(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := d.Round(ctx); err != nil {
			t.Fatal(err)
		}
	}
	consistent(t, d, st, ex, "after the first job finished")
	h, _ := st.History(ctx, j1.ID)
	if len(h) != 3 || h[0].To != StateQueued || h[1].To != StateRunning || h[2].To != StateFinished {
		t.Errorf("history of %s: %+v", j1.ID, h)
	}
	ds, _ := st.Decisions(ctx, j1.ID, 10)
	if len(ds) == 0 || ds[len(ds)-1].Kind != "start" {
		t.Errorf("decisions of %s: %+v", j1.ID, ds)
	}
	evs, _ := st.Events(ctx, 0, 1000)
	kinds := map[string]int{}
	for _, e := range evs {
		kinds[e.Kind]++
	}
	if kinds["submit"] != 2 || kinds["start"] != 2 || kinds["finish"] != 1 {
		t.Errorf("events %v", kinds)
	}

	// The daemon is gone; a new one on the same etcd, its executor still
	// running the long job.
	st.Close()
	st2 := openEtcdTest(t, eps, "/replan/")
	d2, _ := newDaemonWith(t, st2, ex, "static", c)
	consistent(t, d2, st2, ex, "after the restart")
	if got := ex.Running(); len(got) != 1 || got[0] != j2.ID {
		t.Fatalf("running after the restart: %v", got)
	}
	if rec, _ := st2.GetJob(ctx, j2.ID); rec.State != StateRunning || rec.Attempt != 1 {
		t.Errorf("%s after the restart: %s attempt %d", j2.ID, rec.State, rec.Attempt)
	}
	j3, err := d2.Submit(ctx, spec(t, "third", 8, jobspec.BestEffort))
	if err != nil {
		t.Fatal(err)
	}
	if j3.ID != "j-000003" {
		t.Errorf("the new daemon's first job is %s, want j-000003", j3.ID)
	}
	if _, err := d2.Round(ctx); err != nil {
		t.Fatal(err)
	}
	if rec, _ := st2.GetJob(ctx, j3.ID); rec.State != StateRunning {
		t.Errorf("%s: %s (%s), want running on the server the first job left", j3.ID, rec.State, rec.Reason)
	}
	if rec, _ := st2.GetJob(ctx, j2.ID); rec.Attempt != 1 {
		t.Errorf("%s was launched again: attempt %d", j2.ID, rec.Attempt)
	}
	consistent(t, d2, st2, ex, "after a round of the new daemon")
}
