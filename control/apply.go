package control

// The one path of every state change (write the store, then memory) and
// the round: snapshot under the lock, plan without it, apply each decision
// re-checked against the state of that moment (Nomad's plan applier).

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/replan/replan/jobspec"
	"github.com/replan/replan/launch"
	"github.com/replan/replan/perf"
	"github.com/replan/replan/sched"
)

// jobUpdate is the next record of a job, to be stored.
type jobUpdate struct {
	js     *jobState
	rec    JobRecord
	reason string
}

// storeErr marks an error of a store write as ErrStore (nothing changed;
// the API answers 503), keeping the errors callers branch on as they are.
func storeErr(err error) error {
	if errors.Is(err, ErrStore) || errors.Is(err, ErrConflict) || errors.Is(err, ErrNotFound) || errors.Is(err, ErrExists) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrStore, err)
}

// write is the one path of every change of a job or a server: it stores
// the job updates and b in one transaction and only then installs the
// new records and runs after (the change in memory). When the store
// fails, memory is left as it was and the error (wrapping ErrStore) is
// returned. The caller holds d.mu when ups or after touch the daemon.
func (d *Daemon) write(ctx context.Context, ups []jobUpdate, b Batch, after func()) error {
	for _, u := range ups {
		b.Jobs = append(b.Jobs, JobWrite{Rec: u.rec, Reason: u.reason, At: d.now()})
	}
	if !b.empty() {
		vers, err := d.cfg.Store.Commit(ctx, b)
		if err != nil {
			d.storeErrors.Add(1)
			return storeErr(err)
		}
		for i, u := range ups {
			u.rec.Version = vers[i]
			u.js.rec = u.rec
		}
	}
	if after != nil {
		after()
	}
	if len(b.Events) > 0 {
		// Followers of the event stream are woken when the view that
		// shows the change is published (publish broadcasts).
		d.announce.Store(true)
		if !b.submitOnly() {
			d.evWrites.Add(1) // readcache.go: reads wait for it
		}
	}
	return nil
}

// submitOnly reports whether b stores only new jobs and their events (a
// submit; counted by Daemon.logSubmit instead).
func (b *Batch) submitOnly() bool {
	if len(b.Jobs) == 0 || len(b.Nodes) > 0 || len(b.Decisions) > 0 {
		return false
	}
	for _, j := range b.Jobs {
		if !j.Create {
			return false
		}
	}
	return true
}

// ev builds an event stamped now.
func (d *Daemon) ev(kind, job, node, msg string, data any) Event {
	var raw json.RawMessage
	if data != nil {
		raw, _ = json.Marshal(data)
	}
	return Event{Kind: kind, JobID: job, Node: node, Msg: msg, Data: raw, At: d.now()}
}

// Submit validates nothing more than jobspec did, stores the job queued
// and returns its record. The next round schedules it. It never waits for
// a round: the store write comes first, then the job enters memory.
func (d *Daemon) Submit(ctx context.Context, spec *jobspec.Spec) (JobRecord, error) {
	if spec == nil {
		return JobRecord{}, errors.New("submit: no spec")
	}
	spec = d.withTenantLimit(spec) // timelimit.go
	raw, err := json.Marshal(spec)
	if err != nil {
		return JobRecord{}, fmt.Errorf("submit: %w", err)
	}
	id, err := d.cfg.Store.NextJobID(ctx)
	if err != nil {
		d.storeErrors.Add(1)
		return JobRecord{}, fmt.Errorf("submit: %w", storeErr(err))
	}
	rec := JobRecord{ID: id, Name: spec.Name, Tenant: spec.Tenant, Class: string(spec.Class), Spec: raw, State: StateQueued, SubmittedAt: d.now(), Version: 1}
	b := Batch{Jobs: []JobWrite{{Rec: rec, Create: true}},
		Events: []Event{d.ev("submit", id, "", fmt.Sprintf("%s submitted by tenant %s (%s, %d GPUs)", spec.Name, spec.Tenant, spec.Class, spec.Request.GPUs), nil)}}
	if err := d.write(ctx, nil, b, nil); err != nil {
		return JobRecord{}, fmt.Errorf("submit: %w", err)
	}
	d.mu.Lock()
	js := &jobState{rec: rec, spec: spec}
	d.jobs[id] = js
	d.logSubmit(rec, spec.Request.GPUs)
	d.publishAdded(js)
	d.mu.Unlock()
	return rec, nil
}

