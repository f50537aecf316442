package control

import (
	"context"
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/replan/replan/jobspec"
	"github.com/replan/replan/sched"
)

// Issue 28: waiting_s counted from submission for a requeued job (5 s after
// a preemption it showed 3m58s), also after a daemon restart, and
// history's queue_s counted only until the first start. Now waiting_s
// counts from the job's last stop, and queue_s is every wait.
func TestWaitingCountsFromTheLastStop(t *testing.T) {
	ctx := context.Background()
	st, _ := openTest(t)
	ex := &recorder{}
	d, c := newDaemon(t, st, ex, "static")
	j, err := d.Submit(ctx, spec(t, "again", 8, jobspec.BestEffort))
	if err != nil {
		t.Fatal(err)
	}
	c.advance(30 * time.Second) // waits 30 s before its first start
	d.Round(ctx)
	c.advance(4 * time.Minute) // runs 4 min, then fails and is requeued
	ex.mu.Lock()
	ex.next = Observation{Jobs: []JobObservation{{JobID: j.ID, Iterations: 20, Checkpoint: 10, Exited: true, ExitCode: 1}}}
	ex.mu.Unlock()
	d.Observe(ctx)
	ex.mu.Lock()
	ex.next = Observation{}
	ex.mu.Unlock()
	c.advance(5 * time.Second)
	waiting := func(d *Daemon) float64 {
		t.Helper()
		d.mu.Lock()
		d.publish()
		d.mu.Unlock()
		for _, q := range d.Queue() {
			if q.Job.ID == j.ID {
				return q.WaitingS
			}
		}
		t.Fatalf("%s not in the queue", j.ID)
		return 0
	}
	if w := waiting(d); math.Abs(w-5) > 0.5 {
		t.Errorf("5 s after its requeue waiting_s is %.1f, want 5", w)
	}
	// A restarted daemon knows it from the job's history.
	p, _ := sched.New("static")
	d2, err := New(ctx, Config{Store: st, Exec: ex, Policy: p, Clock: c.now, Servers: d.cfg.Servers, Tenants: d.cfg.Tenants})
	if err != nil {
		t.Fatal(err)
	}
	if w := waiting(d2); math.Abs(w-5) > 0.5 {
		t.Errorf("after a restart waiting_s is %.1f, want 5", w)
	}
	// It starts again and finishes: queue_s is both waits, 30 s + 5 s.
	d2.Round(ctx)
	c.advance(time.Minute)
	ex.mu.Lock()
	ex.next = Observation{Jobs: []JobObservation{{JobID: j.ID, Iterations: 1000, Checkpoint: 1000, Exited: true}}}
	ex.mu.Unlock()
	d2.Observe(ctx)
	w := httptest.NewRecorder()
	(&API{D: d2, Version: "test"}).Handler().ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/v1/history", nil))
	var h []HistoryEntry
	err = json.Unmarshal(w.Body.Bytes(), &h)
	if err != nil || len(h) != 1 || h[0].Job.State != StateFinished {
		t.Fatalf("history %+v %v", h, err)
	}
	if math.Abs(h[0].QueueS-35) > 0.5 || math.Abs(h[0].JCTS-335) > 0.5 {
		t.Errorf("history: queue_s %.1f (want 35: 30 s before the first start, 5 s after the failure), jct_s %.1f (want 335)", h[0].QueueS, h[0].JCTS)
	}
}
