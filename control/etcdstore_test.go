package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/replan/replan/internal/etcdtest"
	"github.com/replan/replan/perf"
)

// TestStoreRecordsOfTheDaemon: what the optional store interfaces keep
// (owners, drains, GPU health, profile samples, epochs, launch history)
// and a batch's all-or-nothing, on every backend.
func TestStoreRecordsOfTheDaemon(t *testing.T) {
	forEachStore(t, testStoreRecordsOfTheDaemon)
}

func testStoreRecordsOfTheDaemon(t *testing.T, k storeKit) {
	ctx := withCaller(context.Background(), Identity{User: "alice"})
	s, reopen := k.open(t)
	j := JobRecord{ID: "j-000001", Name: "a", Tenant: "research", Class: "guaranteed", Spec: json.RawMessage(`{"name":"a","note":"<b>&"}`), State: StateQueued, SubmittedAt: t0}
	b := Batch{
		Jobs:           []JobWrite{{Rec: j, Create: true}},
		Events:         []Event{{Kind: "submit", JobID: j.ID, Msg: "submitted", At: t0}},
		Drains:         []NodeDrain{{Name: "a800-01", Reason: "fans", By: "bob", Mode: "now", At: t0}, {Name: "a800-02", Reason: "psu", By: "bob", Mode: "after-jobs", At: t0}},
		GPUHealth:      []GPUHealthRecord{{Server: "a800-01", GPU: 3, Cordoned: true, Cause: "xid-79", Why: "fell off the bus", At: t0, Seen: t0}, {Server: "a800-01", GPU: 1, Cordoned: true, Cause: "ecc-dbe", Why: "dbe", At: t0}},
		ProfileSamples: []ProfileSample{{Type: "gpt2/8/deepspeed", JobID: j.ID, Config: "dp8", Plan: perf.Plan{DP: 8, TP: 1, PP: 1, MicroBatch: 4, GA: 1}, Servers: []string{"a800-01"}, IterS: 0.5, Fits: true, At: t0}},
		Models:         []ModelWrite{{Type: "gpt2/8/deepspeed", Data: json.RawMessage(`{"v":1}`), At: t0}},
		SlowServers:    []SlowServerRecord{{Server: "a800-02", Why: "GPU 5: SM clock 1.1 of 1.98 GHz, thermal", At: t0}, {Server: "a800-01", Why: "slow", At: t0}},
	}
	vers, err := s.Commit(ctx, b)
	if err != nil || !slices.Equal(vers, []int64{1}) {
		t.Fatalf("commit: %v %v", vers, err)
	}
	got, _ := s.GetJob(ctx, j.ID)
	if string(got.Spec) != string(j.Spec) {
		t.Errorf("spec stored as %s, want %s", got.Spec, j.Spec)
	}
	// A batch with a stale job write stores none of it.
	evs0, _ := s.Events(ctx, 0, 100)
	stale := got
	stale.Version = 7
	stale.State = StateRunning
	_, err = s.Commit(ctx, Batch{Jobs: []JobWrite{{Rec: stale, Reason: "start", At: t0}}, Events: []Event{{Kind: "start", JobID: j.ID, At: t0}}, Drains: []NodeDrain{{Name: "a800-01"}}})
	if !errors.Is(err, ErrConflict) {
		t.Fatalf("stale batch: %v", err)
	}
	if evs, _ := s.Events(ctx, 0, 100); len(evs) != len(evs0) {
		t.Errorf("a failed batch stored events: %d, was %d", len(evs), len(evs0))
	}
	// Updates: a drain cleared, a GPU uncordoned, a decision to start.
	got.State = StateRunning
	up := Batch{
		Jobs:        []JobWrite{{Rec: got, Reason: "start", At: t0.Add(time.Minute)}},
		Drains:      []NodeDrain{{Name: "a800-01"}},
		GPUHealth:   []GPUHealthRecord{{Server: "a800-01", GPU: 3, Cordoned: false, Cause: "xid-79", Why: "uncordoned", At: t0.Add(time.Minute), Seen: t0}},
		SlowServers: []SlowServerRecord{{Server: "a800-01", Cleared: true}},
		Decisions:   []DecisionRecord{{JobID: j.ID, Kind: "start", Detail: json.RawMessage(`{"gpus":8}`), Reason: "free", At: t0.Add(time.Minute)}, {JobID: j.ID, Kind: "wait", Reason: "x", At: t0}},
	}
	if vers, err := s.Commit(ctx, up); err != nil || vers[0] != 2 {
		t.Fatalf("update batch: %v %v", vers, err)
	}
	e1, err := s.(EpochStore).NextEpoch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s = reopen(t)
	if e2, err := s.(EpochStore).NextEpoch(ctx); err != nil || e2 != e1+1 {
		t.Errorf("epochs %d then %d %v", e1, e2, err)
	}
	owners, err := s.(ownersStore).JobOwners(ctx)
	if err != nil || owners[j.ID] != "alice" {
		t.Errorf("owners %v %v", owners, err)
	}
	if u, err := s.(jobOwnerStore).JobOwner(ctx, j.ID); err != nil || u != "alice" {
		t.Errorf("owner %q %v", u, err)
	}
	if u, err := s.(jobOwnerStore).JobOwner(ctx, "j-none"); err != nil || u != "" {
		t.Errorf("owner of no job %q %v", u, err)
	}
	drains, err := s.(drainStore).NodeDrains(ctx)
	if err != nil || len(drains) != 1 || drains[0].Name != "a800-02" || drains[0].Mode != "after-jobs" || drains[0].By != "bob" || !drains[0].At.Equal(t0) {
		t.Errorf("drains %+v %v", drains, err)
	}
	gh, err := s.GPUHealth(ctx)
	if err != nil || len(gh) != 2 || gh[0].GPU != 1 || gh[1].GPU != 3 || gh[1].Cordoned || gh[1].Why != "uncordoned" || !gh[0].Seen.IsZero() {
		t.Errorf("GPU health %+v %v", gh, err)
	}
	slow, err := s.SlowServers(ctx)
	if err != nil || len(slow) != 1 || slow[0].Server != "a800-02" || slow[0].Why != "GPU 5: SM clock 1.1 of 1.98 GHz, thermal" || !slow[0].At.Equal(t0) {
		t.Errorf("slow servers %+v %v", slow, err)
	}
	ps, err := profileSamplesOf(ctx, s, "gpt2/8/deepspeed")
	if err != nil || len(ps) != 1 || ps[0].Plan.DP != 8 || ps[0].IterS != 0.5 || !ps[0].At.Equal(t0) {
		t.Errorf("profile samples %+v %v", ps, err)
	}
	if ps, _ := profileSamplesOf(ctx, s, "other"); len(ps) != 0 {
		t.Errorf("profile samples of another type: %+v", ps)
	}
	ms, _ := s.Models(ctx)
	if string(ms["gpt2/8/deepspeed"]) != `{"v":1}` {
		t.Errorf("models %v", ms)
	}
	hist, err := s.(launchStore).AllTransitions(ctx)
	if err != nil || len(hist[j.ID]) != 2 || hist[j.ID][1].To != StateRunning || hist[j.ID][1].Reason != "start" {
		t.Errorf("transitions %+v %v", hist, err)
	}
	ld, err := s.(launchStore).LaunchDecisions(ctx)
	if err != nil || len(ld[j.ID]) != 1 || ld[j.ID][0].Kind != "start" || string(ld[j.ID][0].Detail) != `{"gpus":8}` {
		t.Errorf("launch decisions %+v %v", ld, err)
	}
	// A decision without detail reads back without (not JSON null).
	if ds, err := s.Decisions(ctx, j.ID, 10); err != nil || len(ds) != 2 || ds[0].Kind != "wait" || ds[0].Detail != nil || ds[1].ID >= ds[0].ID {
		t.Errorf("decisions %+v %v", ds, err)
	}
	evs, _ := s.Events(ctx, 0, 100)
	if len(evs) != 1 || evs[0].User != "alice" {
		t.Errorf("events %+v", evs)
	}
	// Creating a job whose ID exists stores nothing else either.
	if _, err := s.Commit(ctx, Batch{Jobs: []JobWrite{{Rec: j, Create: true}}, Events: []Event{{Kind: "submit", At: t0}}}); !errors.Is(err, ErrExists) {
		t.Errorf("create again: %v", err)
	}
	if evs2, _ := s.Events(ctx, 0, 100); len(evs2) != 1 {
		t.Errorf("%d events after a failed create", len(evs2))
	}
	// An update of a job that was never created.
	ghost := got
	ghost.ID = "j-ghost"
	if _, err := s.UpdateJob(ctx, ghost, "x", t0); !errors.Is(err, ErrNotFound) {
		t.Errorf("update of a missing job: %v", err)
	}
}

