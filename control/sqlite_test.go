package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func openTest(t *testing.T) (*SQLite, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "replan.db")
	s, err := OpenSQLite(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, path
}

var t0 = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)

func TestStoreJobLifecycle(t *testing.T) {
	forEachStore(t, testStoreJobLifecycle)
}

func testStoreJobLifecycle(t *testing.T, k storeKit) {
	ctx := context.Background()
	s, reopen := k.open(t)
	id, err := s.NextJobID(ctx)
	if err != nil || id != "j-000001" {
		t.Fatalf("id %q %v", id, err)
	}
	j := JobRecord{ID: id, Name: "gpt2", Tenant: "research", Class: "guaranteed", Spec: json.RawMessage(`{"name":"gpt2"}`), State: StateQueued, SubmittedAt: t0}
	if err := s.CreateJob(ctx, j); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateJob(ctx, j); !errors.Is(err, ErrExists) {
		t.Fatalf("duplicate create: %v", err)
	}
	got, err := s.GetJob(ctx, id)
	if err != nil || got.State != StateQueued || got.Version != 1 || !got.SubmittedAt.Equal(t0) || string(got.Spec) != `{"name":"gpt2"}` {
		t.Fatalf("got %+v %v", got, err)
	}
	got.State, got.Plan, got.StartedAt = StateRunning, json.RawMessage(`{"dp":8}`), t0.Add(time.Minute)
	v, err := s.UpdateJob(ctx, got, "start: 8 GPUs on a800-01", t0.Add(time.Minute))
	if err != nil || v != 2 {
		t.Fatalf("update: %d %v", v, err)
	}
	// A writer holding the old version loses.
	stale := got
	stale.State = StatePreempted
	if _, err := s.UpdateJob(ctx, stale, "x", t0); !errors.Is(err, ErrConflict) {
		t.Fatalf("stale update: %v", err)
	}
	got.Version = v
	got.State, got.FinishedAt = StateFinished, t0.Add(time.Hour)
	if _, err := s.UpdateJob(ctx, got, "done", t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	final, _ := s.GetJob(ctx, id)
	final.State = StateRunning
	if _, err := s.UpdateJob(ctx, final, "revive", t0); !errors.Is(err, ErrConflict) {
		t.Fatalf("leaving a final state: %v", err)
	}
	h, _ := s.History(ctx, id)
	if len(h) != 3 || h[0].To != StateQueued || h[1].To != StateRunning || h[1].Reason != "start: 8 GPUs on a800-01" || h[2].To != StateFinished {
		t.Fatalf("history %+v", h)
	}
	if _, err := s.GetJob(ctx, "j-nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("missing job: %v", err)
	}
	// Everything survives a reopen; IDs are never reused.
	s2 := reopen(t)
	if j, err := s2.GetJob(ctx, id); err != nil || j.State != StateFinished {
		t.Fatalf("after reopen: %+v %v", j, err)
	}
	if next, _ := s2.NextJobID(ctx); next != "j-000002" {
		t.Errorf("next id %s", next)
	}
}

func TestStoreListsEventsDecisionsNodesModelsTimers(t *testing.T) {
	forEachStore(t, testStoreLists)
}

func testStoreLists(t *testing.T, k storeKit) {
	ctx := context.Background()
	s, _ := k.open(t)
	for i, st := range []JobState{StateQueued, StateRunning, StateQueued, StateFinished} {
		id := fmt.Sprintf("j-%06d", i+1)
		if err := s.CreateJob(ctx, JobRecord{ID: id, Name: id, Tenant: []string{"a", "b"}[i%2], Class: "best-effort", Spec: json.RawMessage(`{}`), State: st, SubmittedAt: t0.Add(time.Duration(i) * time.Second)}); err != nil {
			t.Fatal(err)
		}
	}
	q, _ := s.ListJobs(ctx, JobFilter{States: []JobState{StateQueued}})
	if len(q) != 2 || q[0].ID != "j-000001" || q[1].ID != "j-000003" {
		t.Errorf("queued %+v", q)
	}
	b, _ := s.ListJobs(ctx, JobFilter{Tenant: "b"})
	if len(b) != 2 {
		t.Errorf("tenant b: %d", len(b))
	}
	for i := 0; i < 5; i++ {
		if _, err := s.AddEvent(ctx, Event{Kind: "start", JobID: "j-000001", Msg: strconv.Itoa(i), At: t0}); err != nil {
			t.Fatal(err)
		}
	}
	ev, _ := s.Events(ctx, 2, 2)
	if len(ev) != 2 || ev[0].ID != 3 || ev[1].Msg != "3" {
		t.Errorf("events %+v", ev)
	}
	s.AddDecision(ctx, DecisionRecord{JobID: "j-000001", Kind: "wait", Reason: "needs 8 GPUs on one server; largest free block is 4", At: t0})
	s.AddDecision(ctx, DecisionRecord{JobID: "j-000001", Kind: "start", Detail: json.RawMessage(`{"gpus":8}`), Reason: "free", At: t0})
	ds, _ := s.Decisions(ctx, "j-000001", 10)
	if len(ds) != 2 || ds[0].Kind != "start" || string(ds[0].Detail) != `{"gpus":8}` {
		t.Errorf("decisions %+v", ds)
	}
	s.PutNode(ctx, NodeRecord{Name: "a800-01", Reachable: true, UpdatedAt: t0})
	s.PutNode(ctx, NodeRecord{Name: "a800-01", Reachable: false, Missed: 2, UpdatedAt: t0.Add(time.Second)})
	ns, _ := s.Nodes(ctx)
	if len(ns) != 1 || ns[0].Reachable || ns[0].Missed != 2 {
		t.Errorf("nodes %+v", ns)
	}
	s.SaveModel(ctx, "gpt2", json.RawMessage(`{"v":1}`), t0)
	s.SaveModel(ctx, "gpt2", json.RawMessage(`{"v":2}`), t0)
	ms, _ := s.Models(ctx)
	if string(ms["gpt2"]) != `{"v":2}` {
		t.Errorf("models %v", ms)
	}
	s.AddTimerWait(ctx, TimerWait{Tier: "server", GPUs: 8, Wait: 90 * time.Second, At: t0})
	s.AddTimerWait(ctx, TimerWait{Tier: "rack", GPUs: 8, Wait: time.Hour, At: t0.Add(time.Hour)})
	ws, _ := s.TimerWaits(ctx, t0.Add(time.Minute))
	if len(ws) != 1 || ws[0].Tier != "rack" || ws[0].Wait != time.Hour {
		t.Errorf("timer waits %+v", ws)
	}
}

func TestStoreRefusesANewerSchema(t *testing.T) {
	ctx := context.Background()
	s, path := openTest(t)
	if _, err := s.db.ExecContext(ctx, `INSERT INTO schema_migrations(version, applied_at) VALUES (?, 0)`, SchemaVersion()+1); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := OpenSQLite(ctx, path); err == nil || !strings.Contains(err.Error(), "newer") {
		t.Fatalf("want a newer-schema error, got %v", err)
	}
}

// TestStoreSurvivesKill9 has a child process write jobs as fast as it can
// and print each acknowledged ID; the child is SIGKILLed mid-stream. Every
// acknowledged job must be in the store afterwards.
func TestStoreSurvivesKill9(t *testing.T) {
	if os.Getenv("REPLAN_STORE_WRITER") != "" {
		writer()
		return
	}
	path := filepath.Join(t.TempDir(), "crash.db")
	cmd := exec.Command(os.Args[0], "-test.run", "^TestStoreSurvivesKill9$")
	cmd.Env = append(os.Environ(), "REPLAN_STORE_WRITER="+path)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var acked []string
	buf := make([]byte, 0, 1<<16)
	tmp := make([]byte, 4096)
	for len(acked) < 40 {
		n, err := out.Read(tmp)
		if err != nil {
			break
		}
		buf = append(buf, tmp[:n]...)
		lines := strings.Split(string(buf), "\n")
		acked = acked[:0]
		for _, l := range lines[:len(lines)-1] {
			if strings.HasPrefix(l, "ack ") {
				acked = append(acked, strings.TrimPrefix(l, "ack "))
			}
		}
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	if len(acked) < 40 {
		t.Fatalf("writer acknowledged only %d jobs", len(acked))
	}
	s, err := OpenSQLite(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, id := range acked {
		if _, err := s.GetJob(context.Background(), id); err != nil {
			t.Fatalf("acknowledged job %s lost after kill -9: %v", id, err)
		}
	}
}

func writer() {
	ctx := context.Background()
	s, err := OpenSQLite(ctx, os.Getenv("REPLAN_STORE_WRITER"))
	if err != nil {
		fmt.Println("open:", err)
		os.Exit(1)
	}
	for {
		id, err := s.NextJobID(ctx)
		if err != nil {
			os.Exit(1)
		}
		if err := s.CreateJob(ctx, JobRecord{ID: id, Name: id, Tenant: "t", Class: "best-effort", Spec: json.RawMessage(`{}`), State: StateQueued, SubmittedAt: time.Now()}); err != nil {
			os.Exit(1)
		}
		fmt.Println("ack " + id)
	}
}
