package control

// Job spec pins. The scheduler gets them in the snapshot (pinJob) and
// offers only what satisfies them (sched/pin.go); breaksPin stays as a
// last check of each decision against the spec, which a policy that
// honours pins never trips.

import (
	"fmt"
	"slices"

	"github.com/replan/replan/cluster"
	"github.com/replan/replan/jobspec"
	"github.com/replan/replan/perf"
	"github.com/replan/replan/sched"
)

// pinnedStart turns a start that offers a plan-pinned job another plan
// into a start with its pinned plan on the requested GPUs taken from the
// offered allocation (whole TP groups per server), when that is valid.
func (d *Daemon) pinnedStart(a sched.Decision) (sched.Decision, bool) {
	js := d.jobs[a.Job]
	if js == nil || a.Kind != sched.Start || !js.spec.Pin.Plan || !js.spec.Request.HasPlan {
		return a, false
	}
	p := js.spec.Request.Plan
	want := p.GPUs()
	var alloc []sched.Alloc
	var pl perf.Placement
	for _, al := range a.Alloc {
		take := min(al.GPUs, want) / p.TP * p.TP
		if take <= 0 {
			continue
		}
		frac := float64(take) / float64(al.GPUs)
		alloc = append(alloc, sched.Alloc{Server: al.Server, GPUs: take, CPUs: int(float64(al.CPUs) * frac), MemGB: al.MemGB * frac})
		pl = append(pl, take)
		want -= take
	}
	if want > 0 {
		return a, false
	}
	arch := js.spec.Arch
	arch.GlobalBatch = js.spec.GlobalBatch
	if perf.Check(arch, p, pl) != nil {
		return a, false
	}
	slices.SortFunc(pl, func(x, y int) int { return y - x })
	a.Plan, a.Alloc, a.Placement = p, alloc, pl
	a.Why += " (plan pinned: started on the requested plan)"
	return a, d.breaksPin(a) == ""
}

// pinJob gives the scheduler's view of a job its spec's pins.
func pinJob(sj *sched.Job, spec *jobspec.Spec) {
	sj.PinPlan = spec.Pin.Plan && spec.Request.HasPlan
	sj.Tiers = spec.Pin.Tiers
	sj.Labels = spec.RequiredLabels() // labels.go
}

// breaksPin reports why decision a would break its job's pinning (the job
// spec's pin.plan, and pin.tiers: no tier wider than the widest listed), or
// "" when it does not. The daemon does not apply such a decision.
func (d *Daemon) breaksPin(a sched.Decision) string {
	js := d.jobs[a.Job]
	if js == nil || a.Kind == sched.Preempt {
		return ""
	}
	if why := d.breaksLabels(js, a); why != "" {
		return why // labels.go
	}
	pin := js.spec.Pin
	if pin.Plan && js.spec.Request.HasPlan && a.Plan != js.spec.Request.Plan {
		return fmt.Sprintf("plan pinned to %s; the scheduler offered %s on %s", js.spec.Request.Plan, a.Plan, cluster.PlacementText(a.Placement))
	}
	if len(pin.Tiers) > 0 {
		tier := perf.TierServer
		racks := map[string]bool{}
		for _, al := range a.Alloc {
			racks[d.cfg.Servers[al.Server].Rack] = true
		}
		switch {
		case len(racks) > 1:
			tier = perf.TierCrossRack
		case len(a.Alloc) > 1:
			tier = perf.TierRack
		}
		if tier > slices.Max(pin.Tiers) {
			return fmt.Sprintf("pinned to tiers %v; the scheduler offered a %s placement (%s)", pin.Tiers, tier, cluster.PlacementText(a.Placement))
		}
	}
	return ""
}
