package control

import (
	"context"
	"testing"
	"time"

	"github.com/replan/replan/jobspec"
)

// TestDaemonWithSimulatedCluster runs the whole loop on a virtual clock:
// three jobs start, a fourth arrives and the morphling policy makes room
// (reconfiguring or preempting), and every job finishes with its iteration
// count never going backwards past a checkpoint.
func TestDaemonWithSimulatedCluster(t *testing.T) {
	ctx := context.Background()
	st, _ := openTest(t)
	c := &clock{t: time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)}
	ex := NewSimExecutor(c.now, []string{"a", "b"}, nil, nil, 30*time.Second)
	d, _ := newDaemonWith(t, st, ex, "morphling", c)
	var ids []string
	for _, n := range []string{"one", "two", "three"} {
		s := spec(t, n, 4, jobspec.BestEffort)
		s.Iterations = 300
		r, err := d.Submit(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r.ID)
	}
	step := func() {
		c.advance(20 * time.Second)
		if err := d.Observe(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := d.Round(ctx); err != nil {
			t.Fatal(err)
		}
		for _, n := range d.Nodes() {
			if n.FreeGPUs < 0 || n.FreeGPUs > n.GPUs {
				t.Fatalf("server %s has %d free GPUs of %d", n.Name, n.FreeGPUs, n.GPUs)
			}
		}
	}
	d.Round(ctx)
	for i := 0; i < 5; i++ {
		step()
	}
	s := spec(t, "four", 8, jobspec.Guaranteed)
	s.Iterations = 300
	r, _ := d.Submit(ctx, s)
	ids = append(ids, r.ID)
	last := map[string]int{}
	for i := 0; i < 2000 && len(d.jobsSnapshot()) > 0; i++ {
		step()
		for _, id := range ids {
			rec, _ := st.GetJob(ctx, id)
			if rec.Iterations < last[id] && rec.Iterations < rec.Checkpoint {
				t.Fatalf("%s went back from %d to %d", id, last[id], rec.Iterations)
			}
			last[id] = rec.Iterations
		}
	}
	for _, id := range ids {
		rec, _ := st.GetJob(ctx, id)
		if rec.State != StateFinished || rec.Iterations != 300 {
			t.Errorf("%s: %s after %d iterations (%s)", id, rec.State, rec.Iterations, rec.Reason)
		}
	}
	kinds := map[string]int{}
	ds, _ := st.Decisions(ctx, "", 10000)
	for _, dr := range ds {
		kinds[dr.Kind]++
	}
	t.Logf("decisions: %v", kinds)
	if kinds["start"] < 4 {
		t.Errorf("decisions %v: every job must have started", kinds)
	}
	if len(ex.Running()) != 0 {
		t.Errorf("still running on the simulated cluster: %v", ex.Running())
	}
}

func newDaemonWith(t *testing.T, st Store, ex Executor, policy string, c *clock) (*Daemon, *clock) {
	t.Helper()
	d, _ := newDaemon(t, st, ex, policy)
	d.cfg.Clock = c.now
	return d, c
}
