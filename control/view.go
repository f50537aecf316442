package control

// The read view: what the API and metrics read without the daemon's lock.

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/replan/replan/jobspec"
	"github.com/replan/replan/perf"
	"github.com/replan/replan/sched"
)

// jobsSnapshot lists the ids of every job not in a final state, as of the
// last published view.
func (d *Daemon) jobsSnapshot() []string { return d.view().jobs }

// readView is what readers (the API, metrics) see without taking the
// daemon's lock: it is rebuilt after every change and before every slow
// executor call, so a reconfiguration that takes minutes on real servers
// never stalls `replan queue`.
type readView struct {
	queue []QueueEntry
	nodes []NodeView
	jobs  []string
	// recs are the records of every job in jobs as stored, in the
	// store's order (submission time, id): GET /v1/jobs of live states.
	recs       []JobRecord
	round      RoundStats
	throughput map[string]Throughput
	// progress is each running job's [iterations, checkpoint] as last
	// observed.
	progress map[string][2]int
	running  []RunningJob
	links    sched.LinkReport
	at       time.Time // the daemon's clock when it was built (the API's as_of)
	seq      uint64    // grows with every view published
	// ops is the daemon's clientOps when the view was built: every client
	// operation up to it is in the view.
	ops uint64
	// otherOps is the daemon's otherOps then: the last client operation
	// that was not a submit.
	otherOps uint64
	// evs is the daemon's evWrites then: every change that carried an
	// event up to it is in the view.
	evs uint64
	// built is when the view was rebuilt (wall clock; a submit's view
	// keeps the one it was made from).
	built time.Time
	// chain is the seq of the first view of a run of views each made from
	// the one before by appending one submitted job (publishAdded); seq
	// itself for a rebuilt view.
	chain uint64

	// checkpointing is how often each running job checkpoints.
	checkpointing map[string]CheckpointInfo
	// memory is each running job's measured and estimated GPU memory
	// (mempeak.go).
	memory map[string]JobMemory
}

// RunningJob is a running job with what the daemon knows of its speed:
// predicted and measured throughput, what a guaranteed job was promised
// (its request's predicted throughput) and whether it gets it, and the
// time-shift of its launch.
type RunningJob struct {
	Job         JobRecord  `json:"job"`
	Throughput  Throughput `json:"throughput"`
	PromisedSPS float64    `json:"promised_samples_per_s,omitempty"`
	// SLA is "ok" or "below" for a guaranteed job (measured throughput, or
	// the prediction before any measurement, against the promise less 5%),
	// "" for best-effort jobs.
	SLA    string  `json:"sla,omitempty"`
	ShiftS float64 `json:"shift_s"`
	// RestartLeftS is how long its checkpoint-restart still takes before
	// it makes progress (the executor's restart cost as the estimator
	// knows it, plus its time-shift; 0 once it reports throughput).
	RestartLeftS float64 `json:"restart_left_s,omitempty"`
	// AsOf is the daemon's clock when this view was taken.
	AsOf time.Time `json:"as_of"`
}

