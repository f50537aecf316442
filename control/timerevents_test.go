package control

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/replan/replan/jobspec"
	"github.com/replan/replan/perf"
	"github.com/replan/replan/sched"
)

// timerEventsOf is every "timer" event stored, oldest first.
func timerEventsOf(t *testing.T, st Store) []Event {
	t.Helper()
	evs, err := st.Events(context.Background(), 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	var out []Event
	for _, e := range evs {
		if e.Kind == "timer" {
			out = append(out, e)
		}
	}
	return out
}

// A waiting job whose auto-tuned server timer grows (a long wait joined
// the history) gets one event naming the tier, the old and new timer and
// expiry and the starts it came from; a round that changes nothing and a
// timer that shrinks add none.
func TestTimerMovedLaterHasOneEventThatSaysWhy(t *testing.T) {
	ctx := context.Background()
	st, _ := openTest(t)
	d, c := newDaemon(t, st, &recorder{}, "dally")
	big, _ := d.Submit(ctx, spec(t, "big", 16, jobspec.Guaranteed))
	if _, err := d.Round(ctx); err != nil {
		t.Fatal(err)
	}
	if j, _ := st.GetJob(ctx, big.ID); j.State != StateRunning {
		t.Fatalf("big is %s", j.State)
	}
	small, _ := d.Submit(ctx, spec(t, "small", 8, jobspec.BestEffort))
	at := float64(c.now().Add(-time.Hour).Unix())
	obs := func(wait float64) sched.TimerObs {
		return sched.TimerObs{Tier: perf.TierServer, GPUs: 8, At: at, Wait: wait}
	}
	d.mu.Lock()
	d.history.Add(obs(600))
	d.mu.Unlock()
	round := func() {
		t.Helper()
		if _, err := d.Round(ctx); err != nil {
			t.Fatal(err)
		}
		c.advance(time.Second)
	}
	round()
	tm := d.timers[small.ID]
	if tm.ServerTimer != 600 || tm.ServerFrom != 1 {
		t.Fatalf("server timer %v from %d starts, want 600 from 1", tm.ServerTimer, tm.ServerFrom)
	}
	round()
	if evs := timerEventsOf(t, st); len(evs) != 0 {
		t.Fatalf("no timer changed, yet events %+v", evs)
	}

	d.mu.Lock()
	d.history.Add(obs(1800)) // mean 1200 s + 2 sd (849 s): 48m17s
	d.mu.Unlock()
	round()
	round() // the same timers again: no second event
	evs := timerEventsOf(t, st)
	if len(evs) != 1 {
		t.Fatalf("want one timer event, got %+v", evs)
	}
	e := evs[0]
	if e.JobID != small.ID || !strings.Contains(e.Msg, "server timer retuned 10m → 48m17s from 2 recent starts of 8-GPU jobs") {
		t.Errorf("event %s %q", e.JobID, e.Msg)
	}
	var ch TimerChange
	if err := json.Unmarshal(e.Data, &ch); err != nil {
		t.Fatal(err)
	}
	if ch.Tier != "server" || ch.OldS != 600 || ch.Starts != 2 || !ch.NewExpiry.After(ch.OldExpiry) ||
		ch.NewExpiry.Sub(ch.OldExpiry).Round(time.Second) != time.Duration(ch.NewS-ch.OldS)*time.Second {
		t.Errorf("data %+v", ch)
	}
	if !strings.Contains(e.Msg, "expires "+ch.NewExpiry.Format("15:04:05")+" instead of "+ch.OldExpiry.Format("15:04:05")) {
		t.Errorf("message %q does not name both expiries", e.Msg)
	}

	// Shorter waits pull the timer in: the countdown only moves forward,
	// nothing to explain.
	d.mu.Lock()
	d.history.Obs = []sched.TimerObs{obs(300)}
	d.mu.Unlock()
	round()
	if evs := timerEventsOf(t, st); len(evs) != 1 {
		t.Errorf("a shorter timer made events: %+v", evs[1:])
	}
}

// failTimers fails the store's commits that carry a "timer" event while
// fail is set.
type failTimers struct {
	Store
	fail bool
}

func (f *failTimers) Commit(ctx context.Context, b Batch) ([]int64, error) {
	for _, e := range b.Events {
		if f.fail && e.Kind == "timer" {
			return nil, errors.New("disk full")
		}
	}
	return f.Store.Commit(ctx, b)
}

// A timer event the store could not keep is emitted again at the next
// round: the later timer is never shown without it.
func TestTimerEventRetriedAfterAStoreFailure(t *testing.T) {
	ctx := context.Background()
	sq, _ := openTest(t)
	st := &failTimers{Store: sq}
	d, c := newDaemon(t, st, &recorder{}, "dally")
	d.Submit(ctx, spec(t, "big", 16, jobspec.Guaranteed))
	d.Round(ctx)
	small, _ := d.Submit(ctx, spec(t, "small", 8, jobspec.BestEffort))
	at := float64(c.now().Add(-time.Hour).Unix())
	d.mu.Lock()
	d.history.Add(sched.TimerObs{Tier: perf.TierServer, GPUs: 8, At: at, Wait: 600})
	d.mu.Unlock()
	d.Round(ctx)
	c.advance(time.Second)
	d.mu.Lock()
	d.history.Add(sched.TimerObs{Tier: perf.TierServer, GPUs: 8, At: at, Wait: 1800})
	d.mu.Unlock()
	st.fail = true
	if _, err := d.Round(ctx); err == nil || !strings.Contains(err.Error(), "timer events") {
		t.Fatalf("round with the store failing: %v", err)
	}
	if evs := timerEventsOf(t, sq); len(evs) != 0 {
		t.Fatalf("events stored although the store failed: %+v", evs)
	}
	st.fail = false
	c.advance(time.Second)
	d.Round(ctx)
	evs := timerEventsOf(t, sq)
	if len(evs) != 1 || evs[0].JobID != small.ID || !strings.Contains(evs[0].Msg, "server timer retuned 10m → 48m17s") {
		t.Errorf("after the store recovered: %+v", evs)
	}
}
