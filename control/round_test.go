package control

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/replan/replan/jobspec"
	"github.com/replan/replan/sched"
)

// gate is a policy that, while armed, stops in Schedule until released
// (a round whose policy takes minutes), and can run a hook there.
type gate struct {
	sched.Policy
	armed   atomic.Bool
	entered chan struct{}
	release chan struct{}
	hook    func(sched.Snapshot, sched.Decisions)
	mu      sync.Mutex
	seen    []sched.Snapshot
}

func newGate(t *testing.T, inner string) *gate {
	p, err := sched.New(inner)
	if err != nil {
		t.Fatal(err)
	}
	return &gate{Policy: p, entered: make(chan struct{}, 1), release: make(chan struct{})}
}

func (g *gate) Schedule(s sched.Snapshot) sched.Decisions {
	g.mu.Lock()
	g.seen = append(g.seen, s)
	g.mu.Unlock()
	if g.armed.Load() {
		g.entered <- struct{}{}
		<-g.release
	}
	dec := g.Policy.Schedule(s)
	if g.hook != nil {
		g.hook(s, dec)
	}
	return dec
}

func gateDaemon(t *testing.T, g *gate, ex Executor, c *clock) *Daemon {
	t.Helper()
	st, _ := openTest(t)
	d, err := New(context.Background(), Config{Store: st, Exec: ex, Policy: g, Clock: c.now,
		Servers: []ServerInfo{{Name: "a", Address: "10.0.0.1", Rack: "r1", GPUs: 8, CPUs: 64, MemGB: 1000}, {Name: "b", Address: "10.0.0.2", Rack: "r1", GPUs: 8, CPUs: 64, MemGB: 1000}},
		Tenants: []TenantInfo{{Name: "research", QuotaGPUs: 16}}})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// within runs f and fails the test when it has not returned after a
// generous deadline (it waits for a round that never ends).
func within(t *testing.T, what string, f func() error) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("%s: %v", what, err)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("%s did not return within 20 s (it waits for a round whose policy is planning, or the round is unbounded)", what)
	}
}

// TestOperationsDoNotWaitForARound: while a round's policy is planning,
// submit, cancel, hold, release, drain, undrain and every read complete.
func TestOperationsDoNotWaitForARound(t *testing.T) {
	ctx := context.Background()
	c := &clock{t: time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)}
	ex := NewSimExecutor(c.now, []string{"a", "b"}, nil, nil, 0)
	g := newGate(t, "static")
	d := gateDaemon(t, g, ex, c)
	run, _ := d.Submit(ctx, spec(t, "runs", 8, jobspec.BestEffort))
	if _, err := d.Round(ctx); err != nil {
		t.Fatal(err)
	}
	waiting, _ := d.Submit(ctx, spec(t, "waits", 8, jobspec.BestEffort))
	server := ""
	for _, n := range d.Nodes() {
		if len(n.Jobs) > 0 {
			server = n.Name
		}
	}
	if server == "" {
		t.Fatal("test setup: nothing runs")
	}
	g.armed.Store(true)
	roundDone := make(chan struct{})
	go func() { d.Round(ctx); close(roundDone) }()
	<-g.entered
	g.armed.Store(false)
	var late JobRecord
	within(t, "submit", func() (err error) { late, err = d.Submit(ctx, spec(t, "late", 8, jobspec.BestEffort)); return })
	within(t, "hold", func() error { _, err := d.Hold(ctx, late.ID); return err })
	within(t, "release", func() error { _, err := d.Release(ctx, late.ID); return err })
	within(t, "cancel a waiting job", func() error { _, err := d.Cancel(ctx, waiting.ID); return err })
	within(t, "drain", func() error { _, err := d.Drain(ctx, server); return err })
	within(t, "undrain", func() error { return d.Undrain(ctx, server) })
	within(t, "cancel the job moved off the drained server", func() error { _, err := d.Cancel(ctx, run.ID); return err })
	within(t, "reads", func() error {
		_ = d.Queue()
		_ = d.Nodes()
		_ = d.LastRound()
		_ = d.Running()
		h := (&API{D: d, Version: "test"}).Handler()
		for _, path := range []string{"/v1/queue", "/v1/nodes", "/v1/jobs", "/v1/status", "/metrics"} {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, path, nil))
			if w.Code != http.StatusOK {
				return fmt.Errorf("GET %s: %d %s", path, w.Code, w.Body.String())
			}
		}
		return nil
	})
	close(g.release)
	<-roundDone
	consistent(t, d, d.cfg.Store, ex, "after the round")
}

