package sim

// Forward simulation from a live state: the daemon's ETA. The same engine
// as a trace replay (simulator.loop, round, apply) starts from the jobs
// that run and wait now instead of from a trace, with no future arrivals,
// and stops once every waiting job has started.

import (
	"container/heap"
	"context"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/replan/replan/dataset"
	"github.com/replan/replan/perf"
	"github.com/replan/replan/sched"
)

// ForwardJob is what the forward simulation knows of a job beyond what the
// policy sees (sched.Job): how fast a running job goes now and how much of
// its restart it still has to pay.
type ForwardJob struct {
	// Rate is a running job's measured iterations per second (0: priced
	// from its model like any other configuration).
	Rate float64
	// RestartLeft is the seconds before a running job progresses again
	// (checkpoint-restart and time-shift still to come). Negative, with
	// no Rate: its restart ended that long ago and it has progressed
	// since, unobserved, at its priced rate.
	RestartLeft float64
}

// ForwardConfig bounds a forward simulation.
type ForwardConfig struct {
	// RestartCost is the seconds every start and change of plan or
	// placement costs (0: the simulator's default, negative: none).
	RestartCost float64
	// Horizon is how far ahead it looks, in seconds (default 30 days).
	Horizon float64
	// MaxRounds bounds the policy rounds it runs (default 2000).
	MaxRounds int
	// RoundEvery is how often the control plane observes and schedules,
	// in seconds (0: on every event): a job that could start between two
	// rounds starts at the next one.
	RoundEvery float64
	// IdealSeconds: the caller keeps Job.IdealSeconds (as the simulator
	// does) and the forward simulation accumulates it from the
	// snapshot's. False (a control plane, which keeps none): the policy
	// is shown none in the forward simulation either, and estimates
	// Nw_sens from progress as it does in the caller's rounds.
	IdealSeconds bool
	// Arrivals are jobs expected to be submitted later (Submit after
	// Snapshot.Now, no allocation): the estimate of a waiting job counts
	// with the jobs that will overtake it. Their IDs must not collide with
	// the snapshot's.
	Arrivals []sched.Job
}

// ForwardResult is when each job that waits now starts, in the snapshot's
// clock (Snapshot.Now), and why the others got no estimate.
type ForwardResult struct {
	Start map[string]float64
	// NoStart is, for each waiting job that did not start within the
	// horizon, the policy's last reason for keeping it waiting.
	NoStart map[string]string
	Rounds  int
}

type forward struct {
	horizon float64
	rounds  int
	steps   int // loop iterations so far
	cut     bool
	waiting []*job
	first   int // index of the first expected arrival in simulator.jobs
}

// done stops the loop before time t once every job that waited has
// started, past the horizon, or after too many rounds.
func (f *forward) done(s *simulator, t float64) bool {
	f.steps++
	if t > f.horizon || s.rounds >= f.rounds || f.steps > 50*f.rounds {
		f.cut = f.cut || t <= f.horizon
		return true
	}
	for _, j := range f.waiting {
		if !j.started {
			return false
		}
	}
	return true
}