// unsettled reports whether news of job id could not be stored yet (a
// finish or exit during a store outage, a failed launch's requeue, news
// that came while an executor call for it ran in the background): no round
// touches it until that news is stored, nor while such a call is under way
// (background.go).
func (d *Daemon) unsettled(id string) bool {
	_, p := d.pending[id]
	_, r := d.requeues[id]
	return p || r || d.busy[id] > 0
}

// usable reports whether new work may go to server i.
func (d *Daemon) usable(i int) bool {
	n := d.nodes[i]
	return !n.drained && !n.suspect && n.missed < d.cfg.HeartbeatMisses
}

// seenJob is what a round's snapshot saw of a job; a decision applies only
// while the job is still there.
type seenJob struct {
	state   JobState
	attempt int
}

// clusterGPUs is every GPU of the inventory: no curve or request the
// policy sees is longer than this.
func (d *Daemon) clusterGPUs() int {
	n := 0
	for _, s := range d.cfg.Servers {
		n += s.GPUs
	}
	return max(n, 1)
}

// snapshot builds the scheduler's view (an immutable copy: the policy
// reads it without the daemon's lock): usable servers, tenants, and every
// queued, preempted or running job. The caller holds d.mu.
func (d *Daemon) snapshot() (sched.Snapshot, map[string]seenJob) {
	s := sched.Snapshot{Now: float64(d.now().UnixNano()) / 1e9, History: sched.TimerHistory{Obs: slices.Clone(d.history.Obs)}, SpineGBps: d.cfg.SpineGBps}
	for i, info := range d.cfg.Servers {
		sv := sched.Server{ID: info.Name, Rack: info.Rack, GPUs: info.GPUs, CPUs: info.CPUs, MemGB: info.MemGB, Labels: info.Labels}
		if !d.usable(i) {
			sv.GPUs, sv.CPUs, sv.MemGB = 0, 0, 0
		} else {
			sv.GPUs -= d.cordonedFree(i) // health.go
		}
		s.Servers = append(s.Servers, sv)
	}
	for _, t := range d.cfg.Tenants {
		s.Tenants = append(s.Tenants, sched.Tenant{Name: t.Name, QuotaGPUs: t.QuotaGPUs})
	}
	type entry struct {
		at int64
		id string
	}
	order := make([]entry, 0, len(d.jobs))
	now := d.now()
	for id, js := range d.jobs {
		if js.stopping || now.Before(js.backoff) || d.unsettled(id) || !js.depsMet() || d.profileHolds(js) {
			continue
		}
		if js.rec.State == StateQueued || js.rec.State == StatePreempted || js.rec.State == StateRunning {
			order = append(order, entry{js.rec.SubmittedAt.UnixNano(), id})
		}
	}
	slices.SortFunc(order, func(a, b entry) int {
		if a.at != b.at {
			return cmp.Compare(a.at, b.at)
		}
		return strings.Compare(a.id, b.id)
	})
	ids := make([]string, len(order))
	for k, e := range order {
		ids[k] = e.id
	}
	seen := make(map[string]seenJob, len(ids))
	s.Jobs = make([]sched.Job, 0, len(ids))
	total := d.clusterGPUs()
	totalCPUs := 0
	for _, sv := range d.cfg.Servers {
		totalCPUs += sv.CPUs
	}
	totalCPUs = max(totalCPUs, 1)
	for _, id := range ids {
		js := d.jobs[id]
		seen[id] = seenJob{state: js.rec.State, attempt: js.rec.Attempt}
		// A request larger than the cluster is clamped to it: no input
		// makes the policy build a curve or enumerate plans beyond what
		// the cluster can give.
		req := min(js.spec.Request.GPUs, total)
		sj := sched.Job{ID: id, Tenant: js.spec.Tenant, Model: d.snapModel(js.spec), ReqGPUs: req, ReqCPUs: min(js.spec.Request.CPUs, totalCPUs),
			ReqPlan: js.spec.Request.Plan, Submit: float64(js.rec.SubmittedAt.UnixNano()) / 1e9,
			ItersDone: float64(js.iters), ItersTotal: float64(js.spec.Iterations), Restarts: js.rec.Restarts}
		pinJob(&sj, js.spec) // pins.go
		if js.spec.Class == jobspec.Guaranteed {
			sj.Class = sched.Guaranteed
		}
		if !js.spec.Request.HasPlan {
			sj.ReqPlan = defaultPlanFor(js.spec, req)
		}
		if js.rec.State != StateRunning {
			sj.RunSeconds = js.ranFor.Seconds()
			if !js.lastRun.IsZero() {
				sj.LastRun = float64(js.lastRun.UnixNano()) / 1e9
			}
		}
		if js.rec.State == StateRunning {
			sj.Plan = js.plan
			changed := js.changed
			if changed.IsZero() {
				changed = js.rec.StartedAt
			}
			sj.LastChange = float64(changed.UnixNano()) / 1e9
			sj.LastRun = sj.Submit
			if !js.runFrom.IsZero() {
				sj.RunSeconds = (js.ranFor + now.Sub(js.runFrom)).Seconds()
				sj.LastRun = float64(now.UnixNano()) / 1e9
			}
			if !js.phase.IsZero() {
				sj.Phase = float64(js.phase.UnixNano()) / 1e9
			}
			for _, srv := range js.servers {
				i := d.srvIdx[srv.Name]
				sj.Alloc = append(sj.Alloc, sched.Alloc{Server: i, GPUs: len(srv.GPUs), CPUs: len(srv.CPUs)})
			}
		}
		s.Jobs = append(s.Jobs, sj)
	}
	s.FillFree()
	// Devices held by jobs outside the snapshot (being stopped after a
	// cancel, a drain or a preemption) are not free either.
	for i := range d.owner {
		sv := &s.Servers[i]
		for _, o := range d.owner[i].gpu {
			if _, in := seen[o]; o != "" && !in {
				sv.FreeGPUs = max(sv.FreeGPUs-1, 0)
			}
		}
		for _, o := range d.owner[i].cpu {
			if _, in := seen[o]; o != "" && !in {
				sv.FreeCPUs = max(sv.FreeCPUs-1, 0)
			}
		}
	}
	return s, seen
}

