package agent

// The daemon's epoch and lease (docs/agent.md, "Epoch and lease").
//
// Every command of a daemon carries its epoch (HeaderEpoch); the agent
// remembers the highest it has seen (STATE/epoch) and refuses lower ones,
// so a daemon that has been replaced (restarted, or a former leader)
// cannot command the agent any more. Commands may also carry a lease
// (HeaderLease): an agent that hears no leased command for that long
// stops every process it runs (SIGTERM, SIGKILL after HeaderLeaseGrace; a
// grace of 0 is SIGKILL at once). The lease's deadline is kept in
// STATE/lease, where every process's wrapper shell watches it too, so a
// process is fenced even while its agent is dead.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Headers of the daemon's commands.
const (
	// HeaderEpoch is the epoch of the daemon (or leader) that sends the
	// command: a decimal number; lower than the highest seen is refused.
	HeaderEpoch = "X-Replan-Epoch"
	// HeaderLease renews the lease for this many seconds (decimal).
	HeaderLease = "X-Replan-Lease"
	// HeaderLeaseGrace is the SIGTERM→SIGKILL grace of a stop at the
	// lease's end, in seconds (0: SIGKILL at once).
	HeaderLeaseGrace = "X-Replan-Lease-Grace"
)

// ErrStaleEpoch is a command refused because its epoch is below the
// highest this agent has seen (HTTP 412).
var ErrStaleEpoch = errors.New("stale epoch")

// Files in the state directory.
const (
	epochFile = "epoch"
	leaseFile = "lease"
)

// lease is an agent's epoch and lease.
type lease struct {
	dir string

	mu      sync.Mutex
	epoch   uint64
	expiry  time.Time // zero: no lease given yet
	grace   time.Duration
	expired bool  // the processes were stopped at this expiry
	written int64 // the deadline in STATE/lease (Unix seconds)
}

// openLease reads the epoch and the lease left by an earlier agent in dir:
// an agent restarted while its daemon was away keeps the deadline it had.
func openLease(dir string) (*lease, error) {
	l := &lease{dir: dir}
	p := filepath.Join(dir, epochFile)
	if b, err := os.ReadFile(p); err == nil {
		n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%s: line 1: not an epoch: %q", p, strings.TrimSpace(string(b)))
		}
		l.epoch = n
	} else if !os.IsNotExist(err) {
		return nil, err
	}
	p = filepath.Join(dir, leaseFile)
	if b, err := os.ReadFile(p); err == nil {
		d, g, err := parseLeaseFile(string(b))
		if err != nil {
			return nil, fmt.Errorf("%s: line 1: %w", p, err)
		}
		l.expiry, l.grace, l.written = time.Unix(d, 0), time.Duration(g)*time.Second, d
	} else if !os.IsNotExist(err) {
		return nil, err
	}
	return l, nil
}

// parseLeaseFile reads "DEADLINE GRACE": Unix seconds and whole seconds.
func parseLeaseFile(s string) (deadline, grace int64, err error) {
	f := strings.Fields(s)
	if len(f) != 2 {
		return 0, 0, fmt.Errorf("want \"DEADLINE GRACE\", got %q", strings.TrimSpace(s))
	}
	d, err1 := strconv.ParseInt(f[0], 10, 64)
	g, err2 := strconv.ParseInt(f[1], 10, 64)
	if err1 != nil || err2 != nil || d < 0 || g < 0 {
		return 0, 0, fmt.Errorf("want \"DEADLINE GRACE\" (non-negative integers), got %q", strings.TrimSpace(s))
	}
	return d, g, nil
}

// Epoch returns the highest epoch the agent has seen.
func (a *Agent) Epoch() uint64 {
	a.lease.mu.Lock()
	defer a.lease.mu.Unlock()
	return a.lease.epoch
}

