package control

// Suspect servers: launch failures are attributed to the servers of the
// launch; a server where launches of SuspectAfter different jobs failed
// within SuspectWindow gets no new starts (Nomad's BadNodeTracker), and
// failures there do not consume the jobs' restart budgets.

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/replan/replan/launch"
)

type launchFailure struct {
	job     string
	at      time.Time
	line    string // the error's last line
	counted bool   // it consumed the job's restart budget
}

type pendingRequeue struct {
	why   string
	count bool
}

// lastLine is the last non-empty line of an error message.
func lastLine(err error) string {
	lines := strings.Split(strings.TrimSpace(err.Error()), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// launchFailed records that the launch of js on servers failed and
// requeues js (store first). A failure on a server that is or becomes
// suspect does not count against the job's restart budget, and the
// failures that made the server suspect are given back. The caller holds
// d.mu.
func (d *Daemon) launchFailed(ctx context.Context, js *jobState, servers []launch.Server, lerr error) error {
	id := js.rec.ID
	now := d.now()
	line := lastLine(lerr)
	onSuspect := false
	// A server that stopped answering is the server's fault, not the
	// job's or the launch's (sshexec.go ErrServerUnreachable): no charge,
	// no launch failure held against the servers, no backoff but the
	// fence's; heartbeats deal with the server.
	unreachable := errors.Is(lerr, ErrServerUnreachable)
	if unreachable {
		servers = nil
	}
	var newly []string
	for _, s := range servers {
		i, ok := d.srvIdx[s.Name]
		if !ok {
			continue
		}
		if d.nodes[i].suspect {
			onSuspect = true
		}
		keep := d.launchFails[s.Name][:0]
		for _, f := range d.launchFails[s.Name] {
			if now.Sub(f.at) <= d.cfg.SuspectWindow {
				keep = append(keep, f)
			}
		}
		d.launchFails[s.Name] = append(keep, launchFailure{job: id, at: now, line: line})
		jobs := map[string]bool{}
		for _, f := range d.launchFails[s.Name] {
			jobs[f.job] = true
		}
		if !d.nodes[i].suspect && len(jobs) >= d.cfg.SuspectAfter {
			newly = append(newly, s.Name)
			onSuspect = true
		}
	}
	why := fmt.Sprintf("launch failed: %v", lerr)
	up, e, final := d.requeueChange(js, why, !onSuspect && !unreachable)
	ups := []jobUpdate{up}
	b := Batch{Events: []Event{e}}
	refund := map[string]int{}
	for _, name := range newly {
		i := d.srvIdx[name]
		var lines []string
		for _, f := range d.launchFails[name] {
			lines = append(lines, fmt.Sprintf("%s: %s", f.job, hideLogLines(f.line))) // no job's logs (redact.go)
			if f.counted && f.job != id {
				refund[f.job]++
			}
		}
		whyS := fmt.Sprintf("launches of %d jobs failed within %s: %s", len(lines), d.cfg.SuspectWindow, strings.Join(lines, "; "))
		n := d.nodes[i]
		b.Nodes = append(b.Nodes, NodeRecord{Name: name, Reachable: n.reachable, Drained: n.drained, Missed: n.missed, Suspect: true, SuspectWhy: whyS, UpdatedAt: now})
		b.Events = append(b.Events, d.ev("suspect", "", name, name+" is suspect, no new starts there: "+whyS, nil))
	}
	ids := make([]string, 0, len(refund))
	for j := range refund {
		ids = append(ids, j)
	}
	sort.Strings(ids)
	for _, j := range ids {
		other := d.jobs[j]
		if other == nil || other.stopping {
			continue
		}
		rec := other.rec
		rec.Failures = max(rec.Failures-refund[j], 0)
		ups = append(ups, jobUpdate{other, rec, "launch failures on a suspect server given back"})
	}
	err := d.write(ctx, ups, b, func() {
		for _, name := range newly {
			i := d.srvIdx[name]
			d.nodes[i].suspect = true
			for k := range d.launchFails[name] {
				d.launchFails[name][k].counted = false
			}
			for _, nr := range b.Nodes {
				if nr.Name == name {
					d.nodes[i].suspectWhy = nr.SuspectWhy
				}
			}
		}
		if !onSuspect {
			for _, s := range servers {
				fs := d.launchFails[s.Name]
				if len(fs) > 0 && fs[len(fs)-1].job == id {
					fs[len(fs)-1].counted = true
				}
			}
		}
		d.afterRequeue(js, final, false)
		if unreachable {
			// What it launched there may still run until its lease ends:
			// it starts again only once that is certain (fence.go).
			d.holdForFence(js)
		} else {
			js.launchFails++
			js.backoff = now.Add(d.cfg.LaunchBackoff << min(js.launchFails-1, 5))
			js.backoffWhy = "its last launch failed: it waits before the next try"
			if js.launchFails > 1 {
				js.backoffWhy = fmt.Sprintf("its last %d launches failed: it waits before the next try", js.launchFails)
			}
		}
	})
	if err != nil {
		// Memory still says running (as the store does); the requeue is
		// retried at the next Observe.
		d.requeues[id] = pendingRequeue{why: why, count: !onSuspect && !unreachable}
		return fmt.Errorf("requeue %s after a failed launch: %w", id, err)
	}
	return nil
}

// clearSuspect stores that server i is no longer suspect, then forgets
// its failures. The caller holds d.mu.
func (d *Daemon) clearSuspect(ctx context.Context, i int, why string) error {
	n := d.nodes[i]
	name := d.cfg.Servers[i].Name
	b := Batch{Nodes: []NodeRecord{{Name: name, Reachable: n.reachable, Drained: n.drained, Missed: n.missed, UpdatedAt: d.now()}},
		Events: []Event{d.ev("unsuspect", "", name, name+" is no longer suspect: "+why, nil)}}
	return d.write(ctx, nil, b, func() {
		d.nodes[i].suspect, d.nodes[i].suspectWhy = false, ""
		delete(d.launchFails, name)
	})
}

// healthChecks runs the executor's health check on suspect servers that
// answer heartbeats (at most once per minute of the daemon's clock each),
// all at once, and clears those that pass. It takes d.mu; the caller must
// not hold it.
func (d *Daemon) healthChecks(ctx context.Context) error {
	hc, ok := d.cfg.Exec.(HealthChecker)
	if !ok {
		return nil
	}
	d.mu.Lock()
	var due []int
	for i, n := range d.nodes {
		name := d.cfg.Servers[i].Name
		if n.suspect && !d.slowSuspect(name) && n.missed < d.cfg.HeartbeatMisses && d.now().Sub(d.checked[name]) >= time.Minute {
			due = append(due, i)
			d.checked[name] = d.now()
		}
	}
	d.mu.Unlock()
	passed := make([]bool, len(due))
	var wg sync.WaitGroup
	for k, i := range due {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := d.cfg.Servers[i].Name
			err := hc.Check(ctx, name)
			if err != nil {
				d.log.Info("health check of a suspect server failed", "server", name, "err", err)
			}
			passed[k] = err == nil
		}()
	}
	wg.Wait()
	var errs []error
	for k, i := range due {
		if !passed[k] {
			continue
		}
		name := d.cfg.Servers[i].Name
		d.mu.Lock()
		if d.nodes[i].suspect {
			if err := d.clearSuspect(ctx, i, "health check passed"); err != nil {
				errs = append(errs, fmt.Errorf("clear suspect %s: %w", name, err))
			}
		}
		d.publish()
		d.mu.Unlock()
	}
	return errors.Join(errs...)
}
