package control

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/replan/replan/internal/yamlcheck"
	"github.com/replan/replan/jobspec"
	"github.com/replan/replan/sched"
)

// ckptStopper is the recorder whose stops with a checkpoint write one at
// iteration ckpt.
type ckptStopper struct {
	*recorder
	ckpt      int
	withCkpts []bool
}

func (c *ckptStopper) Stop(ctx context.Context, id string, ckpt bool) (int, error) {
	c.recorder.Stop(ctx, id, ckpt)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.withCkpts = append(c.withCkpts, ckpt)
	if ckpt {
		return c.ckpt, nil
	}
	return 0, nil
}

// specWith parses the test spec of spec() with extra top-level lines
// (line 14 on).
func specWith(t *testing.T, name string, gpus int, extra string) *jobspec.Spec {
	t.Helper()
	data := fmt.Sprintf(`version: 1
name: %s
tenant: research
class: best-effort
model: gpt2
framework: deepspeed
workdir: /w
entrypoint: train.py
global_batch: 16
iterations: 1000
checkpoint_dir: /ckpt/%s
request: {gpus: %d, plan: "dp=%d,tp=1,pp=1,mb=%d,ga=1"}
%s`, name, name, gpus, gpus, 16/gpus, extra)
	s, err := jobspec.Parse(name+".yaml", []byte(data), nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func freeGPUs(d *Daemon) int {
	free := 0
	for _, n := range d.Nodes() {
		free += n.FreeGPUs
	}
	return free
}

// TestTimeLimitStopsWithCheckpointAndFails: the time limit counts the time
// a job holds GPUs, not the time it waits (a drain's requeue in between);
// at the limit the job is stopped with a checkpoint and fails with a
// reason that says so, its GPUs free.
func TestTimeLimitStopsWithCheckpointAndFails(t *testing.T) {
	ctx := context.Background()
	st, _ := openTest(t)
	ex := &ckptStopper{recorder: &recorder{}, ckpt: 1234}
	d, c := newDaemon(t, st, ex, "static")
	j, err := d.Submit(ctx, specWith(t, "limited", 8, "time_limit: 1h\n"))
	if err != nil {
		t.Fatal(err)
	}
	d.Round(ctx)
	if len(ex.starts) != 1 {
		t.Fatalf("starts %d", len(ex.starts))
	}
	c.advance(40 * time.Minute)
	ex.next = Observation{Jobs: []JobObservation{{JobID: j.ID, Iterations: 600, Checkpoint: 500}}}
	d.Observe(ctx)
	if _, err := d.Drain(ctx, ex.starts[0].Servers[0].Name); err != nil {
		t.Fatal(err)
	}
	c.advance(2 * time.Hour) // waiting: not counted
	d.Round(ctx)
	if rec, _ := st.GetJob(ctx, j.ID); rec.State != StateRunning || len(ex.starts) != 2 {
		t.Fatalf("after the drain and 2 h of waiting: %s (%q), %d starts", rec.State, rec.Reason, len(ex.starts))
	}
	c.advance(19 * time.Minute) // 59 minutes run
	d.Round(ctx)
	if rec, _ := st.GetJob(ctx, j.ID); rec.State != StateRunning {
		t.Fatalf("stopped after 59 minutes of a 1h limit: %s %q", rec.State, rec.Reason)
	}
	c.advance(time.Minute + 10*time.Second)
	if _, err := d.Round(ctx); err != nil {
		t.Fatal(err)
	}
	rec, _ := st.GetJob(ctx, j.ID)
	if want := "stopped at its time limit 1h after running 1h0m; checkpoint 1234"; rec.State != StateFailed || rec.Reason != want || rec.Checkpoint != 1234 || rec.FinishedAt.IsZero() {
		t.Fatalf("at the limit: %s %q checkpoint %d, want failed %q", rec.State, rec.Reason, rec.Checkpoint, want)
	}
	if n := len(ex.withCkpts); n != 2 || !ex.withCkpts[1] || ex.stops[1] != j.ID {
		t.Errorf("stops %v with checkpoint %v", ex.stops, ex.withCkpts)
	}
	if free := freeGPUs(d); free != 16 {
		t.Errorf("free GPUs after the time limit: %d", free)
	}
	evs, _ := st.Events(ctx, 0, 100)
	found := false
	for _, e := range evs {
		found = found || (e.Kind == "timeout" && e.JobID == j.ID && strings.Contains(e.Msg, "time limit 1h"))
	}
	if !found {
		t.Errorf("no timeout event: %+v", evs)
	}
	if q := d.Queue(); len(q) != 0 {
		t.Errorf("queue after the time limit: %+v", q)
	}
	h, _ := st.History(ctx, j.ID)
	if last := h[len(h)-1]; last.From != StateRunning || last.To != StateFailed {
		t.Errorf("history ends %+v", last)
	}
}

// TestTimeLimitCountsAcrossADaemonRestart: a daemon that restarts
// restores the time each job has run from its history; it counted from
// zero again, so a job could run past its limit by every restart.
func TestTimeLimitCountsAcrossADaemonRestart(t *testing.T) {
	ctx := context.Background()
	st, _ := openTest(t)
	ex := &ckptStopper{recorder: &recorder{}, ckpt: 77}
	d, c := newDaemon(t, st, ex, "static")
	j, _ := d.Submit(ctx, specWith(t, "limited", 8, "time_limit: 1h\n"))
	d.Round(ctx)
	c.advance(50 * time.Minute)
	// A new daemon on the same store; its executor still runs the job.
	ex2 := &ckptStopper{recorder: &recorder{starts: ex.starts}, ckpt: 88}
	d2, err := New(ctx, Config{Store: st, Exec: ex2, Policy: d.cfg.Policy, Clock: c.now, Servers: d.cfg.Servers, Tenants: d.cfg.Tenants})
	if err != nil {
		t.Fatal(err)
	}
	d2.Round(ctx)
	if rec, _ := st.GetJob(ctx, j.ID); rec.State != StateRunning {
		t.Fatalf("after 50 minutes: %s %q", rec.State, rec.Reason)
	}
	c.advance(11 * time.Minute)
	d2.Round(ctx)
	rec, _ := st.GetJob(ctx, j.ID)
	if want := "stopped at its time limit 1h after running 1h1m; checkpoint 88"; rec.State != StateFailed || rec.Reason != want {
		t.Fatalf("61 minutes after its start, across a restart: %s %q, want %q", rec.State, rec.Reason, want)
	}
}

// TestTimeLimitTenantDefaultAndMaximum: a spec without time_limit gets its
// tenant's default (stored with the job; else the maximum); one above the
// tenant's maximum is refused at admission naming file, line and field.
func TestTimeLimitTenantDefaultAndMaximum(t *testing.T) {
	ctx := context.Background()
	st, _ := openTest(t)
	ex := &ckptStopper{recorder: &recorder{}}
	d, c := newDaemon(t, st, ex, "static")
	d.cfg.Tenants = []TenantInfo{
		{Name: "research", QuotaGPUs: 16, TimeLimitDefault: jobspec.Duration(2 * time.Hour), TimeLimitMax: jobspec.Duration(12 * time.Hour)},
		{Name: "capped", QuotaGPUs: 16, TimeLimitMax: jobspec.Duration(3 * time.Hour)},
		{Name: "free", QuotaGPUs: 16},
	}
	over := specWith(t, "over", 8, "time_limit: 13h\n")
	err := d.Admit(ctx, over, nil)
	var ae *AdmissionError
	if !errors.As(err, &ae) || len(ae.Problems) != 1 {
		t.Fatalf("13h against a 12h maximum: %v", err)
	}
	if got, want := ae.Problems[0].Error(), "over.yaml:13: time_limit: 13h is above the time_limit_max of tenant research, 12h"; got != want {
		t.Errorf("refusal %q, want %q", got, want)
	}
	if p := yamlcheck.Problems(err); len(p) != 1 || p[0].Field != "time_limit" {
		t.Errorf("problems %+v", p)
	}
	if err := d.Admit(ctx, specWith(t, "max", 8, "time_limit: 12h\n"), nil); err != nil {
		t.Errorf("12h against a 12h maximum: %v", err)
	}
	for _, c := range []struct {
		tenant string
		want   time.Duration
	}{{"research", 2 * time.Hour}, {"capped", 3 * time.Hour}, {"free", 0}} {
		s := specWith(t, "d-"+c.tenant, 8, "")
		s.Tenant = c.tenant
		if err := d.Admit(ctx, s, nil); err != nil {
			t.Fatal(err)
		}
		rec, err := d.Submit(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		stored, _ := st.GetJob(ctx, rec.ID)
		if !strings.Contains(string(stored.Spec), fmt.Sprintf(`"time_limit":"%s"`, jobspec.Duration(c.want))) && c.want > 0 ||
			c.want == 0 && strings.Contains(string(stored.Spec), "time_limit") {
			t.Errorf("tenant %s: stored spec %s, want a time limit of %v", c.tenant, stored.Spec, c.want)
		}
		if s.TimeLimit != 0 {
			t.Errorf("the caller's spec was changed: %v", s.TimeLimit)
		}
	}
	// The default is enforced: research's job (2 h) ends after 2 h.
	d.Round(ctx)
	c.advance(2*time.Hour + time.Second)
	d.Round(ctx)
	jobs, _ := st.ListJobs(ctx, JobFilter{States: []JobState{StateFailed}})
	if len(jobs) != 1 || jobs[0].Name != "d-research" || !strings.Contains(jobs[0].Reason, "time limit 2h") {
		t.Errorf("failed after 2 h: %+v", jobs)
	}
}

// TestETACapsRunTimeByTimeLimit: a waiting job's estimated start counts
// with the running job that holds its GPUs ending at its time limit, not
// when its iterations would be done.
func TestETACapsRunTimeByTimeLimit(t *testing.T) {
	st, _ := openTest(t)
	c := &clock{t: time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)}
	ex := NewSimExecutor(c.now, []string{"a", "b"}, nil, nil, time.Minute)
	d, _ := newDaemonWith(t, st, ex, "static", c)
	ctx := context.Background()
	limited := specWith(t, "r1", 8, "time_limit: 30m\n")
	limited.Iterations *= 1000
	long := spec(t, "r2", 8, jobspec.BestEffort)
	long.Iterations *= 1000
	d.Submit(ctx, limited)
	d.Submit(ctx, long)
	start := c.now()
	if _, err := d.Round(ctx); err != nil {
		t.Fatal(err)
	}
	c.advance(5 * time.Minute)
	d.Observe(ctx)
	d.Submit(ctx, spec(t, "w8", 8, jobspec.BestEffort))
	d.EnableETA(func() sched.Policy { p, _ := sched.New("static"); return p }, time.Minute, 0)
	q := waitETA(t, d)
	if len(q) != 1 || q[0].ETAAt == nil {
		t.Fatalf("queue %+v", q)
	}
	if at := q[0].ETAAt.Sub(start); at < 29*time.Minute || at > 31*time.Minute {
		t.Errorf("w8 estimated to start %v after r1 (time limit 30m) started, want about 30m", at)
	}
}
