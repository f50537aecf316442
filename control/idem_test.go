package control

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/replan/replan/internal/waitfor"
	"github.com/replan/replan/sched"
)

// Issue 12: a client retry after a connection error created the job twice.
// A retry with the same Idempotency-Key returns the job the first
// submission created, also when retries race and after a daemon restart
// (the key is stored with the job); the same key with another spec is
// refused.
func TestAPISubmitIdempotencyKey(t *testing.T) {
	forEachStore(t, testAPISubmitIdempotencyKey)
}

func testAPISubmitIdempotencyKey(t *testing.T, k storeKit) {
	ctx := context.Background()
	st, reopen := k.open(t)
	serve := func(st Store) *Client {
		c := &clock{t: time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)}
		p, _ := sched.New("morphling")
		d, err := New(ctx, Config{Store: st, Exec: &recorder{}, Policy: p, Clock: c.now,
			Servers: []ServerInfo{{Name: "a", Rack: "r1", GPUs: 8, CPUs: 64, MemGB: 1000}},
			Tenants: []TenantInfo{{Name: "research", QuotaGPUs: 8}}})
		if err != nil {
			t.Fatal(err)
		}
		sctx, cancel := context.WithCancel(ctx)
		t.Cleanup(cancel)
		sock := filepath.Join(t.TempDir(), "s.sock")
		l, err := ListenUnix(sock)
		if err != nil {
			t.Fatal(err)
		}
		go Serve(sctx, l, (&API{D: d, Version: "test"}).Handler())
		return NewUnixClient(sock)
	}
	cl := serve(st)
	spec := []byte(admitSpec(nil))
	first, err := cl.SubmitWithKey(ctx, "a.yaml", spec, "key-1")
	if err != nil {
		t.Fatal(err)
	}
	again, err := cl.SubmitWithKey(ctx, "a.yaml", spec, "key-1")
	if err != nil || again.ID != first.ID {
		t.Fatalf("retry: %+v %v (first %s)", again, err, first.ID)
	}
	// Racing retries of a new key: one job.
	var wg sync.WaitGroup
	ids := make([]string, 8)
	errs := make([]error, 8)
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := cl.SubmitWithKey(ctx, "a.yaml", spec, "key-2")
			ids[i], errs[i] = r.ID, err
		}()
	}
	wg.Wait()
	for i := range ids {
		if errs[i] != nil || ids[i] != ids[0] || ids[i] == first.ID {
			t.Fatalf("racing retries: %v %v", ids, errs)
		}
	}
	// The same key with another spec is refused, and creates nothing.
	other := []byte(strings.Replace(string(spec), "gpus: 4", "gpus: 2", 1))
	_, err = cl.SubmitWithKey(ctx, "a.yaml", other, "key-1")
	var re *RemoteError
	if !errors.As(err, &re) || re.Status != http.StatusUnprocessableEntity || !strings.Contains(re.APIError.Error, first.ID) {
		t.Fatalf("key reused with another spec: %v", err)
	}
	if _, err := cl.SubmitWithKey(ctx, "a.yaml", spec, "bad key\n"); err == nil {
		t.Error("a key with a newline was accepted")
	}
	// Without a key every submission is a new job; Submit makes a key.
	if r, err := cl.Submit(ctx, "a.yaml", spec); err != nil || r.ID == first.ID || r.ID == ids[0] {
		t.Fatalf("plain submit %+v %v", r, err)
	}
	// The key survives a daemon restart.
	st2 := reopen(t)
	cl2 := serve(st2)
	r, err := cl2.SubmitWithKey(ctx, "a.yaml", spec, "key-1")
	if err != nil || r.ID != first.ID {
		t.Fatalf("after restart: %+v %v", r, err)
	}
	jobs, _ := cl2.Jobs(ctx)
	if len(jobs) != 3 {
		t.Errorf("%d jobs, want 3", len(jobs))
	}
}

// Issue 24: idempotency keys were kept forever. A key is kept for the
// retention of the daemon's clock: a retry within it gets the first job,
// a retry after it creates a new job (the key now names that one), and
// the loop deletes expired keys from the store. After the clock steps
// back, the queue's waiting_s is 0, never negative.
func TestIdempotencyKeysExpireAndWaitNeverNegative(t *testing.T) {
	forEachStore(t, testIdempotencyKeysExpire)
}

func testIdempotencyKeysExpire(t *testing.T, k storeKit) {
	ctx := context.Background()
	st, _ := k.open(t)
	c := &clock{t: time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)}
	p, _ := sched.New("morphling")
	d, err := New(ctx, Config{Store: st, Exec: &recorder{}, Policy: p, Clock: c.now, IdempotencyRetention: 2 * time.Hour,
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
	go Serve(sctx, l, (&API{D: d, Version: "test"}).Handler())
	cl := NewUnixClient(sock)
	// Each takes the cluster's one server: one runs once the loop runs,
	// the others wait.
	spec := []byte(strings.Replace(admitSpec(nil), "gpus: 4", "gpus: 8", 1))
	first, err := cl.SubmitWithKey(ctx, "a.yaml", spec, "k")
	if err != nil {
		t.Fatal(err)
	}
	keys := func() int { return countStored(t, st, "idempotency", "idem/") }
	c.advance(2*time.Hour - time.Second)
	if r, err := cl.SubmitWithKey(ctx, "a.yaml", spec, "k"); err != nil || r.ID != first.ID {
		t.Fatalf("retry within the retention: %s %v, want %s", r.ID, err, first.ID)
	}
	c.advance(2 * time.Second)
	second, err := cl.SubmitWithKey(ctx, "a.yaml", spec, "k")
	if err != nil || second.ID == first.ID {
		t.Fatalf("retry after the retention: %s %v, want a new job", second.ID, err)
	}
	if r, err := cl.SubmitWithKey(ctx, "a.yaml", spec, "k"); err != nil || r.ID != second.ID {
		t.Fatalf("the renewed key: %s %v, want %s", r.ID, err, second.ID)
	}
	// Another key, then past both retentions: the loop's purge deletes them.
	third, err := cl.SubmitWithKey(ctx, "a.yaml", spec, "other")
	if err != nil {
		t.Fatal(err)
	}
	if n := keys(); n != 2 {
		t.Fatalf("%d keys stored, want 2", n)
	}
	c.advance(2*time.Hour + time.Second)
	go d.Run(sctx, 20*time.Millisecond)
	waitfor.T(t, ctx, "the loop deletes the expired keys", waitfor.Options{}, func() error {
		if n := keys(); n != 0 {
			return fmt.Errorf("%d keys stored after the retention", n)
		}
		return nil
	})

	// The clock steps back before every submission (then an operation
	// publishes a new view): nobody has waited a negative time.
	c.advance(-5 * time.Hour)
	if _, err := cl.JobOp(ctx, third.ID, "hold"); err != nil {
		t.Fatal(err)
	}
	q, err := cl.Queue(ctx)
	if err != nil || len(q) == 0 {
		t.Fatalf("queue %v %v", q, err)
	}
	for _, e := range q {
		if e.WaitingS < 0 {
			t.Errorf("%s waiting_s %v after the clock stepped back", e.Job.ID, e.WaitingS)
		}
	}
}
