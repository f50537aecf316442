package control

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/replan/replan/sched"
)

const storeHelperEnv = "REPLAN_STORE_HELPER"

// TestStoreHelper is not a test: TestStoreIsExclusiveWithoutSharedMemory
// runs the test binary with it selected, as another process, to read the
// database named in the environment with SQLite's default VFS.
func TestStoreHelper(t *testing.T) {
	path := os.Getenv(storeHelperEnv)
	if path == "" {
		t.Skip("helper process of TestStoreIsExclusiveWithoutSharedMemory")
	}
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(200)")
	if err == nil {
		var n int
		if err = db.QueryRow(`SELECT COUNT(*) FROM jobs`).Scan(&n); err == nil {
			fmt.Printf("\n@@@jobs %d\n", n)
			os.Exit(0)
		}
	}
	fmt.Printf("\n@@@error %v\n", err)
	os.Exit(0)
}

// Issue 24: with a store read in flight, a stalled disk (fsfreeze) froze
// the whole daemon: SQLite's WAL index was a mmapped -shm file, and a
// thread blocked in a page fault on it cannot be stopped by Go's garbage
// collector, so every goroutine waited. The store now keeps the WAL index
// in the heap (SQLite's unix-excl VFS: the process holds the database
// exclusively): no -shm file exists while reads and writes go on,
// readers still do not wait for a writer's open transaction, and another
// process cannot open the database until the store is closed.
func TestStoreIsExclusiveWithoutSharedMemory(t *testing.T) {
	ctx := context.Background()
	st, path := openTest(t)
	if _, err := st.Commit(ctx, Batch{Jobs: []JobWrite{{Rec: JobRecord{ID: "j-000001", Name: "a", Tenant: "t", Class: "best-effort", Spec: []byte("{}"), State: StateQueued, SubmittedAt: t0}, Create: true}}}); err != nil {
		t.Fatal(err)
	}
	// A writer's transaction is open while the read pool reads.
	tx, err := st.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, `UPDATE jobs SET reason = 'x'`); err != nil {
		t.Fatal(err)
	}
	if jobs, err := st.ListJobs(ctx, JobFilter{}); err != nil || len(jobs) != 1 {
		t.Fatalf("read during a write: %d jobs, %v", len(jobs), err)
	}
	tx.Rollback()
	var mode string
	if err := st.db.QueryRowContext(ctx, `PRAGMA journal_mode`).Scan(&mode); err != nil || mode != "wal" {
		t.Errorf("journal mode %q %v, want wal", mode, err)
	}
	if _, err := os.Stat(path + "-shm"); err == nil {
		t.Errorf("%s-shm exists: the WAL index is a mmapped file", path)
	}
	other := func() string {
		cmd := exec.Command(os.Args[0], "-test.run=^TestStoreHelper$")
		cmd.Env = append(os.Environ(), storeHelperEnv+"="+path)
		out, _ := cmd.CombinedOutput()
		s := string(out)
		i := strings.Index(s, "\n@@@")
		if i < 0 {
			t.Fatalf("helper: %s", out)
		}
		return strings.TrimSpace(strings.SplitN(s[i+4:], "\n", 2)[0])
	}
	if got := other(); !strings.Contains(got, "locked") {
		t.Errorf("another process reading the open store: %q, want database is locked", got)
	}
	st.Close()
	if got := other(); got != "jobs 1" {
		t.Errorf("another process reading the closed store: %q", got)
	}
}

// stallStore is a Store whose reads and writes block while stalled (a
// stalled disk), until released.
type stallStore struct {
	Store
	mu      sync.Mutex
	gate    chan struct{} // closed: not stalled
	blocked chan string   // a call that blocks says so
}

func newStallStore(s Store) *stallStore {
	g := make(chan struct{})
	close(g)
	return &stallStore{Store: s, gate: g, blocked: make(chan string, 16)}
}

func (s *stallStore) stall() {
	s.mu.Lock()
	s.gate = make(chan struct{})
	s.mu.Unlock()
}

func (s *stallStore) release() {
	s.mu.Lock()
	select {
	case <-s.gate:
	default:
		close(s.gate)
	}
	s.mu.Unlock()
}

func (s *stallStore) wait(what string) {
	s.mu.Lock()
	g := s.gate
	s.mu.Unlock()
	select {
	case <-g:
		return
	default:
	}
	s.blocked <- what
	<-g
}

func (s *stallStore) Commit(ctx context.Context, b Batch) ([]int64, error) {
	s.wait("commit")
	return s.Store.Commit(ctx, b)
}

func (s *stallStore) NextJobID(ctx context.Context) (string, error) {
	s.wait("next job id")
	return s.Store.NextJobID(ctx)
}

func (s *stallStore) ListJobs(ctx context.Context, f JobFilter) ([]JobRecord, error) {
	s.wait("list jobs")
	return s.Store.ListJobs(ctx, f)
}

func (s *stallStore) Events(ctx context.Context, after int64, limit int) ([]Event, error) {
	s.wait("events")
	return s.Store.Events(ctx, after, limit)
}

// Issue 24: whoami and /metrics must answer while the store is stalled,
// with a read (history) and a write (a cancel, which holds the daemon's
// lock while its transaction is stored) blocked in it.
func TestWhoamiAndMetricsAnswerWhileTheStoreIsStalled(t *testing.T) {
	ctx := context.Background()
	base, _ := openTest(t)
	st := newStallStore(base)
	p, _ := sched.New("morphling")
	d, err := New(ctx, Config{Store: st, Exec: &recorder{}, Policy: p,
		Servers: []ServerInfo{{Name: "a", Rack: "r1", GPUs: 8, CPUs: 64, MemGB: 1000}},
		Tenants: []TenantInfo{{Name: "research", QuotaGPUs: 8}}})
	if err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sock := filepath.Join(t.TempDir(), "s.sock")
	l, err := ListenUnix(sock)
	if err != nil {
		t.Fatal(err)
	}
	api := &API{D: d, Version: "test"}
	go Serve(sctx, l, api.Handler())
	cl := NewUnixClient(sock)
	job, err := cl.Submit(ctx, "a.yaml", []byte(admitSpec(nil)))
	if err != nil {
		t.Fatal(err)
	}
	d.Queue() // a published view

	st.stall()
	t.Cleanup(st.release)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); cl.History(ctx) }()
	go func() { defer wg.Done(); cl.JobOp(ctx, job.ID, "cancel") }()
	got := map[string]bool{}
	for len(got) < 2 {
		got[<-st.blocked] = true
	}
	t.Logf("blocked in the store: %v", got)

	// Both answer with the store stalled; the deadline only ends a hang.
	rctx, done := context.WithTimeout(ctx, 60*time.Second)
	defer done()
	w, err := cl.WhoAmI(rctx)
	if err != nil || w.User == "" {
		t.Errorf("whoami with the store stalled: %+v %v", w, err)
	}
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	req, _ := http.NewRequestWithContext(rctx, "GET", "http://replan/metrics", nil)
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("/metrics with the store stalled: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), `replan_jobs{state="queued"} 1`) {
		t.Errorf("/metrics with the store stalled: %d\n%s", resp.StatusCode, body)
	}
	st.release()
	wg.Wait()
}
