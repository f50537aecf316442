package control

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/replan/replan/jobspec"
	"github.com/replan/replan/launch"
	"github.com/replan/replan/perf"
	"github.com/replan/replan/sched"
)

// faultStore is a Store whose Nth write fails (every write when failAll).
type faultStore struct {
	Store
	mu      sync.Mutex
	writes  int
	failAt  int
	failAll bool
	failed  int
}

var errInjected = errors.New("injected: disk I/O error")

func (f *faultStore) write() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.writes++
	if f.failAll || f.writes == f.failAt {
		f.failed++
		return errInjected
	}
	return nil
}

func (f *faultStore) Commit(ctx context.Context, b Batch) ([]int64, error) {
	if err := f.write(); err != nil {
		return nil, err
	}
	return f.Store.Commit(ctx, b)
}
func (f *faultStore) NextJobID(ctx context.Context) (string, error) {
	if err := f.write(); err != nil {
		return "", err
	}
	return f.Store.NextJobID(ctx)
}
func (f *faultStore) CreateJob(ctx context.Context, j JobRecord) error {
	if err := f.write(); err != nil {
		return err
	}
	return f.Store.CreateJob(ctx, j)
}
func (f *faultStore) UpdateJob(ctx context.Context, j JobRecord, reason string, at time.Time) (int64, error) {
	if err := f.write(); err != nil {
		return 0, err
	}
	return f.Store.UpdateJob(ctx, j, reason, at)
}
func (f *faultStore) AddDecision(ctx context.Context, d DecisionRecord) (int64, error) {
	if err := f.write(); err != nil {
		return 0, err
	}
	return f.Store.AddDecision(ctx, d)
}
func (f *faultStore) AddEvent(ctx context.Context, e Event) (int64, error) {
	if err := f.write(); err != nil {
		return 0, err
	}
	return f.Store.AddEvent(ctx, e)
}
func (f *faultStore) PutNode(ctx context.Context, n NodeRecord) error {
	if err := f.write(); err != nil {
		return err
	}
	return f.Store.PutNode(ctx, n)
}
func (f *faultStore) AddTimerWait(ctx context.Context, w TimerWait) error {
	if err := f.write(); err != nil {
		return err
	}
	return f.Store.AddTimerWait(ctx, w)
}

func (f *faultStore) set(failAt int, failAll bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.writes, f.failAt, f.failAll = 0, failAt, failAll
}

