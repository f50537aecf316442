package control

import (
	"context"
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/replan/replan/jobspec"
	"github.com/replan/replan/sched"
)

// etaDaemon is a 16-GPU daemon on the simulated executor with start
// estimates on: two 8-GPU jobs run, then small and big jobs wait.
func etaDaemon(t *testing.T, policy string) (*Daemon, *clock) {
	t.Helper()
	st, _ := openTest(t)
	c := &clock{t: time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)}
	ex := NewSimExecutor(c.now, []string{"a", "b"}, nil, nil, time.Minute)
	d, _ := newDaemonWith(t, st, ex, policy, c)
	ctx := context.Background()
	d.Submit(ctx, spec(t, "r1", 8, jobspec.BestEffort))
	d.Submit(ctx, spec(t, "r2", 8, jobspec.BestEffort))
	if _, err := d.Round(ctx); err != nil {
		t.Fatal(err)
	}
	c.advance(5 * time.Minute)
	d.Observe(ctx)
	d.Submit(ctx, spec(t, "w8", 8, jobspec.BestEffort))
	d.Submit(ctx, spec(t, "w2", 2, jobspec.BestEffort))
	d.Submit(ctx, spec(t, "w4", 4, jobspec.BestEffort))
	d.Round(ctx)
	d.EnableETA(func() sched.Policy { p, _ := sched.New(policy); return p }, time.Minute, 0)
	return d, c
}

