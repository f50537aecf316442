package control

// Estimated start times: the daemon simulates forward from its current
// state with its own policy (a separate instance), its fitted models and
// each running job's measured progress and throughput (sim.Forward, the
// simulator's engine), in the background. Reads never wait for it: they
// see the last estimate. Jobs not submitted yet are not guessed at
// (ETAWindow): an estimate is the start if nothing else arrives.

import (
	"context"
	"maps"
	"sync"
	"time"

	"github.com/replan/replan/perf"
	"github.com/replan/replan/sched"
	"github.com/replan/replan/sim"
)

// etaState is the background estimator's state; its mutex is taken after
// d.mu, never before.
type etaState struct {
	mu        sync.Mutex
	newPolicy func() sched.Policy
	policy    sched.Policy
	restart   float64 // the executor's checkpoint-restart cost, seconds
	every     float64 // seconds between the daemon's rounds
	running   bool
	dirty     bool
	asOf      time.Time            // the daemon's clock when the estimated state was taken
	at        map[string]time.Time // estimated start per waiting job
	why       map[string]string    // why a waiting job has no estimate
	first     map[string]time.Time // the first estimate each job got
	firstAsOf map[string]time.Time // when the state of that estimate was taken
	models    map[snapKey]*perf.Model
	runs      int
	// recent are the jobs submitted within the last ETAWindow (as the
	// policy saw them when first seen, by ID): with ETAWindow > 0 the
	// forward simulation expects the next window to bring them again.
	recent map[string]sched.Job
}

// ETAWindow, when > 0, makes the estimator expect every job submitted in
// the last ETAWindow to be submitted again one window later (a forecast of
// the jobs that will overtake a waiting one). It is off (0): repeating
// the exact jobs of the last window forecasts badly. A rare large, long job
// repeated with certainty holds a waiting job's estimate hours late, and
// the bursts of a trace do not repeat an hour apart. Measured on the
// Morphling traces (sim's TestForwardETAOnTrace, deterministic; docs/
// control.md), |first ETA − start| / wait at p90 is 0.70 with no forecast
// and 0.79 with the last hour again on workload-base.csv, 0.80 and 0.90 on
// workload-mt.csv; in `replan demo` 0.68 against 0.85-0.89.
var ETAWindow time.Duration

// ETA is a waiting job's estimated start.
type ETA struct {
	// At is the estimated start (zero when there is no estimate).
	At time.Time
	// Reason says why there is no estimate ("" when there is one).
	Reason string
}

// EnableETA starts estimating waiting jobs' start times in the background
// after every change, with policies made by newPolicy (the daemon's policy
// with the same options; the estimator keeps its own instance), a
// checkpoint-restart cost of restart per start or reconfiguration, and a
// scheduling round every roundEvery of the daemon's clock (0: at once).
func (d *Daemon) EnableETA(newPolicy func() sched.Policy, restart, roundEvery time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.eta.mu.Lock()
	d.eta.newPolicy, d.eta.restart, d.eta.every = newPolicy, restart.Seconds(), roundEvery.Seconds()
	d.eta.mu.Unlock()
	d.etaKick()
}

// etaInput is what one forward simulation starts from.
type etaInput struct {
	snap     sched.Snapshot
	extra    map[string]sim.ForwardJob
	arrivals []sched.Job
	held     []string
	depWaits map[string]string // jobs waiting for a dependency (deps.go)
	asOf     time.Time
}

// etaKick starts a forward simulation of the current state unless one
// runs (then it runs again when that one ends). The caller holds d.mu.
func (d *Daemon) etaKick() {
	e := &d.eta
	e.mu.Lock()
	if e.newPolicy == nil {
		e.mu.Unlock()
		return
	}
	if e.running {
		e.dirty = true
		e.mu.Unlock()
		return
	}
	e.running, e.dirty = true, false
	e.mu.Unlock()
	in := d.etaInputLocked()
	go d.etaLoop(in)
}

