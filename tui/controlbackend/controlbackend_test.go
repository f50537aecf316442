package controlbackend

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/replan/replan/agent"
	"github.com/replan/replan/control"
	"github.com/replan/replan/internal/waitfor"
	"github.com/replan/replan/sched"
	"github.com/replan/replan/tui/data"
)

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

const spec = `version: 1
name: bert-a
tenant: research
class: best-effort
model: bert
framework: deepspeed
workdir: /w
entrypoint: train.py
global_batch: 32
iterations: 50
checkpoint_dir: /ckpt/x
request: {gpus: 4}
`

// The adapter over a real daemon's API on a unix socket: a submitted job
// starts, and every screen's rows come out filled.
func TestOverTheAPI(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir := t.TempDir()
	st, err := control.OpenSQLite(ctx, filepath.Join(dir, "replan.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	c := &clock{t: time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)}
	pol, err := sched.New("morphling")
	if err != nil {
		t.Fatal(err)
	}
	ex := control.NewSimExecutor(c.now, []string{"a", "b"}, nil, nil, 0)
	// server a's GPUs as an agent reads them: GPU 3 runs two processes
	gb, err := agent.NewFakeBackend("8xA800")
	if err != nil {
		t.Fatal(err)
	}
	if err := gb.SetProcesses(3, []agent.GPUProcess{{PID: 4242, UsedMemoryBytes: 30 << 30}, {PID: 4243, UsedMemoryBytes: 1 << 29}}); err != nil {
		t.Fatal(err)
	}
	ex.SetGPUBackend("a", gb)
	d, err := control.New(ctx, control.Config{
		Store: st, Exec: ex, Policy: pol, Clock: c.now,
		Servers: []control.ServerInfo{{Name: "a", Address: "10.0.0.1", Rack: "r1", GPUs: 8, CPUs: 64, MemGB: 1000}, {Name: "b", Address: "10.0.0.2", Rack: "r1", GPUs: 8, CPUs: 64, MemGB: 1000}},
		Tenants: []control.TenantInfo{{Name: "research", QuotaGPUs: 16}},
	})
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "replan.sock")
	l, err := control.ListenUnix(sock)
	if err != nil {
		t.Fatal(err)
	}
	go control.Serve(ctx, l, (&control.API{D: d, Version: "test"}).Handler())
	go d.Run(ctx, 20*time.Millisecond)
	b := New(control.NewUnixClient(sock))

	id, err := b.Submit(ctx, "a.yaml", []byte(spec))
	if err != nil || id == "" {
		t.Fatalf("submit: %q %v", id, err)
	}
	if _, err := b.Submit(ctx, "bad.yaml", []byte("name: x\n")); err == nil {
		t.Error("a bad spec was accepted")
	}
	var evs []data.Event
	var after int64
	deadline := time.Now().Add(10 * time.Second)
	started := false
	for !started && time.Now().Before(deadline) {
		got, err := b.Events(ctx, after, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range got {
			after = e.ID
			evs = append(evs, e)
			if e.Kind == "start" && e.JobID == id {
				started = true
				if e.Plan == "" {
					t.Errorf("start event without a plan: %+v", e)
				}
			}
		}
	}
	if !started {
		t.Fatalf("no start event: %+v", evs)
	}

	// The running list is the daemon's published view, which may be one
	// publish behind the event stream (a reader never waits for a round
	// in progress): wait for it to show the job, on progress.
	var jobs []data.Job
	for {
		var err error
		jobs, err = b.Jobs(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(jobs) == 1 || time.Now().After(deadline.Add(10*time.Second)) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(jobs) != 1 {
		t.Fatalf("jobs %+v after the start event", jobs)
	}
	j := jobs[0]
	if j.ID != id || !j.HasArch || j.Arch.Name == "" || j.PlanString == "" || j.GPUs() == 0 || j.TotalIterations != 50 || j.PlacementString == "" {
		t.Errorf("job %+v", j)
	}
	if j.Plan.GPUs() != j.GPUs() {
		t.Errorf("plan on %d GPUs, placement %d", j.Plan.GPUs(), j.GPUs())
	}

	nodes, err := b.Nodes(ctx)
	if err != nil || len(nodes) != 2 {
		t.Fatalf("nodes %+v %v", nodes, err)
	}
	owned := 0
	for _, n := range nodes {
		if n.Rack != "r1" || len(n.Owners) != 8 || !n.Reachable {
			t.Errorf("node %+v", n)
		}
		for _, o := range n.Owners {
			if o == id {
				owned++
			}
		}
	}
	if owned != j.GPUs() {
		t.Errorf("%d GPUs owned by %s, placement has %d", owned, id, j.GPUs())
	}
	// the processes on each GPU, with their PIDs and memory (the daemon
	// reads its telemetry at each heartbeat: wait for the first)
	procs := func() string {
		ns, err := b.Nodes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, n := range ns {
			for _, g := range n.Stats {
				for _, p := range g.Processes {
					out = append(out, fmt.Sprintf("%s/%d:%d:%.1f", n.Name, g.Index, p.PID, p.MemGB))
				}
			}
		}
		return strings.Join(out, " ")
	}
	want := "a/3:4242:30.0 a/3:4243:0.5"
	waitfor.T(t, ctx, "GPU processes in the node view", waitfor.Options{Stall: 30 * time.Second, Poll: 20 * time.Millisecond}, func() error {
		if got := procs(); got != want {
			return fmt.Errorf("processes %q, want %q", got, want)
		}
		return nil
	})

	detail, err := b.Job(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	var start *data.Decision
	for i, dc := range detail.Decisions {
		if dc.Kind == "start" {
			start = &detail.Decisions[i]
		}
	}
	if start == nil || start.Plan == "" || start.Placement == "" || len(detail.History) == 0 {
		t.Errorf("detail %+v", detail)
	}
	// its attempts, as history will list them, and its spec
	if a := detail.Attempts; len(a) != 1 || a[0].N != 1 || a[0].Kind != "start" || a[0].GPUs != j.GPUs() || a[0].Plan != j.PlanString ||
		a[0].State != "running" || !a[0].End.IsZero() || a[0].Start.IsZero() {
		t.Errorf("attempts of a running job: %+v", a)
	}
	if spec := strings.Join(detail.Spec, "\n"); !strings.Contains(spec, `"name": "bert-a"`) || len(detail.Spec) < 5 {
		t.Errorf("spec lines:\n%s", spec)
	}

	st2, err := b.Status(ctx)
	if err != nil || st2.GPUs != 16 || st2.Servers != 2 || st2.Policy == "" {
		t.Errorf("status %+v %v", st2, err)
	}
	if q, err := b.Queue(ctx); err != nil || len(q) != 0 {
		t.Errorf("queue %+v %v", q, err)
	}

	if err := b.Drain(ctx, "nowhere"); err == nil {
		t.Error("drained an unknown server")
	}
	if err := b.Cancel(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := b.Cancel(ctx, id); err == nil || !strings.Contains(err.Error(), "cancelled") {
		t.Errorf("second cancel: %v", err)
	}
	if detail, err := b.Job(ctx, id); err != nil || len(detail.Attempts) != 1 || detail.Attempts[0].State != "cancelled" || detail.Attempts[0].End.IsZero() {
		t.Errorf("attempts of the cancelled job: %+v %v", detail.Attempts, err)
	}
	if _, err := b.Job(ctx, "j-999999"); err == nil {
		t.Error("an unknown job was found")
	}
}

// TestQueueRowsAsOfNow: an entry taken 5 s before the daemon's clock now
// shows its timers, wait and ETA as of now, so the screen's countdown
// does not start again from 5-second-old figures on every poll.
func TestQueueRowsAsOfNow(t *testing.T) {
	asOf := time.Date(2026, 1, 5, 9, 0, 0, 0, time.UTC)
	eta := 100.0
	q := []control.QueueEntry{{Job: control.JobRecord{ID: "j-1", State: control.StateQueued}, GPUs: 8, WaitingS: 20, AsOf: asOf, ETAS: &eta,
		Timers: &sched.JobTimers{ServerTimer: 60, RackTimer: 120, Starved: 20, NwSens: 3.46}}}
	r := QueueRows(q, asOf.Add(5*time.Second))[0]
	if r.Waited != 25*time.Second || r.ETA != 95*time.Second || !r.HasETA {
		t.Errorf("waited %v, eta %v (%v); want 25s and 95s", r.Waited, r.ETA, r.HasETA)
	}
	if r.Timers.ServerTimer != 35*time.Second || r.Timers.RackTimer != 95*time.Second || r.Timers.Starved != 25*time.Second {
		t.Errorf("timers %+v; want server 35s, rack 95s, starved 25s", *r.Timers)
	}
	if r.Timers.NwSens != 1 {
		t.Errorf("Nw_sens %v, want it clamped to 1 (a share of ideal)", r.Timers.NwSens)
	}
}

// TestUserTextIsCleaned: names, tenants and reasons reach the TUI without
// terminal control sequences (a reason can quote an agent's error, an
// event a log line).
func TestUserTextIsCleaned(t *testing.T) {
	j := Job(control.JobRecord{ID: "j-1", Name: "a\x1b[2Jb", Tenant: "t\x1b]0;pwned\x07", Reason: "x\x1b[31my\r"})
	if j.Name != "ab" || j.Tenant != "t" || j.Reason != "xy " {
		t.Fatalf("Job kept control sequences: name %q tenant %q reason %q", j.Name, j.Tenant, j.Reason)
	}
	// Issue 24: a model name with a right-to-left override (stored before
	// job specs refused it) is shown with the override visible.
	j = Job(control.JobRecord{ID: "j-3", Name: "m", Spec: []byte(`{"arch":{"name":"gpt\u202e2"}}`)})
	if j.Arch.Name != "gpt<U+202E>2" {
		t.Errorf("Job's model name %q", j.Arch.Name)
	}
	rows := QueueRows([]control.QueueEntry{{Job: control.JobRecord{ID: "j-2", Name: "n\x1b[H", Tenant: "t"}, Reason: "r\x1b[?1049h"}}, time.Now())
	if rows[0].Name != "n" || rows[0].Reason != "r" {
		t.Fatalf("queue row kept control sequences: %+v", rows[0])
	}
}

// TestLogLinesAreCleaned: the log pane shows a log as `replan logs` does,
// without the terminal's control sequences (colours, cursor moves, a
// title change), with tabs expanded and blank lines dropped.
func TestLogLinesAreCleaned(t *testing.T) {
	got := LogLines("\x1b[31miter 1\x1b[0m loss 2.0\r\n\n\x1b]0;pwned\x07iter 2\tloss 1.9\n\x1b[2Jiter 3\n")
	want := []string{"iter 1 loss 2.0", "iter 2    loss 1.9", "iter 3"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("LogLines = %q, want %q", got, want)
	}
	for _, l := range got {
		if strings.ContainsAny(l, "\x1b\x07\r\t") {
			t.Errorf("a control character stayed: %q", l)
		}
	}
	if s := SpecLines([]byte(`{"name":"x\u001b[2Jy","env":{"K":"<redacted>"}}`)); len(s) != 6 || strings.Contains(strings.Join(s, ""), "\x1b") {
		t.Errorf("SpecLines = %q", s)
	}
}
