package control

import (
	"context"
	"sync"
	"time"
)

// notifier lets long-polling readers wait for the next event and lets API
// calls ask the loop for a round now.
type notifier struct {
	mu   sync.Mutex
	ch   chan struct{}
	kick chan struct{}
}

func (n *notifier) init() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.ch == nil {
		n.ch = make(chan struct{})
		n.kick = make(chan struct{}, 1)
	}
}

// changed returns a channel closed at the next event.
func (d *Daemon) changed() <-chan struct{} {
	d.notify.init()
	d.notify.mu.Lock()
	defer d.notify.mu.Unlock()
	return d.notify.ch
}

func (d *Daemon) broadcast() {
	d.notify.init()
	d.notify.mu.Lock()
	close(d.notify.ch)
	d.notify.ch = make(chan struct{})
	d.notify.mu.Unlock()
}

// Kick asks the loop for a scheduling round as soon as it can.
func (d *Daemon) Kick() {
	d.notify.init()
	select {
	case d.notify.kick <- struct{}{}:
	default:
	}
}

// Run is the daemon's loop: every tick (and whenever Kick is called) it
// observes the executor and runs a scheduling round, until ctx ends.
// Errors of one iteration are logged; the loop goes on.
func (d *Daemon) Run(ctx context.Context, tick time.Duration) error {
	d.notify.init()
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		if err := d.Observe(ctx); err != nil {
			d.log.Warn("observe", "err", err)
		}
		d.expireIdempotencyKeys(ctx) // idem.go: hourly by default
		d.settleDrains(ctx)          // drain.go: after-jobs drains whose last job ended
		if st, err := d.Round(ctx); err != nil {
			d.log.Warn("round", "err", err)
		} else if st.Actions > 0 {
			d.log.Info("round", "actions", st.Actions, "waiting", st.Waiting, "took", st.Duration)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-d.notify.kick:
		}
	}
}
