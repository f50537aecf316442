package control

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/replan/replan/jobspec"
)

// TestHungJobRestartedAfterTheBoundNotBefore: a job that stops logging
// iterations keeps running until it has been silent for its bound
// (the spec's hang: floor here, larger than factor × iteration), then is
// restarted from its checkpoint, charged one failure, with a hang event
// that says how long it was silent and shows its last log lines. The job
// beside it is not touched.
func TestHungJobRestartedAfterTheBoundNotBefore(t *testing.T) {
	ctx := context.Background()
	f := newFaultCluster(t)
	s := spec(t, "stuck", 4, jobspec.BestEffort)
	s.Iterations = 100000
	s.Hang = &jobspec.Hang{Factor: 2, FloorS: 300}
	j, err := f.d.Submit(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	o := spec(t, "fine", 4, jobspec.BestEffort)
	o.Iterations = 100000
	other, _ := f.d.Submit(ctx, o)
	f.d.Round(ctx)
	for i := 0; i < 4; i++ {
		f.step(t, 20*time.Second)
	}
	f.d.mu.Lock()
	bound, _, _, iter := f.d.hangBound(f.d.jobs[j.ID])
	f.d.mu.Unlock()
	if bound != 5*time.Minute || iter <= 0 || 2*iter >= bound {
		t.Fatalf("bound %s, predicted iteration %s: want the 5m floor", bound, iter)
	}
	before, _ := f.st.GetJob(ctx, j.ID)
	otherBefore, _ := f.st.GetJob(ctx, other.ID)
	if !f.ex.Hang(j.ID) {
		t.Fatal("not running")
	}
	hungAt := f.c.now() // the last observation saw its last iteration
	for {
		f.step(t, 20*time.Second)
		silent := f.c.now().Sub(hungAt)
		r, _ := f.st.GetJob(ctx, j.ID)
		if silent < bound {
			if r.State != StateRunning || r.Attempt != before.Attempt || len(f.events(t, "hang")) != 0 {
				t.Fatalf("restarted after %s of silence, before its bound %s: %s (%s)", silent, bound, r.State, r.Reason)
			}
			continue
		}
		// Restarted at the first observation past the bound, and placed
		// again by that round.
		evs := f.events(t, "hang")
		if len(evs) != 1 {
			t.Fatalf("after %s of silence: %d hang events; job %s (%s)", silent, len(evs), r.State, r.Reason)
		}
		e := evs[0]
		if e.JobID != j.ID || !strings.Contains(e.Msg, "no new iteration for 5m0s") || !strings.Contains(e.Msg, "last log lines: [Rank 0]") || !strings.Contains(e.Msg, " ⏎ [Rank 0]") {
			t.Errorf("hang event: %q", e.Msg)
		}
		var data hangData
		if err := json.Unmarshal(e.Data, &data); err != nil || data.SilentS != 300 || len(data.LastLines) == 0 || !data.Counted {
			t.Errorf("hang data %s: %+v, %v", e.Data, data, err)
		}
		if r.Failures != 1 || r.Attempt != before.Attempt+1 || r.Checkpoint < before.Checkpoint {
			t.Errorf("after the hang: %s, %d failures, attempt %d (was %d), checkpoint %d", r.State, r.Failures, r.Attempt, before.Attempt, r.Checkpoint)
		}
		break
	}
	or, _ := f.st.GetJob(ctx, other.ID)
	if or.State != StateRunning || or.Attempt != otherBefore.Attempt {
		t.Errorf("the other job: %s, attempt %d (was %d)", or.State, or.Attempt, otherBefore.Attempt)
	}
	// It runs again and is not found hung while it logs.
	for i := 0; i < 30; i++ {
		f.step(t, 20*time.Second)
	}
	if evs := f.events(t, "hang"); len(evs) != 1 {
		t.Errorf("%d hang events for a job that runs again", len(evs))
	}
}

// TestHangOnAFaultyServerIsNotCharged: a hung job on a suspect server is
// restarted without counting against its restart budget; the daemon's
// own bound (HangFloor) applies to a spec without hang:.
func TestHangOnAFaultyServerIsNotCharged(t *testing.T) {
	ctx := context.Background()
	f := newFaultCluster(t)
	f.d.cfg.HangFloor = 3 * time.Minute
	s := spec(t, "stuck", 8, jobspec.BestEffort)
	s.Iterations = 100000
	j, _ := f.d.Submit(ctx, s)
	f.d.Round(ctx)
	for i := 0; i < 3; i++ {
		f.step(t, 20*time.Second)
	}
	server := f.placement(t, j.ID)[0].Name
	f.d.mu.Lock()
	f.d.nodes[f.d.srvIdx[server]].suspect = true
	f.d.checked[server] = f.c.now().Add(time.Hour) // its health check not due (it would clear it)
	f.d.mu.Unlock()
	f.ex.Hang(j.ID)
	for k := 0; k < 9; k++ {
		f.c.advance(20 * time.Second)
		if err := f.d.Observe(ctx); err != nil {
			t.Fatal(err)
		}
	}
	r, _ := f.st.GetJob(ctx, j.ID)
	evs := f.events(t, "hang")
	if r.State != StatePreempted || r.Failures != 0 || len(evs) != 1 || !strings.Contains(evs[0].Msg, "not counted: "+server+" is suspect") {
		t.Fatalf("%s, %d failures; events %+v", r.State, r.Failures, evs)
	}
}

// TestJobNeverSeenLoggingIsNotHung: a job whose log shows no iteration
// (a log replan cannot read, or one hung before its first iteration
// ever) is never restarted as hung: silence says nothing there.
func TestJobNeverSeenLoggingIsNotHung(t *testing.T) {
	ctx := context.Background()
	f := newFaultCluster(t)
	f.d.cfg.HangFloor = 3 * time.Minute
	s := spec(t, "quiet", 4, jobspec.BestEffort)
	j, _ := f.d.Submit(ctx, s)
	f.d.Round(ctx)
	if !f.ex.Hang(j.ID) { // still paying its restart cost: no iteration yet
		t.Fatal("not running")
	}
	for k := 0; k < 30; k++ {
		f.step(t, 20*time.Second)
	}
	r, _ := f.st.GetJob(ctx, j.ID)
	if r.State != StateRunning || r.Failures != 0 || len(f.events(t, "hang")) != 0 {
		t.Fatalf("after 10 min without any iteration: %s, %d failures, hang events %+v", r.State, r.Failures, f.events(t, "hang"))
	}
}
