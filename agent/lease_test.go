package agent

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// leased has c send epoch and, while lease > 0, a lease of that many
// seconds with grace 0 on every command.
func leased(c *Client, epoch uint64, lease *atomic.Value) {
	c.SetHeaders(func(h http.Header) {
		h.Set(HeaderEpoch, strconv.FormatUint(epoch, 10))
		if s, _ := lease.Load().(string); s != "" {
			h.Set(HeaderLease, s)
			h.Set(HeaderLeaseGrace, "0")
		}
	})
}

// alive reports whether pid runs (a zombie does not).
func alive(pid int) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// TestLeaseExpiryStopsProcesses: an agent that hears no leased command
// for a lease period stops what it runs (issue 24); a renewal that comes
// after that brings nothing back, and a process started after it runs
// on while the lease is renewed.
func TestLeaseExpiryStopsProcesses(t *testing.T) {
	_, c, _, _, _ := startTestAgent(t)
	ctx := context.Background()
	var lease atomic.Value
	lease.Store("0.6")
	leased(c, 1, &lease)
	p, err := c.Start(ctx, ProcessSpec{ID: "j-a0-r0", Argv: []string{"sh", "-c", "trap '' TERM; while :; do sleep 0.05; done"}})
	if err != nil {
		t.Fatal(err)
	}
	// Renewed every 100 ms for a while: it runs on.
	until := time.Now().Add(1500 * time.Millisecond)
	for time.Now().Before(until) {
		if _, err := c.Status(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if info, err := c.Process(ctx, p.Spec.ID); err != nil || info.State != StateRunning {
		t.Fatalf("renewed lease: process %+v, %v; want running", info, err)
	}
	// Silence (commands without a lease renew nothing): stopped (it
	// ignores SIGTERM, so SIGKILL at once, grace 0).
	lease.Store("")
	waitFor(t, "the lease stops the process", func() bool {
		info, err := c.Process(ctx, p.Spec.ID)
		return err == nil && info.State == StateExited && info.StopRequested
	})
	if alive(p.PID) {
		t.Fatalf("pid %d still runs", p.PID)
	}
	// A new process under a renewed lease runs.
	lease.Store("0.6")
	q, err := c.Start(ctx, ProcessSpec{ID: "j-a1-r0", Argv: []string{"sleep", "30"}})
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if _, err := c.Status(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if info, _ := c.Process(ctx, q.Spec.ID); info.State != StateRunning {
		t.Fatalf("new process under a renewed lease: %+v", info)
	}
}

// TestNoLeaseNoFence: commands without a lease (a local tool's, or a
// daemon with leases off) never stop anything.
func TestNoLeaseNoFence(t *testing.T) {
	_, c, _, _, _ := startTestAgent(t)
	ctx := context.Background()
	var lease atomic.Value
	leased(c, 1, &lease)
	p, err := c.Start(ctx, ProcessSpec{ID: "free", Argv: []string{"sleep", "30"}})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * LeaseCheckEvery) // what must not happen has had its chance
	if info, _ := c.Process(ctx, p.Spec.ID); info.State != StateRunning {
		t.Fatalf("no lease given: %+v", info)
	}
}

// TestLeaseFencesWithoutAgent: with its agent gone (killed), a process is
// still stopped once the lease runs out: its wrapper shell watches the
// lease file.
func TestLeaseFencesWithoutAgent(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "agent.sock")
	a, cancel, served := serveAgent(t, dir, sock)
	_ = a
	c := NewSocketClient(sock)
	ctx := context.Background()
	var lease atomic.Value
	lease.Store("1")
	leased(c, 1, &lease)
	p, err := c.Start(ctx, ProcessSpec{ID: "orphan", Argv: []string{"sleep", "60"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(-p.PID, syscall.SIGKILL) })
	// The agent goes away; its processes stay.
	cancel()
	<-served
	if !alive(p.PID) {
		t.Fatal("the process ended with its agent")
	}
	began := time.Now()
	waitFor(t, "the wrapper fences the process", func() bool { return !alive(p.PID) })
	// Deadline (whole seconds, at most 1 s after the renewal) plus the
	// watch's second and the date's granularity.
	if took := time.Since(began); took > 5*time.Second {
		t.Errorf("fenced after %s", took)
	}
}

// serveAgent serves an agent with state under dir on sock until the
// returned cancel; served then yields Serve's error.
func serveAgent(t *testing.T, dir, sock string) (*Agent, context.CancelFunc, chan error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	a, err := New(ctx, testConfig(t, dir, sock))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := ListenUnix(ctx, sock)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- a.Serve(ctx, ln) }()
	return a, cancel, served
}

// TestEpochRefusesLower: the agent obeys the highest epoch it has seen,
// across its restarts, and refuses a lower one with a clear error.
func TestEpochRefusesLower(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "agent.sock")
	serve := func() (*Agent, context.CancelFunc, chan error) { return serveAgent(t, dir, sock) }
	client := func(epoch uint64) *Client {
		c := NewSocketClient(sock)
		c.SetHeaders(func(h http.Header) { h.Set(HeaderEpoch, strconv.FormatUint(epoch, 10)) })
		return c
	}
	ctx := context.Background()
	a, cancel, served := serve()
	if _, err := client(5).Status(ctx); err != nil {
		t.Fatal(err)
	}
	if a.Epoch() != 5 {
		t.Fatalf("epoch %d, want 5", a.Epoch())
	}
	check := func(when string) {
		_, err := client(4).Start(ctx, ProcessSpec{ID: "stale", Argv: []string{"true"}})
		if !errors.Is(err, ErrStaleEpoch) || !strings.Contains(err.Error(), "epoch 4") || !strings.Contains(err.Error(), "epoch 5") {
			t.Fatalf("%s: epoch 4 after 5: %v; want a stale-epoch error naming both", when, err)
		}
		if _, err := a.sup.Get("stale"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("%s: the refused command started a process: %v", when, err)
		}
	}
	check("same agent")
	// Equal and higher epochs are obeyed; no epoch (a local tool) too.
	if _, err := client(5).Status(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := NewSocketClient(sock).Status(ctx); err != nil {
		t.Fatal(err)
	}
	cancel()
	<-served
	a, cancel, served = serve()
	defer func() { cancel(); <-served }()
	check("restarted agent")
	if _, err := client(6).Status(ctx); err != nil || a.Epoch() != 6 {
		t.Fatalf("epoch 6: %v, agent at %d", err, a.Epoch())
	}
	// A malformed epoch names its header.
	c := NewSocketClient(sock)
	c.SetHeaders(func(h http.Header) { h.Set(HeaderEpoch, "-1") })
	if _, err := c.Status(ctx); err == nil || !strings.Contains(err.Error(), HeaderEpoch) {
		t.Fatalf("epoch -1: %v", err)
	}
}

// TestLeaseFileMalformed: a broken lease file is an error naming it.
func TestLeaseFileMalformed(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, leaseFile), []byte("soon 0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := openLease(dir); err == nil || !strings.Contains(err.Error(), filepath.Join(dir, leaseFile)+": line 1") {
		t.Fatalf("malformed lease file: %v", err)
	}
}

