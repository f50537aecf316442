package control

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/replan/replan/sched"
)

// ErrBadState is returned when an operation does not apply to a job's
// current state (cancelling a finished job, releasing a running one).
var ErrBadState = errors.New("not possible in the job's state")

// Cancel ends a job: a running one is stopped without a checkpoint.
func (d *Daemon) Cancel(ctx context.Context, id string) (JobRecord, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	defer d.publish()
	js := d.jobs[id]
	if js == nil {
		r, err := d.cfg.Store.GetJob(ctx, id)
		if err != nil {
			return JobRecord{}, err
		}
		return r, fmt.Errorf("cancel %s: it is %s: %w", id, r.State, ErrBadState)
	}
	running := js.rec.State == StateRunning
	js.rec.State, js.rec.Reason, js.rec.FinishedAt, js.rec.Placement = StateCancelled, "cancelled by the operator", d.now(), nil
	if err := d.save(ctx, js, "cancel"); err != nil {
		return js.rec, err
	}
	d.release(id)
	delete(d.jobs, id)
	d.event(ctx, "cancel", id, "", js.spec.Name+" cancelled", nil)
	if running {
		if _, err := d.cfg.Exec.Stop(ctx, id, false); err != nil {
			return js.rec, fmt.Errorf("cancel %s: stop: %w", id, err)
		}
	}
	return js.rec, nil
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
	js := d.jobs[id]
	if js == nil {
		r, err := d.cfg.Store.GetJob(ctx, id)
		if err != nil {
			return JobRecord{}, err
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
	js.rec.State, js.rec.Reason = to, reason
	if err := d.save(ctx, js, string(to)); err != nil {
		return js.rec, err
	}
	d.event(ctx, string(to), id, "", fmt.Sprintf("%s %s", js.spec.Name, to), nil)
	return js.rec, nil
}

// Drain stops scheduling onto a server and moves its jobs off: each is
// checkpointed and returned to the queue, and the next round places it
// elsewhere (the reconfiguration sequence split across two rounds).
func (d *Daemon) Drain(ctx context.Context, server string) ([]string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	defer d.publish()
	i, ok := d.srvIdx[server]
	if !ok {
		return nil, fmt.Errorf("drain: unknown server %q", server)
	}
	d.nodes[i].drained = true
	if err := d.cfg.Store.PutNode(ctx, NodeRecord{Name: server, Reachable: d.nodes[i].reachable, Drained: true, Missed: d.nodes[i].missed, UpdatedAt: d.now()}); err != nil {
		return nil, err
	}
	d.event(ctx, "drain", "", server, server+" drained", nil)
	var moved []string
	var errs []error
	for _, js := range d.jobsOn(server) {
		d.stopRun(js)
		js.rec.State, js.rec.Reason, js.rec.Placement = StatePreempted, "moved off drained server "+server, nil
		if err := d.save(ctx, js, "drain "+server); err != nil {
			errs = append(errs, err)
			continue
		}
		d.release(js.rec.ID)
		js.servers = nil
		ckpt, err := d.cfg.Exec.Stop(ctx, js.rec.ID, true)
		if err != nil {
			errs = append(errs, err)
		} else if ckpt > js.rec.Checkpoint {
			js.rec.Checkpoint, js.rec.Iterations = ckpt, ckpt
			d.save(ctx, js, "checkpoint")
		}
		moved = append(moved, js.rec.ID)
	}
	return moved, errors.Join(errs...)
}

// Undrain lets the scheduler use a server again.
func (d *Daemon) Undrain(ctx context.Context, server string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	defer d.publish()
	i, ok := d.srvIdx[server]
	if !ok {
		return fmt.Errorf("undrain: unknown server %q", server)
	}
	d.nodes[i].drained = false
	d.event(ctx, "undrain", "", server, server+" back in service", nil)
	return d.cfg.Store.PutNode(ctx, NodeRecord{Name: server, Reachable: d.nodes[i].reachable, Missed: d.nodes[i].missed, UpdatedAt: d.now()})
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

func (d *Daemon) queueLocked() []QueueEntry {
	var out []QueueEntry
	now := d.now()
	for id, js := range d.jobs {
		if js.rec.State == StateRunning {
			continue
		}
		reason := d.waits[id]
		if js.rec.State == StateHeld {
			reason = "held by the operator"
		} else if reason == "" {
			reason = js.rec.Reason
		}
		if reason == "" {
			reason = "not scheduled yet"
		}
		e := QueueEntry{Job: js.rec, GPUs: js.spec.Request.GPUs, Reason: reason, WaitingS: now.Sub(js.rec.SubmittedAt).Seconds()}
		if t, ok := d.timers[id]; ok && js.rec.State != StateHeld {
			e.Timers = &t
		}
		out = append(out, e)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Job.ID < out[b].Job.ID })
	return out
}

// NodeView is a server with what the daemon knows of it.
type NodeView struct {
	ServerInfo
	Reachable bool     `json:"reachable"`
	Drained   bool     `json:"drained"`
	Missed    int      `json:"missed_heartbeats"`
	FreeGPUs  int      `json:"free_gpus"`
	Jobs      []string `json:"jobs"`
	// GPUOwners is the job holding each GPU index ("" when free).
	GPUOwners []string `json:"gpu_owners"`
	// State is up, drained or down; GPUStats the GPUs' figures as last
	// observed (telemetry.go); IdleHeld the GPUs a job holds that are idle.
	State    string    `json:"state"`
	GPUStats []GPUStat `json:"gpu_stats"`
	IdleHeld []int     `json:"idle_held_gpus,omitempty"`
	// AsOf is the daemon's clock when this view was taken.
	AsOf time.Time `json:"as_of"`
}

// Nodes lists every server, as of the last published view.
func (d *Daemon) Nodes() []NodeView { return d.view().nodes }

func (d *Daemon) nodesLocked() []NodeView {
	var out []NodeView
	for i, info := range d.cfg.Servers {
		v := NodeView{ServerInfo: info, Reachable: d.nodes[i].missed < d.cfg.HeartbeatMisses, Drained: d.nodes[i].drained, Missed: d.nodes[i].missed, Jobs: []string{},
			GPUOwners: append([]string(nil), d.owner[i].gpu...)}
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
		d.nodeTelemetry(i, &v) // state and GPU figures (telemetry.go)
		out = append(out, v)
	}
	return out
}

// LastRound reports the last scheduling round.
func (d *Daemon) LastRound() RoundStats { return d.view().round }