// admit checks a command's epoch and renews the lease it carries. A
// command without an epoch (a local tool's) is admitted and renews
// nothing.
func (l *lease) admit(h http.Header, now time.Time) error {
	v := h.Get(HeaderEpoch)
	if v == "" {
		return nil
	}
	epoch, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return &FieldError{HeaderEpoch, fmt.Sprintf("%q is not an epoch (a non-negative integer)", v)}
	}
	var period, grace time.Duration
	if v := h.Get(HeaderLease); v != "" {
		s, err := strconv.ParseFloat(v, 64)
		if err != nil || s <= 0 || s > 24*3600 {
			return &FieldError{HeaderLease, fmt.Sprintf("%q: want seconds in (0, 86400]", v)}
		}
		period = time.Duration(s * float64(time.Second))
		if v := h.Get(HeaderLeaseGrace); v != "" {
			g, err := strconv.ParseFloat(v, 64)
			if err != nil || g < 0 || g > 24*3600 {
				return &FieldError{HeaderLeaseGrace, fmt.Sprintf("%q: want seconds in [0, 86400]", v)}
			}
			grace = time.Duration(g * float64(time.Second))
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if epoch < l.epoch {
		return fmt.Errorf("%w: the command carries epoch %d, this agent obeys epoch %d or later (a newer daemon or leader commands it)", ErrStaleEpoch, epoch, l.epoch)
	}
	if epoch > l.epoch {
		if err := writeFileAtomic(filepath.Join(l.dir, epochFile), fmt.Appendf(nil, "%d\n", epoch)); err != nil {
			return fmt.Errorf("record epoch %d: %w", epoch, err)
		}
		l.epoch = epoch
	}
	if period > 0 {
		l.expiry, l.grace, l.expired = now.Add(period), grace, false
		// The file's deadline is never later than the one in memory
		// (rounded down), and changes at most once a second.
		if d := l.expiry.Unix(); d != l.written {
			g := int64((grace + time.Second - 1) / time.Second)
			if err := writeLeaseFile(filepath.Join(l.dir, leaseFile), fmt.Sprintf("%d %d\n", d, g)); err != nil {
				return fmt.Errorf("record lease: %w", err)
			}
			l.written = d
		}
	}
	return nil
}

// due reports, once per expiry, that the lease has run out, with the
// grace of the stop it asks for.
func (l *lease) due(now time.Time) (bool, time.Duration, time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.expiry.IsZero() || l.expired || now.Before(l.expiry) {
		return false, 0, time.Time{}
	}
	l.expired = true
	return true, l.grace, l.expiry
}

// withEpoch wraps the API: a command with a stale epoch is refused (412)
// before it does anything.
func (a *Agent) withEpoch(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := a.lease.admit(r.Header, time.Now()); err != nil {
			if errors.Is(err, ErrStaleEpoch) {
				writeJSON(w, http.StatusPreconditionFailed, ErrorBody{Error: err.Error(), Field: HeaderEpoch})
				return
			}
			writeError(w, err)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// LeaseCheckEvery paces the agent's check of its lease.
var LeaseCheckEvery = 200 * time.Millisecond

// watchLease stops every running process when the lease runs out, until
// ctx ends.
func (a *Agent) watchLease(ctx context.Context) {
	t := time.NewTicker(LeaseCheckEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		due, grace, at := a.lease.due(time.Now())
		if !due {
			continue
		}
		var ids []string
		for _, p := range a.sup.List() {
			if p.State == StateRunning {
				ids = append(ids, p.Spec.ID)
			}
		}
		if len(ids) == 0 {
			continue
		}
		a.log.Warn("lease expired: no word from the daemon; stopping every process", "expired_at", at, "grace", grace, "processes", ids)
		for _, id := range ids {
			go func() {
				if _, err := a.sup.Stop(ctx, id, grace); err != nil && !errors.Is(err, context.Canceled) {
					a.log.Warn("lease expired: stop", "id", id, "err", err)
				}
			}()
		}
	}
}

// writeLeaseFile writes content to a temporary file renamed over path
// (not synced: a lease does not outlive a reboot, nor do the processes).
func writeLeaseFile(path, content string) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
