package control

// Fencing (issue 24): never two live attempts of a job.
//
// Every command the SSH executor sends an agent carries the daemon's
// epoch (agent.HeaderEpoch): an agent refuses epochs below the highest it
// has seen, so a replaced daemon (restarted, or a former leader) commands
// nothing any more. Commands to a server that answered its last heartbeat
// also renew the agent's lease (agent.HeaderLease): an agent that hears no
// leased command for a lease period stops every process it runs (its
// processes' wrapper shells do the same while it is dead).
//
// A job whose stop could not be confirmed (its server cut off) is
// started again only once every such process has been confirmed stopped
// or its server's lease has certainly run out: on the daemon's own clock,
// from the send of the last leased command to that server, two lease
// periods (one for the lease, one for a command delivered late: renewals
// after the lease ran out fence nothing back to life), the lease's kill
// grace and fenceSlack (the wrappers' one-second watch).

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/replan/replan/agent"
)

// EpochStore is a store that hands out daemon epochs: NextEpoch returns a
// number higher than any it returned before, durably (the SQLite store
// bumps a counter). A highly available store would return its leader
// election's revision.
type EpochStore interface {
	NextEpoch(ctx context.Context) (uint64, error)
}

// EpochUser is an executor whose commands carry the daemon's epoch; the
// daemon sets it at start, before it adopts running jobs.
type EpochUser interface {
	SetEpoch(epoch uint64)
}

// Fencer is an executor that may hold a job back from starting until its
// previous attempt is certainly stopped: FencedAt returns when that will
// be at the latest (zero when nothing holds the job back). The daemon
// keeps such a job queued until then.
type Fencer interface {
	FencedAt(jobID string) time.Time
}

// holdForFence keeps a job the executor holds back (Fencer) out of the
// rounds until its earlier attempt is certainly stopped, so that its start
// does not wait in the executor. The caller holds d.mu.
func (d *Daemon) holdForFence(js *jobState) {
	f, ok := d.cfg.Exec.(Fencer)
	if !ok {
		return
	}
	at := f.FencedAt(js.rec.ID)
	if wait := time.Until(at); wait > 0 {
		if until := d.now().Add(wait); until.After(js.backoff) {
			js.backoff = until
			js.backoffWhy = "its earlier attempt is not confirmed stopped (its server does not answer): it starts again once that server's agent lease has certainly run out"
		}
		d.log.Warn("fence: the job starts again only once its earlier attempt is certainly stopped", "job", js.rec.ID, "wait", wait.Round(time.Second))
	}
}

// takeEpoch gives the daemon its epoch (Config.Epoch, the election's
// revision, or the store's next) and hands it to the executor.
func (d *Daemon) takeEpoch(ctx context.Context) error {
	epoch := d.cfg.Epoch
	eu, uses := d.cfg.Exec.(EpochUser)
	if epoch == 0 {
		// Every start takes one, whether its executor carries it or not
		// (the sim executor does not): status reports it.
		es, ok := d.cfg.Store.(EpochStore)
		if !ok {
			return nil
		}
		var err error
		if epoch, err = es.NextEpoch(ctx); err != nil {
			return fmt.Errorf("control: %w", err)
		}
	}
	d.epoch = epoch
	if uses {
		eu.SetEpoch(epoch)
	}
	d.log.Info("daemon epoch", "epoch", epoch)
	return nil
}

// Epoch is the daemon's epoch (0: its executor carries none).
func (d *Daemon) Epoch() uint64 { return d.epoch }

// NextEpoch implements EpochStore: 1, 2, ... one per daemon start.
func (s *SQLite) NextEpoch(ctx context.Context) (uint64, error) {
	var v int64
	err := s.db.QueryRowContext(ctx, `INSERT INTO counters(name, value) VALUES ('epoch', 1)
		ON CONFLICT(name) DO UPDATE SET value = value + 1 RETURNING value`).Scan(&v)
	if err != nil {
		return 0, fmt.Errorf("next epoch: %w", err)
	}
	return uint64(v), nil
}

// fenceSlack covers the wrapper shells' watch of the lease (a check each
// second, whole seconds) and scheduling delays.
const fenceSlack = 3 * time.Second