// defaultPlanFor is the request plan of a job that named none on g GPUs.
func defaultPlanFor(spec *jobspec.Spec, g int) perf.Plan {
	g = max(g, 1)
	mb := max(spec.GlobalBatch/g, 1)
	return perf.Plan{DP: g, TP: 1, PP: 1, MicroBatch: mb, GA: 1}
}

// Round runs one scheduling round: it copies a snapshot under the lock,
// runs the policy without it, then applies the decisions one by one, each
// re-checked against the state of that moment (the job is where the
// snapshot saw it, the devices are free, the servers usable). A decision
// that no longer holds is dropped and counted; the next round retries.
// Submits, cancels, holds, drains and reads never wait for a round.
func (d *Daemon) Round(ctx context.Context) (RoundStats, error) {
	d.roundMu.Lock()
	defer d.roundMu.Unlock()
	began := time.Now()
	d.mu.Lock()
	atLimit, limitErr := d.expireTimeLimits(ctx) // timelimit.go
	d.mu.Unlock()
	limitErr = errors.Join(limitErr, d.stopAtLimit(ctx, atLimit))
	d.mu.Lock()
	depWaits, depErr := d.checkDeps(ctx) // deps.go
	checkErr := d.checkSchedulable(ctx)  // admit.go: unschedulable jobs, and back
	snap, seen := d.snapshot()
	d.mu.Unlock()
	t0 := time.Now()
	dec := d.cfg.Policy.Schedule(snap)
	planned := time.Since(t0)
	pinned := map[string]string{}
	applied, dropped, errs := d.applyDecisions(ctx, dec.Actions, seen, pinned)
	errs = append(errs, checkErr, limitErr, depErr)
	for id, why := range pinned {
		dec.Waiting = append(dec.Waiting, sched.Wait{Job: id, Reason: why})
	}
	for id, why := range depWaits {
		dec.Waiting = append(dec.Waiting, sched.Wait{Job: id, Reason: why})
	}
	errs = append(errs, d.recordWaits(ctx, dec.Waiting)...)
	d.mu.Lock()
	defer d.mu.Unlock()
	d.links = dec.Links
	d.timers = map[string]sched.JobTimers{}
	for _, t := range dec.Timers {
		d.timers[t.Job] = t
	}
	if err := d.noteTimers(ctx, snap.Now, dec.Timers); err != nil {
		errs = append(errs, fmt.Errorf("round: timer events: %w", err))
	}
	if len(dec.Observed) > 0 {
		var b Batch
		for _, o := range dec.Observed {
			at := time.Unix(0, int64(o.At*1e9)).UTC()
			b.TimerWaits = append(b.TimerWaits, TimerWait{Tier: o.Tier.String(), GPUs: o.GPUs, Wait: time.Duration(o.Wait * float64(time.Second)), At: at})
		}
		if err := d.write(ctx, nil, b, func() { d.history.Add(dec.Observed...) }); err != nil {
			errs = append(errs, fmt.Errorf("round: timer history: %w", err))
		}
	}
	d.history.Prune(snap.Now, d.cfg.TimerWindow.Seconds())
	d.lastRound = RoundStats{At: d.now(), Duration: planned, Total: time.Since(began), Actions: len(dec.Actions), Waiting: len(dec.Waiting), Applied: applied, Dropped: dropped}
	d.publish()
	return d.lastRound, errors.Join(errs...)
}