// etaInputLocked copies what the estimator needs; the caller holds d.mu.
// Models are copied (the daemon refits its own in place); a copy is kept
// while the model does not change, so the estimator's policy caches stay
// warm.
func (d *Daemon) etaInputLocked() etaInput {
	snap, _ := d.snapshot()
	in := etaInput{snap: snap, extra: map[string]sim.ForwardJob{}, asOf: d.now()}
	e := &d.eta
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.models == nil {
		e.models = map[snapKey]*perf.Model{}
	}
	changed := false
	for i := range in.snap.Jobs {
		sj := &in.snap.Jobs[i]
		js := d.jobs[sj.ID]
		if sj.Model != nil {
			typ := snapKeyOf(sj.Model)
			if c := e.models[typ]; c == nil || *c != *sj.Model {
				m := *sj.Model
				e.models[typ] = &m
				changed = true
			}
			sj.Model = e.models[typ]
		}
		if js == nil || len(sj.Alloc) == 0 {
			continue
		}
		fj := sim.ForwardJob{}
		if js.measSPS > 0 && js.spec.GlobalBatch > 0 {
			fj.Rate = js.measSPS / float64(js.spec.GlobalBatch)
			// It went on since it was observed (up to a round ago): at
			// that rate, not stuck where it was seen.
			if since := in.asOf.Sub(js.measAt).Seconds(); since > 0 && !js.measAt.IsZero() {
				sj.ItersDone = min(sj.ItersDone+since*fj.Rate, sj.ItersTotal)
			}
		}
		ready := restartFrom(js, in.asOf).Add(time.Duration((e.restart + js.shift) * float64(time.Second)))
		if left := ready.Sub(in.asOf).Seconds(); fj.Rate == 0 {
			// Its restart may have ended since the last observation: it
			// has progressed since (at most a round's worth, the longest
			// it goes unobserved).
			fj.RestartLeft = max(left, -e.every)
		}
		in.extra[sj.ID] = fj
	}
	if changed || e.policy == nil {
		// A new model is a new cache key: start from a fresh policy so
		// the old entries do not pile up.
		e.policy = e.newPolicy()
	}
	d.capByTimeLimit(&in.snap, in.extra, e.restart, in.asOf) // timelimit.go
	in.depWaits = map[string]string{}
	for id, js := range d.jobs {
		if js.rec.State == StateHeld {
			in.held = append(in.held, id)
		} else if !js.depsMet() && js.deps.broken == "" {
			why := js.deps.waitFor
			if why == "" {
				why = "waits for " + js.spec.After[0].String()
			}
			in.depWaits[id] = why + ": no estimate until then"
		}
	}
	in.arrivals = e.expectedLocked(in.snap)
	return in
}

// expectedLocked records the snapshot's new submissions and returns the
// arrivals the estimator expects: every job submitted in the last
// ETAWindow, submitted again one window later. The caller holds e.mu.
func (e *etaState) expectedLocked(snap sched.Snapshot) []sched.Job {
	w := ETAWindow.Seconds()
	if w <= 0 {
		return nil
	}
	if e.recent == nil {
		e.recent = map[string]sched.Job{}
	}
	for _, sj := range snap.Jobs {
		if _, ok := e.recent[sj.ID]; !ok && sj.Submit >= snap.Now-w {
			sj.Alloc, sj.Plan, sj.ItersDone, sj.Restarts, sj.LastRun, sj.RunSeconds, sj.Phase, sj.LastChange = nil, perf.Plan{}, 0, 0, 0, 0, 0, 0
			e.recent[sj.ID] = sj
		}
	}
	var out []sched.Job
	for id, sj := range e.recent {
		if sj.Submit < snap.Now-w {
			delete(e.recent, id)
			continue
		}
		if sj.Model != nil {
			sj.Model = e.models[snapKeyOf(sj.Model)]
		}
		if sj.Model == nil {
			continue
		}
		sj.ID = "expected:" + id
		sj.Submit += w
		out = append(out, sj)
	}
	return out
}

// ETABusy is the share of one core the estimator may use: after a forward
// simulation that took t, the next one starts no sooner than
// t·(1/ETABusy − 1) later (changes meanwhile are merged into it). On a
// large cluster, where one simulation takes long and the state changes
// all the time, the estimator would otherwise hold a core for good and
// slow the daemon it estimates.
var ETABusy = 0.5

// etaLoop runs forward simulations until the state stops changing.
func (d *Daemon) etaLoop(in etaInput) {
	for {
		d.eta.mu.Lock()
		p, restart, every := d.eta.policy, d.eta.restart, d.eta.every
		d.eta.mu.Unlock()
		began := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		res, err := sim.Forward(ctx, in.snap, p, nil, in.extra, sim.ForwardConfig{RestartCost: restartOrNone(restart), Arrivals: in.arrivals, RoundEvery: every})
		cancel()
		took := time.Since(began)
		if err != nil {
			d.log.Warn("eta", "err", err)
		}
		d.etaStore(in, res, err)
		d.eta.mu.Lock()
		if !d.eta.dirty {
			d.eta.running = false
			d.eta.mu.Unlock()
			return
		}
		d.eta.mu.Unlock()
		if b := ETABusy; b > 0 && b < 1 {
			time.Sleep(time.Duration(float64(took) * (1/b - 1)))
		}
		d.eta.mu.Lock()
		d.eta.dirty = false
		d.eta.mu.Unlock()
		d.mu.Lock()
		in = d.etaInputLocked()
		d.mu.Unlock()
	}
}