// DefaultLease is the agents' lease when SSHOptions.Lease is 0.
const DefaultLease = 30 * time.Second

// fence is the SSH executor's epoch, its leases and the stops it could
// not confirm.
type fence struct {
	started time.Time // the executor's start: no earlier daemon leased later
	mu      sync.Mutex
	epoch   uint64
	servers map[string]*serverLease
	// pending are the processes, per job, whose stop was not confirmed.
	pending map[string][]sshProc
	renew   sync.Once // starts renewLeases
}

// serverLease is what the executor knows of one server's lease.
type serverLease struct {
	sent time.Time // send of the last leased command
	down bool      // the last heartbeat failed: commands renew no lease
}

func (f *fence) server(name string) *serverLease {
	if f.servers == nil {
		f.servers = map[string]*serverLease{}
	}
	s := f.servers[name]
	if s == nil {
		s = &serverLease{}
		f.servers[name] = s
	}
	return s
}

// SetEpoch implements EpochUser.
func (e *SSHExecutor) SetEpoch(epoch uint64) {
	e.fence.mu.Lock()
	e.fence.epoch = epoch
	e.fence.mu.Unlock()
}

// lease is the executor's lease period; 0 when leases are off.
func (e *SSHExecutor) lease() time.Duration {
	if e.opt.Lease < 0 {
		return 0
	}
	return e.opt.Lease
}

// headers returns the header hook of server name's agent client: the
// epoch always, the lease while the server answers.
func (e *SSHExecutor) headers(name string) func(http.Header) {
	return func(h http.Header) {
		e.fence.mu.Lock()
		defer e.fence.mu.Unlock()
		h.Set(agent.HeaderEpoch, strconv.FormatUint(e.fence.epoch, 10))
		lease := e.lease()
		s := e.fence.server(name)
		if lease <= 0 || s.down {
			return
		}
		s.sent = time.Now()
		h.Set(agent.HeaderLease, strconv.FormatFloat(lease.Seconds(), 'f', -1, 64))
		h.Set(agent.HeaderLeaseGrace, strconv.FormatFloat(e.opt.LeaseGrace.Seconds(), 'f', -1, 64))
	}
}

// heartbeat records whether server name answered its heartbeat: commands
// to a server that did not renew no lease until it answers again.
func (e *SSHExecutor) heartbeat(name string, ok bool) {
	e.fence.mu.Lock()
	e.fence.server(name).down = !ok
	e.fence.mu.Unlock()
}

// renewLeases keeps renewing, every quarter lease, the leases of the
// servers where tracked jobs run, whatever the daemon's loop is busy with
// (a reconfiguration holds it for minutes; Observe's heartbeats alone
// would let every other server's lease run out meanwhile). It starts with
// the first launch or adoption and runs for the executor's life.
func (e *SSHExecutor) renewLeases() {
	every := e.lease() / 4
	if every <= 0 {
		return
	}
	e.fence.renew.Do(func() {
		go func() {
			t := time.NewTicker(every)
			defer t.Stop()
			for range t.C {
				e.mu.Lock()
				seen := map[string]bool{}
				var names []string
				for _, j := range e.jobs {
					for _, p := range j.procs {
						if !seen[p.server] {
							seen[p.server] = true
							names = append(names, p.server)
						}
					}
				}
				e.mu.Unlock()
				sort.Strings(names)
				e.each(context.Background(), len(names), func(ctx context.Context, i int) error {
					ctx, cancel := context.WithTimeout(ctx, min(e.opt.CallTimeout, 2*every))
					defer cancel()
					c, err := e.client(ctx, names[i])
					if err == nil {
						_, err = c.Status(ctx)
					}
					e.heartbeat(names[i], err == nil)
					return nil
				})
			}
		}()
	})
}

// expiry is when server name's lease has certainly run out (the caller
// holds e.fence.mu); zero when leases are off.
func (e *SSHExecutor) expiry(name string) time.Time {
	lease := e.lease()
	if lease <= 0 {
		return time.Time{}
	}
	sent := e.fence.server(name).sent
	if sent.IsZero() {
		// Not leased by this executor: an earlier daemon's last lease
		// was sent before this one started.
		sent = e.fence.started
	}
	return sent.Add(2*lease + e.opt.LeaseGrace + fenceSlack)
}

