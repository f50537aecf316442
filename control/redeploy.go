package control

// Servers that come back: a server that rebooted answers SSH again, but
// its agent (and every job process) is gone until something starts the
// agent. When a server has missed HeartbeatMisses heartbeats (its jobs
// are back in the queue from their checkpoints by then), the daemon asks
// the executor to redeploy its agent (AgentRedeployer: the SSH executor
// runs fleet.Deploy, as `replan deploy` does, then the health check).
// SSH that does not answer costs no try: the server is off, and is asked
// again every RedeployOptions.Backoff. A try that fails is tried again
// after Backoff, doubled with each failure (at most 32×); after Tries
// failures the server is marked down with the last failure as its reason
// and left alone until its agent answers again (an operator's `replan
// deploy`) or the daemon restarts. A server back gets a "redeploy" event
// with its downtime; the next heartbeat returns it to service. An agent
// that answers with another boot id than before (restarted by the
// server's own init after a reboot) gets a "reboot" event with the
// downtime: the jobs it ran are gone, and come back as exited.
//
// The redeploy state is the daemon's memory, not stored: a restarted
// daemon tries again from the first try.

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Defaults of RedeployOptions.
const (
	DefaultRedeployTries   = 5
	DefaultRedeployBackoff = 30 * time.Second
)

// RedeployOptions bound how the daemon brings a server's agent back.
type RedeployOptions struct {
	// Tries is how many failed redeploys mark a server down (default
	// DefaultRedeployTries; negative: the daemon never redeploys).
	Tries int
	// Backoff is the wait after the first failed try, doubled after each
	// further one up to 32×, and how often a server whose SSH does not
	// answer is asked again (default DefaultRedeployBackoff, of the
	// daemon's clock).
	Backoff time.Duration
}

// AgentRedeployer is implemented by executors that can start a server's
// agent again (the SSH executor, the simulated one).
type AgentRedeployer interface {
	// Redeploy starts the agent on server and health-checks the server.
	// It returns how the agent was started (a fleet.Status* word) and
	// ErrSSHDown when the server's SSH does not answer (nothing tried).
	Redeploy(ctx context.Context, server string) (status string, err error)
}

// ErrSSHDown says a server's SSH does not answer: there is no agent to
// start there yet.
var ErrSSHDown = errors.New("SSH does not answer")

// ErrRedeployOff says the executor was given no way to deploy agents.
var ErrRedeployOff = errors.New("no agent deploy configured")

// agentState is what the daemon knows of a server's agent; guarded by
// d.mu.
type agentState struct {
	lastUp   time.Time // last heartbeat answered
	downFrom time.Time // first heartbeat missed since lastUp
	boot     string    // boot id last reported
	tries    int       // failed redeploys since it was last up
	next     time.Time // no redeploy before
	busy     bool      // a redeploy runs
	gaveUp   bool      // Tries failed: down until its agent answers
	why      string    // the last failure
	off      bool      // the executor cannot redeploy (ErrRedeployOff)
	sshDown  bool      // the last try found SSH not answering
	rebootAt time.Time // its boot id last changed (jobs exiting then are not charged)
}

// redeployData is the data of the redeploy events.
type redeployData struct {
	Status    string  `json:"status,omitempty"`
	Tries     int     `json:"tries"`
	DowntimeS float64 `json:"downtime_s"`
	Err       string  `json:"err,omitempty"`
}

// agentOf is server i's agent state (created empty); the caller holds
// d.mu.
func (d *Daemon) agentOf(i int) *agentState {
	if d.agents == nil {
		d.agents = map[int]*agentState{}
	}
	a := d.agents[i]
	if a == nil {
		a = &agentState{}
		d.agents[i] = a
	}
	return a
}

// downtime is how long server i has been without its agent by now: since
// its last answered heartbeat, else since the first one missed.
func (a *agentState) downtime(now time.Time) time.Duration {
	from := a.lastUp
	if from.IsZero() {
		from = a.downFrom
	}
	if from.IsZero() {
		return 0
	}
	return now.Sub(from)
}

