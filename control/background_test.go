package control

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/replan/replan/internal/waitfor"
	"github.com/replan/replan/jobspec"
	"github.com/replan/replan/launch"
)

// holdingExec is the simulated executor, except that the executor calls
// for one job (its start, reconfiguration or stop) wait until released:
// a checkpoint wait of minutes, as a large model's takes.
type holdingExec struct {
	*SimExecutor
	job     string
	once    sync.Once
	entered chan struct{} // closed when the first held call began
	release chan struct{}
}

func (h *holdingExec) hold(ctx context.Context, id string) error {
	if id != h.job {
		return nil
	}
	h.once.Do(func() { close(h.entered) })
	select {
	case <-h.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (h *holdingExec) Start(ctx context.Context, l Launch) error {
	if err := h.hold(ctx, l.JobID); err != nil {
		return err
	}
	return h.SimExecutor.Start(ctx, l)
}

func (h *holdingExec) Stop(ctx context.Context, id string, checkpoint bool) (int, error) {
	if err := h.hold(ctx, id); err != nil {
		return 0, err
	}
	return h.SimExecutor.Stop(ctx, id, checkpoint)
}

func (h *holdingExec) Reconfigure(ctx context.Context, from, to Launch, last int) error {
	if err := h.hold(ctx, to.JobID); err != nil {
		return err
	}
	return h.SimExecutor.Reconfigure(ctx, from, to, last)
}

// TestLoopGoesOnWhileAJobsLaunchWaits: with Config.Background (what
// `replan daemon` runs), the daemon's loop goes on while the executor
// works on one job: a start held for as long as the test likes does not
// keep the loop from noticing that another job's server stopped answering
// and putting that job back in the queue. Inline (the loop as it was), the
// loop sat in the round's start and the other job stayed "running" on a
// dead server for as long as the start took (this test failed on its
// first wait). Released, the held start completes: the job runs, and its
// devices were held all along (the requeued job was not placed on them).
func TestLoopGoesOnWhileAJobsLaunchWaits(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, sim, ex, d := heldCluster(t)
	defer d.WaitBackground()
	first, down := startedOnOneServer(t, d, st, "first")
	held, err := d.Submit(ctx, spec(t, "held", 8, jobspec.BestEffort))
	if err != nil {
		t.Fatal(err)
	}
	ex.job = held.ID
	loop := make(chan error, 1)
	go func() { loop <- d.Run(ctx, 10*time.Millisecond) }()
	select {
	case <-ex.entered:
	case err := <-loop:
		t.Fatalf("loop ended: %v", err)
	}
	sim.SetDown(down, true)
	opt := waitfor.Options{Stall: 60 * time.Second}
	waitfor.T(t, ctx, "the first job back in the queue while the held start waits", opt, func() error {
		r, err := st.GetJob(ctx, first.ID)
		if err != nil {
			return err
		}
		if r.State == StateRunning {
			return fmt.Errorf("first job %s (%s) on a server that stopped answering", r.State, r.Reason)
		}
		return nil
	})
	select {
	case <-ex.release:
	default:
	}
	h, _ := st.GetJob(ctx, held.ID)
	if h.State != StateRunning {
		t.Fatalf("held job: %s (%s)", h.State, h.Reason)
	}
	if on := sim.Running(); slices.Contains(on, held.ID) {
		t.Fatalf("the executor runs %v while the held start waits", on)
	}
	close(ex.release)
	waitfor.T(t, ctx, "the held job started by the executor", opt, func() error {
		if on := sim.Running(); !slices.Contains(on, held.ID) {
			return fmt.Errorf("the executor runs %v", on)
		}
		return nil
	})
	cancel()
	if err := <-loop; err != nil {
		t.Fatal(err)
	}
	d.WaitBackground()
	f, _ := st.GetJob(ctx, first.ID)
	if f.State == StateRunning {
		t.Errorf("first job running again with its server down: %s", f.Reason)
	}
}

// TestDrainAnswersBeforeTheCheckpoints: with Config.Background a drain
// answers once the drain and its jobs' return to the queue are stored; it
// does not wait for their checkpoints, which for a large model take longer
// than a client waits (30 s by default: `replan drain` said "the daemon
// did not answer within 30s; is replan daemon running" while the drain
// went on). The job's devices stay held until its stop returns.
func TestDrainAnswersBeforeTheCheckpoints(t *testing.T) {
	ctx := context.Background()
	st, sim, ex, d := heldCluster(t)
	defer d.WaitBackground()
	j, on := startedOnOneServer(t, d, st, "moved")
	ex.job = j.ID // its checkpointed stop waits until released
	done := make(chan error, 1)
	var moved []string
	go func() {
		var err error
		moved, err = d.Drain(ctx, on)
		done <- err
	}()
	// The drain answers while the stop waits (inline, it waited with it).
	var derr error
	answered := false
	waitfor.T(t, ctx, "the drain's answer while its job's stop waits", waitfor.Options{Stall: 30 * time.Second}, func() error {
		select {
		case derr = <-done:
			answered = true
			return nil
		default:
			return fmt.Errorf("no answer yet")
		}
	})
	if !answered || derr != nil {
		t.Fatal(derr)
	}
	<-ex.entered
	if len(moved) != 1 || moved[0] != j.ID {
		t.Fatalf("moved %v", moved)
	}
	if r, _ := st.GetJob(ctx, j.ID); r.State != StatePreempted {
		t.Fatalf("after the drain answered: %s (%s)", r.State, r.Reason)
	}
	d.mu.Lock()
	held := d.busy[j.ID] > 0
	d.mu.Unlock()
	if !held {
		t.Fatal("the job's stop is not under way when the drain answered")
	}
	close(ex.release)
	d.WaitBackground()
	if on := sim.Running(); slices.Contains(on, j.ID) {
		t.Fatalf("still running after its stop: %v", on)
	}
}

// A cancel answers once it is stored; the job's stop goes on beside it
// and its GPUs stay held until the stop returns. Inline, the cancel
// waited for the stop (an unreachable server's call timeout).
func TestCancelAnswersBeforeTheStop(t *testing.T) {
	ctx := context.Background()
	st, sim, ex, d := heldCluster(t)
	defer d.WaitBackground()
	j, _ := startedOnOneServer(t, d, st, "cancelled")
	ex.job = j.ID // its stop waits until released
	done := make(chan error, 1)
	go func() {
		_, err := d.Cancel(ctx, j.ID)
		done <- err
	}()
	var cerr error
	waitfor.T(t, ctx, "the cancel's answer while its job's stop waits", waitfor.Options{Stall: 30 * time.Second}, func() error {
		select {
		case cerr = <-done:
			return nil
		default:
			return fmt.Errorf("no answer yet")
		}
	})
	if cerr != nil {
		t.Fatal(cerr)
	}
	<-ex.entered
	if r, _ := st.GetJob(ctx, j.ID); r.State != StateCancelled {
		t.Fatalf("after the cancel answered: %s (%s)", r.State, r.Reason)
	}
	free := sumFree(d)
	if free != 8 {
		t.Fatalf("%d GPUs free while the cancelled job's stop is under way, want 8 (its 8 held)", free)
	}
	close(ex.release)
	d.WaitBackground()
	if on := sim.Running(); slices.Contains(on, j.ID) {
		t.Fatalf("still running after its stop: %v", on)
	}
	if free = sumFree(d); free != 16 {
		t.Fatalf("%d GPUs free after the stop, want 16", free)
	}
}

// sumFree is the daemon's free GPUs over its usable servers.
func sumFree(d *Daemon) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, f := range d.freeGPUs() {
		n += f
	}
	return n
}

// heldCluster is a daemon with its executor's work in the background
// (Config.Background) on two simulated servers of 8 GPUs whose executor
// holds the calls for the job it is told (holdingExec), static policy.
func heldCluster(t *testing.T) (*SQLite, *SimExecutor, *holdingExec, *Daemon) {
	t.Helper()
	st, _ := openTest(t)
	c := &clock{t: time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)}
	sim := NewSimExecutor(c.now, []string{"a", "b"}, nil, nil, 30*time.Second)
	ex := &holdingExec{SimExecutor: sim, entered: make(chan struct{}), release: make(chan struct{})}
	d, _ := newDaemonWith(t, st, ex, "static", c)
	d.cfg.Background = true
	return st, sim, ex, d
}

// startedOnOneServer submits an 8-GPU best-effort job, runs a round and
// waits for its start: the job and the server it runs on.
func startedOnOneServer(t *testing.T, d *Daemon, st *SQLite, name string) (JobRecord, string) {
	t.Helper()
	ctx := context.Background()
	j, err := d.Submit(ctx, spec(t, name, 8, jobspec.BestEffort))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Round(ctx); err != nil {
		t.Fatal(err)
	}
	d.WaitBackground()
	r, _ := st.GetJob(ctx, j.ID)
	var pl []launch.Server
	_ = json.Unmarshal(r.Placement, &pl)
	if r.State != StateRunning || len(pl) != 1 {
		t.Fatalf("%s: %s on %v", name, r.State, pl)
	}
	return j, pl[0].Name
}
