package control

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/replan/replan/agent"
)

var _ LogReader = (*SSHExecutor)(nil)

// agentMaxTail is the most lines an agent's log endpoint returns by count
// (agent's maxTail); a larger tail asks for the whole current log file.
const agentMaxTail = 100000

// Logs implements LogReader: rank 0's log of the job's current launch,
// read through the agent of rank 0's server. When the job does not run now
// (finished, failed, stopped, or this daemon has not adopted it yet), it
// reads the newest process of the job the agents still keep, found by the
// process id prefix (see ProcessID): the highest attempt, its lowest rank.
// With follow the stream goes on until ctx ends, the reader is closed, or
// the process has exited and its log is drained; tail < 0 means the whole
// current log file.
func (e *SSHExecutor) Logs(ctx context.Context, jobID string, tail int, follow bool) (io.ReadCloser, error) {
	if tail > agentMaxTail {
		tail = -1
	}
	e.mu.Lock()
	var cur *sshProc
	if j := e.jobs[jobID]; j != nil {
		for i := range j.procs {
			if j.procs[i].rank == 0 {
				p := j.procs[i]
				cur = &p
				break
			}
		}
	}
	e.mu.Unlock()
	if cur != nil {
		rc, err := e.procLogs(ctx, *cur, tail, follow)
		if !errors.Is(err, agent.ErrNotFound) {
			return rc, err
		}
		// The agent lost the record (restarted on a new state directory, or
		// the process was deleted): look for what else of the job is left.
		e.log.Warn("logs: rank 0 of the current launch is unknown to its agent; looking for other processes of the job", "job", jobID, "server", cur.server, "id", cur.id)
	}
	p, err := e.newestProc(ctx, jobID, -1)
	if err != nil {
		return nil, err
	}
	return e.procLogs(ctx, p, tail, follow)
}

// AttemptLogs implements AttemptLogReader: the log of rank 0 of the
// job's launch number attempt (the lowest rank its agents still keep),
// read through its server's agent. The agents keep every launch's
// processes and logs (docs/control.md, "Known limits").
func (e *SSHExecutor) AttemptLogs(ctx context.Context, jobID string, attempt, tail int, follow bool) (io.ReadCloser, error) {
	if tail > agentMaxTail {
		tail = -1
	}
	p, err := e.newestProc(ctx, jobID, attempt)
	if err != nil {
		return nil, err
	}
	return e.procLogs(ctx, p, tail, follow)
}

// procLogs reads one process's log through its server's agent.
func (e *SSHExecutor) procLogs(ctx context.Context, p sshProc, tail int, follow bool) (io.ReadCloser, error) {
	c, err := e.client(ctx, p.server)
	if err != nil {
		return nil, fmt.Errorf("logs of %s: agent on %s: %w", p.id, p.server, err)
	}
	if follow {
		rc, err := c.FollowLogs(ctx, p.id, tail)
		if err != nil {
			return nil, fmt.Errorf("logs of %s on %s: %w", p.id, p.server, err)
		}
		return rc, nil
	}
	b, err := c.Logs(ctx, p.id, tail)
	if err != nil {
		return nil, fmt.Errorf("logs of %s on %s: %w", p.id, p.server, err)
	}
	return io.NopCloser(bytes.NewReader(b)), nil
}

// newestProc asks every server's agent for the processes of jobID and
// returns the newest: the highest attempt (only attempt, when it is not
// -1), within it the lowest rank (rank 0 when its server still has it).
// It fails with ErrNotFound when every agent answered and none has such a
// process.
func (e *SSHExecutor) newestProc(ctx context.Context, jobID string, attempt int) (sshProc, error) {
	type hit struct {
		p       sshProc
		attempt int
	}
	found := make([][]hit, len(e.order))
	errs := e.each(ctx, len(e.order), func(ctx context.Context, i int) error {
		ctx, cancel := context.WithTimeout(ctx, e.opt.CallTimeout)
		defer cancel()
		c, err := e.client(ctx, e.order[i])
		if err != nil {
			return err
		}
		ps, err := c.Processes(ctx)
		if err != nil {
			return err
		}
		for _, p := range ps {
			if a, r, ok := parseProcessID(jobID, p.Spec.ID); ok && (attempt < 0 || a == attempt) {
				found[i] = append(found[i], hit{sshProc{rank: r, server: e.order[i], id: p.Spec.ID}, a})
			}
		}
		return nil
	})
	best := hit{attempt: -1}
	for _, hs := range found {
		for _, h := range hs {
			if h.attempt > best.attempt || (h.attempt == best.attempt && h.p.rank < best.p.rank) {
				best = h
			}
		}
	}
	if best.attempt >= 0 {
		return best.p, nil
	}
	var down []string
	for i, err := range errs {
		if err != nil {
			down = append(down, fmt.Sprintf("%s: %v", e.order[i], err))
		}
	}
	what := "the job"
	if attempt >= 0 {
		what = fmt.Sprintf("its attempt %d", attempt)
	}
	if len(down) == 0 {
		return sshProc{}, fmt.Errorf("logs of %s: no process of %s on any of the %d agents (its records were deleted, or it never started): %w", jobID, what, len(e.order), ErrNotFound)
	}
	return sshProc{}, fmt.Errorf("logs of %s: no process of %s on the agents that answered; %d of %d did not (%s)", jobID, what, len(down), len(e.order), strings.Join(down, "; "))
}

// failTailLines is how many of a failed rank's last log lines its
// failure's reason quotes; failReadLines how many are read for them
// (torchrun's report after a worker's failure, which quoteLines leaves
// out, is about 40).
const (
	failTailLines = 5
	failReadLines = 80
)

// logTail is "; last lines: …" with the last lines of process id's log on
// server, joined on one line (each cut to 200 bytes), for a failure's
// reason; "" when the log cannot be read (bounded by CallTimeout) or is
// empty.
func (e *SSHExecutor) logTail(ctx context.Context, server, id string) string {
	ctx, cancel := context.WithTimeout(ctx, e.opt.CallTimeout)
	defer cancel()
	c, err := e.client(ctx, server)
	if err != nil {
		return ""
	}
	b, err := c.Logs(ctx, id, failReadLines)
	if err != nil {
		e.log.Debug("failure's log tail", "server", server, "id", id, "err", err)
		return ""
	}
	return quoteLines(string(b), failTailLines) // redact.go: the job's logs
}