// recordWaits stores the reason of every waiting job whose reason changed,
// in transactions of at most waitBatch jobs (the lock is let go between
// them, so a round with thousands of new reasons does not stall submits:
// smaller transactions cost more fsyncs but hold the lock less).
func (d *Daemon) recordWaits(ctx context.Context, waits []sched.Wait) []error {
	const waitBatch = 32
	var errs []error
	waiting := make(map[string]bool, len(waits))
	for _, w := range waits {
		waiting[w.Job] = true
	}
	for lo := 0; lo < len(waits); lo += waitBatch {
		chunk := waits[lo:min(lo+waitBatch, len(waits))]
		d.mu.Lock()
		var ups []jobUpdate
		var b Batch
		var reasons []sched.Wait
		for _, w := range chunk {
			js := d.jobs[w.Job]
			if js == nil || js.stopping || js.rec.State == StateRunning || js.rec.State == StateHeld || d.waits[w.Job] == w.Reason {
				continue
			}
			rec := js.rec
			rec.Reason = w.Reason
			ups = append(ups, jobUpdate{js, rec, "wait"})
			b.Decisions = append(b.Decisions, DecisionRecord{JobID: w.Job, Kind: "wait", Reason: w.Reason, At: d.now()})
			reasons = append(reasons, w)
		}
		err := d.write(ctx, ups, b, func() {
			for _, w := range reasons {
				d.waits[w.Job] = w.Reason
			}
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("round: wait reasons: %w", err))
		}
		d.mu.Unlock()
	}
	d.mu.Lock()
	for id := range d.waits {
		if !waiting[id] {
			delete(d.waits, id)
		}
	}
	d.mu.Unlock()
	return errs
}

// applyBatch is how many start decisions are stored in one transaction.
const applyBatch = 32

// prepared is a decision that still holds, ready to be stored.
type prepared struct {
	js      *jobState
	id      string
	kind    sched.Kind
	up      jobUpdate
	dec     DecisionRecord
	ev      Event
	after   func() // the change in memory, once stored
	servers []launch.Server
	old     Launch
	next    Launch
	attempt int
	running bool // it was running (a reconfiguration of a live job)
}

