package control

// The SSH executor's health check of a server (HealthChecker): what a
// launch needs, tried for real, without a job.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/replan/replan/agent"
)

// healthProcessPrefix starts the agent process id of a health check's
// trial process (never a job process id: see isJobProcessID).
const healthProcessPrefix = "replan-health-"

var _ HealthChecker = (*SSHExecutor)(nil)

// Check implements HealthChecker: it passes when everything a launch
// needs works on the server —
//
//   - a command runs over SSH (`true`: the SSH login works, which also
//     carries the agent's socket),
//   - the agent answers,
//   - the agent sees at least the inventory's GPUs,
//   - a trivial process (`true`) started through the agent exits 0.
//
// The whole check is bounded by CallTimeout. The trial process's record
// is deleted afterwards. The daemon checks suspect servers with it (at
// most once a minute each) and clears those that pass.
func (e *SSHExecutor) Check(ctx context.Context, server string) error {
	if err := e.check(ctx, server); err != nil {
		return fmt.Errorf("health check on %s: %w", server, err)
	}
	return nil
}

func (e *SSHExecutor) check(ctx context.Context, server string) error {
	s, err := e.server(server)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, e.opt.CallTimeout)
	defer cancel()
	h, err := e.host(server)
	if err != nil {
		return err
	}
	if _, err := e.fl.Pool().Output(ctx, h, "true"); err != nil {
		return fmt.Errorf("run `true` over SSH: %w", err)
	}
	c, err := e.client(ctx, server)
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	if _, err := c.Status(ctx); err != nil {
		return fmt.Errorf("agent does not answer: %w", err)
	}
	snap, err := c.GPUs(ctx)
	if err != nil {
		return fmt.Errorf("agent's GPUs: %w", err)
	}
	if len(snap.GPUs) < s.GPUs {
		why := ""
		if snap.Error != "" {
			why = ": " + snap.Error
		}
		return fmt.Errorf("%d of the inventory's %d GPUs visible (backend %q)%s", len(snap.GPUs), s.GPUs, snap.Backend, why)
	}
	id := fmt.Sprintf("%s%d", healthProcessPrefix, time.Now().UnixNano())
	p, err := c.Start(ctx, agent.ProcessSpec{ID: id, Argv: []string{"true"}})
	if err != nil {
		return fmt.Errorf("start `true` through the agent: %w", err)
	}
	defer func() {
		// The record goes, even when ctx is what failed.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.opt.CallTimeout)
		defer cancel()
		if p.State == agent.StateRunning {
			c.Stop(dctx, id, 0)
		}
		if err := c.Delete(dctx, id); err != nil && !errors.Is(err, agent.ErrNotFound) {
			e.log.Warn("health check: delete the trial process", "server", server, "id", id, "err", err)
		}
	}()
	for p.State == agent.StateRunning {
		select {
		case <-ctx.Done():
			return fmt.Errorf("`true` started through the agent has not exited within %s", e.opt.CallTimeout)
		case <-time.After(min(e.opt.Poll, 100*time.Millisecond)):
		}
		if p, err = c.Process(ctx, id); err != nil {
			return fmt.Errorf("`true` started through the agent: %w", err)
		}
	}
	if code := exitCode(p); code != 0 {
		return fmt.Errorf("`true` started through the agent exited %d: %s", code, strings.TrimSpace(p.ExitReason))
	}
	return nil
}
