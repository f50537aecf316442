package control

import (
	"context"
	"errors"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/replan/replan/sched"
)

// Issue 12: a client retry after a connection error created the job twice.
// A retry with the same Idempotency-Key returns the job the first
// submission created, also when retries race and after a daemon restart
// (the key is stored with the job); the same key with another spec is
// refused.
func TestAPISubmitIdempotencyKey(t *testing.T) {
	ctx := context.Background()
	st, dbPath := openTest(t)
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
	st.Close()
	st2, err := OpenSQLite(ctx, dbPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st2.Close() })
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
