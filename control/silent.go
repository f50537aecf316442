package control

import (
	"context"
	"time"
)

// Servers that do not answer at all. A server whose link is down (or
// whose host hangs) drops what it is sent: each call to it waits out the
// whole CallTimeout. Asked in every Observe, one such server made every
// observation of the cluster last that long (15 s by default), and the
// daemon's loop with it: no round, no heartbeat of the others read, no
// fault noticed meanwhile. Once a server's poll has timed out, Observe
// reports it unreachable with that poll's error at once and asks it
// again beside the loop, one probe at a time; when a probe gets an answer
// or an error of its own before the timeout (the server answers again,
// or refuses: sshd stopped, agent gone), the next Observe asks it inline
// again, so what it says then is read as before
// (TestObserveAsksASilentServerBesideTheLoop).

// silentServer is what the executor knows of a server whose last poll
// timed out.
type silentServer struct {
	err     error // the last poll's or probe's error
	probing bool  // a probe is under way
	back    bool  // a probe ended before the timeout: ask it inline next time
}

// stillSilent is the error to report for name without asking it when its
// last poll timed out and no probe has heard from it since (starting a
// probe when none is under way); nil when Observe should ask it.
func (e *SSHExecutor) stillSilent(name string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	s := e.silent[name]
	if s == nil || s.back {
		return nil
	}
	if !s.probing {
		s.probing = true
		go e.probeSilent(name)
	}
	return s.err
}

// polledServer records the outcome of an inline poll of name: a poll that
// timed out makes it silent, any other ends that.
func (e *SSHExecutor) polledServer(name string, err error, timedOut bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err == nil || !timedOut {
		if s := e.silent[name]; s != nil && !s.probing {
			delete(e.silent, name)
		} else if s != nil {
			s.back = true // the probe under way ends it
		}
		return
	}
	if e.silent == nil {
		e.silent = map[string]*silentServer{}
	}
	if s := e.silent[name]; s != nil {
		s.err, s.back = err, false
		return
	}
	e.silent[name] = &silentServer{err: err}
}

// probeSilent asks a silent server for its agent's status, bounded by
// CallTimeout, and records what it heard.
func (e *SSHExecutor) probeSilent(name string) {
	if e.probe != nil {
		e.probe(name)
	}
	ctx, cancel := context.WithTimeout(context.Background(), e.opt.CallTimeout)
	defer cancel()
	start := time.Now()
	c, err := e.client(ctx, name)
	if err == nil {
		_, err = c.Status(ctx)
	}
	timedOut := ctx.Err() == context.DeadlineExceeded
	e.mu.Lock()
	defer e.mu.Unlock()
	s := e.silent[name]
	if s == nil {
		return
	}
	s.probing = false
	if err == nil || !timedOut {
		s.back = true
		e.log.Debug("observe: a silent server answered a probe", "server", name, "after", time.Since(start), "err", err)
		return
	}
	s.err = err
}