func profileSamplesOf(ctx context.Context, s Store, typ string) ([]ProfileSample, error) {
	ps, ok := s.(interface {
		ProfileSamples(context.Context, string) ([]ProfileSample, error)
	})
	if !ok {
		return nil, fmt.Errorf("a %T keeps no profile samples", s)
	}
	return ps.ProfileSamples(ctx, typ)
}

// Two daemons' stores on one etcd (a deposed leader still writing): a
// write from a stale read loses with ErrConflict, and IDs drawn by
// concurrent commits are unique and never reused.
func TestEtcdStoreConcurrentWriters(t *testing.T) {
	ctx := context.Background()
	eps := etcdtest.Start(t)
	a := openEtcdTest(t, eps, "/c/")
	b := openEtcdTest(t, eps, "/c/")
	j := JobRecord{ID: "j-000001", Name: "a", Tenant: "t", Class: "guaranteed", Spec: json.RawMessage(`{}`), State: StateQueued, SubmittedAt: t0}
	if err := a.CreateJob(ctx, j); err != nil {
		t.Fatal(err)
	}
	ra, _ := a.GetJob(ctx, j.ID)
	rb, _ := b.GetJob(ctx, j.ID)
	ra.State, rb.State = StateRunning, StateCancelled
	if _, err := a.UpdateJob(ctx, ra, "start", t0); err != nil {
		t.Fatal(err)
	}
	if _, err := b.UpdateJob(ctx, rb, "cancel", t0); !errors.Is(err, ErrConflict) {
		t.Fatalf("the stale writer: %v", err)
	}
	// Events, decisions and job IDs from 2 stores × 4 goroutines.
	const per = 15
	var wg sync.WaitGroup
	var mu sync.Mutex
	var evIDs, decIDs []int64
	var jobIDs []string
	var errs []error
	for g := 0; g < 8; g++ {
		s := []*EtcdStore{a, b}[g%2]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < per; i++ {
				e, err1 := s.AddEvent(ctx, Event{Kind: "x", Msg: fmt.Sprint(g, i), At: t0})
				d, err2 := s.AddDecision(ctx, DecisionRecord{JobID: j.ID, Kind: "wait", At: t0})
				id, err3 := s.NextJobID(ctx)
				mu.Lock()
				evIDs, decIDs, jobIDs = append(evIDs, e), append(decIDs, d), append(jobIDs, id)
				errs = append(errs, err1, err2, err3)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	slices.Sort(evIDs)
	slices.Sort(decIDs)
	slices.Sort(jobIDs)
	for i := range evIDs {
		if evIDs[i] != int64(i+1) || decIDs[i] != int64(i+1) || jobIDs[i] != fmt.Sprintf("j-%06d", i+1) {
			t.Fatalf("IDs %d: event %d decision %d job %s, want %d", i, evIDs[i], decIDs[i], jobIDs[i], i+1)
		}
	}
	evs, err := b.Events(ctx, 0, 1000)
	if err != nil || len(evs) != 8*per {
		t.Fatalf("%d events %v", len(evs), err)
	}
	for i, e := range evs {
		if e.ID != int64(i+1) {
			t.Fatalf("event %d has ID %d", i, e.ID)
		}
	}
	// After compaction the next ID still grows.
	if n, err := a.CompactEvents(ctx, t0.Add(time.Second)); err != nil || n != 8*per {
		t.Fatalf("compacted %d %v", n, err)
	}
	if id, err := b.AddEvent(ctx, Event{Kind: "x", At: t0}); err != nil || id != 8*per+1 {
		t.Errorf("after compaction: event %d %v", id, err)
	}
}

// Old events are deleted after the retention, newer ones kept; the
// store's loop does it by itself.
func TestEtcdStoreCompactsOldEvents(t *testing.T) {
	ctx := context.Background()
	eps := etcdtest.Start(t)
	s := openEtcdTest(t, eps, "/e/")
	now := time.Now().UTC()
	for i, at := range []time.Time{now.Add(-3 * time.Hour), now.Add(-2 * time.Hour), now.Add(-30 * time.Minute), now} {
		if _, err := s.AddEvent(ctx, Event{Kind: "k", Msg: fmt.Sprint(i), At: at}); err != nil {
			t.Fatal(err)
		}
	}
	n, err := s.CompactEvents(ctx, now.Add(-time.Hour))
	if err != nil || n != 2 {
		t.Fatalf("compacted %d %v, want 2", n, err)
	}
	evs, _ := s.Events(ctx, 0, 100)
	if len(evs) != 2 || evs[0].ID != 3 || evs[1].Msg != "3" {
		t.Fatalf("kept %+v", evs)
	}
	if n, _ := s.CompactEvents(ctx, now.Add(-time.Hour)); n != 0 {
		t.Errorf("compacted %d again", n)
	}
	// Every event is old, and one is stored while the compaction runs
	// (between its read and its delete): that one is kept.
	compactHook = func() {
		if _, err := s.AddEvent(ctx, Event{Kind: "k", Msg: "meanwhile", At: now}); err != nil {
			t.Error(err)
		}
	}
	n, err = s.CompactEvents(ctx, now.Add(time.Hour))
	compactHook = nil
	if evs, _ := s.Events(ctx, 0, 100); err != nil || n != 2 || len(evs) != 1 || evs[0].Msg != "meanwhile" {
		t.Fatalf("compacted %d (%v), kept %+v: want the event stored meanwhile kept", n, err, evs)
	}
	// A store opened with a retention of 10 min compacts at start.
	other := openEtcdTest(t, eps, "/e2/")
	for i, at := range []time.Time{now.Add(-time.Hour), now} {
		if _, err := other.AddEvent(ctx, Event{Kind: "k", Msg: fmt.Sprint(i), At: at}); err != nil {
			t.Fatal(err)
		}
	}
	s2, err := OpenEtcdStore(ctx, EtcdConfig{Endpoints: eps, Prefix: "/e2/", EventRetention: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	deadline := time.Now().Add(time.Minute)
	for {
		evs, _ := s2.Events(ctx, 0, 100)
		if len(evs) == 1 && evs[0].Msg == "1" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the store's loop kept %+v", evs)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A record over MaxEtcdValue is refused by name, and nothing of its batch
// is stored.
func TestEtcdStoreRefusesAHugeRecord(t *testing.T) {
	ctx := context.Background()
	s := openEtcdTest(t, etcdtest.Start(t), "/h/")
	big := `{"x":"` + strings.Repeat("a", MaxEtcdValue) + `"}`
	j := JobRecord{ID: "j-000001", Name: "a", Tenant: "t", Class: "guaranteed", Spec: json.RawMessage(big), State: StateQueued, SubmittedAt: t0}
	_, err := s.Commit(ctx, Batch{Jobs: []JobWrite{{Rec: j, Create: true}}, Events: []Event{{Kind: "submit", At: t0}}})
	if err == nil || !strings.Contains(err.Error(), "j-000001") || !strings.Contains(err.Error(), "limit") {
		t.Fatalf("huge job: %v", err)
	}
	if _, err := s.GetJob(ctx, j.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("the huge job was stored: %v", err)
	}
	if evs, _ := s.Events(ctx, 0, 10); len(evs) != 0 {
		t.Errorf("events of the refused batch: %+v", evs)
	}
}

// Three etcd members: with one down the store works; with two down a
// write fails (nothing half-written) and works again once a member
// returns.
func TestEtcdStoreQuorum(t *testing.T) {
	ctx := context.Background()
	ms := etcdtest.StartCluster(t, 3)
	s := openEtcdTest(t, etcdtest.Endpoints(ms), "/q/")
	j := JobRecord{ID: "j-000001", Name: "a", Tenant: "t", Class: "guaranteed", Spec: json.RawMessage(`{}`), State: StateQueued, SubmittedAt: t0}
	if err := s.CreateJob(ctx, j); err != nil {
		t.Fatal(err)
	}
	ms[0].Stop()
	if _, err := s.AddEvent(ctx, Event{Kind: "one-down", At: t0}); err != nil {
		t.Fatalf("one member down: %v", err)
	}
	ms[1].Stop()
	wctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	_, err := s.AddEvent(wctx, Event{Kind: "two-down", At: t0})
	cancel()
	if err == nil {
		t.Fatal("a write without quorum succeeded")
	}
	ms[1].Restart(t, true)
	deadline := time.Now().Add(time.Minute)
	for {
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := s.AddEvent(wctx, Event{Kind: "back", At: t0})
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no write after quorum returned: %v", err)
		}
	}
	evs, _ := s.Events(ctx, 0, 100)
	var kinds []string
	for _, e := range evs {
		kinds = append(kinds, e.Kind)
	}
	// The write that timed out without quorum may have been committed
	// once it returned (etcd's answer was unknown), but whole.
	if !reflect.DeepEqual(kinds, []string{"one-down", "back"}) && !reflect.DeepEqual(kinds, []string{"one-down", "two-down", "back"}) {
		t.Errorf("events %v", kinds)
	}
}
