package control

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/replan/replan/jobspec"
	"github.com/replan/replan/sched"
)

func after(id, when string) string {
	return fmt.Sprintf("after:\n  - {job: %s, when: %s}\n", id, when)
}

func queueReason(t *testing.T, d *Daemon, id string) string {
	t.Helper()
	for _, e := range d.Queue() {
		if e.Job.ID == id {
			return e.Reason
		}
	}
	t.Fatalf("%s not in the queue: %+v", id, d.Queue())
	return ""
}

// TestDependencyHoldsUntilOK: a job that waits for another to finish ok
// is not scheduled, with its reason, though GPUs are free; once the other
// finishes it starts.
func TestDependencyHoldsUntilOK(t *testing.T) {
	ctx := context.Background()
	st, _ := openTest(t)
	ex := &recorder{}
	d, _ := newDaemon(t, st, ex, "static")
	d.EnableETA(func() sched.Policy { p, _ := sched.New("static"); return p }, time.Minute, 0)
	a, _ := d.Submit(ctx, spec(t, "first", 8, jobspec.BestEffort))
	bs := specWith(t, "second", 8, after(a.ID, "ok"))
	if err := d.Admit(ctx, bs, nil); err != nil {
		t.Fatal(err)
	}
	b, _ := d.Submit(ctx, bs)
	if _, err := d.Round(ctx); err != nil {
		t.Fatal(err)
	}
	if len(ex.starts) != 1 || ex.starts[0].JobID != a.ID {
		t.Fatalf("starts %+v", ex.starts)
	}
	want := "waits for " + a.ID + " to finish ok"
	if r := queueReason(t, d, b.ID); r != want {
		t.Errorf("queue reason %q, want %q", r, want)
	}
	if rec, _ := st.GetJob(ctx, b.ID); rec.State != StateQueued || rec.Reason != want {
		t.Errorf("stored %s %q", rec.State, rec.Reason)
	}
	// Its estimate says why there is none.
	deadline := time.Now().Add(20 * time.Second)
	for !strings.HasPrefix(d.ETA(b.ID).Reason, want) {
		if time.Now().After(deadline) {
			t.Fatalf("ETA %+v", d.ETA(b.ID))
		}
		time.Sleep(10 * time.Millisecond)
	}
	d.Round(ctx)
	if len(ex.starts) != 1 {
		t.Fatalf("started before its dependency finished: %+v", ex.starts)
	}
	ex.next = Observation{Jobs: []JobObservation{{JobID: a.ID, Iterations: 1000, Exited: true}}}
	d.Observe(ctx)
	d.Round(ctx)
	if len(ex.starts) != 2 || ex.starts[1].JobID != b.ID {
		t.Fatalf("not started after its dependency finished: %+v", ex.starts)
	}
}