// TestStaleStartIsDropped: a job cancelled between the round's snapshot
// and the apply of its start is not started; the decision is counted as
// dropped and no GPU is given twice.
func TestStaleStartIsDropped(t *testing.T) {
	ctx := context.Background()
	c := &clock{t: time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)}
	ex := &recorder{}
	g := newGate(t, "static")
	d := gateDaemon(t, g, ex, c)
	j, _ := d.Submit(ctx, spec(t, "doomed", 8, jobspec.BestEffort))
	other, _ := d.Submit(ctx, spec(t, "other", 8, jobspec.BestEffort))
	g.hook = func(s sched.Snapshot, dec sched.Decisions) {
		starts := 0
		for _, a := range dec.Actions {
			if a.Job == j.ID && a.Kind == sched.Start {
				starts++
			}
		}
		if starts != 1 {
			t.Errorf("test setup: the policy does not start %s: %v", j.ID, dec.Actions)
		}
		within(t, "cancel during the round", func() error { _, err := d.Cancel(ctx, j.ID); return err })
		// The freed GPUs go to a job submitted meanwhile, in the next round.
	}
	st, err := d.Round(ctx)
	if err != nil {
		t.Fatal(err)
	}
	g.hook = nil
	if st.Dropped != 1 || st.Applied != 1 {
		t.Errorf("round: applied %d, dropped %d (want 1 and 1)", st.Applied, st.Dropped)
	}
	for _, l := range ex.starts {
		if l.JobID == j.ID {
			t.Fatalf("the cancelled job %s was started", j.ID)
		}
	}
	if r, _ := d.cfg.Store.GetJob(ctx, j.ID); r.State != StateCancelled {
		t.Fatalf("%s is %s", j.ID, r.State)
	}
	third, _ := d.Submit(ctx, spec(t, "third", 8, jobspec.BestEffort))
	d.Round(ctx)
	started := map[string]bool{}
	for _, l := range ex.starts {
		started[l.JobID] = true
	}
	if !started[other.ID] || !started[third.ID] {
		t.Errorf("starts %v: want %s and %s", started, other.ID, third.ID)
	}
	consistent(t, d, d.cfg.Store, nil, "after the rounds")
	w := httptest.NewRecorder()
	(&API{D: d, Version: "test"}).Handler().ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if !strings.Contains(w.Body.String(), "replan_round_decisions_dropped_total 1") {
		t.Errorf("metrics do not count the dropped decision:\n%s", w.Body.String())
	}
}

// TestHugeRequestDoesNotBlowUpTheRound: a stored job asking for 65,536
// GPUs on a 16-GPU cluster gives the policy a request (and so a curve and
// a plan enumeration) of at most the cluster's GPUs, and the daemon
// recovers it and completes its rounds.
func TestHugeRequestDoesNotBlowUpTheRound(t *testing.T) {
	ctx := context.Background()
	c := &clock{t: time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)}
	st, _ := openTest(t)
	s := spec(t, "huge", 8, jobspec.BestEffort)
	s.Request.GPUs = 65536
	s.Request.CPUs = 65536 * 8
	s.Request.HasPlan = false
	raw, _ := json.Marshal(s)
	if err := st.CreateJob(ctx, JobRecord{ID: "j-huge", Name: s.Name, Tenant: s.Tenant, Class: string(s.Class), Spec: raw, State: StateQueued, SubmittedAt: c.now()}); err != nil {
		t.Fatal(err)
	}
	g := newGate(t, "morphling")
	d, err := New(ctx, Config{Store: st, Exec: &recorder{}, Policy: g, Clock: c.now,
		Servers: []ServerInfo{{Name: "a", Address: "10.0.0.1", Rack: "r1", GPUs: 8, CPUs: 64, MemGB: 1000}, {Name: "b", Address: "10.0.0.2", Rack: "r1", GPUs: 8, CPUs: 64, MemGB: 1000}},
		Tenants: []TenantInfo{{Name: "research", QuotaGPUs: 16}}})
	if err != nil {
		t.Fatal(err)
	}
	d.Submit(ctx, spec(t, "small", 8, jobspec.BestEffort))
	within(t, "a round with a 65536-GPU request", func() error { _, err := d.Round(ctx); return err })
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.seen) == 0 {
		t.Fatal("the policy was not called")
	}
	for _, sj := range g.seen[0].Jobs {
		if sj.ReqGPUs > 16 || sj.ReqPlan.GPUs() > 16 || sj.ReqCPUs > 128 {
			t.Errorf("%s: the policy was given a request of %d GPUs, plan %s (the cluster has 16)", sj.ID, sj.ReqGPUs, sj.ReqPlan)
		}
	}
	if r, err := st.GetJob(ctx, "j-huge"); err != nil || r.State.Final() {
		t.Errorf("the huge job: %+v %v", r, err)
	}
}

