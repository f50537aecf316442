package control

// Time limits (spec time_limit; the inventory's tenants[].time_limit_default
// and time_limit_max): a job's time counts while it holds resources (from
// each start to each stop), not while it waits. At the limit a running job
// is checkpointed and stopped through the executor's stop-with-checkpoint
// and ends failed, its reason saying so ("stopped at its time limit 12h
// after running 12h0m; checkpoint 1234"). The forward simulation of the
// ETA caps each job's remaining run time by its remaining limit. See
// docs/control.md, "Time limits".

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/replan/replan/internal/timelimit"
	"github.com/replan/replan/jobspec"
	"github.com/replan/replan/perf"
	"github.com/replan/replan/sched"
	"github.com/replan/replan/sim"
)

// tenantInfo is the inventory's tenant name (nil when unknown).
func (d *Daemon) tenantInfo(name string) *TenantInfo {
	for i := range d.cfg.Tenants {
		if d.cfg.Tenants[i].Name == name {
			return &d.cfg.Tenants[i]
		}
	}
	return nil
}

// withTenantLimit is spec with its tenant's time limit when it sets none:
// time_limit_default, else time_limit_max (a copy; spec is not changed).
// The limit is stored with the job: a later change of the inventory does
// not change the limit of a job already submitted.
func (d *Daemon) withTenantLimit(spec *jobspec.Spec) *jobspec.Spec {
	if spec.TimeLimit > 0 {
		return spec
	}
	t := d.tenantInfo(spec.Tenant)
	if t == nil {
		return spec
	}
	lim := t.TimeLimitDefault
	if lim <= 0 {
		lim = t.TimeLimitMax
	}
	if lim <= 0 {
		return spec
	}
	c := *spec
	c.TimeLimit = lim
	return &c
}

// admitTimeLimit refuses a time limit above the tenant's time_limit_max.
func (d *Daemon) admitTimeLimit(spec *jobspec.Spec, add func(field, format string, args ...any)) {
	t := d.tenantInfo(spec.Tenant)
	if t == nil || t.TimeLimitMax <= 0 || spec.TimeLimit <= t.TimeLimitMax {
		return
	}
	add("time_limit", "%s is above the time_limit_max of tenant %s, %s", spec.TimeLimit, spec.Tenant, t.TimeLimitMax)
}

// ranTime is how long js has held resources in all by now.
func (js *jobState) ranTime(now time.Time) time.Duration {
	r := js.ranFor
	if !js.runFrom.IsZero() {
		r += max(now.Sub(js.runFrom), 0)
	}
	return r
}

// runTimeOf is, from a job's history, how long it held resources before
// its current run (ranFor) and when its current run began (runFrom, zero
// when it does not run): what recovery restores, so a daemon restart does
// not reset the time counted against a limit.
func runTimeOf(h []Transition) (ranFor time.Duration, runFrom time.Time) {
	for _, tr := range h {
		switch {
		case tr.To == StateRunning && tr.From != StateRunning:
			runFrom = tr.At
		case tr.From == StateRunning && tr.To != StateRunning && !runFrom.IsZero():
			ranFor += max(tr.At.Sub(runFrom), 0)
			runFrom = time.Time{}
		}
	}
	return ranFor, runFrom
}

// timeLimitReason is the final reason of a job stopped at its limit.
func timeLimitReason(limit jobspec.Duration, ran time.Duration, ckpt int) string {
	return fmt.Sprintf("stopped at its time limit %s after running %s; checkpoint %d", limit, timelimit.Ran(ran), ckpt)
}

// atLimit is a job that reached its time limit: stored failed, to be
// stopped with a checkpoint (running) by stopAtLimit.
type atLimit struct {
	js      *jobState
	id      string
	ran     time.Duration
	running bool
}

