package control

// Admission: what can never run is refused at submit (Admit), and what
// becomes impossible later (servers drained) is shown as unschedulable
// until capacity returns (checkSchedulable, run at the start of every
// round). See docs/jobspec.md, "Admission".

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/replan/replan/internal/yamlcheck"
	"github.com/replan/replan/jobspec"
	"github.com/replan/replan/perf"
)

// StateUnschedulable is a waiting job that cannot run on the servers in
// service now (drained or removed ones taken away what it needs). It is
// not offered to the scheduler; it waits again (queued or preempted) as
// soon as capacity returns.
const StateUnschedulable JobState = "unschedulable"

// AdmissionError is a spec the cluster can never run: every problem names
// the spec's file, line and field. The API answers it with 400.
type AdmissionError struct {
	Problems []*yamlcheck.Problem
}

func (e *AdmissionError) Error() string {
	s := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		s[i] = p.Error()
	}
	return strings.Join(s, "\n")
}

// Unwrap returns the problems, as jobspec.Parse's joined errors do.
func (e *AdmissionError) Unwrap() []error {
	out := make([]error, len(e.Problems))
	for i, p := range e.Problems {
		out[i] = p
	}
	return out
}

// capacity is what a set of servers can ever give one job.
type capacity struct {
	gpus, cpus int
	memGB      float64
	perServer  int // GPUs of the largest server
	perRack    int // GPUs of the largest rack
}

func capacityOf(servers []ServerInfo, use func(i int) bool) capacity {
	var c capacity
	racks := map[string]int{}
	for i, s := range servers {
		if use != nil && !use(i) {
			continue
		}
		c.gpus += s.GPUs
		c.cpus += s.CPUs
		c.memGB += s.MemGB
		c.perServer = max(c.perServer, s.GPUs)
		racks[s.Rack] += s.GPUs
		c.perRack = max(c.perRack, racks[s.Rack])
	}
	return c
}

// Admit checks a parsed spec against the cluster (all its servers, drained
// or not) and the tenants: an unknown tenant, a request above what the
// cluster (or, for a guaranteed job, its tenant's quota) can ever give, a
// requested plan that breaks a rule or does not fit in GPU or host memory
// (perf's estimate: the numbers `replan plan` prints), a model with no plan
// that fits at any size the cluster has, and a pin no server or rack can
// satisfy. It returns an *AdmissionError naming each problem, or nil. acc
// (nil: none) adds the tenants' CPU and memory quotas.
func (d *Daemon) Admit(ctx context.Context, spec *jobspec.Spec, acc *Access) error {
	if spec == nil {
		return errors.New("admit: no spec")
	}
	file := spec.File
	if file == "" {
		file = "job.yaml"
	}
	var probs []*yamlcheck.Problem
	add := func(field, format string, args ...any) {
		probs = append(probs, &yamlcheck.Problem{File: file, Line: spec.Line(field), Field: field, Msg: fmt.Sprintf(format, args...)})
	}
	all := capacityOf(d.cfg.Servers, nil)
	req := spec.Request

	// The tenant.
	var tenant *TenantInfo
	names := make([]string, 0, len(d.cfg.Tenants))
	for i := range d.cfg.Tenants {
		names = append(names, d.cfg.Tenants[i].Name)
		if d.cfg.Tenants[i].Name == spec.Tenant {
			tenant = &d.cfg.Tenants[i]
		}
	}
	if tenant == nil && len(d.cfg.Tenants) > 0 {
		sort.Strings(names)
		add("tenant", "unknown tenant %q (the inventory's tenants: %s)", spec.Tenant, strings.Join(names, ", "))
	}

	// Resources the cluster can never give.
	if req.GPUs > all.gpus {
		add("request.gpus", "%d GPUs asked, the cluster has %d in all", req.GPUs, all.gpus)
	}
	if req.CPUs > all.cpus {
		add("request.cpus", "%d CPU cores asked, the cluster has %d in all", req.CPUs, all.cpus)
	}
	if float64(req.MemoryGB) > all.memGB {
		add("request.memory_gb", "%d GB of host memory asked, the cluster has %.0f GB in all", req.MemoryGB, all.memGB)
	}
	if spec.Class == jobspec.Guaranteed && tenant != nil {
		if req.GPUs > tenant.QuotaGPUs {
			add("request.gpus", "a guaranteed job of tenant %s may hold at most its quota of %d GPUs, asked for %d", spec.Tenant, tenant.QuotaGPUs, req.GPUs)
		}
		if ta := acc.tenant(spec.Tenant); ta != nil {
			if ta.QuotaCPUs > 0 && req.CPUs > ta.QuotaCPUs {
				add("request.cpus", "a guaranteed job of tenant %s may hold at most its quota of %d CPU cores, asked for %d", spec.Tenant, ta.QuotaCPUs, req.CPUs)
			}
			if ta.QuotaMemGB > 0 && req.MemoryGB > ta.QuotaMemGB {
				add("request.memory_gb", "a guaranteed job of tenant %s may hold at most its quota of %d GB, asked for %d", spec.Tenant, ta.QuotaMemGB, req.MemoryGB)
			}
		}
	}

	// The plan and the model, priced by the model the scheduler uses.
	arch := spec.Arch
	arch.GlobalBatch = spec.GlobalBatch
	d.mu.Lock()
	arch.ActScale = d.typeActScale(spec) // its measured activation factor (mempeak.go)
	d.mu.Unlock()
	env := d.cfg.Model(arch).Env
	per := max(all.perServer, 1)
	if req.HasPlan && req.GPUs >= 1 && req.GPUs <= all.gpus {
		pl := perf.PackedPlacement(req.GPUs, per)
		if req.Plan.TP > per {
			add("request.plan", "TP %d is more than the %d GPUs of the largest server: a tensor-parallel group never spans servers, so plan %s can never run here", req.Plan.TP, per, req.Plan)
		} else if err := perf.Check(arch, req.Plan, pl); err != nil {
			add("request.plan", "%v (on %d GPUs packed onto servers of %d: %s)", err, req.GPUs, per, pl)
		} else if err := perf.EstimateMemory(arch, req.Plan, pl).Fits(env); err != nil {
			add("request.plan", "%v", err)
		}
	}
	minG := minFeasible(arch, env, jobSpace(spec), cpusPerGPU(spec), per, all.gpus)
	if minG == 0 && all.gpus > 0 {
		fw := ""
		if frameworkSpace(spec.Framework) != (perf.Space{}) {
			fw = " that " + string(spec.Framework) + " runs (ZeRO-0/1 without offload, the same GPU count on every server)"
		}
		if spec.Supports != nil {
			fw += " within the entrypoint's supports"
		}
		add("model", "no plan of %s%s fits in GPU and host memory on any GPU count up to the cluster's %d (see replan plan --model %s)", arch.Name, fw, all.gpus, arch.Name)
	}

	// Pins.
	if need := pinNeed(spec, minG); need > 0 && len(spec.Pin.Tiers) > 0 {
		if most, where := pinCapacity(spec.Pin.Tiers, all); need > most {
			add("pin.tiers", "pinned to %s: the job needs %d GPUs there, the largest %s of the inventory has %d", tiersString(spec.Pin.Tiers), need, where, most)
		}
	}
	d.admitLabels(spec, minG, add) // labels.go
	d.admitTimeLimit(spec, add)    // timelimit.go
	if err := d.admitAfter(ctx, spec, add); err != nil {
		return err // deps.go
	}
	if len(probs) > 0 {
		return &AdmissionError{Problems: probs}
	}
	return nil
}