// blackHole is a simulated cluster with one server that answers its
// heartbeats but fails every launch.
type blackHole struct {
	*SimExecutor
	bad string
}

func (b *blackHole) failing(l Launch) error {
	for _, s := range l.Servers {
		if s.Name == b.bad {
			return fmt.Errorf("start %s rank 0 on %s: exited 1 after 2s:\nTraceback (most recent call last):\nImportError: libcuda.so.1: cannot open shared object file", l.JobID, s.Name)
		}
	}
	return nil
}

func (b *blackHole) Start(ctx context.Context, l Launch) error {
	if err := b.failing(l); err != nil {
		return err
	}
	return b.SimExecutor.Start(ctx, l)
}

func (b *blackHole) Reconfigure(ctx context.Context, from, to Launch, last int) error {
	if err := b.failing(to); err != nil {
		b.SimExecutor.Stop(ctx, from.JobID, true)
		return err
	}
	return b.SimExecutor.Reconfigure(ctx, from, to, last)
}

func (b *blackHole) Check(ctx context.Context, server string) error {
	if server == b.bad {
		return fmt.Errorf("health check on %s: launch failed", server)
	}
	return nil
}

// TestBlackHoleServerBecomesSuspect: one server of four fails every
// launch; ten jobs all finish, none failed, none charged for the
// server's failures, and the server is suspect (stored, in GET /v1/nodes,
// with an event naming the failures' last lines).
func TestBlackHoleServerBecomesSuspect(t *testing.T) {
	ctx := context.Background()
	c := &clock{t: time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)}
	names := []string{"a", "b", "c", "d"}
	ex := &blackHole{SimExecutor: NewSimExecutor(c.now, names, nil, nil, 0), bad: "b"}
	st, _ := openTest(t)
	p, _ := sched.New("static")
	var servers []ServerInfo
	for i, n := range names {
		servers = append(servers, ServerInfo{Name: n, Address: fmt.Sprintf("10.0.0.%d", i+1), Rack: "r1", GPUs: 8, CPUs: 64, MemGB: 1000})
	}
	d, err := New(ctx, Config{Store: st, Exec: ex, Policy: p, Clock: c.now, Servers: servers, Tenants: []TenantInfo{{Name: "research", QuotaGPUs: 32}}})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i := 0; i < 10; i++ {
		s := spec(t, fmt.Sprintf("job%d", i), 8, jobspec.BestEffort)
		s.Iterations = 200
		r, err := d.Submit(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r.ID)
	}
	finished := 0
	var last []JobRecord
	for step := 0; step < 2000 && finished < len(ids); step++ {
		d.Round(ctx)
		c.advance(30 * time.Second)
		d.Observe(ctx)
		last, _ = st.ListJobs(ctx, JobFilter{})
		finished = 0
		for _, r := range last {
			if r.State == StateFailed {
				t.Fatalf("%s failed: %s", r.ID, r.Reason)
			}
			if r.State == StateFinished {
				finished++
			}
		}
	}
	if finished != len(ids) {
		t.Fatalf("%d of %d jobs finished; last seen: %+v", finished, len(ids), last)
	}
	for _, r := range last {
		if r.Failures != 0 {
			t.Errorf("%s was charged %d failures for the black hole's launches", r.ID, r.Failures)
		}
	}
	nodes, _ := st.Nodes(ctx)
	stored := false
	for _, n := range nodes {
		if n.Name == "b" && n.Suspect {
			stored = true
		}
		if n.Name != "b" && n.Suspect {
			t.Errorf("healthy server %s is suspect: %s", n.Name, n.SuspectWhy)
		}
	}
	if !stored {
		t.Errorf("server b is not stored as suspect: %+v", nodes)
	}
	w := httptest.NewRecorder()
	(&API{D: d, Version: "test"}).Handler().ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/v1/nodes", nil))
	var views []NodeView
	json.Unmarshal(w.Body.Bytes(), &views)
	for _, v := range views {
		if (v.Name == "b") != (v.State == "suspect") {
			t.Errorf("GET /v1/nodes: %s is %q", v.Name, v.State)
		}
	}
	evs, _ := st.Events(ctx, 0, 100000)
	named := false
	for _, e := range evs {
		if e.Kind == "suspect" && e.Node == "b" && strings.Contains(e.Msg, "libcuda.so.1") {
			named = true
		}
	}
	if !named {
		t.Error("no suspect event naming the failures' last lines")
	}
	// The server is repaired: its next health check passes and clears it.
	ex.bad = ""
	c.advance(2 * time.Minute)
	if err := d.Observe(ctx); err != nil {
		t.Fatal(err)
	}
	for _, n := range d.Nodes() {
		if n.Name == "b" && n.State != "up" {
			t.Errorf("after a passing health check b is %q (%s)", n.State, n.SuspectWhy)
		}
	}
	// undrain clears it too.
	if _, err := d.Drain(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	if err := d.Undrain(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	for _, n := range d.Nodes() {
		if n.Name == "b" && (n.Suspect || n.State != "up") {
			t.Errorf("after undrain b is %q", n.State)
		}
	}
	if nodes, _ := st.Nodes(ctx); len(nodes) == 0 {
		t.Error("no node records stored")
	} else {
		for _, n := range nodes {
			if n.Suspect {
				t.Errorf("%s still stored suspect", n.Name)
			}
		}
	}
}

// ctxExec is a simulated cluster whose calls fail when their context is
// done (an SSH call abandoned with its client).
type ctxExec struct{ *SimExecutor }

func (e ctxExec) Stop(ctx context.Context, id string, ckpt bool) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("stop %s: %w", id, err)
	}
	return e.SimExecutor.Stop(ctx, id, ckpt)
}

