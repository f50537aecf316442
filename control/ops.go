package control

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/replan/replan/sched"
)

// ErrBadState is returned when an operation does not apply to a job's
// current state (cancelling a finished job, releasing a running one).
var ErrBadState = errors.New("not possible in the job's state")

// Cancel ends a job: a running one is stopped without a checkpoint. Once
// the cancel is stored it is carried out to the end even if the caller
// goes away (complete or not at all); the job's devices stay held until
// the executor confirms the stop.
func (d *Daemon) Cancel(ctx context.Context, id string) (JobRecord, error) {
	d.mu.Lock()
	js := d.jobs[id]
	if js == nil {
		d.mu.Unlock()
		r, err := d.cfg.Store.GetJob(ctx, id)
		if err != nil {
			return JobRecord{}, fmt.Errorf("cancel %s: %w", id, err)
		}
		return r, fmt.Errorf("cancel %s: it is %s: %w", id, r.State, ErrBadState)
	}
	ctx = context.WithoutCancel(ctx)
	running := js.rec.State == StateRunning
	rec := js.rec
	rec.State, rec.Reason, rec.FinishedAt, rec.Placement = StateCancelled, "cancelled by the operator", d.now(), nil
	err := d.write(ctx, []jobUpdate{{js, rec, "cancel"}}, Batch{Events: []Event{d.ev("cancel", id, "", js.spec.Name+" cancelled", nil)}}, func() {
		delete(d.jobs, id)
		delete(d.waits, id)
		delete(d.pending, id)
		delete(d.requeues, id)
		d.stopRun(js)
		js.servers = nil
		switch {
		case running:
			js.stopping = true
		case !js.stopping:
			d.release(id)
		}
	})
	out := js.rec
	d.clientOp()
	d.publish()
	d.mu.Unlock()
	if err != nil {
		return out, fmt.Errorf("cancel %s: %w", id, err)
	}
	if running {
		// The cancel is stored: the answer does not wait for the stop
		// (Config.Background), whose call waits out an unreachable
		// server's timeout; the GPUs stay held until it returns.
		err := d.later(id, "cancel", func() error {
			err := d.stopAndRelease(ctx, js, id, false)
			d.publishNow()
			return err
		})
		if err != nil {
			return out, fmt.Errorf("cancel %s: %w", id, err)
		}
	}
	return out, nil
}

// Hold keeps a waiting job out of scheduling until Release.
func (d *Daemon) Hold(ctx context.Context, id string) (JobRecord, error) {
	return d.transition(ctx, id, []JobState{StateQueued, StatePreempted}, StateHeld, "held by the operator")
}

// Release returns a held job to the queue.
func (d *Daemon) Release(ctx context.Context, id string) (JobRecord, error) {
	return d.transition(ctx, id, []JobState{StateHeld}, StateQueued, "")
}

func (d *Daemon) transition(ctx context.Context, id string, from []JobState, to JobState, reason string) (JobRecord, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	defer d.publish()
	d.clientOp()
	js := d.jobs[id]
	if js == nil {
		r, err := d.cfg.Store.GetJob(ctx, id)
		if err != nil {
			return JobRecord{}, fmt.Errorf("%s %s: %w", to, id, err)
		}
		return r, fmt.Errorf("%s %s: it is %s: %w", to, id, r.State, ErrBadState)
	}
	ok := false
	for _, f := range from {
		ok = ok || js.rec.State == f
	}
	if !ok {
		return js.rec, fmt.Errorf("%s %s: it is %s: %w", to, id, js.rec.State, ErrBadState)
	}
	rec := js.rec
	rec.State, rec.Reason = to, reason
	if err := d.write(ctx, []jobUpdate{{js, rec, string(to)}}, Batch{Events: []Event{d.ev(string(to), id, "", fmt.Sprintf("%s %s", js.spec.Name, to), nil)}}, nil); err != nil {
		return js.rec, fmt.Errorf("%s %s: %w", to, id, err)
	}
	return js.rec, nil
}

// nodeRecord is server i's stored record as memory has it.
func (d *Daemon) nodeRecord(i int) NodeRecord {
	n := d.nodes[i]
	return NodeRecord{Name: d.cfg.Servers[i].Name, Reachable: n.reachable, Drained: n.drained, Missed: n.missed, Suspect: n.suspect, SuspectWhy: n.suspectWhy, UpdatedAt: d.now()}
}