// A fenced process gets no SIGTERM when the lease's grace is 0: the
// wrapper's watchdog sent TERM and KILL back to back, so a trainer's TERM
// trap began a checkpoint the KILL cut short (the outage test under load:
// a relaunch resumed at iteration 87, saved by the orphan, after the last
// checkpoint its trail recorded, 75).
func TestLeaseFenceWithoutGraceSendsNoTERM(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "agent.sock")
	_, cancel, served := serveAgent(t, dir, sock)
	c := NewSocketClient(sock)
	ctx := context.Background()
	var lease atomic.Value
	lease.Store("1")
	leased(c, 1, &lease)
	mark := filepath.Join(dir, "got-term")
	p, err := c.Start(ctx, ProcessSpec{ID: "orphan", Argv: []string{"sh", "-c", `trap 'echo term > "$0"; exit 0' TERM; while :; do :; done`, mark}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(-p.PID, syscall.SIGKILL) })
	cancel() // the agent goes away; the wrapper's watchdog fences
	<-served
	waitFor(t, "the wrapper fences the process", func() bool { return !alive(p.PID) })
	if b, err := os.ReadFile(mark); err == nil {
		t.Fatalf("the fenced process got SIGTERM (wrote %q): with grace 0 it must only be killed", b)
	}
}