// TestCancelCompletesWhenTheClientGoesAway: a cancel whose client has
// gone is done completely or not at all: never "cancelled" in memory
// while the store (and the cluster) still run the job.
func TestCancelCompletesWhenTheClientGoesAway(t *testing.T) {
	ctx := context.Background()
	c := &clock{t: time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)}
	sim := NewSimExecutor(c.now, []string{"a", "b"}, nil, nil, 0)
	st, _ := openTest(t)
	d, _ := newDaemonWith(t, st, ctxExec{sim}, "static", c)
	j, _ := d.Submit(ctx, spec(t, "victim", 8, jobspec.BestEffort))
	d.Round(ctx)
	if got := sim.Running(); len(got) != 1 {
		t.Fatalf("test setup: running %v", got)
	}
	gone, cancel := context.WithCancel(ctx)
	cancel()
	_, err := d.Cancel(gone, j.ID)
	t.Logf("cancel with a gone client: %v", err)
	consistent(t, d, st, sim, "cancel with a gone client")
	r, _ := st.GetJob(ctx, j.ID)
	if r.State == StateCancelled && len(sim.Running()) != 0 {
		t.Fatalf("stored cancelled but still running on the cluster: %v", sim.Running())
	}
	// The GPUs are free for the next job only once the job stopped.
	next, _ := d.Submit(ctx, spec(t, "next", 8, jobspec.BestEffort))
	d.Round(ctx)
	consistent(t, d, st, sim, "after the next round")
	_ = next
}

// slowMove is a simulated cluster whose reconfigurations wait until the
// test lets them finish (a checkpoint and restart take minutes).
type slowMove struct {
	*SimExecutor
	entered chan struct{}
	release chan struct{}
}

func (e *slowMove) Reconfigure(ctx context.Context, from, to Launch, last int) error {
	e.entered <- struct{}{}
	<-e.release
	return e.SimExecutor.Reconfigure(ctx, from, to, last)
}