// Drain stops scheduling onto a server and moves its jobs off: the drain
// and every job's return to the queue are stored in one transaction, then
// each job is checkpointed and stopped, and the next round places it
// elsewhere (the reconfiguration sequence split across two rounds).
func (d *Daemon) Drain(ctx context.Context, server string) ([]string, error) {
	return d.DrainWith(ctx, server, DrainRequest{})
}

// DrainWith drains server as req says (drain.go): with req.AfterJobs its
// running jobs are left to finish (no new work goes there); otherwise
// they are moved off now, as Drain does. The reason, the caller in ctx
// and the time are stored with the drain.
func (d *Daemon) DrainWith(ctx context.Context, server string, req DrainRequest) ([]string, error) {
	d.mu.Lock()
	i, ok := d.srvIdx[server]
	if !ok {
		d.mu.Unlock()
		return nil, fmt.Errorf("drain: unknown server %q: %w", server, ErrNotFound)
	}
	dr := d.drainRecord(ctx, server, req)
	ctx = context.WithoutCancel(ctx)
	node := d.nodeRecord(i)
	node.Drained = true
	var ups []jobUpdate
	jobs := d.jobsOn(server)
	if req.AfterJobs {
		err := d.drainAfterJobs(ctx, i, node, dr, jobs)
		d.mu.Unlock()
		return []string{}, err
	}
	ids := make([]string, len(jobs))
	for k, js := range jobs {
		rec := js.rec
		rec.State, rec.Reason, rec.Placement = StatePreempted, "moved off drained server "+server, nil
		rec.Checkpoint = max(rec.Checkpoint, js.ckpt)
		ups = append(ups, jobUpdate{js, rec, "drain " + server})
		ids[k] = js.rec.ID
	}
	b := Batch{Nodes: []NodeRecord{node}, Drains: []NodeDrain{dr}, Events: []Event{d.ev("drain", "", server, drainMsg(server, ids)+reasonSuffix(dr.Reason), drainData{Jobs: ids})}}
	err := d.write(ctx, ups, b, func() {
		d.nodes[i].drained = true
		d.nodes[i].drain, d.nodes[i].drainSettled = dr, true
		for _, js := range jobs {
			d.stopRun(js)
			js.servers = nil
			js.stopping = true
		}
	})
	d.clientOp()
	d.publish()
	d.mu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("drain %s: %w", server, err)
	}
	moved := []string{}
	var errs []error
	for k, js := range jobs {
		// With the executor's work beside the loop (background.go) the
		// answer does not wait for the checkpoints, which may take longer
		// than a client waits: the drain and the requeues are stored.
		sctx := ctx
		if d.cfg.Background {
			sctx = context.WithoutCancel(ctx)
		}
		if err := d.later(ids[k], "drain", func() error {
			defer d.publishNow()
			return d.stopAndRelease(sctx, js, ids[k], true)
		}); err != nil {
			errs = append(errs, err)
		}
		moved = append(moved, ids[k])
	}
	d.publishNow()
	return moved, errors.Join(errs...)
}

// drainData is a drain event's data: the jobs it moves off the server.
type drainData struct {
	Jobs []string `json:"jobs"`
}

// drainMsg is a drain event's message; it names the jobs the drain moves
// (each is checkpointed, stopped and requeued).
func drainMsg(server string, ids []string) string {
	if len(ids) == 0 {
		return server + " drained: no jobs to move"
	}
	return fmt.Sprintf("%s drained: moving %s (checkpoint, stop, requeue)", server, strings.Join(ids, ", "))
}

// Undrain lets the scheduler use a server again; it also clears a
// suspect server.
func (d *Daemon) Undrain(ctx context.Context, server string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	defer d.publish()
	d.clientOp()
	i, ok := d.srvIdx[server]
	if !ok {
		return fmt.Errorf("undrain: unknown server %q: %w", server, ErrNotFound)
	}
	node := d.nodeRecord(i)
	node.Drained, node.Suspect, node.SuspectWhy = false, false, ""
	b := Batch{Nodes: []NodeRecord{node}, Drains: []NodeDrain{{Name: server}}, Events: []Event{d.ev("undrain", "", server, server+" back in service", nil)}}
	d.clearSlow(&b, server) // failslow.go
	if err := d.write(ctx, nil, b, func() {
		delete(d.fs.servers, server)
		d.nodes[i].drained, d.nodes[i].suspect, d.nodes[i].suspectWhy = false, false, ""
		d.nodes[i].drain = NodeDrain{}
		delete(d.launchFails, server)
	}); err != nil {
		return fmt.Errorf("undrain %s: %w", server, err)
	}
	return nil
}