// consistent checks that the daemon's memory equals the store (every live
// job in the same state, attempt, version and placement; no job in memory
// that the store has final), that no GPU is held by two running jobs, and
// that the executor runs nothing the store does not say runs.
func consistent(t *testing.T, d *Daemon, st Store, ex *SimExecutor, when string) {
	t.Helper()
	ctx := context.Background()
	recs, err := st.ListJobs(ctx, JobFilter{})
	if err != nil {
		t.Fatalf("%s: list: %v", when, err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	stored := map[string]JobRecord{}
	gpu := map[string]string{}
	for _, r := range recs {
		stored[r.ID] = r
		js := d.jobs[r.ID]
		if r.State.Final() {
			if js != nil {
				t.Fatalf("%s: %s is %s in the store but %s in memory", when, r.ID, r.State, js.rec.State)
			}
			continue
		}
		if js == nil {
			t.Fatalf("%s: %s is %s in the store but not in memory", when, r.ID, r.State)
		}
		m := js.rec
		if m.State != r.State || m.Attempt != r.Attempt || m.Version != r.Version || !bytes.Equal(m.Placement, r.Placement) || m.Failures != r.Failures {
			t.Fatalf("%s: %s memory %s attempt %d v%d failures %d %s, store %s attempt %d v%d failures %d %s", when, r.ID,
				m.State, m.Attempt, m.Version, m.Failures, m.Placement, r.State, r.Attempt, r.Version, r.Failures, r.Placement)
		}
		if r.State == StateRunning {
			var servers []launch.Server
			if err := json.Unmarshal(r.Placement, &servers); err != nil {
				t.Fatalf("%s: %s placement: %v", when, r.ID, err)
			}
			for _, s := range servers {
				for _, g := range s.GPUs {
					k := fmt.Sprintf("%s/%d", s.Name, g)
					if o := gpu[k]; o != "" {
						t.Fatalf("%s: GPU %s held by %s and %s", when, k, o, r.ID)
					}
					gpu[k] = r.ID
					if own := d.owner[d.srvIdx[s.Name]].gpu[g]; own != r.ID {
						t.Fatalf("%s: GPU %s is %s's in the store, %q's in memory", when, k, r.ID, own)
					}
				}
			}
		}
	}
	for id := range d.jobs {
		if _, ok := stored[id]; !ok {
			t.Fatalf("%s: %s in memory, not in the store", when, id)
		}
	}
	for i := range d.owner {
		for g, o := range d.owner[i].gpu {
			if o != "" && gpu[fmt.Sprintf("%s/%d", d.cfg.Servers[i].Name, g)] != o {
				t.Fatalf("%s: memory gives GPU %s/%d to %s, which the store does not run there", when, d.cfg.Servers[i].Name, g, o)
			}
		}
	}
	if ex != nil {
		for _, id := range ex.Running() {
			if stored[id].State != StateRunning {
				t.Fatalf("%s: the executor runs %s, which the store has %s", when, id, stored[id].State)
			}
		}
	}
	nodes, err := st.Nodes(ctx)
	if err != nil {
		t.Fatalf("%s: nodes: %v", when, err)
	}
	for _, n := range nodes {
		m := d.nodes[d.srvIdx[n.Name]]
		if m.drained != n.Drained || m.suspect != n.Suspect {
			t.Fatalf("%s: node %s memory drained=%v suspect=%v, store drained=%v suspect=%v", when, n.Name, m.drained, m.suspect, n.Drained, n.Suspect)
		}
	}
}

// faultScenario drives a daemon through submit, start, reconfigure,
// preempt, finish, cancel, hold, drain and requeue, calling check after
// every step. It returns the store's error count seen by the callers.
func faultScenario(t *testing.T, d *Daemon, c *clock, ex *SimExecutor, check func(string)) {
	ctx := context.Background()
	var ids []string
	submit := func(name string, gpus int, class jobspec.Class, iters int) {
		s := spec(t, name, gpus, class)
		s.Iterations = iters
		if r, err := d.Submit(ctx, s); err == nil {
			ids = append(ids, r.ID)
		}
		check("submit " + name)
	}
	adv := 20 * time.Second
	step := func(what string) {
		c.advance(adv)
		d.Observe(ctx)
		check(what + ": observe")
		d.Round(ctx)
		check(what + ": round")
	}
	for _, n := range []string{"one", "two", "three"} {
		submit(n, 4, jobspec.BestEffort, 1000000)
	}
	d.Round(ctx)
	check("first round")
	for i := 0; i < 3; i++ {
		step("warm")
	}
	submit("four", 8, jobspec.Guaranteed, 1000000)
	submit("five", 4, jobspec.BestEffort, 600)
	if len(ids) > 4 {
		d.Hold(ctx, ids[4])
		check("hold")
		d.Release(ctx, ids[4])
		check("release")
	}
	adv = 5 * time.Minute
	for i := 0; i < 3; i++ {
		step("grow")
	}
	if len(ids) > 1 {
		d.Cancel(ctx, ids[1])
		check("cancel")
	}
	pol := d.cfg.Policy.(*scripted)
	pol.set(moveOne)
	step("reconfigure")
	pol.set(preemptOne)
	step("preempt")
	d.Drain(ctx, "a")
	check("drain")
	step("drained")
	d.Undrain(ctx, "a")
	check("undrain")
	ex.SetDown("b", true)
	for i := 0; i < 3; i++ {
		step("b down")
	}
	ex.SetDown("b", false)
	for k, id := range ids {
		if k != 4 {
			d.Cancel(ctx, id)
			check("cancel " + id)
		}
	}
	adv = 10 * time.Minute
	for i := 0; i < 40; i++ {
		step("finish")
	}
}

// scripted is a policy whose next round can be given by the test.
type scripted struct {
	sched.Policy
	mu   sync.Mutex
	hook func(sched.Snapshot) []sched.Decision
}

func (p *scripted) set(h func(sched.Snapshot) []sched.Decision) {
	p.mu.Lock()
	p.hook = h
	p.mu.Unlock()
}

func (p *scripted) Schedule(s sched.Snapshot) sched.Decisions {
	p.mu.Lock()
	h := p.hook
	p.hook = nil
	p.mu.Unlock()
	if h != nil {
		if ds := h(s); len(ds) > 0 {
			return sched.Decisions{Actions: ds}
		}
	}
	return p.Policy.Schedule(s)
}

// moveOne reconfigures the first running job onto another server with
// room for it (same plan).
func moveOne(s sched.Snapshot) []sched.Decision {
	for _, j := range s.Jobs {
		if len(j.Alloc) != 1 {
			continue
		}
		for k, sv := range s.Servers {
			if k != j.Alloc[0].Server && sv.FreeGPUs >= j.Alloc[0].GPUs && sv.FreeCPUs >= j.Alloc[0].CPUs {
				a := j.Alloc[0]
				a.Server = k
				return []sched.Decision{{Kind: sched.Reconfigure, Job: j.ID, Plan: j.Plan, Alloc: []sched.Alloc{a}, Placement: perf.Placement{a.GPUs}, Why: "test: move"}}
			}
		}
	}
	// A full cluster (the policy grows jobs into every free GPU): restart
	// the first one-server job where it is, which is a reconfiguration too
	// (checkpoint, stop, relaunch).
	for _, j := range s.Jobs {
		if len(j.Alloc) == 1 {
			a := j.Alloc[0]
			return []sched.Decision{{Kind: sched.Reconfigure, Job: j.ID, Plan: j.Plan, Alloc: []sched.Alloc{a}, Placement: perf.Placement{a.GPUs}, Why: "test: restart in place"}}
		}
	}
	return nil
}

// preemptOne preempts the first running job.
func preemptOne(s sched.Snapshot) []sched.Decision {
	for _, j := range s.Jobs {
		if len(j.Alloc) > 0 {
			return []sched.Decision{{Kind: sched.Preempt, Job: j.ID, Why: "test: preempt"}}
		}
	}
	return nil
}

func newFaultDaemon(t *testing.T, k storeKit) (*Daemon, *faultStore, Store, *clock, *SimExecutor) {
	t.Helper()
	st, _ := k.open(t)
	fs := &faultStore{Store: st}
	c := &clock{t: time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)}
	ex := NewSimExecutor(c.now, []string{"a", "b"}, nil, nil, 30*time.Second)
	inner, err := sched.New("morphling")
	if err != nil {
		t.Fatal(err)
	}
	p := &scripted{Policy: inner}
	d, err := New(context.Background(), Config{Store: fs, Exec: ex, Policy: p, Clock: c.now,
		Servers: []ServerInfo{{Name: "a", Address: "10.0.0.1", Rack: "r1", GPUs: 8, CPUs: 64, MemGB: 1000}, {Name: "b", Address: "10.0.0.2", Rack: "r1", GPUs: 8, CPUs: 64, MemGB: 1000}},
		Tenants: []TenantInfo{{Name: "research", QuotaGPUs: 16}}})
	if err != nil {
		t.Fatal(err)
	}
	return d, fs, st, c, ex
}

// TestStoreFaultAtEveryWrite fails the Nth store write of a scenario, for
// every N: after each step, and after a restart on the same store, memory
// equals the store and no GPU is held by two jobs.
func TestStoreFaultAtEveryWrite(t *testing.T) {
	forEachStore(t, testStoreFaultAtEveryWrite)
}

func testStoreFaultAtEveryWrite(t *testing.T, k storeKit) {
	d, fs, st0, c, ex := newFaultDaemon(t, k)
	faultScenario(t, d, c, ex, func(string) {})
	total := fs.writes
	evs, _ := st0.Events(context.Background(), 0, 10000)
	kinds := map[string]int{}
	for _, e := range evs {
		kinds[e.Kind]++
	}
	t.Logf("scenario events: %v", kinds)
	for _, k := range []string{"submit", "start", "reconfigure", "preempt", "finish", "cancel", "drain", "requeue", "held"} {
		if kinds[k] == 0 {
			t.Errorf("the scenario has no %s event: %v", k, kinds)
		}
	}
	if total < 20 {
		t.Fatalf("the scenario made only %d writes", total)
	}
	stride := 1
	if testing.Short() {
		stride = 7
	}
	t.Logf("scenario: %d store writes; failing each (stride %d)", total, stride)
	for n := 1; n <= total; n += stride {
		d, fs, st, c, ex := newFaultDaemon(t, k)
		fs.set(n, false)
		faultScenario(t, d, c, ex, func(when string) { consistent(t, d, fs, ex, fmt.Sprintf("write %d failed, %s", n, when)) })
		if fs.failed != 1 {
			t.Fatalf("write %d: the fault fired %d times", n, fs.failed)
		}
		// A restart on the same store (the executor still runs its jobs).
		p, _ := sched.New("morphling")
		d2, err := New(context.Background(), Config{Store: st, Exec: ex, Policy: p, Clock: c.now, Servers: d.cfg.Servers, Tenants: d.cfg.Tenants})
		if err != nil {
			t.Fatalf("write %d: restart: %v", n, err)
		}
		consistent(t, d2, st, ex, fmt.Sprintf("write %d failed, after a restart", n))
	}
}

// fillDisk makes every further write that needs a new page fail with
// SQLITE_FULL (PRAGMA max_page_count on the store's one connection), and
// fills the free room of the tables a job change writes to.
func fillDisk(t *testing.T, st *SQLite) {
	t.Helper()
	ctx := context.Background()
	var pages int
	if err := st.db.QueryRowContext(ctx, `PRAGMA page_count`).Scan(&pages); err != nil {
		t.Fatal(err)
	}
	if _, err := st.db.ExecContext(ctx, fmt.Sprintf(`PRAGMA max_page_count = %d`, pages)); err != nil {
		t.Fatal(err)
	}
	// Rows of shrinking size, until not even a one-byte row fits.
	for _, size := range []int{300, 100, 30, 10, 1} {
		pad := strings.Repeat("x", size)
		for i := 0; ; i++ {
			if _, err := st.db.ExecContext(ctx, `INSERT INTO events(kind, msg, at) VALUES ('', ?, 0)`, pad); err != nil {
				break
			}
			if i > 100000 {
				t.Fatal("the database never filled up")
			}
		}
		for i := 0; ; i++ {
			if _, err := st.db.ExecContext(ctx, `INSERT INTO job_history(job_id, from_state, to_state, reason, at) VALUES ('', '', '', ?, 0)`, pad); err != nil {
				break
			}
			if i > 100000 {
				t.Fatal("the database never filled up")
			}
		}
	}
}

func freeDisk(t *testing.T, st *SQLite) {
	t.Helper()
	if _, err := st.db.ExecContext(context.Background(), `PRAGMA max_page_count = 1073741823`); err != nil {
		t.Fatal(err)
	}
}

// TestFullDisk: while the database cannot grow, submits get a clean 503;
// a job that finishes during the outage is neither lost nor rerun, and the
// daemon recovers when space returns.
func TestFullDisk(t *testing.T) {
	ctx := context.Background()
	st, _ := openTest(t)
	c := &clock{t: time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)}
	ex := NewSimExecutor(c.now, []string{"a", "b"}, nil, nil, 0)
	d, _ := newDaemonWith(t, st, ex, "static", c)
	s := spec(t, "short", 8, jobspec.BestEffort)
	s.Iterations = 40
	j, err := d.Submit(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Round(ctx); err != nil {
		t.Fatal(err)
	}
	if r, _ := st.GetJob(ctx, j.ID); r.State != StateRunning {
		t.Fatalf("not started: %+v", r)
	}
	fillDisk(t, st)
	h := (&API{D: d, Version: "test"}).Handler()
	body, _ := json.Marshal(SubmitRequest{File: "x.yaml", Spec: strings.Replace(specYAML, "%s", "during-outage", 1)})
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/v1/jobs", bytes.NewReader(body)))
	if w.Code != http.StatusServiceUnavailable || !strings.Contains(w.Body.String(), "full") {
		t.Errorf("submit on a full disk: %d %s (want 503 naming the cause)", w.Code, w.Body.String())
	}
	if _, err := d.Submit(ctx, s); !errors.Is(err, ErrStore) {
		t.Errorf("submit on a full disk: %v (want ErrStore)", err)
	}
	// The job finishes while the disk is full.
	c.advance(24 * time.Hour)
	if err := d.Observe(ctx); err == nil {
		t.Error("observe stored a finish on a full disk?")
	}
	consistent(t, d, st, ex, "finish during the outage")
	if r, _ := st.GetJob(ctx, j.ID); r.State != StateRunning {
		t.Fatalf("test setup: the finish was stored on a full disk: %+v", r)
	}
	d.Round(ctx)
	consistent(t, d, st, ex, "round during the outage")
	if got := ex.Running(); len(got) != 0 {
		t.Fatalf("the finished job runs again: %v", got)
	}
	freeDisk(t, st)
	if err := d.Observe(ctx); err != nil {
		t.Fatalf("observe after space returned: %v", err)
	}
	r, _ := st.GetJob(ctx, j.ID)
	if r.State != StateFinished || r.Iterations != 40 {
		t.Fatalf("after the outage the job is %s at %d iterations (want finished at 40)", r.State, r.Iterations)
	}
	consistent(t, d, st, ex, "after the outage")
	if _, err := d.Submit(ctx, s); err != nil {
		t.Fatalf("submit after space returned: %v", err)
	}
}
