package control

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/replan/replan/agent"
	"github.com/replan/replan/dataset"
	"github.com/replan/replan/perf"
)

// SimExecutor runs jobs on a simulated cluster: a job advances at the
// measured iteration time of its (plan, placement) when the Morphling
// tables have it, else at its model's prediction; every start costs
// RestartCost of no progress; a stopped job keeps what it had done (it
// checkpoints on stop). Time is whatever Clock says, so `replan demo` can
// run it accelerated. Servers can be failed and recovered.
type SimExecutor struct {
	Clock       func() time.Time
	Measured    *dataset.Measured // may be nil
	Models      func(perf.Arch) perf.Model
	RestartCost time.Duration
	// GPUsPerServer is what each server reports GPU figures for (0: 8).
	GPUsPerServer int
	// Pace is how fast every job runs against what the tables or the
	// model say (0: 1; 0.5: twice as slow everywhere, a model that is
	// wrong). A GPU backend's throttled clocks slow the jobs on those
	// GPUs further (simexec_faults.go).
	Pace float64
	// ActScale is the share of the activations perf counts that the
	// simulated jobs keep (0: 1): a running job's GPUs report the memory
	// perf estimates for its plan with this activation factor
	// (simexec_mem.go).
	ActScale float64

	mu       sync.Mutex
	running  map[string]*simJob
	down     map[string]bool
	servers  []string
	samplers map[string]*agent.Sampler // servers whose GPU health a backend reports (simexec_faults.go)
	agents   simAgents                 // servers whose agent is gone (simexec_redeploy.go)
}

type simJob struct {
	l        Launch
	base     float64   // iterations done when it (re)started (its checkpoint)
	ready    time.Time // when the restart cost has been paid
	iterTime float64   // seconds per iteration
	nominal  float64   // seconds per iteration at full speed
	pace     float64   // the fraction of full speed it runs at
	// hung: it makes no progress from frozen on (simexec_faults.go); exit:
	// its processes died with this code.
	hung   bool
	frozen float64
	exit   *int
	// memGB is what its GPUs report used once it runs (simexec_mem.go;
	// 0: a fixed figure).
	memGB float64
}

// NewSimExecutor returns a simulated executor for the named servers.
func NewSimExecutor(clock func() time.Time, servers []string, measured *dataset.Measured, models func(perf.Arch) perf.Model, restart time.Duration) *SimExecutor {
	return &SimExecutor{Clock: clock, Measured: measured, Models: models, RestartCost: restart, running: map[string]*simJob{}, down: map[string]bool{}, servers: servers}
}

// SetDown marks a server dead (its jobs stop, it misses heartbeats) or alive.
func (e *SimExecutor) SetDown(server string, down bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.down[server] = down
}

func (e *SimExecutor) iterTime(l Launch) (float64, error) {
	pl := make(perf.Placement, 0, len(l.Servers))
	cpus, gpus := 0, 0
	for _, s := range l.Servers {
		pl = append(pl, len(s.GPUs))
		cpus += len(s.CPUs)
		gpus += len(s.GPUs)
	}
	sort.Sort(sort.Reverse(sort.IntSlice(pl)))
	a := l.Spec.Arch
	if e.Measured != nil {
		if t, ok := e.Measured.IterTime(a.Name, a, l.Plan, pl); ok && t > 0 {
			return t, nil
		}
	}
	m := perf.DefaultModel(a, perf.A800)
	if e.Models != nil {
		m = e.Models(a)
		m.Arch = a
	}
	b, err := m.Predict(l.Plan, perf.Resources{Placement: pl, CPUsPerGPU: float64(cpus) / float64(max(gpus, 1))})
	if err != nil {
		return 0, err
	}
	return b.Iter, nil
}

func (e *SimExecutor) start(l Launch, base float64) error {
	it, err := e.iterTime(l)
	if err != nil {
		return fmt.Errorf("simulated start %s: %w", l.JobID, err)
	}
	for _, s := range l.Servers {
		if e.down[s.Name] {
			return fmt.Errorf("simulated start %s: server %s is down", l.JobID, s.Name)
		}
	}
	now := e.Clock()
	ready := now.Add(e.RestartCost + time.Duration(l.Shift*float64(time.Second)))
	e.running[l.JobID] = &simJob{l: l, base: base, ready: ready, iterTime: it, nominal: it, pace: 1, memGB: e.memGB(l)}
	e.setPace(e.running[l.JobID], e.globalPace())
	return nil
}

// Start implements Executor.
func (e *SimExecutor) Start(ctx context.Context, l Launch) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.start(l, float64(l.From))
}