func cpusPerGPU(spec *jobspec.Spec) float64 {
	return float64(spec.Request.CPUs) / float64(max(spec.Request.GPUs, 1))
}

// pinNeed is the fewest GPUs the job can run on: its request with a pinned
// plan, else the smallest count any plan fits on (minG; 0: none).
func pinNeed(spec *jobspec.Spec, minG int) int {
	if spec.Pin.Plan && spec.Request.HasPlan {
		return spec.Request.GPUs
	}
	return minG
}

// pinCapacity is the most GPUs one job may get within the allowed tiers.
func pinCapacity(tiers []perf.Tier, c capacity) (int, string) {
	switch {
	case slices.Contains(tiers, perf.TierCrossRack):
		return c.gpus, "cluster"
	case slices.Contains(tiers, perf.TierRack):
		return c.perRack, "rack"
	}
	return c.perServer, "server"
}

func pinCapacityOnly(tiers []perf.Tier, c capacity) int {
	n, _ := pinCapacity(tiers, c)
	return n
}

func tiersString(ts []perf.Tier) string {
	s := make([]string, len(ts))
	for i, t := range ts {
		s[i] = t.String()
	}
	return "[" + strings.Join(s, ", ") + "]"
}

// feasMemo remembers minFeasible: it depends only on its arguments, and
// the round asks it for every waiting job.
var feasMemo sync.Map

type feasKey struct {
	arch             perf.Arch
	space            perf.Space
	gpuMemGB, hostGB float64
	offload          bool
	perServer, limit int
}

// minFeasible is the smallest GPU count in 1..limit (packed onto servers
// of per GPUs) on which some plan of arch that the framework runs (space)
// passes every rule and fits env's GPU and host memory; 0 when none does.
func minFeasible(arch perf.Arch, env perf.Env, space perf.Space, cpg float64, per, limit int) int {
	key := feasKey{arch, space, env.GPUMemGB, env.HostMemGB, cpg >= 1, per, limit}
	if v, ok := feasMemo.Load(key); ok {
		return v.(int)
	}
	found := 0
	if arch.Validate() == nil {
		for g := 1; g <= limit && found == 0; g++ {
			pl := perf.PackedPlacement(g, max(per, 1))
			for _, p := range perf.Candidates(arch, g) {
				if (p.Offload && cpg < 1) || space.Check(p, pl) != nil {
					continue
				}
				if perf.Check(arch, p, pl) == nil && perf.EstimateMemory(arch, p, pl).Fits(env) == nil {
					found = g
					break
				}
			}
		}
	}
	feasMemo.Store(key, found)
	return found
}