// noteAgent takes a heartbeat of server i into its agent state: an answer
// ends a redeploy or a give-up; a changed boot id is a reboot (an event).
// The caller holds d.mu.
func (d *Daemon) noteAgent(i int, n NodeObservation) []Event {
	a := d.agentOf(i)
	now := d.now()
	if !n.Reachable {
		if a.downFrom.IsZero() {
			a.downFrom = now
		}
		return nil
	}
	var evs []Event
	if n.BootID != "" && a.boot != "" && n.BootID != a.boot {
		down := a.downtime(now)
		evs = append(evs, d.ev("reboot", "", n.Name, fmt.Sprintf("%s rebooted (boot id %s, was %s); its agent answers after %s down", n.Name, short(n.BootID), short(a.boot), down.Round(time.Second)),
			redeployData{DowntimeS: down.Seconds()}))
		a.rebootAt = now
	}
	if n.BootID != "" {
		a.boot = n.BootID
	}
	a.lastUp, a.downFrom = now, time.Time{}
	a.tries, a.gaveUp, a.why, a.next, a.sshDown = 0, false, "", time.Time{}, false
	return evs
}

// rebootWindow is how long after a server's reboot was seen a job's exit
// there is the reboot's (the agent reports the exits with the new boot id,
// in that observation or the next).
const rebootWindow = time.Minute

// rebootedUnder names a server of js that rebooted within rebootWindow
// ("" when none): js's exit is the server's failure, not charged. The
// caller holds d.mu.
func (d *Daemon) rebootedUnder(js *jobState) string {
	for _, s := range js.servers {
		i, ok := d.srvIdx[s.Name]
		if !ok {
			continue
		}
		if a := d.agents[i]; a != nil && !a.rebootAt.IsZero() && d.now().Sub(a.rebootAt) <= rebootWindow {
			return s.Name
		}
	}
	return ""
}

// short is a boot id's first 8 characters.
func short(id string) string { return id[:min(len(id), 8)] }

// redeployChecks starts a redeploy of each server that missed its
// heartbeats and is due (not busy, not given up, past its backoff), each
// in its own goroutine; the results are stored as they come. It takes
// d.mu; the caller must not hold it.
func (d *Daemon) redeployChecks(ctx context.Context) {
	rd, ok := d.cfg.Exec.(AgentRedeployer)
	if !ok || d.cfg.Redeploy.Tries < 0 {
		return
	}
	d.mu.Lock()
	var due []int
	var from []time.Time // when each went down: its downtime counts from then
	for i, n := range d.nodes {
		if n.missed < d.cfg.HeartbeatMisses {
			continue
		}
		a := d.agentOf(i)
		if a.busy || a.gaveUp || a.off || d.now().Before(a.next) {
			continue
		}
		a.busy = true
		due = append(due, i)
		from = append(from, d.now().Add(-a.downtime(d.now())))
	}
	d.mu.Unlock()
	for k, i := range due {
		name := d.cfg.Servers[i].Name
		d.redeploying.Add(1)
		go func() {
			defer d.redeploying.Done()
			status, err := rd.Redeploy(ctx, name)
			if err := d.redeployDone(ctx, i, from[k], status, err); err != nil {
				d.log.Warn("redeploy", "server", name, "err", err)
			}
		}()
	}
}

// waitRedeploys waits for the redeploys under way (tests).
func (d *Daemon) waitRedeploys() { d.redeploying.Wait() }