// applyDecisions re-checks the decisions one by one against the current
// state and carries out those that still hold: the store writes of up to
// applyBatch starts go in one transaction (a preemption or a
// reconfiguration ends a group, so what it frees is there for the
// decisions after it), then the executor works without the lock. It
// returns how many were applied and dropped.
func (d *Daemon) applyDecisions(ctx context.Context, acts []sched.Decision, seen map[string]seenJob, pinned map[string]string) (applied, dropped int, errs []error) {
	for lo := 0; lo < len(acts); {
		d.mu.Lock()
		scratch := map[int]*serverDevices{}
		var group []*prepared
		inGroup := map[string]bool{}
		for lo < len(acts) && len(group) < applyBatch {
			a := acts[lo]
			lo++
			var p *prepared
			if !inGroup[a.Job] {
				p = d.prepare(a, seen[a.Job], pinned, scratch)
			}
			if p == nil {
				if pinned[a.Job] == "" {
					dropped++
					d.dropped.Add(1)
				}
				continue
			}
			group = append(group, p)
			inGroup[a.Job] = true
			if p.kind != sched.Start {
				break
			}
		}
		var ups []jobUpdate
		var b Batch
		for _, p := range group {
			ups = append(ups, p.up)
			b.Decisions = append(b.Decisions, p.dec)
			b.Events = append(b.Events, p.ev)
		}
		err := d.write(ctx, ups, b, func() {
			for _, p := range group {
				p.after()
			}
		})
		d.publish() // what the group's events announce is in the view at once
		d.mu.Unlock()
		if err != nil {
			errs = append(errs, fmt.Errorf("apply %d decisions: %w", len(group), err))
			continue
		}
		applied += len(group)
		for _, p := range group {
			var err error
			if p.kind == sched.Preempt {
				err = d.later(p.id, "preempt", func() error {
					return d.stopAndRelease(context.WithoutCancel(ctx), p.js, p.id, true)
				})
			} else {
				// (with the loop's context, as inline: a shutdown ends it)
				err = d.later(p.id, p.kind.String(), func() error { return d.execute(ctx, p) })
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("%s %s: %w", p.kind, p.id, err))
			}
		}
	}
	return applied, dropped, errs
}