// expireTimeLimits stores every job that reached its time limit as failed
// with the reason, and takes it out of the daemon's jobs; a running one
// keeps its devices (stopping) until stopAtLimit has stopped it. A job
// whose write fails is left as it was (the next round tries again). The
// caller holds d.mu.
func (d *Daemon) expireTimeLimits(ctx context.Context) ([]atLimit, error) {
	now := d.now()
	var ids []string
	for id, js := range d.jobs {
		if js.spec.TimeLimit <= 0 || js.stopping || d.unsettled(id) {
			continue
		}
		switch js.rec.State {
		case StateRunning, StateQueued, StatePreempted, StateUnschedulable:
		default:
			continue // held: the operator decides
		}
		if js.ranTime(now) >= time.Duration(js.spec.TimeLimit) {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	var out []atLimit
	var errs []error
	for _, id := range ids {
		js := d.jobs[id]
		running := js.rec.State == StateRunning
		ran := js.ranTime(now)
		rec := js.rec
		rec.Checkpoint = max(rec.Checkpoint, js.ckpt)
		rec.Iterations = max(rec.Iterations, js.iters)
		rec.State, rec.FinishedAt, rec.Placement = StateFailed, now, nil
		rec.Reason = timeLimitReason(js.spec.TimeLimit, ran, rec.Checkpoint)
		if !running {
			rec.Reason = fmt.Sprintf("reached its time limit %s after running %s; checkpoint %d", js.spec.TimeLimit, timelimit.Ran(ran), rec.Checkpoint)
		}
		e := d.ev("timeout", id, "", js.spec.Name+" "+rec.Reason, map[string]any{"time_limit": js.spec.TimeLimit, "ran_s": ran.Seconds()})
		err := d.write(ctx, []jobUpdate{{js, rec, "time limit"}}, Batch{Events: []Event{e}}, func() {
			delete(d.jobs, id)
			delete(d.waits, id)
			d.stopRun(js)
			js.servers = nil
			if running {
				js.stopping = true
			} else {
				d.release(id)
			}
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("time limit of %s: %w", id, err))
			continue
		}
		if running {
			out = append(out, atLimit{js, id, ran, true})
		}
	}
	return out, errors.Join(errs...)
}

// stopAtLimit stops each running job expireTimeLimits failed, with a
// checkpoint, frees its devices and stores the checkpoint the stop wrote
// in its record and reason. It takes d.mu; the caller must not hold it.
func (d *Daemon) stopAtLimit(ctx context.Context, jobs []atLimit) error {
	var errs []error
	for _, j := range jobs {
		if err := d.later(j.id, "time limit", func() error { return d.stopOneAtLimit(ctx, j) }); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// stopOneAtLimit is stopAtLimit's work for one job (in the background
// with Config.Background: background.go).
func (d *Daemon) stopOneAtLimit(ctx context.Context, j atLimit) error {
	j.js.exec.Lock()
	from := d.now()
	ckpt, err := d.cfg.Exec.Stop(ctx, j.id, true)
	took := d.now().Sub(from)
	j.js.exec.Unlock()
	d.mu.Lock()
	defer d.mu.Unlock()
	defer d.publishSoon()
	d.release(j.id)
	j.js.stopping = false
	switch {
	case err != nil:
		return fmt.Errorf("stop %s at its time limit: %w", j.id, err)
	case ckpt > j.js.rec.Checkpoint:
		if cerr := d.noteCheckpointCost(ctx, j.js, took); cerr != nil {
			d.log.Warn("checkpoint cost", "job", j.id, "err", cerr)
		}
		rec := j.js.rec
		rec.Checkpoint, rec.Iterations = ckpt, max(rec.Iterations, ckpt)
		rec.Reason = timeLimitReason(j.js.spec.TimeLimit, j.ran, ckpt)
		if werr := d.write(ctx, []jobUpdate{{j.js, rec, "checkpoint at the time limit"}}, Batch{}, nil); werr != nil {
			return fmt.Errorf("stop %s at its time limit: checkpoint %d: %w", j.id, ckpt, werr)
		}
	}
	return nil
}

// capByTimeLimit caps what the forward simulation expects of each job with
// a time limit: the iterations it can still run in its remaining limit at
// its rate (a running job's measured or predicted rate; a waiting job's
// predicted on its request, less a restart). The caller holds d.mu.
func (d *Daemon) capByTimeLimit(snap *sched.Snapshot, extra map[string]sim.ForwardJob, restart float64, now time.Time) {
	per := 1
	for _, s := range d.cfg.Servers {
		per = max(per, s.GPUs)
	}
	for i := range snap.Jobs {
		sj := &snap.Jobs[i]
		js := d.jobs[sj.ID]
		if js == nil || js.spec.TimeLimit <= 0 || js.spec.GlobalBatch <= 0 {
			continue
		}
		left := (time.Duration(js.spec.TimeLimit) - js.ranTime(now)).Seconds()
		var rate float64 // iterations per second
		if len(sj.Alloc) > 0 {
			fj := extra[sj.ID]
			rate = fj.Rate
			if rate <= 0 {
				rate = js.predSPS / float64(js.spec.GlobalBatch)
			}
			left -= max(fj.RestartLeft, 0)
		} else {
			g := max(sj.ReqGPUs, 1)
			r := perf.Resources{Placement: perf.PackedPlacement(g, per), CPUsPerGPU: float64(sj.ReqCPUs) / float64(g)}
			if b, err := d.model(js.spec).Model.Predict(sj.ReqPlan, r); err == nil && b.Iter > 0 {
				rate = 1 / b.Iter
			}
			left -= max(restart, 0)
		}
		if rate <= 0 {
			continue
		}
		sj.ItersTotal = min(sj.ItersTotal, sj.ItersDone+rate*max(left, 0))
	}
}
