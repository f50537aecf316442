// Package waitfor waits on progress, not on the clock: end-to-end tests
// poll a condition and fail only when the system stops moving, so a
// loaded machine that is slow but advancing does not fail them.
//
// The condition reports what it sees as an error while it is not yet true;
// whenever that report changes (a job advanced an iteration, a state
// changed), the stall window restarts. The wait fails when the report has
// not changed for Stall, when the overall Limit passes, or when ctx ends,
// and the failure says what was last seen.
package waitfor

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// Options bound a wait.
type Options struct {
	// Stall is how long the observed state may stay the same (default
	// 60s).
	Stall time.Duration
	// Limit bounds the whole wait however much progress is made (default
	// 20 × Stall).
	Limit time.Duration
	// Poll is the interval between checks (default 100ms).
	Poll time.Duration
	// Log, when set, is called with every new state seen (a trace of the
	// wait for the test log).
	Log func(state string)
}

func (o Options) withDefaults() Options {
	if o.Stall <= 0 {
		o.Stall = time.Minute
	}
	if o.Limit <= 0 {
		o.Limit = 20 * o.Stall
	}
	if o.Poll <= 0 {
		o.Poll = 100 * time.Millisecond
	}
	return o
}

// Progress calls check until it returns nil. check's error is the state
// seen; a different message than the last one is progress and restarts the
// stall window. It returns an error naming what, the last state and how
// long it waited when the state stalls, the limit passes or ctx ends.
func Progress(ctx context.Context, what string, opt Options, check func() error) error {
	opt = opt.withDefaults()
	began := time.Now()
	var last string
	changed := began
	changes := 0
	for {
		err := check()
		if err == nil {
			return nil
		}
		now := time.Now()
		if msg := err.Error(); msg != last {
			last, changed = msg, now
			changes++
			if opt.Log != nil {
				opt.Log(msg)
			}
		}
		switch {
		case ctx.Err() != nil:
			return fmt.Errorf("%s: %v after %s (%d changes seen); last seen: %s", what, ctx.Err(), now.Sub(began).Round(time.Millisecond), changes, last)
		case now.Sub(changed) >= opt.Stall:
			return fmt.Errorf("%s: no progress for %s (waited %s in all, %d changes seen); last seen: %s", what, opt.Stall, now.Sub(began).Round(time.Millisecond), changes, last)
		case now.Sub(began) >= opt.Limit:
			return fmt.Errorf("%s: still not true after the overall limit %s (%d changes seen); last seen: %s", what, opt.Limit, changes, last)
		}
		select {
		case <-ctx.Done():
		case <-time.After(opt.Poll):
		}
	}
}

// T is Progress for tests: it fails t with the error.
func T(t testing.TB, ctx context.Context, what string, opt Options, check func() error) {
	t.Helper()
	if err := Progress(ctx, what, opt, check); err != nil {
		t.Fatal(err)
	}
}