// QueueEntry is a waiting job and why it waits.
type QueueEntry struct {
	Job      JobRecord `json:"job"`
	GPUs     int       `json:"gpus"`
	Reason   string    `json:"reason"`
	WaitingS float64   `json:"waiting_s"`
	// Timers are the job's delay timers (network-aware policies): the
	// server and rack timers, how long it has starved, the widest tier it
	// accepts now and why, its Nw_sens.
	Timers *sched.JobTimers `json:"timers,omitempty"`
	// ETAS is the estimated start in seconds from AsOf (a forward
	// simulation of the scheduler, eta.go); null when there is no
	// estimate, and ETAReason says why. ETAAt is the same as a time.
	ETAS      *float64   `json:"eta_s"`
	ETAAt     *time.Time `json:"eta_at"`
	ETAReason string     `json:"eta_reason,omitempty"`
	// AsOf is the daemon's clock when this entry was taken: waiting_s and
	// the timers are as of then.
	AsOf time.Time `json:"as_of"`
}

// Queue lists the jobs that wait (queued, preempted, held), oldest first,
// as of the last published view (it never waits for a round or an
// executor call in progress).
func (d *Daemon) Queue() []QueueEntry { return d.withETA(d.view()) }

// queueLocked builds the queue's entries from sorted, the ids of every
// job in order (sortedJobIDs); the caller holds d.mu.
func (d *Daemon) queueLocked(sorted []string) []QueueEntry {
	out := make([]QueueEntry, 0, roomForSubmits(len(sorted)))
	now := d.now()
	for _, id := range sorted {
		js := d.jobs[id]
		if js.rec.State == StateRunning {
			continue
		}
		reason := d.waits[id]
		if js.rec.State == StateHeld {
			reason = "held by the operator"
		} else if now.Before(js.backoff) && js.backoffWhy != "" {
			// Out of the rounds until then: the last round's reason is
			// not why it waits now.
			// The stored reason (what happened) ends it: quoted log lines
			// end a text (redact.go).
			reason = fmt.Sprintf("%s (not before %s, in %s)", js.backoffWhy, js.backoff.UTC().Format(time.TimeOnly), js.backoff.Sub(now).Round(time.Second))
			if why := hideLogLines(js.rec.Reason); why != "" {
				reason += ": " + why
			}
		} else if reason == "" {
			reason = hideLogLines(js.rec.Reason) // a list: no job's logs (redact.go)
		}
		if reason == "" {
			reason = "not scheduled yet"
		}
		out = append(out, QueueEntry{Job: js.rec, GPUs: js.spec.Request.GPUs, Reason: reason, WaitingS: waitedS(now, js.waitingSince())})
		if t, ok := d.timers[id]; ok && js.rec.State != StateHeld {
			out[len(out)-1].Timers = &t
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// waitingSince is when js began to wait this time: when it last stopped
// holding resources (a preemption, a failure, a drain), else its
// submission.
func (js *jobState) waitingSince() time.Time {
	if js.lastRun.After(js.rec.SubmittedAt) {
		return js.lastRun
	}
	return js.rec.SubmittedAt
}

// waitedS is how long a job submitted at sub has waited by now, in
// seconds; never negative, so a wall clock stepped back (NTP, an operator)
// reads as no wait rather than a negative one.
func waitedS(now, sub time.Time) float64 { return max(now.Sub(sub).Seconds(), 0) }

// NodeView is a server with what the daemon knows of it.
type NodeView struct {
	ServerInfo
	Reachable bool `json:"reachable"`
	Drained   bool `json:"drained"`
	Missed    int  `json:"missed_heartbeats"`
	// Suspect: launches of several jobs failed there; no new starts
	// until undrain or a passing health check. SuspectWhy names them.
	Suspect    bool   `json:"suspect,omitempty"`
	SuspectWhy string `json:"suspect_why,omitempty"`
	// State is one word: up, down, redeploying (it misses heartbeats and
	// the daemon starts its agent again, redeploy.go), drained, draining
	// (drained after its jobs, some still run there) or suspect.
	State string `json:"state"`
	// DownWhy is why a down or redeploying server's agent could not be
	// started (the last try's error; after the last try the server stays
	// down until its agent answers).
	DownWhy string `json:"down_why,omitempty"`
	// DrainReason, DrainedBy, DrainedAt and DrainMode (now or
	// after-jobs) say why, by whom, when and how it was drained
	// (drain.go); empty when it is not.
	DrainReason string     `json:"drain_reason,omitempty"`
	DrainedBy   string     `json:"drained_by,omitempty"`
	DrainedAt   *time.Time `json:"drained_at,omitempty"`
	DrainMode   string     `json:"drain_mode,omitempty"`
	FreeGPUs    int        `json:"free_gpus"`
	Jobs        []string   `json:"jobs"`
	// GPUOwners is the job holding each GPU index ("" when free).
	GPUOwners []string `json:"gpu_owners"`
	// GPUStats are the GPUs' figures as last observed (telemetry.go);
	// IdleHeld the GPUs a job holds that are idle.
	GPUStats []GPUStat `json:"gpu_stats"`
	IdleHeld []int     `json:"idle_held_gpus,omitempty"`
	// CordonedGPUs are the GPUs that get no new work, with their causes
	// (health.go); FreeGPUs does not count them.
	CordonedGPUs []GPUCordon `json:"cordoned_gpus,omitempty"`
	// AsOf is the daemon's clock when this view was taken.
	AsOf time.Time `json:"as_of"`
}

// Nodes lists every server, as of the last published view.
func (d *Daemon) Nodes() []NodeView { return d.view().nodes }

func (d *Daemon) nodesLocked() []NodeView {
	var out []NodeView
	for i, info := range d.cfg.Servers {
		n := d.nodes[i]
		v := NodeView{ServerInfo: info, Reachable: n.missed < d.cfg.HeartbeatMisses, Drained: n.drained, Missed: n.missed, Jobs: []string{},
			Suspect: n.suspect, SuspectWhy: n.suspectWhy, GPUOwners: append([]string(nil), d.owner[i].gpu...)}
		v.setDrain(n.drain) // drain.go
		switch {
		case n.drained && n.drain.Mode == DrainAfterJobs && holdsAny(d.owner[i].gpu):
			v.State = "draining"
		case n.drained:
			v.State = "drained"
		case !v.Reachable:
			v.State, v.DownWhy = d.downState(i) // redeploy.go
		case n.suspect:
			v.State = "suspect"
		default:
			v.State = "up"
		}
		seen := map[string]bool{}
		for _, o := range d.owner[i].gpu {
			if o == "" {
				v.FreeGPUs++
			} else if !seen[o] {
				seen[o] = true
				v.Jobs = append(v.Jobs, o)
			}
		}
		sort.Strings(v.Jobs)
		d.nodeTelemetry(i, &v) // GPU figures (telemetry.go)
		out = append(out, v)
	}
	return out
}

// LastRound reports the last scheduling round.
func (d *Daemon) LastRound() RoundStats { return d.view().round }

// lastStop is when a job's history last took it out of running (zero if
// it never left it).
func lastStop(h []Transition) time.Time {
	var t time.Time
	for _, tr := range h {
		if tr.From == StateRunning && tr.To != StateRunning {
			t = tr.At
		}
	}
	return t
}

// waitedInAll is the time job j spent not running between its submission
// and its end, from its history: every wait, not only the first.
func waitedInAll(j JobRecord, h []Transition) float64 {
	end := j.FinishedAt
	var ran time.Duration
	var since time.Time
	for _, tr := range h {
		switch {
		case tr.To == StateRunning && tr.From != StateRunning:
			since = tr.At
		case tr.From == StateRunning && tr.To != StateRunning && !since.IsZero():
			ran += tr.At.Sub(since)
			since = time.Time{}
		}
	}
	if !since.IsZero() && end.After(since) {
		ran += end.Sub(since)
	}
	return max(end.Sub(j.SubmittedAt)-ran, 0).Seconds()
}