func restartOrNone(s float64) float64 {
	if s <= 0 {
		return -1
	}
	return s
}

// etaStore keeps one simulation's estimates.
func (d *Daemon) etaStore(in etaInput, res sim.ForwardResult, err error) {
	e := &d.eta
	e.mu.Lock()
	defer e.mu.Unlock()
	e.runs++
	e.asOf = in.asOf
	e.at, e.why = map[string]time.Time{}, map[string]string{}
	if e.first == nil {
		e.first, e.firstAsOf = map[string]time.Time{}, map[string]time.Time{}
	}
	base := in.snap.Now
	for _, sj := range in.snap.Jobs {
		if len(sj.Alloc) > 0 {
			continue
		}
		if err != nil {
			e.why[sj.ID] = "no estimate: the forward simulation failed: " + err.Error()
			continue
		}
		t, ok := res.Start[sj.ID]
		if !ok {
			e.why[sj.ID] = "no start within 30 days of simulated time with today's jobs: " + res.NoStart[sj.ID]
			continue
		}
		at := in.asOf.Add(time.Duration((t - base) * float64(time.Second)))
		e.at[sj.ID] = at
		if _, seen := e.first[sj.ID]; !seen {
			e.first[sj.ID], e.firstAsOf[sj.ID] = at, in.asOf
		}
	}
	for _, id := range in.held {
		e.why[id] = "held by the operator: no start until released"
	}
	for id, why := range in.depWaits {
		e.why[id] = why
	}
}

// ETA reports a waiting job's latest estimated start.
func (d *Daemon) ETA(id string) ETA {
	e := &d.eta
	e.mu.Lock()
	defer e.mu.Unlock()
	if at, ok := e.at[id]; ok {
		return ETA{At: at}
	}
	if why, ok := e.why[id]; ok {
		return ETA{Reason: why}
	}
	if e.newPolicy == nil {
		return ETA{Reason: "start estimates are off in this daemon"}
	}
	return ETA{Reason: "not estimated yet"}
}

// FirstETAs is the first estimated start each job got (for measuring the
// estimates against what happened).
func (d *Daemon) FirstETAs() map[string]time.Time {
	e := &d.eta
	e.mu.Lock()
	defer e.mu.Unlock()
	return maps.Clone(e.first)
}

// FirstETAsAsOf is, for each job's first estimate, when the state it was
// simulated from was taken (jobs submitted later were unknown to it).
func (d *Daemon) FirstETAsAsOf() map[string]time.Time {
	e := &d.eta
	e.mu.Lock()
	defer e.mu.Unlock()
	return maps.Clone(e.firstAsOf)
}

// withETA is the queue as published plus each entry's latest estimate,
// relative to when the view was taken (AsOf).
func (d *Daemon) withETA(v *readView) []QueueEntry {
	out := make([]QueueEntry, len(v.queue))
	copy(out, v.queue)
	for i := range out {
		q := &out[i]
		q.AsOf = v.at
		eta := d.ETA(q.Job.ID)
		if q.Job.State == StateHeld {
			eta = ETA{Reason: "held by the operator: no start until released"}
		}
		if eta.At.IsZero() {
			q.ETAReason = eta.Reason
			continue
		}
		at := eta.At.UTC()
		s := max(at.Sub(v.at).Seconds(), 0)
		if s == 0 {
			at = v.at
		}
		q.ETAS, q.ETAAt = &s, &at
	}
	return out
}

// restartLeft is how long a running job's restart still takes at now: 0
// once it reports throughput or when the restart cost is unknown. The
// caller holds d.mu.
func (d *Daemon) restartLeft(js *jobState, now time.Time) float64 {
	if js.measSPS > 0 || js.changed.IsZero() {
		return 0
	}
	d.eta.mu.Lock()
	cost := d.eta.restart
	d.eta.mu.Unlock()
	if cost <= 0 {
		return 0
	}
	ready := restartFrom(js, now).Add(time.Duration((cost + js.shift) * float64(time.Second)))
	return max(ready.Sub(now).Seconds(), 0)
}

// restartFrom is when a running job's current restart began: when the
// executor took its launch, which can be well after the round decided it
// (launches of one round go one after the other); now while the launch is
// still in flight. The caller holds d.mu.
func restartFrom(js *jobState, now time.Time) time.Time {
	switch {
	case js.launching:
		return now
	case js.launched.After(js.changed):
		return js.launched
	}
	return js.changed
}