// prepare re-checks decision a against the current state: the job is where
// the snapshot saw it (state and attempt) and not being stopped, a start is
// for a waiting job and a reconfiguration for a running one, the servers
// are usable and the devices free (scratch holds those given to earlier
// decisions of the group). It returns nil when the decision no longer
// holds (or breaks a pin, recorded in pinned). The caller holds d.mu.
func (d *Daemon) prepare(a sched.Decision, seen seenJob, pinned map[string]string, scratch map[int]*serverDevices) *prepared {
	js := d.jobs[a.Job]
	if js == nil || js.stopping || seen.state == "" || js.rec.State != seen.state || js.rec.Attempt != seen.attempt || d.unsettled(a.Job) {
		return nil
	}
	if why := d.breaksPin(a); why != "" {
		fixed, ok := d.pinnedStart(a)
		if !ok {
			if js.rec.State != StateRunning {
				pinned[a.Job] = why
			}
			return nil
		}
		a = fixed
	}
	id := js.rec.ID
	p := &prepared{js: js, id: id, kind: a.Kind}
	switch a.Kind {
	case sched.Preempt:
		if js.rec.State != StateRunning {
			return nil
		}
		rec := js.rec
		rec.State, rec.Reason, rec.Placement = StatePreempted, a.Why, nil
		p.up = jobUpdate{js, rec, "preempt: " + a.Why}
		p.dec = DecisionRecord{JobID: id, Kind: "preempt", Reason: a.Why, At: d.now()}
		p.ev = d.ev("preempt", id, "", a.Why, nil)
		p.after = func() {
			d.stopRun(js)
			js.servers = nil
			js.stopping = true
		}
		return p
	case sched.Start, sched.Reconfigure:
		if (a.Kind == sched.Start) == (js.rec.State == StateRunning) {
			return nil
		}
		for _, al := range a.Alloc {
			if al.Server < 0 || al.Server >= len(d.nodes) || (al.GPUs > 0 && !d.usable(al.Server)) {
				return nil
			}
		}
		servers, err := d.devicesIn(scratch, a.Alloc, id)
		if err != nil {
			return nil // the devices went to another job since the snapshot
		}
		p.servers = servers
		p.old = Launch{JobID: id, Spec: js.spec, Plan: js.plan, Servers: js.servers, Attempt: max(js.rec.Attempt-1, 0)}
		p.running = js.rec.State == StateRunning
		placement, _ := json.Marshal(servers)
		plan, _ := json.Marshal(a.Plan)
		rec := js.rec
		rec.Plan, rec.Placement, rec.Reason = plan, placement, ""
		rec.State = StateRunning
		if rec.StartedAt.IsZero() {
			rec.StartedAt = d.now()
		}
		rec.Checkpoint = max(rec.Checkpoint, js.ckpt)
		resume := rec.Checkpoint > 0 || rec.Attempt > 0
		if a.Kind == sched.Reconfigure || rec.Attempt > 0 {
			rec.Restarts++
		}
		rec.Attempt++
		p.attempt = rec.Attempt
		p.up = jobUpdate{js, rec, fmt.Sprintf("%s: %s", a.Kind, a.Why)}
		detail, _ := json.Marshal(map[string]any{"plan": a.Plan, "placement": a.Placement, "throughput": a.Throughput})
		p.dec = DecisionRecord{JobID: id, Kind: a.Kind.String(), Detail: detail, Reason: a.Why, At: d.now()}
		p.ev = d.ev(a.Kind.String(), id, "", fmt.Sprintf("%s on %s with %s (%.2f samples/s predicted); %s", js.spec.Name, placementWords(servers), a.Plan, a.Throughput, a.Why),
			map[string]any{"plan": a.Plan.String(), "placement": placementWords(servers)})
		ck := d.chooseCheckpoint(js, len(servers), a.Throughput)
		p.next = Launch{JobID: id, Spec: js.spec, Plan: a.Plan, Servers: servers, Attempt: rec.Attempt - 1, Resume: resume, From: rec.Checkpoint, Shift: a.Shift}
		if ck.Source == "replan" {
			p.next.SaveInterval = ck.IntervalIters
		}
		if resume && js.ckPlan != a.Plan {
			p.next.CheckpointPlan = js.ckPlan
		}
		p.after = func() {
			if !p.running {
				d.release(id)
			}
			// A running job keeps its old devices until the executor has
			// moved it (execute frees those it no longer uses).
			d.take(id, servers)
			js.plan, js.servers, js.changed = a.Plan, servers, d.now()
			js.launching = true // until execute (the ETA's restart left)
			js.ckpt = rec.Checkpoint
			if js.runFrom.IsZero() {
				js.runFrom = d.now()
			}
			js.phase = d.now().Add(time.Duration(a.Shift * float64(time.Second)))
			js.predSPS, js.measSPS, js.shift = a.Throughput, 0, a.Shift
			js.ckptInfo = ck
			delete(d.waits, id)
		}
		return p
	}
	return nil
}

// execute has the executor carry out a stored start or reconfiguration,
// without the daemon's lock. A cancel or drain that came in meanwhile has
// stored the job's new state: then nothing is launched, and the one who
// changed it stops what runs (executor calls of one job are serialised).
func (d *Daemon) execute(ctx context.Context, p *prepared) error {
	js, id := p.js, p.id
	js.exec.Lock()
	d.mu.Lock()
	still := d.jobs[id] == js && !js.stopping && js.rec.State == StateRunning && js.rec.Attempt == p.attempt
	last := js.iters
	d.mu.Unlock()
	if !still {
		js.exec.Unlock()
		return nil
	}
	var err error
	if p.kind == sched.Reconfigure && p.running {
		err = d.cfg.Exec.Reconfigure(ctx, p.old, p.next, last)
	} else {
		err = d.cfg.Exec.Start(ctx, p.next)
	}
	js.exec.Unlock()
	d.mu.Lock()
	defer d.mu.Unlock()
	defer d.publishSoon()
	mine := d.jobs[id] == js && js.rec.State == StateRunning && js.rec.Attempt == p.attempt
	if mine {
		js.launching, js.launched = false, d.now()
	}
	if mine && p.running {
		d.releaseExcept(id, p.servers) // the old launch's devices
	}
	if err == nil {
		return nil
	}
	if !mine {
		return err // cancelled or moved meanwhile; that path cleans up
	}
	if ferr := d.launchFailed(ctx, js, p.servers, err); ferr != nil {
		return errors.Join(err, ferr)
	}
	return err
}