// TestDependencyThatCannotBeMet: when the job waited for ends the other
// way, the dependent becomes unschedulable with a reason naming it and
// stays so; failed and any conditions are met by the same end.
func TestDependencyThatCannotBeMet(t *testing.T) {
	ctx := context.Background()
	st, _ := openTest(t)
	ex := &recorder{}
	d, _ := newDaemon(t, st, ex, "static")
	big := spec(t, "big", 16, jobspec.BestEffort)
	a, _ := d.Submit(ctx, big)
	ok, _ := d.Submit(ctx, specWith(t, "on-ok", 8, after(a.ID, "ok")))
	bad, _ := d.Submit(ctx, specWith(t, "on-failed", 8, after(a.ID, "failed")))
	anyEnd, _ := d.Submit(ctx, specWith(t, "on-any", 8, after(a.ID, "any")))
	d.Round(ctx)
	if _, err := d.Cancel(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	d.Round(ctx)
	rec, _ := st.GetJob(ctx, ok.ID)
	want := "its dependency " + a.ID + " ended cancelled: it waited for " + a.ID + " to finish ok"
	if rec.State != StateUnschedulable || rec.Reason != want {
		t.Fatalf("on-ok after its dependency was cancelled: %s %q, want %q", rec.State, rec.Reason, want)
	}
	started := map[string]bool{}
	for _, l := range ex.starts {
		started[l.JobID] = true
	}
	if !started[bad.ID] || !started[anyEnd.ID] || started[ok.ID] {
		t.Errorf("started %v", started)
	}
	// It stays unschedulable (capacity is not what it lacks).
	ex.next = Observation{Jobs: []JobObservation{{JobID: bad.ID, Iterations: 1000, Exited: true}, {JobID: anyEnd.ID, Iterations: 1000, Exited: true}}}
	d.Observe(ctx)
	d.Round(ctx)
	d.Round(ctx)
	if rec, _ := st.GetJob(ctx, ok.ID); rec.State != StateUnschedulable || rec.Reason != want {
		t.Errorf("later: %s %q", rec.State, rec.Reason)
	}
	evs, _ := st.Events(ctx, 0, 100)
	n := 0
	for _, e := range evs {
		if e.Kind == "unschedulable" && e.JobID == ok.ID && strings.Contains(e.Msg, a.ID) {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d unschedulable events naming %s", n, a.ID)
	}
	// A dependency that does not exist (a submit that skipped admission).
	ghost, _ := d.Submit(ctx, specWith(t, "ghost", 8, after("j-999999", "any")))
	d.Round(ctx)
	if rec, _ := st.GetJob(ctx, ghost.ID); rec.State != StateUnschedulable || rec.Reason != "its dependency j-999999 does not exist" {
		t.Errorf("ghost: %s %q", rec.State, rec.Reason)
	}
}

// TestDependencyAdmission: an unknown job, or one that already ended in a
// way the condition can never accept, is refused at submit with file,
// line and field.
func TestDependencyAdmission(t *testing.T) {
	ctx := context.Background()
	st, _ := openTest(t)
	d, _ := newDaemon(t, st, &recorder{}, "static")
	a, _ := d.Submit(ctx, spec(t, "first", 8, jobspec.BestEffort))
	d.Cancel(ctx, a.ID)
	run, _ := d.Submit(ctx, spec(t, "running", 8, jobspec.BestEffort))
	d.Round(ctx)
	for _, c := range []struct{ extra, want string }{
		{"after:\n  - {job: " + run.ID + "}\n  - {job: j-000099, when: any}\n", "x.yaml:15: after[1].job: no job j-000099 (submit the jobs it waits for first)"},
		{after(a.ID, "ok"), "x.yaml:14: after[0].job: job " + a.ID + " already ended cancelled: it can never finish ok"},
	} {
		err := d.Admit(ctx, specWith(t, "x", 8, c.extra), nil)
		var ae *AdmissionError
		if !errors.As(err, &ae) || len(ae.Problems) != 1 || ae.Problems[0].Error() != c.want {
			t.Errorf("%q: %v, want %q", c.extra, err, c.want)
		}
	}
	for _, ok := range []string{after(a.ID, "failed"), after(a.ID, "any"), after(run.ID, "ok")} {
		if err := d.Admit(ctx, specWith(t, "x", 8, ok), nil); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
}

// TestAPISubmitRefusesUnknownDependencyAndLongLimit: through the API, an
// unknown dependency and a time limit above the tenant's maximum are
// refused with 400 naming file, line and field; nothing is stored.
func TestAPISubmitRefusesUnknownDependencyAndLongLimit(t *testing.T) {
	ctx := context.Background()
	st, _ := openTest(t)
	c := &clock{t: time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)}
	p, _ := sched.New("static")
	d, err := New(ctx, Config{
		Store: st, Exec: &recorder{}, Policy: p, Clock: c.now,
		Servers: []ServerInfo{{Name: "a", Address: "10.0.0.1", Rack: "r1", GPUs: 8, CPUs: 64, MemGB: 1000}},
		Tenants: []TenantInfo{{Name: "research", QuotaGPUs: 8, TimeLimitMax: jobspec.Duration(12 * time.Hour)}},
	})
	if err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	sock := filepath.Join(t.TempDir(), "replan.sock")
	l, err := ListenUnix(sock)
	if err != nil {
		t.Fatal(err)
	}
	go Serve(sctx, l, (&API{D: d, Version: "test"}).Handler())
	cl := NewUnixClient(sock)
	_, err = cl.Submit(ctx, "job.yaml", []byte(admitSpec(nil)+"time_limit: 2d\nafter:\n  - {job: j-000042, when: ok}\n"))
	var re *RemoteError
	if !errors.As(err, &re) || re.Status != http.StatusBadRequest {
		t.Fatalf("want 400, got %v", err)
	}
	var got []string
	for _, p := range re.Problems {
		got = append(got, fmt.Sprintf("%s:%d: %s: %s", p.File, p.Line, p.Field, p.Msg))
	}
	want := []string{
		"job.yaml:14: time_limit: 2d is above the time_limit_max of tenant research, 12h",
		"job.yaml:16: after[0].job: no job j-000042 (submit the jobs it waits for first)",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if jobs, _ := cl.Jobs(ctx); len(jobs) != 0 {
		t.Errorf("stored %+v", jobs)
	}
	// Without the problems it is accepted, with the tenant's maximum as
	// its limit when it sets none.
	first, err := cl.Submit(ctx, "job.yaml", []byte(admitSpec(nil)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Submit(ctx, "job.yaml", []byte(admitSpec(nil)+"after:\n  - {job: "+first.ID+"}\n")); err != nil {
		t.Fatal(err)
	}
	rec, _ := st.GetJob(ctx, first.ID)
	if !strings.Contains(string(rec.Spec), `"time_limit":"12h"`) {
		t.Errorf("stored spec %s", rec.Spec)
	}
}