func (d *Daemon) view() *readView {
	if v := d.published.Load(); v != nil {
		// A view left stale by a throttled publish is rebuilt by the
		// reader when the lock is free at once; a reader never waits.
		if d.stale.Load() && d.mu.TryLock() {
			if d.stale.Load() {
				d.publish()
			}
			d.mu.Unlock()
			return d.published.Load()
		}
		return v
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.publish()
	return d.published.Load()
}

// publishSoon rebuilds the read view unless it was rebuilt within the
// last 100 ms (a round applying thousands of decisions publishes a few
// times a second, and once at its end): the view is then marked stale and
// the next reader that finds the lock free rebuilds it. The caller holds
// d.mu.
func (d *Daemon) publishSoon() {
	if time.Since(d.publishedAt) >= 100*time.Millisecond {
		d.publish()
		return
	}
	d.stale.Store(true)
	if d.announce.Swap(false) {
		d.broadcast()
	}
}

// publishNow takes the lock and rebuilds the read view.
func (d *Daemon) publishNow() {
	d.mu.Lock()
	d.publish()
	d.mu.Unlock()
}

// publishAdded publishes the view with a newly submitted job appended (ids
// grow, so the queue stays in id order) without rebuilding it; the caller
// holds d.mu.
func (d *Daemon) publishAdded(js *jobState) {
	old := d.published.Load()
	id := js.rec.ID
	if old == nil || (len(old.jobs) > 0 && old.jobs[len(old.jobs)-1] >= id) || (len(old.queue) > 0 && old.queue[len(old.queue)-1].Job.ID >= id) ||
		(len(old.recs) > 0 && old.recs[len(old.recs)-1].SubmittedAt.After(js.rec.SubmittedAt)) {
		d.publish()
		return
	}
	v := *old
	v.seq++ // v.chain stays: one more view of the run
	v.ops, v.otherOps, v.evs = d.clientOps, d.otherOps, d.evWrites.Load()
	// Appended in place when there is room: views are never changed, old
	// holds only its first len elements, and only the newest view is
	// extended, under d.mu (so the room past its end is nobody's).
	// Copying the queue at every submit was a tenth of what the daemon
	// allocated with rounds back to back.
	v.jobs = append(old.jobs, id)
	v.queue = append(old.queue, QueueEntry{Job: js.rec, GPUs: js.spec.Request.GPUs, Reason: "not scheduled yet"})
	v.recs = append(old.recs, js.rec)
	d.published.Store(&v)
	d.lastPublish.Store(time.Now().UnixNano())
	d.encKickWarm()
	if d.announce.Swap(false) {
		d.broadcast()
	}
	d.etaKick() // re-estimate start times in the background (eta.go)
}

// roomForSubmits is the capacity a rebuilt view's lists get for n
// elements: room for the submits until the next rebuild to be appended in
// place (publishAdded).
func roomForSubmits(n int) int { return n + n/16 + 16 }

// publish rebuilds the read view; the caller holds d.mu.
func (d *Daemon) publish() {
	d.publishedAt = time.Now()
	d.stale.Store(false)
	jobs := d.sortedJobIDs()
	v := &readView{jobs: jobs, queue: d.queueLocked(jobs), nodes: d.nodesLocked(), round: d.lastRound, throughput: map[string]Throughput{}, progress: map[string][2]int{}, checkpointing: map[string]CheckpointInfo{}, links: d.links, at: d.now()}
	v.seq = 1
	if old := d.published.Load(); old != nil {
		v.seq = old.seq + 1
	}
	v.chain = v.seq
	v.ops, v.otherOps, v.evs = d.clientOps, d.otherOps, d.evWrites.Load()
	v.built = time.Now()
	v.recs = make([]JobRecord, len(v.jobs), roomForSubmits(len(v.jobs)))
	for i, id := range v.jobs {
		js := d.jobs[id]
		v.recs[i] = js.rec
		if js.rec.State == StateRunning {
			// Progress as last observed, not as last stored (the store
			// is written every ProgressEvery at most): jobs, job and
			// queue lag one publish, not 4 × ProgressEvery.
			v.recs[i].Iterations, v.recs[i].Checkpoint = max(js.iters, js.rec.Iterations), max(js.ckpt, js.rec.Checkpoint)
			v.progress[id] = [2]int{v.recs[i].Iterations, v.recs[i].Checkpoint}
			tp := Throughput{PredictedSPS: js.predSPS, MeasuredSPS: js.measSPS}
			v.throughput[id] = tp
			if js.ckptInfo.IntervalIters > 0 {
				v.checkpointing[id] = js.ckptInfo
			}
			d.viewMemory(v, id, js) // mempeak.go
			r := RunningJob{Job: v.recs[i], Throughput: tp, ShiftS: js.shift, RestartLeftS: d.restartLeft(js, v.at), AsOf: v.at}
			if js.spec.Class == jobspec.Guaranteed {
				r.PromisedSPS = d.promised(js)
				got := tp.MeasuredSPS
				if got <= 0 {
					got = tp.PredictedSPS
				}
				r.SLA = "ok"
				if r.PromisedSPS > 0 && got < 0.95*r.PromisedSPS {
					r.SLA = "below"
				}
			}
			v.running = append(v.running, r)
		}
	}
	sortRecs(v.recs)
	d.published.Store(v)
	d.lastPublish.Store(time.Now().UnixNano())
	d.encKickWarm()
	if d.announce.Swap(false) {
		d.broadcast()
	}
	d.etaKick() // re-estimate start times in the background (eta.go)
}

// sortedJobIDs lists the ids of d.jobs in order. Ids only grow, so it
// keeps the last view's order of the jobs still there and sorts only the
// ids added since (all after the last one); anything else is sorted
// afresh. The caller holds d.mu.
func (d *Daemon) sortedJobIDs() []string {
	var old []string
	if v := d.published.Load(); v != nil {
		old = v.jobs
	}
	ids := make([]string, 0, roomForSubmits(len(d.jobs)))
	for _, id := range old {
		if _, ok := d.jobs[id]; ok {
			ids = append(ids, id)
		}
	}
	if len(ids) == len(d.jobs) {
		return ids
	}
	kept := len(ids)
	for id := range d.jobs {
		if len(old) == 0 || id > old[len(old)-1] {
			ids = append(ids, id)
		}
	}
	if len(ids) != len(d.jobs) {
		ids = ids[:0]
		for id := range d.jobs {
			ids = append(ids, id)
		}
		kept = 0
	}
	slices.Sort(ids[kept:])
	return ids
}

// Throughput is a running job's predicted and measured samples per second
// (0 when not running or not measured yet).
type Throughput struct {
	PredictedSPS float64 `json:"predicted_samples_per_s"`
	MeasuredSPS  float64 `json:"measured_samples_per_s"`
}

// JobThroughput reports a job's predicted and measured throughput.
func (d *Daemon) JobThroughput(id string) Throughput { return d.view().throughput[id] }

// liveProgress is a running job's iterations and checkpoint as last
// observed (the published view), when it runs.
func (d *Daemon) liveProgress(id string) (iters, ckpt int, ok bool) {
	p, ok := d.view().progress[id]
	return p[0], p[1], ok
}

// Links reports the links jobs share, their compatibility and the jobs'
// time-shifts, as of the last round (network-aware policies).
func (d *Daemon) Links() sched.LinkReport { return d.view().links }

// Running lists the running jobs with their throughput, promise and shift.
func (d *Daemon) Running() []RunningJob { return d.view().running }

// promised is a guaranteed job's promise: the predicted throughput of its
// requested plan on its requested GPUs packed onto servers.
func (d *Daemon) promised(js *jobState) float64 {
	if !js.spec.Request.HasPlan {
		return 0
	}
	o := d.model(js.spec)
	per := 8
	if len(d.cfg.Servers) > 0 {
		per = max(d.cfg.Servers[0].GPUs, 1)
	}
	pl := perf.PackedPlacement(js.spec.Request.GPUs, per)
	b, err := o.Model.Predict(js.spec.Request.Plan, perf.Resources{Placement: pl, CPUsPerGPU: float64(js.spec.Request.CPUs) / float64(max(js.spec.Request.GPUs, 1))})
	if err != nil || b.Iter <= 0 {
		return 0
	}
	return float64(js.spec.GlobalBatch) / b.Iter
}

// Curve is a job's resource sensitivity curve for 1..maxGPUs GPUs, computed
// with the daemon's (fitted) model of its type and its requested CPU cores
// per GPU.
func (d *Daemon) Curve(ctx context.Context, id string, maxGPUs int) ([]perf.CurvePoint, error) {
	d.mu.Lock()
	js := d.jobs[id]
	var spec *jobspec.Spec
	var m perf.Model
	if js != nil {
		spec = js.spec
		m = d.model(js.spec).Model
	}
	d.mu.Unlock()
	if spec == nil {
		rec, err := d.cfg.Store.GetJob(ctx, id)
		if err != nil {
			return nil, err
		}
		var sp jobspec.Spec
		if err := json.Unmarshal(rec.Spec, &sp); err != nil {
			return nil, fmt.Errorf("job %s: spec: %w", id, err)
		}
		spec = &sp
		d.mu.Lock()
		m = d.model(&sp).Model
		d.mu.Unlock()
	}
	m.Space = jobSpace(spec)
	cpg := float64(spec.Request.CPUs) / float64(max(spec.Request.GPUs, 1))
	return d.curves.Get(m, min(max(maxGPUs, 1), 1024, d.clusterGPUs()), max(cpg, 1)), nil
}