// Forward simulates policy p from snap (the policy's own view of the
// cluster now: servers, tenants, running jobs with their allocations and
// plans, waiting jobs) with no new arrivals, and reports when each waiting
// job first starts. extra adds, by job ID, what the control plane measured
// of running jobs. Jobs progress at their measured rate until they are
// reconfigured, then at the models' prediction (measured tables when
// models has them). p must not be used concurrently by anyone else.
func Forward(ctx context.Context, snap sched.Snapshot, p sched.Policy, models *Models, extra map[string]ForwardJob, cfg ForwardConfig) (ForwardResult, error) {
	if cfg.Horizon <= 0 {
		cfg.Horizon = 30 * 24 * 3600
	}
	if cfg.MaxRounds <= 0 {
		cfg.MaxRounds = 2000
	}
	if models == nil {
		models = &Models{}
	}
	// The engine prices by model name: give every model pointer of the
	// snapshot a name of its own.
	m := *models
	m.Fitted = map[string]*perf.Model{}
	for n, fm := range models.Fitted {
		m.Fitted[n] = fm
	}
	if m.Measured == nil {
		m.Measured = dataset.NewMeasured()
	}
	names := map[*perf.Model]string{}
	for n, fm := range m.Fitted {
		names[fm] = n
	}
	s := &simulator{cfg: Config{RestartCost: cfg.RestartCost, RoundInterval: cfg.RoundEvery}.withDefaults(), p: p, models: &m, r: &rates{m: &m, cache: map[rateKey]rateVal{}}}
	s.fwd = &forward{horizon: snap.Now + cfg.Horizon, rounds: cfg.MaxRounds}
	s.now = snap.Now
	s.servers = append([]sched.Server(nil), snap.Servers...)
	for i := range s.servers {
		sv := &s.servers[i]
		sv.FreeGPUs, sv.FreeCPUs, sv.FreeMemGB = sv.GPUs, sv.CPUs, sv.MemGB
	}
	s.tenants = append([]sched.Tenant(nil), snap.Tenants...)
	s.hist = sched.TimerHistory{Obs: append([]sched.TimerObs(nil), snap.History.Obs...)}
	s.cfg.Servers = len(s.servers)
	if len(s.servers) > 0 {
		s.cfg.GPUsPerServer = max(s.servers[0].GPUs, 1)
	}
	if models.SpineGBps == 0 {
		m.SpineGBps = snap.SpineGBps
	}
	jobs := append([]sched.Job(nil), snap.Jobs...)
	sort.SliceStable(jobs, func(a, b int) bool { return jobs[a].Submit < jobs[b].Submit })
	arrivals := append([]sched.Job(nil), cfg.Arrivals...)
	// By time, then ID: the caller's order (a map's) must not change
	// the order the policy sees simultaneous arrivals in.
	sort.SliceStable(arrivals, func(a, b int) bool {
		if arrivals[a].Submit != arrivals[b].Submit {
			return arrivals[a].Submit < arrivals[b].Submit
		}
		return arrivals[a].ID < arrivals[b].ID
	})
	for _, sj := range arrivals {
		if sj.Submit > snap.Now && len(sj.Alloc) == 0 {
			sj.ItersDone, sj.Restarts, sj.LastRun, sj.RunSeconds = 0, 0, 0, 0
			jobs = append(jobs, sj)
		}
	}
	for _, sj := range jobs {
		if sj.Model == nil {
			continue
		}
		name, ok := names[sj.Model]
		if !ok {
			name = sj.Model.Arch.Name
			for k := 2; m.Fitted[name] != nil; k++ {
				name = sj.Model.Arch.Name + "#" + strconv.Itoa(k)
			}
			m.Fitted[name] = sj.Model
			names[sj.Model] = name
		}
		j := &job{w: dataset.WorkloadJob{Name: sj.ID, Submit: sj.Submit, GPUs: sj.ReqGPUs, CPUs: sj.ReqCPUs, Steps: int(math.Ceil(sj.ItersTotal)), Labels: strings.Join(sj.Labels, ";")},
			labels: sj.Labels,
			model:  name, m: sj.Model, reqPlan: sj.ReqPlan, class: sj.Class, tenant: sj.Tenant,
			done: sj.ItersDone, held: sj.ItersDone, last: s.now, changed: sj.LastChange, lastRun: sj.LastRun, runSec: sj.RunSeconds, restarts: sj.Restarts,
			idealSec: sj.IdealSeconds, noIdeal: !cfg.IdealSeconds, reqCPUs: sj.ReqCPUs}
		j.cpg = max(1, sj.ReqCPUs/max(sj.ReqGPUs, 1))
		if sj.Promise > 0 && sj.Model.Arch.GlobalBatch > 0 {
			j.promise = sj.Promise / float64(sj.Model.Arch.GlobalBatch)
		}
		j.promised, j.fixedPromise = j.promise, true // the control plane's own
		if sj.Submit > snap.Now {
			j.st = pending // an expected arrival
			s.jobs = append(s.jobs, j)
			continue
		}
		if len(sj.Alloc) == 0 {
			j.st = waiting
			s.fwd.waiting = append(s.fwd.waiting, j)
			s.jobs = append(s.jobs, j)
			s.live = append(s.live, j) // rounds see only live jobs
			continue
		}
		j.st, j.started, j.first = running, true, sj.LastChange
		j.alloc = append([]sched.Alloc(nil), sj.Alloc...)
		cpg, cross := 1<<30, false
		for _, a := range j.alloc {
			sv := &s.servers[a.Server]
			sv.FreeGPUs -= a.GPUs
			sv.FreeCPUs -= a.CPUs
			sv.FreeMemGB -= a.MemGB
			s.alloc += a.GPUs
			j.gpus += a.GPUs
			if a.GPUs > 0 {
				cpg = min(cpg, a.CPUs/a.GPUs)
			}
			if sv.Rack != s.servers[j.alloc[0].Server].Rack {
				cross = true
			}
		}
		// Priced with the cores it holds; its request stays what the
		// policy sees in every round (the control plane's rounds do).
		cpg = max(min(cpg, j.cpg), 1)
		j.plan, j.pl, j.phase = sj.Plan, placementFromAlloc(j.alloc), sj.Phase
		fj := extra[sj.ID]
		j.rate = fj.Rate
		if j.rate <= 0 {
			if it, _ := s.r.iter(name, j.plan, j.pl, cross, cpg); it > 0 {
				j.rate = 1 / it
			}
		}
		if j.rate <= 0 {
			j.rate = 1e-9 // unpriceable: it holds its GPUs past the horizon
		}
		j.baseIter = 1 / j.rate
		j.restart = s.now + math.Max(fj.RestartLeft, 0)
		if fj.RestartLeft < 0 && fj.Rate <= 0 {
			j.done = math.Min(j.done-fj.RestartLeft*j.rate, float64(j.w.Steps))
			j.held = j.done
		}
		j.version++
		s.jobs = append(s.jobs, j)
		s.live = append(s.live, j)
		if cross {
			s.addSpread(j) // its rack uplinks are shared (relink)
		}
		heap.Push(&s.heap, ev{t: s.finishTime(j), j: j, v: j.version})
	}
	s.fwd.first = len(s.jobs)
	for i, j := range s.jobs {
		if j.st == pending {
			s.fwd.first = i
			break
		}
	}
	res := ForwardResult{Start: map[string]float64{}, NoStart: map[string]string{}}
	if len(s.fwd.waiting) == 0 {
		return res, nil
	}
	if err := s.loop(ctx); err != nil {
		return res, err
	}
	res.Rounds = s.rounds
	for _, j := range s.fwd.waiting {
		if j.started {
			res.Start[j.w.Name] = j.first
		} else {
			why := j.why
			if why == "" || s.fwd.cut {
				why = "the simulation stopped before it started"
			}
			res.NoStart[j.w.Name] = why
		}
	}
	return res, nil
}