// waitETA polls the queue until every entry has an estimate or a reason
// other than "not estimated yet".
func waitETA(t *testing.T, d *Daemon) []QueueEntry {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		q := d.Queue()
		done := len(q) > 0
		for _, e := range q {
			if e.ETAS == nil && (e.ETAReason == "" || e.ETAReason == "not estimated yet") {
				done = false
			}
		}
		if done {
			return q
		}
		if time.Now().After(deadline) {
			t.Fatalf("no estimates after 20 s: %+v", q)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestQueueJSONHasETAForEveryEntry: GET /v1/queue gives every entry eta_s
// (seconds from as_of), eta_at (RFC 3339) and as_of; both agree.
func TestQueueJSONHasETAForEveryEntry(t *testing.T) {
	d, _ := etaDaemon(t, "static")
	waitETA(t, d)
	rr := httptest.NewRecorder()
	(&API{D: d}).Handler().ServeHTTP(rr, httptest.NewRequest(http.MethodGet, "/v1/queue", nil))
	if rr.Code != http.StatusOK {
		t.Fatalf("GET /v1/queue: %d %s", rr.Code, rr.Body)
	}
	var raw []map[string]any
	if err := json.Unmarshal(rr.Body.Bytes(), &raw); err != nil {
		t.Fatal(err)
	}
	if len(raw) != 3 {
		t.Fatalf("want 3 waiting jobs, got %s", rr.Body)
	}
	for _, e := range raw {
		for _, k := range []string{"eta_s", "eta_at", "as_of"} {
			if _, ok := e[k]; !ok {
				t.Errorf("entry without %q: %v", k, e)
			}
		}
		s, ok := e["eta_s"].(float64)
		if !ok {
			t.Errorf("no estimate for a job that can start once the running jobs end: %v", e)
			continue
		}
		at, err1 := time.Parse(time.RFC3339, e["eta_at"].(string))
		asOf, err2 := time.Parse(time.RFC3339, e["as_of"].(string))
		if err1 != nil || err2 != nil {
			t.Fatalf("times not RFC 3339: %v %v", err1, err2)
		}
		if s <= 0 || math.Abs(at.Sub(asOf).Seconds()-s) > 1 {
			t.Errorf("eta_s %.1f, eta_at − as_of %.1f: %v", s, at.Sub(asOf).Seconds(), e)
		}
	}
}

// TestETAIsTheSimulatedStart: with the static policy the 8-GPU job waits
// for a running job to end: its estimate is that job's remaining time
// at its measured rate, not a guess.
func TestETAIsTheSimulatedStart(t *testing.T) {
	d, _ := etaDaemon(t, "static")
	q := waitETA(t, d)
	var runEnd float64
	for _, r := range d.Running() {
		js := d.jobs[r.Job.ID]
		rate := r.Throughput.MeasuredSPS / float64(js.spec.GlobalBatch)
		if rate <= 0 {
			t.Skipf("job %s not measured yet", r.Job.ID)
		}
		left := float64(js.spec.Iterations-r.Job.Iterations) / rate
		if runEnd == 0 || left < runEnd {
			runEnd = left
		}
	}
	for _, e := range q {
		if e.Job.Name != "w8" {
			continue
		}
		if e.ETAS == nil {
			t.Fatalf("w8: no estimate (%s)", e.ETAReason)
		}
		if math.Abs(*e.ETAS-runEnd) > 0.05*runEnd+5 {
			t.Errorf("w8 estimated in %.0f s, the first running job ends in %.0f s", *e.ETAS, runEnd)
		}
	}
}

// TestQueueReasonsAreTheirOwn: waiting jobs of different sizes behind a
// full cluster each get a reason naming their own GPU count.
func TestQueueReasonsAreTheirOwn(t *testing.T) {
	d, _ := etaDaemon(t, "morphling")
	needs := regexp.MustCompile(`needs (\d+) GPUs?`)
	seen := map[string]string{}
	for _, e := range d.Queue() {
		if other, dup := seen[e.Reason]; dup {
			t.Errorf("%s and %s (different sizes) have the same reason %q: one is the other's", other, e.Job.Name, e.Reason)
		}
		seen[e.Reason] = e.Job.Name
		m := needs.FindStringSubmatch(e.Reason)
		if m == nil {
			continue
		}
		t.Logf("%s: %s", e.Job.Name, e.Reason)
		n, _ := strconv.Atoi(m[1])
		if n > e.GPUs {
			t.Errorf("%s (%d GPUs requested) is said to need %d: %q", e.Job.Name, e.GPUs, n, e.Reason)
		}
	}
}

// TestStatusDrainedGPUsAreNotFree: a drained server's idle GPUs are not
// counted as free; status says when it answered.
func TestStatusDrainedGPUsAreNotFree(t *testing.T) {
	st, _ := openTest(t)
	d, c := newDaemon(t, st, &recorder{}, "static")
	if _, err := d.Drain(context.Background(), "b"); err != nil {
		t.Fatal(err)
	}
	rr := httptest.NewRecorder()
	(&API{D: d}).Handler().ServeHTTP(rr, httptest.NewRequest(http.MethodGet, "/v1/status", nil))
	var s Status
	if err := json.Unmarshal(rr.Body.Bytes(), &s); err != nil {
		t.Fatal(err)
	}
	if s.FreeGPUs != 8 || s.UnusableGPUs != 8 {
		t.Errorf("free %d, unusable %d; want 8 free (server a) and 8 unusable (drained b): %s", s.FreeGPUs, s.UnusableGPUs, rr.Body)
	}
	if !s.Now.Equal(c.now()) {
		t.Errorf("now %v, want the daemon's clock %v", s.Now, c.now())
	}
}

// slowStart is the simulated executor whose launches take a while: the
// clock moves on by delay inside Start, before the job's restart begins
// (launches of one round go one after the other; in the demo, at 200×,
// the last of a round's often began a minute or more after the round).
type slowStart struct {
	*SimExecutor
	c     *clock
	delay time.Duration
}

func (s slowStart) Start(ctx context.Context, l Launch) error {
	s.c.advance(s.delay)
	return s.SimExecutor.Start(ctx, l)
}

// TestETACountsTheRestartFromTheLaunch: jobs launched minutes after the
// round that started them pay their restart from their launch, so the job
// waiting for their GPUs starts that much later than the round's time
// suggests; the estimate says so (it counted from the round's).
func TestETACountsTheRestartFromTheLaunch(t *testing.T) {
	st, _ := openTest(t)
	c := &clock{t: time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)}
	ex := NewSimExecutor(c.now, []string{"a", "b"}, nil, nil, time.Minute)
	d, _ := newDaemonWith(t, st, slowStart{ex, c, 2 * time.Minute}, "static", c)
	ctx := context.Background()
	long := spec(t, "r1", 8, jobspec.BestEffort)
	long.Iterations *= 5
	d.Submit(ctx, long)
	d.Submit(ctx, spec(t, "r2", 8, jobspec.BestEffort))
	if _, err := d.Round(ctx); err != nil { // both decided at 12:00; r1 launched at 12:02, r2 at 12:04
		t.Fatal(err)
	}
	d.Observe(ctx) // r1 runs (since 12:03), r2 restarts until 12:05 and ends first
	d.Submit(ctx, spec(t, "w8", 8, jobspec.BestEffort))
	d.EnableETA(func() sched.Policy { p, _ := sched.New("static"); return p }, time.Minute, 0)
	q := waitETA(t, d)
	w8StartsWhenTheFirstJobEnds(t, ex, q, 10*time.Second)
}

// TestETACountsProgressSinceObserved: a running job goes on between
// observations; the estimate counts its progress since the last one at
// its measured rate (it took the job as stuck where it was last seen, so
// whatever waited for it was estimated up to a round late).
func TestETACountsProgressSinceObserved(t *testing.T) {
	st, _ := openTest(t)
	c := &clock{t: time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)}
	ex := NewSimExecutor(c.now, []string{"a", "b"}, nil, nil, time.Minute)
	d, _ := newDaemonWith(t, st, ex, "static", c)
	ctx := context.Background()
	long := spec(t, "r1", 8, jobspec.BestEffort)
	long.Iterations *= 5
	d.Submit(ctx, long)
	d.Submit(ctx, spec(t, "r2", 8, jobspec.BestEffort))
	if _, err := d.Round(ctx); err != nil {
		t.Fatal(err)
	}
	c.advance(3 * time.Minute)
	d.Observe(ctx)
	c.advance(2 * time.Minute) // no observation since
	d.Submit(ctx, spec(t, "w8", 8, jobspec.BestEffort))
	d.EnableETA(func() sched.Policy { p, _ := sched.New("static"); return p }, time.Minute, 0)
	q := waitETA(t, d)
	w8StartsWhenTheFirstJobEnds(t, ex, q, 5*time.Second)
}

// w8StartsWhenTheFirstJobEnds checks that the waiting job w8 is estimated
// to start, within tol, when the first of ex's running jobs ends.
func w8StartsWhenTheFirstJobEnds(t *testing.T, ex *SimExecutor, q []QueueEntry, tol time.Duration) {
	t.Helper()
	var end time.Time
	ex.mu.Lock()
	for _, j := range ex.running {
		if e := j.ready.Add(time.Duration(float64(j.l.Spec.Iterations) * j.iterTime * float64(time.Second))); end.IsZero() || e.Before(end) {
			end = e
		}
	}
	ex.mu.Unlock()
	for _, e := range q {
		if e.Job.Name != "w8" {
			continue
		}
		if e.ETAAt == nil {
			t.Fatalf("w8: no estimate (%s)", e.ETAReason)
		}
		if off := e.ETAAt.Sub(end); off.Abs() > tol {
			t.Errorf("w8 estimated at %s, the first running job ends at %s (%s off)", e.ETAAt.Format(time.TimeOnly), end.Format(time.TimeOnly), off)
		}
	}
}