// TestMovingJobKeepsItsOldDevicesUntilMoved: while the executor moves a
// job (off the daemon's lock, reads and submits go on), the devices it is
// leaving stay held by it; they are free once the move is done.
func TestMovingJobKeepsItsOldDevicesUntilMoved(t *testing.T) {
	ctx := context.Background()
	c := &clock{t: time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)}
	ex := &slowMove{SimExecutor: NewSimExecutor(c.now, []string{"a", "b"}, nil, nil, 0), entered: make(chan struct{}, 1), release: make(chan struct{})}
	inner, _ := sched.New("static")
	pol := &scripted{Policy: inner}
	st, _ := openTest(t)
	d, err := New(ctx, Config{Store: st, Exec: ex, Policy: pol, Clock: c.now,
		Servers: []ServerInfo{{Name: "a", Address: "10.0.0.1", Rack: "r1", GPUs: 8, CPUs: 64, MemGB: 1000}, {Name: "b", Address: "10.0.0.2", Rack: "r1", GPUs: 8, CPUs: 64, MemGB: 1000}},
		Tenants: []TenantInfo{{Name: "research", QuotaGPUs: 16}}})
	if err != nil {
		t.Fatal(err)
	}
	mover, _ := d.Submit(ctx, spec(t, "mover", 8, jobspec.BestEffort))
	d.Round(ctx)
	from := ""
	for _, n := range d.Nodes() {
		if len(n.Jobs) == 1 {
			from = n.Name
		}
	}
	pol.set(moveOne)
	done := make(chan struct{})
	go func() { d.Round(ctx); close(done) }()
	<-ex.entered
	within(t, "a submit during the move", func() error { _, err := d.Submit(ctx, spec(t, "other", 8, jobspec.BestEffort)); return err })
	within(t, "reads during the move", func() error {
		held := 0
		for _, n := range d.Nodes() {
			for _, o := range n.GPUOwners {
				if o == mover.ID {
					held++
				}
			}
		}
		if held != 16 {
			return fmt.Errorf("mid-move %s holds %d GPUs (want its 8 old and 8 new)", mover.ID, held)
		}
		return nil
	})
	close(ex.release)
	<-done
	consistent(t, d, st, ex.SimExecutor, "after the move")
	for _, n := range d.Nodes() {
		if n.Name == from && len(n.Jobs) != 0 {
			t.Errorf("after the move %s still holds %v", from, n.Jobs)
		}
	}
}

// TestConcurrentOperationsStayConsistent runs the loop (observe and rounds
// back to back) while clients submit, cancel, hold, release, drain and
// undrain at once; afterwards memory equals the store and no GPU is held
// twice.
func TestConcurrentOperationsStayConsistent(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := &clock{t: time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)}
	names := []string{"a", "b", "c", "d"}
	ex := NewSimExecutor(c.now, names, nil, nil, 10*time.Second)
	st, _ := openTest(t)
	p, _ := sched.New("morphling")
	var servers []ServerInfo
	for i, n := range names {
		servers = append(servers, ServerInfo{Name: n, Address: fmt.Sprintf("10.0.0.%d", i+1), Rack: "r1", GPUs: 8, CPUs: 64, MemGB: 1000})
	}
	d, err := New(ctx, Config{Store: st, Exec: ex, Policy: p, Clock: c.now, Servers: servers, Tenants: []TenantInfo{{Name: "research", QuotaGPUs: 32}}})
	if err != nil {
		t.Fatal(err)
	}
	loop := make(chan struct{})
	go func() {
		defer close(loop)
		for ctx.Err() == nil {
			c.advance(5 * time.Second)
			d.Observe(ctx)
			d.Round(ctx)
		}
	}()
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < 15; i++ {
				s := spec(t, fmt.Sprintf("w%d-%d", w, i), []int{1, 2, 4, 8}[i%4], jobspec.BestEffort)
				s.Iterations = 400
				r, err := d.Submit(ctx, s)
				if err != nil {
					t.Error(err)
					return
				}
				switch i % 5 {
				case 1:
					d.Cancel(ctx, r.ID)
				case 2:
					d.Hold(ctx, r.ID)
					d.Release(ctx, r.ID)
				case 3:
					srv := names[(w+i)%len(names)]
					d.Drain(ctx, srv)
					d.Undrain(ctx, srv)
				}
				_ = d.Queue()
				_ = d.Nodes()
			}
		}(w)
	}
	wg.Wait()
	cancel()
	<-loop
	consistent(t, d, st, ex, "after concurrent operations")
}

// silentOnce fails its first launch as a server that stopped answering
// does (SSHExecutor's verify past the agents' lease).
type silentOnce struct {
	*SimExecutor
	failed atomic.Bool
}

