package control

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/replan/replan/jobspec"
	"github.com/replan/replan/perf"
	"github.com/replan/replan/sched"
)

// recorder is an Executor that records what it is asked to do and reports
// whatever observation the test queues.
type recorder struct {
	mu      sync.Mutex
	starts  []Launch
	reconfs [][2]Launch
	stops   []string
	next    Observation
	failOn  string
}

func (r *recorder) Start(ctx context.Context, l Launch) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if l.JobID == r.failOn {
		return fmt.Errorf("agent unreachable")
	}
	r.starts = append(r.starts, l)
	return nil
}
func (r *recorder) Reconfigure(ctx context.Context, from, to Launch, last int) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reconfs = append(r.reconfs, [2]Launch{from, to})
	return nil
}
func (r *recorder) Stop(ctx context.Context, id string, ckpt bool) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stops = append(r.stops, id)
	return 0, nil
}
func (r *recorder) Adopt(ctx context.Context, l Launch) (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.starts {
		if s.JobID == l.JobID {
			return true, nil
		}
	}
	return false, nil
}

func (r *recorder) Observe(ctx context.Context) (Observation, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	o := r.next
	r.next = Observation{}
	return o, nil
}

// clock is a virtual clock safe to read from the daemon's loop while a
// test advances it.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func spec(t *testing.T, name string, gpus int, class jobspec.Class) *jobspec.Spec {
	t.Helper()
	data := fmt.Sprintf(`version: 1
name: %s
tenant: research
class: %s
model: gpt2
framework: deepspeed
workdir: /w
entrypoint: train.py
global_batch: 16
iterations: 1000
checkpoint_dir: /ckpt/%s
request: {gpus: %d, plan: "dp=%d,tp=1,pp=1,mb=%d,ga=1"}
`, name, class, name, gpus, gpus, 16/gpus)
	s, err := jobspec.Parse(name+".yaml", []byte(data), nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func newDaemon(t *testing.T, st Store, ex Executor, policy string) (*Daemon, *clock) {
	t.Helper()
	c := &clock{t: time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)}
	p, err := sched.New(policy)
	if err != nil {
		t.Fatal(err)
	}
	d, err := New(context.Background(), Config{
		Store: st, Exec: ex, Policy: p, Clock: c.now,
		Servers: []ServerInfo{{Name: "a", Address: "10.0.0.1", Rack: "r1", GPUs: 8, CPUs: 64, MemGB: 1000}, {Name: "b", Address: "10.0.0.2", Rack: "r1", GPUs: 8, CPUs: 64, MemGB: 1000}},
		Tenants: []TenantInfo{{Name: "research", QuotaGPUs: 16}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return d, c
}

func TestDaemonStartsFinishesAndFreesDevices(t *testing.T) {
	forEachStore(t, testDaemonStartsFinishes)
}

func testDaemonStartsFinishes(t *testing.T, k storeKit) {
	ctx := context.Background()
	st, _ := k.open(t)
	ex := &recorder{}
	d, _ := newDaemon(t, st, ex, "static")
	j1, _ := d.Submit(ctx, spec(t, "one", 8, jobspec.Guaranteed))
	j2, _ := d.Submit(ctx, spec(t, "two", 8, jobspec.BestEffort))
	if _, err := d.Round(ctx); err != nil {
		t.Fatal(err)
	}
	if len(ex.starts) != 2 {
		t.Fatalf("started %d jobs", len(ex.starts))
	}
	used := map[string]bool{}
	for _, l := range ex.starts {
		for _, s := range l.Servers {
			for _, g := range s.GPUs {
				key := fmt.Sprintf("%s/%d", s.Name, g)
				if used[key] {
					t.Fatalf("GPU %s given twice", key)
				}
				used[key] = true
			}
		}
	}
	rec, _ := st.GetJob(ctx, j1.ID)
	if rec.State != StateRunning || len(rec.Placement) == 0 || len(rec.Plan) == 0 {
		t.Fatalf("stored %+v", rec)
	}
	ex.next = Observation{Jobs: []JobObservation{{JobID: j1.ID, Iterations: 1000, Exited: true}, {JobID: j2.ID, Iterations: 10, Checkpoint: 5}}}
	if err := d.Observe(ctx); err != nil {
		t.Fatal(err)
	}
	if rec, _ := st.GetJob(ctx, j1.ID); rec.State != StateFinished || rec.FinishedAt.IsZero() {
		t.Errorf("j1 %+v", rec)
	}
	if rec, _ := st.GetJob(ctx, j2.ID); rec.Iterations != 10 || rec.Checkpoint != 5 {
		t.Errorf("j2 progress %+v", rec)
	}
	free := 0
	for _, n := range d.Nodes() {
		free += n.FreeGPUs
	}
	if free != 8 {
		t.Errorf("free GPUs after j1 finished: %d", free)
	}
	h, _ := st.History(ctx, j1.ID)
	if len(h) != 3 || h[2].To != StateFinished {
		t.Errorf("history %+v", h)
	}
}

func TestDaemonWaitReasonAndQuota(t *testing.T) {
	ctx := context.Background()
	st, _ := openTest(t)
	d, _ := newDaemon(t, st, &recorder{}, "static")
	big, _ := d.Submit(ctx, spec(t, "big", 16, jobspec.BestEffort))
	d.Round(ctx)
	d.Submit(ctx, spec(t, "late", 8, jobspec.BestEffort))
	d.Round(ctx)
	q := d.Queue()
	if len(q) != 1 || q[0].Reason == "" || q[0].Reason == "not scheduled yet" {
		t.Fatalf("queue %+v", q)
	}
	rec, _ := st.GetJob(ctx, q[0].Job.ID)
	if rec.Reason != q[0].Reason {
		t.Errorf("stored reason %q, queue says %q", rec.Reason, q[0].Reason)
	}
	ds, _ := st.Decisions(ctx, q[0].Job.ID, 5)
	if len(ds) == 0 || ds[0].Kind != "wait" {
		t.Errorf("no wait decision recorded: %+v", ds)
	}
	_ = big
}

func TestDaemonRestartsFailedJobsThenFails(t *testing.T) {
	ctx := context.Background()
	st, _ := openTest(t)
	ex := &recorder{}
	d, _ := newDaemon(t, st, ex, "static")
	j, _ := d.Submit(ctx, spec(t, "crashy", 8, jobspec.BestEffort))
	for i := 0; i <= 3; i++ {
		d.Round(ctx)
		ex.next = Observation{Jobs: []JobObservation{{JobID: j.ID, Iterations: 20, Checkpoint: 10, Exited: true, ExitCode: 1}}}
		d.Observe(ctx)
		rec, _ := st.GetJob(ctx, j.ID)
		if i < 3 && (rec.State != StatePreempted || rec.Iterations != 10) {
			t.Fatalf("round %d: %+v", i, rec)
		}
	}
	// the first start and 3 restarts, then the 4th failure fails the job
	rec, _ := st.GetJob(ctx, j.ID)
	if rec.State != StateFailed || !strings.Contains(rec.Reason, "restart limit 3") || rec.Failures != 4 {
		t.Fatalf("after too many failures: state %s reason %q failures %d", rec.State, rec.Reason, rec.Failures)
	}
	// Issue 28: the final reason said "restarting from checkpoint 10 (failed
	// 4 times, restart limit 3)" of a job that will not restart.
	if want := "exited with code 1; not restarted: failed 4 times, restart limit 3"; rec.Reason != want {
		t.Errorf("final reason %q, want %q", rec.Reason, want)
	}
	d.Round(ctx)
	if len(ex.starts) != 4 || !ex.starts[1].Resume {
		t.Errorf("starts %d, resume %v", len(ex.starts), ex.starts[1].Resume)
	}
}

func TestDaemonRequeuesJobsOfADeadServer(t *testing.T) {
	ctx := context.Background()
	st, _ := openTest(t)
	ex := &recorder{}
	d, _ := newDaemon(t, st, ex, "static")
	j, _ := d.Submit(ctx, spec(t, "one", 8, jobspec.BestEffort))
	d.Round(ctx)
	server := ex.starts[0].Servers[0].Name
	for i := 0; i < 2; i++ {
		ex.next = Observation{Nodes: []NodeObservation{{Name: server, Reachable: false, Err: "connection refused"}}, Jobs: []JobObservation{{JobID: j.ID, Iterations: 30, Checkpoint: 25}}}
		d.Observe(ctx)
	}
	rec, _ := st.GetJob(ctx, j.ID)
	if rec.State != StatePreempted || rec.Iterations != 25 || !strings.Contains(rec.Reason, server) {
		t.Fatalf("after the server died: %+v", rec)
	}
	d.Round(ctx)
	if len(ex.starts) != 2 || ex.starts[1].Servers[0].Name == server {
		t.Fatalf("restarted on the dead server: %+v", ex.starts)
	}
	ex.next = Observation{Nodes: []NodeObservation{{Name: server, Reachable: true}}}
	d.Observe(ctx)
	for _, n := range d.Nodes() {
		if n.Name == server && !n.Reachable {
			t.Error("server not recovered")
		}
	}
}

func TestDaemonRecoversFromTheStore(t *testing.T) {
	forEachStore(t, testDaemonRecoversFromTheStore)
}

func testDaemonRecoversFromTheStore(t *testing.T, k storeKit) {
	ctx := context.Background()
	st, _ := k.open(t)
	ex := &recorder{}
	d, _ := newDaemon(t, st, ex, "static")
	d.Submit(ctx, spec(t, "one", 8, jobspec.BestEffort))
	d.Submit(ctx, spec(t, "two", 8, jobspec.BestEffort))
	d.Round(ctx)
	// A new daemon on the same store (the old one was killed) whose
	// executor still runs the jobs: they keep their GPUs, nothing is
	// started twice.
	ex2 := &recorder{starts: ex.starts}
	d2, _ := newDaemon(t, st, ex2, "static")
	d2.Submit(ctx, spec(t, "three", 8, jobspec.BestEffort))
	d2.Round(ctx)
	if len(ex2.starts) != 2 {
		t.Fatalf("restarted daemon started %d jobs on a full cluster", len(ex2.starts)-2)
	}
	q := d2.Queue()
	if len(q) != 1 || q[0].Job.Name != "three" {
		t.Fatalf("queue %+v", q)
	}
	// A daemon whose executor lost the jobs (a fresh simulated cluster)
	// requeues them from their checkpoints instead of waiting forever.
	ex3 := &recorder{}
	d3, _ := newDaemon(t, st, ex3, "static")
	if q := d3.Queue(); len(q) != 3 {
		t.Fatalf("queue after losing the jobs: %+v", q)
	}
	d3.Round(ctx)
	if len(ex3.starts) != 2 || !ex3.starts[0].Resume {
		t.Fatalf("relaunched %+v", ex3.starts)
	}
}

func TestDaemonCancelHoldReleaseDrain(t *testing.T) {
	ctx := context.Background()
	st, _ := openTest(t)
	ex := &recorder{}
	d, _ := newDaemon(t, st, ex, "static")
	a, _ := d.Submit(ctx, spec(t, "a", 8, jobspec.BestEffort))
	b, _ := d.Submit(ctx, spec(t, "b", 8, jobspec.BestEffort))
	c, _ := d.Submit(ctx, spec(t, "c", 8, jobspec.BestEffort))
	if _, err := d.Hold(ctx, c.ID); err != nil {
		t.Fatal(err)
	}
	d.Round(ctx)
	if len(ex.starts) != 2 {
		t.Fatalf("held job scheduled? starts %d", len(ex.starts))
	}
	if _, err := d.Release(ctx, a.ID); err == nil {
		t.Error("released a running job")
	}
	if _, err := d.Cancel(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Cancel(ctx, a.ID); err == nil {
		t.Error("cancelled twice")
	}
	if _, err := d.Release(ctx, c.ID); err != nil {
		t.Fatal(err)
	}
	d.Round(ctx)
	server := ""
	for _, l := range ex.starts {
		if l.JobID == b.ID {
			server = l.Servers[0].Name
		}
	}
	moved, err := d.Drain(ctx, server)
	if err != nil || len(moved) != 1 || moved[0] != b.ID {
		t.Fatalf("drain moved %v: %v", moved, err)
	}
	d.Round(ctx)
	for _, n := range d.Nodes() {
		if n.Name == server && len(n.Jobs) != 0 {
			t.Errorf("drained server still runs %v", n.Jobs)
		}
	}
	if err := d.Undrain(ctx, server); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Drain(ctx, "nope"); err == nil {
		t.Error("drain of an unknown server")
	}
	_ = perf.A800
}

// A job moved off a drained server restarts with another plan: the launch
// names the plan its checkpoint was written with, so the executor can
// convert it.
func TestDaemonRestartWithAnotherPlanNamesTheCheckpointPlan(t *testing.T) {
	ctx := context.Background()
	st, _ := openTest(t)
	ex := &recorder{}
	d, _ := newDaemon(t, st, ex, "morphling")
	j, _ := d.Submit(ctx, spec(t, "wide", 8, jobspec.BestEffort))
	d.Round(ctx)
	if len(ex.starts) != 1 {
		t.Fatalf("starts %d", len(ex.starts))
	}
	first := ex.starts[0]
	ex.next = Observation{Jobs: []JobObservation{{JobID: j.ID, Iterations: 30, Checkpoint: 30}}}
	d.Observe(ctx)
	if _, err := d.Drain(ctx, first.Servers[0].Name); err != nil {
		t.Fatal(err)
	}
	d.Round(ctx)
	if len(ex.starts) != 2 {
		t.Fatalf("not restarted: %d starts", len(ex.starts))
	}
	again := ex.starts[1]
	t.Logf("first %s on %d servers, again %s (checkpoint plan %s)", first.Plan, len(first.Servers), again.Plan, again.CheckpointPlan)
	if !again.Resume {
		t.Fatal("restart does not resume")
	}
	if again.Plan == first.Plan {
		t.Fatalf("test setup: the job kept its plan %s (it should shrink from 16 GPUs to the 8 left)", first.Plan)
	}
	if again.CheckpointPlan != first.Plan {
		t.Errorf("restarted with %s from a checkpoint of %s, but CheckpointPlan is %s", again.Plan, first.Plan, again.CheckpointPlan)
	}
}

// Pinned jobs: a plan pinned to the request is never changed, and a job
// pinned to one server never spans two.
func TestDaemonHonoursPins(t *testing.T) {
	ctx := context.Background()
	st, _ := openTest(t)
	ex := &recorder{}
	d, _ := newDaemon(t, st, ex, "morphling")
	s := spec(t, "pinned", 8, jobspec.BestEffort)
	s.Pin.Plan = true
	j, _ := d.Submit(ctx, s)
	d.Round(ctx)
	// On an empty cluster morphling would grow the job to 16 GPUs with
	// another plan; the pin keeps it on the requested plan or waiting.
	for _, l := range ex.starts {
		if l.JobID == j.ID && l.Plan != s.Request.Plan {
			t.Fatalf("pinned plan %s changed to %s", s.Request.Plan, l.Plan)
		}
	}
	if len(ex.starts) != 1 || ex.starts[0].Plan != s.Request.Plan {
		t.Fatalf("the pinned job did not start on its plan: %+v", ex.starts)
	}
	wide := spec(t, "one-server", 8, jobspec.BestEffort)
	wide.Pin.Tiers = []perf.Tier{perf.TierServer}
	w, _ := d.Submit(ctx, wide)
	for i := 0; i < 3; i++ {
		d.Round(ctx)
	}
	for _, l := range ex.starts {
		if l.JobID == w.ID && len(l.Servers) > 1 {
			t.Fatalf("job pinned to one server placed on %d", len(l.Servers))
		}
	}
}

// TestAdoptedJobShowsItsPrediction: a job a restarted daemon adopts shows
// the model's throughput for the plan and placement it runs with before
// any round decides for it again (it showed 0, and `replan job` no
// throughput line, until then).
func TestAdoptedJobShowsItsPrediction(t *testing.T) {
	ctx := context.Background()
	st, _ := openTest(t)
	ex := &recorder{}
	d, _ := newDaemon(t, st, ex, "static")
	rec, err := d.Submit(ctx, spec(t, "one", 8, jobspec.BestEffort))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Round(ctx); err != nil {
		t.Fatal(err)
	}
	id := rec.ID
	before := d.JobThroughput(id).PredictedSPS
	if before <= 0 {
		t.Fatalf("started job predicts %v samples/s", before)
	}
	d2, _ := newDaemon(t, st, &recorder{starts: ex.starts}, "static")
	after := d2.JobThroughput(id).PredictedSPS
	if math.Abs(after/before-1) > 1e-9 {
		t.Fatalf("adopted job predicts %v samples/s, the daemon that started it %v", after, before)
	}
}

// TestStartEventSaysWhy: the start event (replan events, the TUI's events
// screen) carries the decision's reason after the placement, so an
// operator reads there why a job asking for 8 GPUs holds 16. It used to
// end at the predicted throughput.
func TestStartEventSaysWhy(t *testing.T) {
	ctx := context.Background()
	st, _ := openTest(t)
	d, _ := newDaemon(t, st, &recorder{}, "replan")
	s := spec(t, "one", 8, jobspec.BestEffort)
	j, err := d.Submit(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Round(ctx); err != nil {
		t.Fatal(err)
	}
	decs, err := st.Decisions(ctx, j.ID, 10)
	if err != nil || len(decs) == 0 {
		t.Fatalf("decisions %+v, %v", decs, err)
	}
	why := decs[0].Reason
	if !strings.Contains(why, "8 GPUs") {
		t.Fatalf("start reason %q does not say what was asked", why)
	}
	evs, _ := st.Events(ctx, 0, 100)
	for _, e := range evs {
		if e.Kind == "start" && e.JobID == j.ID {
			t.Logf("start event: %s", e.Msg)
			if !strings.HasSuffix(e.Msg, "predicted); "+why) {
				t.Errorf("start event %q does not end with the decision's reason %q", e.Msg, why)
			}
			return
		}
	}
	t.Fatalf("no start event in %+v", evs)
}

// The drain event names every job the drain moves, in its message and its
// data, so `replan events` says what happened to them.
func TestDrainEventNamesMovedJobs(t *testing.T) {
	ctx := context.Background()
	st, _ := openTest(t)
	ex := &recorder{}
	d, _ := newDaemon(t, st, ex, "static")
	a, _ := d.Submit(ctx, spec(t, "a", 4, jobspec.BestEffort))
	b, _ := d.Submit(ctx, spec(t, "b", 4, jobspec.BestEffort))
	d.Round(ctx)
	on := map[string][]string{}
	for _, l := range ex.starts {
		on[l.Servers[0].Name] = append(on[l.Servers[0].Name], l.JobID)
	}
	server := ex.starts[0].Servers[0].Name
	moved, err := d.Drain(ctx, server)
	if err != nil || strings.Join(moved, ",") != strings.Join(on[server], ",") {
		t.Fatalf("drain of %s moved %v, want %v: %v", server, moved, on[server], err)
	}
	if len(moved) == 0 {
		t.Fatalf("test setup: nothing ran on %s (%v, jobs %s %s)", server, on, a.ID, b.ID)
	}
	evs, err := st.Events(ctx, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	var drain *Event
	for i := range evs {
		if evs[i].Kind == "drain" {
			drain = &evs[i]
		}
	}
	if drain == nil {
		t.Fatalf("no drain event in %+v", evs)
	}
	want := server + " drained: moving " + strings.Join(moved, ", ")
	if !strings.HasPrefix(drain.Msg, want) {
		t.Errorf("drain event says %q, want it to start %q", drain.Msg, want)
	}
	if got := string(drain.Data); got != `{"jobs":["`+strings.Join(moved, `","`)+`"]}` {
		t.Errorf("drain event data %s", got)
	}
	// A server with nothing on it says so.
	other := "a"
	if server == "a" {
		other = "b"
	}
	if len(on[other]) == 0 {
		if _, err := d.Drain(ctx, other); err != nil {
			t.Fatal(err)
		}
		evs, _ = st.Events(ctx, drain.ID, 10)
		if len(evs) == 0 || evs[len(evs)-1].Msg != other+" drained: no jobs to move" {
			t.Errorf("empty drain events %+v", evs)
		}
	}
}