// redeployDone stores the outcome of a redeploy of server i, which went
// down at downFrom. It takes d.mu.
func (d *Daemon) redeployDone(ctx context.Context, i int, downFrom time.Time, status string, rerr error) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	a := d.agentOf(i)
	name := d.cfg.Servers[i].Name
	now := d.now()
	backoff := d.cfg.Redeploy.Backoff
	switch {
	case errors.Is(rerr, ErrRedeployOff):
		a.busy, a.off = false, true
		return nil
	case errors.Is(rerr, ErrSSHDown):
		a.busy, a.next, a.why, a.sshDown = false, now.Add(backoff), rerr.Error(), true
		d.log.Info("redeploy: SSH does not answer; asking again later", "server", name, "err", rerr)
		return nil
	case rerr != nil && d.nodes[i].missed < d.cfg.HeartbeatMisses:
		// It answered meanwhile (an operator's deploy, a slow agent, or
		// this deploy's agent whose health check then failed): no failure
		// to count, but said. (A redeploy that passed is told even when
		// an observation saw the agent back first.)
		e := d.ev("redeploy-failed", "", name, fmt.Sprintf("%s answers heartbeats again, but the redeploy that started its agent failed: %v", name, rerr),
			redeployData{Status: status, Tries: a.tries, DowntimeS: now.Sub(downFrom).Seconds(), Err: rerr.Error()})
		err := d.write(ctx, nil, Batch{Events: []Event{e}}, func() { a.busy = false })
		if err != nil {
			a.busy = false
			return fmt.Errorf("store the redeploy of %s: %w", name, err)
		}
		d.publish()
		return nil
	}
	var e Event
	tries := a.tries
	var gaveUp bool
	var next time.Time
	down := now.Sub(downFrom)
	if rerr == nil {
		e = d.ev("redeploy", "", name, fmt.Sprintf("%s is back: its agent was %s after %s down; health check passed", name, statusWords(status), down.Round(time.Second)),
			redeployData{Status: status, Tries: tries + 1, DowntimeS: down.Seconds()})
		next = now.Add(backoff)
	} else {
		tries++
		data := redeployData{Status: status, Tries: tries, DowntimeS: down.Seconds(), Err: rerr.Error()}
		if tries >= d.cfg.Redeploy.Tries {
			gaveUp = true
			e = d.ev("redeploy-gave-up", "", name, fmt.Sprintf("%s is down: %d tries to start its agent failed (down %s); last: %v", name, tries, down.Round(time.Second), rerr), data)
		} else {
			wait := backoff << min(tries-1, 5)
			next = now.Add(wait)
			e = d.ev("redeploy-failed", "", name, fmt.Sprintf("%s: try %d of %d to start its agent failed, next in %s: %v", name, tries, d.cfg.Redeploy.Tries, wait, rerr), data)
		}
	}
	a.sshDown = false
	err := d.write(ctx, nil, Batch{Events: []Event{e}}, func() {
		a.busy, a.tries, a.gaveUp, a.next = false, tries, gaveUp, next
		if rerr != nil {
			a.why = rerr.Error()
		} else {
			a.why = ""
		}
	})
	if err != nil {
		a.busy, a.next = false, now.Add(backoff)
		return fmt.Errorf("store the redeploy of %s: %w", name, err)
	}
	d.publish()
	if rerr == nil {
		d.Kick() // its next heartbeat returns it to service
	}
	return nil
}

// statusWords says how a redeploy started the agent.
func statusWords(status string) string {
	switch status {
	case "deployed":
		return "deployed again"
	case "restarted", "upgraded":
		return status
	case "up to date":
		return "found running"
	case "":
		return "started"
	}
	return status
}

// downState is the state word and reason of server i, which misses its
// heartbeats: "redeploying" while the daemon tries to start its agent,
// "down" otherwise (with the reason when it gave up). The caller holds
// d.mu.
func (d *Daemon) downState(i int) (state, why string) {
	a := d.agents[i]
	if a == nil {
		return "down", ""
	}
	switch {
	case a.gaveUp:
		return "down", a.why
	case (a.busy || a.tries > 0) && !a.sshDown && !a.off && d.cfg.Redeploy.Tries >= 0:
		return "redeploying", a.why
	}
	return "down", a.why
}