// unconfirmed records processes of job id whose stop was not confirmed.
func (e *SSHExecutor) unconfirmed(id string, procs []sshProc) {
	if len(procs) == 0 || e.lease() <= 0 {
		return
	}
	e.fence.mu.Lock()
	defer e.fence.mu.Unlock()
	if e.fence.pending == nil {
		e.fence.pending = map[string][]sshProc{}
	}
	e.fence.pending[id] = append(e.fence.pending[id], procs...)
}

// FencedAt implements Fencer.
func (e *SSHExecutor) FencedAt(id string) time.Time {
	e.fence.mu.Lock()
	defer e.fence.mu.Unlock()
	var at time.Time
	for _, p := range e.fence.pending[id] {
		if x := e.expiry(p.server); x.After(at) {
			at = x
		}
	}
	return at
}

// awaitFence returns once no process of an earlier attempt of job id can
// still run: each unconfirmed one is confirmed stopped (SIGKILL at once,
// no checkpoint) or its server's lease has certainly run out. It gives up
// with an error when ctx ends first.
func (e *SSHExecutor) awaitFence(ctx context.Context, id string) error {
	for {
		e.fence.mu.Lock()
		procs := e.fence.pending[id]
		now := time.Now()
		byServer := map[string][]sshProc{}
		var left []sshProc
		for _, p := range procs {
			if x := e.expiry(p.server); !x.IsZero() && !now.Before(x) {
				continue // its lease has run out: the agent or its wrapper stopped it
			}
			byServer[p.server] = append(byServer[p.server], p)
		}
		e.fence.mu.Unlock()
		if len(procs) == 0 {
			return nil
		}
		names := make([]string, 0, len(byServer))
		for s := range byServer {
			names = append(names, s)
		}
		sort.Strings(names)
		errs := e.each(ctx, len(names), func(ctx context.Context, i int) error {
			ctx, cancel := context.WithTimeout(ctx, e.opt.CallTimeout)
			defer cancel()
			return e.confirmStopped(ctx, names[i], byServer[names[i]])
		})
		var why []string
		for i, err := range errs {
			if err != nil {
				left = append(left, byServer[names[i]]...)
				why = append(why, err.Error())
			}
		}
		e.fence.mu.Lock()
		if len(left) == 0 {
			delete(e.fence.pending, id)
		} else {
			e.fence.pending[id] = left
		}
		var until time.Time
		for _, p := range left {
			if x := e.expiry(p.server); !x.IsZero() && (until.IsZero() || x.Before(until)) {
				until = x
			}
		}
		e.fence.mu.Unlock()
		if len(left) == 0 {
			e.log.Info("fence: the earlier attempt is stopped", "job", id)
			return nil
		}
		wait := e.opt.Poll * 4
		if !until.IsZero() {
			wait = min(wait, max(time.Until(until), 0))
		}
		e.log.Warn("fence: waiting for the earlier attempt to stop", "job", id, "until", until, "why", strings.Join(why, "; "))
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: processes of an earlier attempt may still run (%s); not starting another: %w", id, strings.Join(why, "; "), ctx.Err())
		case <-time.After(wait):
		}
	}
}

// confirmStopped kills the processes on server (SIGKILL, no checkpoint)
// that still run and returns nil once none does.
func (e *SSHExecutor) confirmStopped(ctx context.Context, server string, procs []sshProc) error {
	c, err := e.client(ctx, server)
	if err != nil {
		return fmt.Errorf("%s: %w", server, err)
	}
	for _, p := range procs {
		info, err := c.Stop(ctx, p.id, 0)
		if errors.Is(err, agent.ErrNotFound) {
			continue
		}
		if err != nil {
			return fmt.Errorf("stop %s on %s: %w", p.id, server, err)
		}
		if info.State != agent.StateExited {
			return fmt.Errorf("stop %s on %s: still %s", p.id, server, info.State)
		}
	}
	return nil
}