func (s *silentOnce) Start(ctx context.Context, l Launch) error {
	if !s.failed.Swap(true) {
		return fmt.Errorf("start %s: %w: rank 0's server %s has not answered for 6s", l.JobID, ErrServerUnreachable, l.Servers[0].Name)
	}
	return s.SimExecutor.Start(ctx, l)
}

// TestUnreachableServerLaunchIsNotCharged: a launch that failed because
// its server stopped answering is the server's fault: the job goes back
// to the queue uncharged, is not held back by the launch backoff (the next
// round starts it, with no time passing), and no launch failure is held
// against its servers.
func TestUnreachableServerLaunchIsNotCharged(t *testing.T) {
	ctx := context.Background()
	c := &clock{t: time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)}
	names := []string{"a", "b"}
	ex := &silentOnce{SimExecutor: NewSimExecutor(c.now, names, nil, nil, 0)}
	st, _ := openTest(t)
	p, _ := sched.New("static")
	var servers []ServerInfo
	for i, n := range names {
		servers = append(servers, ServerInfo{Name: n, Address: fmt.Sprintf("10.0.0.%d", i+1), Rack: "r1", GPUs: 8, CPUs: 64, MemGB: 1000})
	}
	d, err := New(ctx, Config{Store: st, Exec: ex, Policy: p, Clock: c.now, Servers: servers, Tenants: []TenantInfo{{Name: "research", QuotaGPUs: 16}}})
	if err != nil {
		t.Fatal(err)
	}
	r, err := d.Submit(ctx, spec(t, "job", 8, jobspec.BestEffort))
	if err != nil {
		t.Fatal(err)
	}
	d.Round(ctx) // the launch fails
	rec, _ := st.GetJob(ctx, r.ID)
	if rec.State != StatePreempted || rec.Failures != 0 {
		t.Fatalf("after the failed launch: %s, %d failures (%s)", rec.State, rec.Failures, rec.Reason)
	}
	d.Round(ctx) // no time passes: no backoff holds it
	rec, _ = st.GetJob(ctx, r.ID)
	if rec.State != StateRunning {
		t.Fatalf("the next round left it %s: %s", rec.State, rec.Reason)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for name, fs := range d.launchFails {
		if len(fs) > 0 {
			t.Errorf("launch failures held against %s: %+v", name, fs)
		}
	}
}

// failsStart is a sim executor whose starts fail (a launch error that is
// the job's, not a server's).
type failsStart struct{ *SimExecutor }

func (f *failsStart) Start(ctx context.Context, l Launch) error {
	return fmt.Errorf("start %s: torchrun exited at once", l.JobID)
}

// A job held back by the launch backoff is out of the rounds until then:
// the queue says so, and until when, not the last round's reason or the
// failure's. Before, it showed the failed launch's reason with no word of
// the wait.
func TestQueueSaysWhyABackedOffJobWaits(t *testing.T) {
	ctx := context.Background()
	c := &clock{t: time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)}
	ex := &failsStart{NewSimExecutor(c.now, []string{"a", "b"}, nil, nil, 0)}
	st, _ := openTest(t)
	d, _ := newDaemonWith(t, st, ex, "static", c)
	r, err := d.Submit(ctx, spec(t, "job", 8, jobspec.BestEffort))
	if err != nil {
		t.Fatal(err)
	}
	d.Round(ctx) // the launch fails: back to the queue, backed off
	d.mu.Lock()
	q := d.queueLocked([]string{r.ID})
	until := d.jobs[r.ID].backoff
	d.mu.Unlock()
	if len(q) != 1 {
		t.Fatalf("queue %+v", q)
	}
	want := "its last launch failed: it waits before the next try (not before " + until.UTC().Format(time.TimeOnly) + ", in "
	if !until.After(c.now()) || !strings.HasPrefix(q[0].Reason, want) {
		t.Fatalf("backed off until %s; reason %q, want it to begin %q", until, q[0].Reason, want)
	}
	c.t = until.Add(time.Second) // past the backoff: the rounds' reasons again
	d.mu.Lock()
	q = d.queueLocked([]string{r.ID})
	d.mu.Unlock()
	if strings.Contains(q[0].Reason, "waits before the next try") {
		t.Fatalf("past the backoff, reason %q", q[0].Reason)
	}
}
