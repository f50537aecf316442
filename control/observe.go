package control

// Observe: the executor's news applied store first.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/replan/replan/perf"
)

// Observe asks the executor for news and applies it: progress, finished
// and failed jobs, throughput samples (refitting models that are more than
// 10% off), and server heartbeats. Every change is stored before memory
// changes; news whose store write failed (a finish during a full disk) is
// kept and applied again at the next Observe.
func (d *Daemon) Observe(ctx context.Context) error {
	obs, err := d.cfg.Exec.Observe(ctx)
	if err != nil {
		return fmt.Errorf("observe: %w", err)
	}
	var errs []error
	type stopReq struct {
		js *jobState
		id string
	}
	var stops []stopReq
	var cordoned []*jobState // jobs on GPUs cordoned now (health.go)
	d.mu.Lock()
	d.noteFailures(obs)         // checkpoint.go
	d.observeProfiles(obs.Jobs) // profile.go: runs of profiling phases
	for _, n := range obs.Nodes {
		i, ok := d.srvIdx[n.Name]
		if !ok {
			continue
		}
		ns := d.nodes[i]
		d.keepTelemetry(i, n) // GPU figures (telemetry.go)
		if n.Reachable {
			moved, err := d.cordonGPUs(ctx, i, n.GPUs) // health.go
			if err != nil {
				errs = append(errs, err)
			}
			cordoned = append(cordoned, moved...)
		}
		next := ns
		var b Batch
		var ups []jobUpdate
		var down []*jobState
		var finals []bool
		b.Events = d.noteAgent(i, n) // redeploy.go: a changed boot id is a reboot
		if n.Reachable {
			next.missed, next.reachable = 0, true
			if ns.missed >= d.cfg.HeartbeatMisses {
				b.Events = append(b.Events, d.ev("node-up", "", n.Name, n.Name+" answers again", nil))
			}
		} else {
			next.missed++
			next.reachable = false
			if next.missed == d.cfg.HeartbeatMisses {
				b.Events = append(b.Events, d.ev("node-down", "", n.Name, fmt.Sprintf("%s missed %d heartbeats: %s", n.Name, next.missed, n.Err), nil))
				for _, js := range d.jobsOn(n.Name) {
					up, e, final := d.requeueChange(js, fmt.Sprintf("server %s stopped answering; back to the queue from checkpoint %d", n.Name, max(js.rec.Checkpoint, js.ckpt)), false)
					ups = append(ups, up)
					b.Events = append(b.Events, e)
					down = append(down, js)
					finals = append(finals, final)
				}
			}
		}
		if next == ns && len(b.Events) == 0 {
			continue // nothing to store: heartbeats that change nothing are not written
		}
		b.Nodes = []NodeRecord{{Name: n.Name, Reachable: n.Reachable, Drained: ns.drained, Missed: next.missed, Suspect: ns.suspect, SuspectWhy: ns.suspectWhy, UpdatedAt: d.now()}}
		err := d.write(ctx, ups, b, func() {
			d.nodes[i] = next
			for k, js := range down {
				d.afterRequeue(js, finals[k], true)
				stops = append(stops, stopReq{js, js.rec.ID})
			}
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("observe %s: %w", n.Name, err))
		}
	}
	d.notePeaks(obs.Jobs) // mempeak.go: with the telemetry just kept
	// News whose write failed last time comes again (the executor may not
	// repeat it: a finished job is reported once).
	jobs := obs.Jobs
	var progress []*jobState
	for id, p := range d.pending {
		k := slices.IndexFunc(jobs, func(o JobObservation) bool { return o.JobID == id })
		if k < 0 {
			jobs = append(jobs, p)
		} else if p.Exited && !jobs[k].Exited {
			jobs[k] = p
		}
	}
	for _, o := range jobs {
		js := d.jobs[o.JobID]
		if js == nil || js.stopping || js.rec.State != StateRunning {
			delete(d.pending, o.JobID)
			continue
		}
		if d.busy[o.JobID] > 0 {
			// An executor call for it is under way (background.go): what
			// the executor says of it meanwhile is applied once it returned.
			d.pending[o.JobID] = o
			continue
		}
		if o.Iterations > js.iters {
			js.progressAt, js.loggedIters = d.now(), true // a new iteration (hang.go)
		}
		iters := max(js.iters, o.Iterations)
		ckpt := max(js.ckpt, o.Checkpoint)
		if o.SamplesPerSec > 0 {
			js.launchFails = 0 // it runs: its launches succeed again
			js.measSPS = o.SamplesPerSec
			js.measAt = d.now() // with iters: the ETA's progress since
			if d.noteSpeed(js, o.SamplesPerSec, o.Iterations > js.iters) {
				// Kept from the model until its slowness is judged (failslow.go).
			} else if err := d.refit(ctx, js, o.SamplesPerSec); err != nil {
				errs = append(errs, err)
			}
		}
		id := js.rec.ID
		switch {
		case iters >= js.spec.Iterations || (o.Exited && o.ExitCode == 0):
			rec := js.rec
			rec.State, rec.FinishedAt, rec.Reason = StateFinished, d.now(), ""
			rec.Placement = nil
			rec.Iterations, rec.Checkpoint = iters, ckpt
			b := Batch{Events: []Event{d.ev("finish", id, "", fmt.Sprintf("%s finished after %s", js.spec.Name, iterations(iters)), nil)}}
			err := d.write(ctx, []jobUpdate{{js, rec, "finished"}}, b, func() {
				d.release(id)
				delete(d.jobs, id)
				delete(d.pending, id)
				delete(d.requeues, id)
			})
			if err != nil {
				o.Iterations, o.Checkpoint, o.Exited = iters, ckpt, true
				d.pending[id] = o
				errs = append(errs, fmt.Errorf("observe: finish %s: %w", id, err))
			}
		case o.Exited:
			js.iters, js.ckpt = iters, ckpt
			d.noteExit(js) // a cordon of its GPU soon after gives the failure back (health.go)
			// The log lines o.Err quotes end the reason (redact.go).
			cause, lines := splitLogLines(o.Err)
			why, count := fmt.Sprintf("exited with code %d%s; restarting from checkpoint %d", o.ExitCode, suffix(cause), ckpt), true
			if s := d.rebootedUnder(js); s != "" { // redeploy.go: the server, not the job, failed
				why, count = why+"; not counted: "+s+" rebooted", false
			}
			why += lines
			if err := d.requeue(ctx, js, why, count); err != nil {
				o.Iterations, o.Checkpoint = iters, ckpt
				d.pending[id] = o
				errs = append(errs, fmt.Errorf("observe: requeue %s: %w", id, err))
			} else {
				delete(d.pending, id)
			}
		default:
			js.iters, js.ckpt = iters, ckpt
			delete(d.pending, id)
			// A new checkpoint is written at once (it is what a restart
			// resumes from); plain progress at most every ProgressEvery.
			since := d.now().Sub(js.saved)
			if ckpt != js.rec.Checkpoint && since >= d.cfg.ProgressEvery || since >= 4*d.cfg.ProgressEvery && iters != js.rec.Iterations {
				progress = append(progress, js)
			}
		}
	}
	// Failed launches whose requeue could not be stored.
	for id, p := range d.requeues {
		js := d.jobs[id]
		if js == nil || js.rec.State != StateRunning {
			delete(d.requeues, id)
			continue
		}
		if err := d.requeue(ctx, js, p.why, p.count); err != nil {
			errs = append(errs, fmt.Errorf("observe: requeue %s: %w", id, err))
		}
	}
	// An observation that stored events (a job finished, failed or was
	// requeued) publishes at once; one that only moved progress figures
	// rebuilds the view at most every 100 ms (rebuilding the view of
	// 5,000 jobs after each was a fifth of the daemon's CPU with rounds
	// back to back; a reader of a view left stale rebuilds it when the
	// lock is free).
	if d.announce.Load() {
		d.publish()
	} else {
		d.publishSoon()
	}
	d.mu.Unlock()
	// Progress is stored in transactions of up to 64 jobs, the lock let
	// go between them (each built from the job's state of that moment).
	for lo := 0; lo < len(progress); lo += 64 {
		d.mu.Lock()
		var ups []jobUpdate
		for _, js := range progress[lo:min(lo+64, len(progress))] {
			if d.jobs[js.rec.ID] != js || js.stopping || js.rec.State != StateRunning || d.unsettled(js.rec.ID) {
				continue
			}
			rec := js.rec
			rec.Iterations, rec.Checkpoint = js.iters, js.ckpt
			ups = append(ups, jobUpdate{js, rec, "progress"})
		}
		if err := d.write(ctx, ups, Batch{}, func() {
			for _, u := range ups {
				u.js.saved = d.now()
			}
		}); err != nil {
			errs = append(errs, fmt.Errorf("observe: progress of %d jobs: %w", len(ups), err))
		}
		d.mu.Unlock()
	}
	for _, s := range stops {
		if err := d.later(s.id, "stop", func() error { return d.stopAndRelease(ctx, s.js, s.id, false) }); err != nil {
			errs = append(errs, err)
		}
	}
	for _, js := range cordoned {
		id := js.rec.ID
		if err := d.later(id, "stop", func() error { return d.stopAndRelease(ctx, js, id, true) }); err != nil {
			errs = append(errs, err)
		}
	}
	if len(stops)+len(cordoned) > 0 {
		d.publishNow()
	}
	if err := d.healthChecks(ctx); err != nil {
		errs = append(errs, err)
	}
	if err := d.hangChecks(ctx); err != nil { // hang.go
		errs = append(errs, err)
	}
	d.redeployChecks(ctx)                     // redeploy.go: agents gone from servers that answer SSH
	if err := d.slowChecks(ctx); err != nil { // failslow.go
		errs = append(errs, err)
	}
	if err := d.profileStep(ctx); err != nil { // profile.go
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// refit feeds a measured throughput to the job's model type; a refitted
// model is stored before it replaces the one in memory, and the running
// jobs of the type then show its predictions. A refit is told (a "refit"
// event) only when it moved the predictions by more than perf.RefitMoved;
// samples that do not refit are stored with the model at most every
// ProgressEvery, so models and samples survive a restart. The caller holds
// d.mu.
func (d *Daemon) refit(ctx context.Context, js *jobState, sps float64) error {
	typ := modelTypeOf(js.spec)
	o := d.model(js.spec)
	r, ok := d.runningResources(js)
	if !ok {
		return nil
	}
	sample := perf.Sample{Plan: js.plan, Resources: r, IterS: float64(js.spec.GlobalBatch) / sps, PeakGPUGB: js.jobPeakGB()}
	// Most samples only join the history (no refit): those go straight to
	// the model, stored now and then; a sample that will refit it works
	// on a copy, installed once the refitted model is stored.
	if b, err := o.Model.Predict(sample.Plan, sample.Resources); err != nil || !perf.NeedsRefit(b.Iter, sample.IterS) || len(o.Samples)+1 < perf.MinSamples {
		if _, err := o.Observe(sample); err != nil {
			d.log.Warn("refit", "job", js.rec.ID, "err", err)
			return nil
		}
		if d.now().Sub(d.modelSaved[typ]) < d.cfg.ProgressEvery {
			return nil
		}
		c := *o
		_, _, moved := refitActScale(typ, &c) // mempeak.go
		raw, err := json.Marshal(&c)
		if err != nil {
			return fmt.Errorf("store model %s: %w", typ, err)
		}
		at := d.now()
		b := Batch{Models: []ModelWrite{{Type: typ.String(), Data: raw, At: at}}}
		if moved != "" {
			b.Events = []Event{d.ev("memory", js.rec.ID, "", moved, nil)}
		}
		if err := d.write(ctx, nil, b, func() {
			d.modelSaved[typ] = at
			if o.Model.Arch.ActScale != c.Model.Arch.ActScale {
				o.Model.Arch.ActScale = c.Model.Arch.ActScale
				d.dropSnapModels(typ)
			}
		}); err != nil {
			return fmt.Errorf("store model %s: %w", typ, err)
		}
		return nil
	}
	c := *o
	c.Samples = slices.Clone(o.Samples)
	refitted, err := c.Observe(sample)
	if err != nil {
		d.log.Warn("refit", "job", js.rec.ID, "err", err)
		return nil
	}
	if !refitted {
		*o = c
		return nil
	}
	at := d.now()
	c.FittedAt = at
	_, _, memMoved := refitActScale(typ, &c) // mempeak.go
	raw, err := json.Marshal(&c)
	if err != nil {
		return fmt.Errorf("refit %s: %w", typ, err)
	}
	b := Batch{Models: []ModelWrite{{Type: typ.String(), Data: raw, At: at}}}
	if memMoved != "" {
		b.Events = append(b.Events, d.ev("memory", js.rec.ID, "", memMoved, nil))
	}
	if moved := perf.PredictionShift(o.Model, c.Model, c.Samples); moved > perf.RefitMoved {
		b.Events = append(b.Events, d.ev("refit", js.rec.ID, "", fmt.Sprintf("model %s refitted on %d samples (measured %.2f samples/s): predictions moved up to %.0f%%", typ, len(c.Samples), sps, 100*moved), nil))
	}
	if err := d.write(ctx, nil, b, func() {
		*o = c
		d.modelSaved[typ] = at
		d.dropSnapModels(typ)
		for _, other := range d.jobs {
			if other.rec.State == StateRunning && len(other.servers) > 0 && modelTypeOf(other.spec) == typ {
				if p := d.predictRunning(other); p > 0 {
					other.predSPS = p
				}
			}
		}
	}); err != nil {
		return fmt.Errorf("refit %s: %w", typ, err)
	}
	return nil
}

// iterations is "1 iteration" or "n iterations".
func iterations(n int) string {
	if n == 1 {
		return "1 iteration"
	}
	return fmt.Sprintf("%d iterations", n)
}