// requeue returns a job to the queue (from its last checkpoint), or fails
// it when it has failed more than MaxRestarts times (countFailure adds
// this failure to its budget). The caller holds d.mu and stops whatever
// still runs of the job.
func (d *Daemon) requeue(ctx context.Context, js *jobState, why string, countFailure bool) error {
	up, e, final := d.requeueChange(js, why, countFailure)
	return d.write(ctx, []jobUpdate{up}, Batch{Events: []Event{e}}, func() { d.afterRequeue(js, final, false) })
}

func (d *Daemon) requeueChange(js *jobState, why string, countFailure bool) (jobUpdate, Event, bool) {
	rec := js.rec
	rec.Placement = nil
	rec.Checkpoint = max(rec.Checkpoint, js.ckpt)
	rec.Iterations = rec.Checkpoint
	if countFailure {
		rec.Failures++
	}
	if rec.Failures > d.cfg.MaxRestarts {
		// The cause, without the restart the caller's reason announces:
		// this job is not restarted. The log lines it quotes stay at its
		// end (redact.go).
		why, lines := splitLogLines(why)
		for _, next := range []string{"; restarting from checkpoint", "; back to the queue from checkpoint"} {
			if i := strings.LastIndex(why, next); i >= 0 {
				why = why[:i]
			}
		}
		rec.State, rec.Reason, rec.FinishedAt = StateFailed, why+fmt.Sprintf("; not restarted: failed %d times, restart limit %d", rec.Failures, d.cfg.MaxRestarts)+lines, d.now()
		return jobUpdate{js, rec, "failed: " + why + lines}, d.ev("fail", rec.ID, "", rec.Reason, nil), true
	}
	rec.State, rec.Reason = StatePreempted, why
	return jobUpdate{js, rec, "requeue: " + why}, d.ev("requeue", rec.ID, "", why, nil), false
}

// afterRequeue is the change in memory of a stored requeue; with
// keepDevices the devices stay held until the job's stop returns.
func (d *Daemon) afterRequeue(js *jobState, final, keepDevices bool) {
	d.stopRun(js)
	if keepDevices {
		js.stopping = true
	} else {
		d.release(js.rec.ID)
	}
	js.servers = nil
	js.iters, js.ckpt = js.rec.Iterations, js.rec.Checkpoint
	delete(d.requeues, js.rec.ID)
	if final {
		delete(d.jobs, js.rec.ID)
	}
}

// stopAndRelease has the executor stop job id (with a checkpoint when
// asked) after its new state was stored, then frees its devices and
// stores a newer checkpoint. It takes d.mu; the caller must not hold it.
func (d *Daemon) stopAndRelease(ctx context.Context, js *jobState, id string, checkpoint bool) error {
	js.exec.Lock()
	from := d.now()
	ckpt, err := d.cfg.Exec.Stop(ctx, id, checkpoint)
	took := d.now().Sub(from)
	js.exec.Unlock()
	d.mu.Lock()
	defer d.mu.Unlock()
	defer d.publishSoon()
	d.release(id)
	js.stopping = false
	if err != nil {
		d.holdForFence(js) // not started again while it may still run (fence.go)
		return fmt.Errorf("stop %s: %w", id, err)
	}
	if checkpoint && ckpt > 0 {
		// A stop with a checkpoint is what a checkpoint costs (and the
		// processes' exit): the next intervals are chosen from it.
		if err := d.noteCheckpointCost(ctx, js, took); err != nil {
			d.log.Warn("checkpoint cost", "job", id, "err", err)
		}
	}
	if checkpoint && ckpt > js.rec.Checkpoint && d.jobs[id] == js && js.rec.State != StateRunning {
		rec := js.rec
		rec.Checkpoint, rec.Iterations = ckpt, ckpt
		if werr := d.write(ctx, []jobUpdate{{js, rec, "checkpoint"}}, Batch{}, func() { js.iters, js.ckpt = ckpt, ckpt }); werr != nil {
			return fmt.Errorf("stop %s: checkpoint %d: %w", id, ckpt, werr)
		}
	}
	return nil
}