// unschedulableWhy reports why js cannot run on the servers in service
// now (capacity now, of all servers all), or "" when it can. The caller
// holds d.mu.
func (d *Daemon) unschedulableWhy(js *jobState, all, now capacity) string {
	all, now, on := d.labelCapacity(js, all, now) // labels.go
	arch := js.spec.Arch
	arch.GlobalBatch = js.spec.GlobalBatch
	arch.ActScale = d.typeActScale(js.spec) // mempeak.go
	env := d.cfg.Model(arch).Env
	minG := minFeasible(arch, env, jobSpace(js.spec), cpusPerGPU(js.spec), max(all.perServer, 1), all.gpus)
	need := max(pinNeed(js.spec, minG), 1)
	if minG == 0 {
		return fmt.Sprintf("no plan of %s fits in memory on up to %d GPUs%s", arch.Name, all.gpus, on)
	}
	if need <= now.gpus && (len(js.spec.Pin.Tiers) == 0 || need <= pinCapacityOnly(js.spec.Pin.Tiers, now)) {
		return ""
	}
	drained := func() string {
		var out []string
		for i, s := range d.cfg.Servers {
			if d.nodes[i].drained {
				out = append(out, s.Name)
			}
		}
		var parts []string
		if len(out) > 0 {
			parts = append(parts, "drained: "+strings.Join(out, ", "))
		}
		if c := d.cordonedCount(); c > 0 {
			parts = append(parts, fmt.Sprintf("cordoned: %d GPUs", c)) // health.go
		}
		if len(parts) == 0 {
			return ""
		}
		return " (" + strings.Join(parts, "; ") + ")"
	}
	if need > now.gpus {
		if on != "" {
			return fmt.Sprintf("needs at least %d GPUs%s, those in service have %d%s", need, on, now.gpus, drained())
		}
		return fmt.Sprintf("needs at least %d GPUs, the servers in service have %d%s", need, now.gpus, drained())
	}
	if len(js.spec.Pin.Tiers) > 0 {
		if most, where := pinCapacity(js.spec.Pin.Tiers, now); need > most {
			return fmt.Sprintf("pinned to %s: needs %d GPUs in one %s, the largest in service has %d%s", tiersString(js.spec.Pin.Tiers), need, where, most, drained())
		}
	}
	return ""
}

// checkSchedulable runs at the start of every round (the caller holds
// d.mu): a waiting job the servers in service can no longer run becomes
// unschedulable with the reason (stored, shown in the queue, an event),
// and an unschedulable job that can run again waits again. The store is
// written first; a store error leaves the job as it was.
func (d *Daemon) checkSchedulable(ctx context.Context) error {
	ids := make([]string, 0, len(d.jobs))
	for id := range d.jobs {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	all := capacityOf(d.cfg.Servers, nil)
	now := capacityOf(d.healthyServers(), func(i int) bool { return !d.nodes[i].drained }) // less cordoned GPUs (health.go)
	var errs []error
	for _, id := range ids {
		js := d.jobs[id]
		st := js.rec.State
		if st != StateQueued && st != StatePreempted && st != StateUnschedulable {
			continue
		}
		why := js.deps.broken // deps.go: a dependency that ended the other way
		if why == "" {
			why = d.unschedulableWhy(js, all, now)
		}
		rec := js.rec
		switch {
		case why != "" && (st != StateUnschedulable || rec.Reason != why):
			rec.State, rec.Reason = StateUnschedulable, why
		case why == "" && st == StateUnschedulable:
			rec.State, rec.Reason = StateQueued, "capacity returned"
			if rec.Attempt > 0 {
				rec.State = StatePreempted // it resumes from its checkpoint
			}
		default:
			continue
		}
		var b Batch
		if rec.State == StateUnschedulable {
			b.Events = append(b.Events, d.ev("unschedulable", id, "", js.spec.Name+" unschedulable: "+why, nil))
		} else {
			b.Events = append(b.Events, d.ev("schedulable", id, "", js.spec.Name+" can run again: waits in the queue", nil))
		}
		if err := d.write(ctx, []jobUpdate{{js, rec, "admission: " + rec.Reason}}, b, func() { delete(d.waits, id) }); err != nil {
			errs = append(errs, fmt.Errorf("job %s: %w", id, err))
		}
	}
	return errors.Join(errs...)
}