// Reconfigure implements Executor.
func (e *SimExecutor) Reconfigure(ctx context.Context, from, to Launch, last int) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	base := float64(last)
	if j := e.running[from.JobID]; j != nil {
		base = math.Max(base, e.progress(j))
	}
	delete(e.running, from.JobID)
	return e.start(to, base)
}

func (e *SimExecutor) progress(j *simJob) float64 {
	if j.hung {
		return j.frozen
	}
	base := j.base
	d := e.Clock().Sub(j.ready).Seconds()
	if d <= 0 {
		return base
	}
	return base + d/j.iterTime
}

// Stop implements Executor.
func (e *SimExecutor) Stop(ctx context.Context, id string, checkpoint bool) (int, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	j := e.running[id]
	if j == nil {
		return 0, nil
	}
	delete(e.running, id)
	if !checkpoint {
		return 0, nil
	}
	return int(e.progress(j)), nil
}

// Observe implements Executor.
func (e *SimExecutor) Observe(ctx context.Context) (Observation, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	var o Observation
	owners := map[string]map[int]*simJob{}
	for _, j := range e.running {
		for _, s := range j.l.Servers {
			if owners[s.Name] == nil {
				owners[s.Name] = map[int]*simJob{}
			}
			for _, g := range s.GPUs {
				owners[s.Name][g] = j
			}
		}
	}
	gpus := map[string][]GPUStat{}
	for _, s := range e.servers {
		n := NodeObservation{Name: s, Reachable: !e.down[s] && !e.agents.gone[s], BootID: e.agents.bootID(s)}
		if e.down[s] {
			n.Err = "simulated failure"
		} else if e.agents.gone[s] {
			n.Err = "simulated: the agent does not answer"
		} else {
			n.GPUs = e.gpuHealthOf(ctx, s, simGPUs(s, e.gpusOn(s, owners[s]), owners[s], e.Clock()))
			gpus[s] = n.GPUs
		}
		o.Nodes = append(o.Nodes, n)
	}
	e.throttle(gpus) // simexec_faults.go
	ids := make([]string, 0, len(e.running))
	for id := range e.running {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		j := e.running[id]
		dead := false
		for _, s := range j.l.Servers {
			dead = dead || e.down[s.Name] || e.agents.gone[s.Name]
		}
		if dead {
			continue
		}
		it := int(e.progress(j))
		obs := JobObservation{JobID: id, Iterations: it, Checkpoint: it}
		if e.Clock().After(j.ready) && !j.hung {
			obs.SamplesPerSec = float64(j.l.Spec.GlobalBatch) / j.iterTime
		}
		if j.exit != nil {
			// Like the SSH executor, the failure quotes the last lines
			// of the job's log.
			var tail strings.Builder
			simLog(&tail, max(it-4, 1), it, float64(j.l.Spec.GlobalBatch)/j.iterTime)
			obs.Exited, obs.ExitCode, obs.Err = true, *j.exit, "killed"+quoteLines(tail.String(), failTailLines)
			obs.SamplesPerSec = 0
			delete(e.running, id)
		} else if it >= j.l.Spec.Iterations {
			obs.Exited, obs.Iterations, obs.Checkpoint = true, j.l.Spec.Iterations, j.l.Spec.Iterations
			delete(e.running, id)
		}
		o.Jobs = append(o.Jobs, obs)
	}
	return o, nil
}

// Adopt implements Executor: the simulated cluster keeps what it runs in
// memory, so after a restart of the process nothing is left to adopt.
func (e *SimExecutor) Adopt(ctx context.Context, l Launch) (bool, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	_, ok := e.running[l.JobID]
	return ok, nil
}

// Running lists the jobs the simulated cluster runs.
func (e *SimExecutor) Running() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for id := range e.running {
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}

var _ Executor = (*SimExecutor)(nil)

// Check implements HealthChecker: a simulated server passes unless it is
// down.
func (e *SimExecutor) Check(ctx context.Context, server string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.down[server] {
		return fmt.Errorf("health check on %s: simulated failure", server)
	}
	if e.agents.gone[server] {
		return fmt.Errorf("health check on %s: simulated: the agent does not answer", server)
	}
	return nil
}

var _ HealthChecker = (*SimExecutor)(nil)

// gpusOn is how many GPUs a simulated server reports: GPUsPerServer, or
// more when a job holds a higher index.
func (e *SimExecutor) gpusOn(server string, owners map[int]*simJob) int {
	n := e.GPUsPerServer
	if n <= 0 {
		n = 8
	}
	for i := range owners {
		n = max(n, i+1)
	}
	return n
}
