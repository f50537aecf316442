package control_test

import (
	"sort"

	"github.com/replan/replan/perf"
	"github.com/replan/replan/sched"
)

// shrinkToFit is the test daemon's policy for the torch end-to-end test
// (testDaemonConfig.Policy "shrink-to-fit"). Morphling gives the small
// trainer model one GPU — correctly: on the simulated A800s its predicted
// throughput does not grow with GPUs, a 135k-parameter model is all
// overhead — so the test scripts the decisions it needs instead, and
// everything after the decision (apply, SIGTERM, checkpoint, stop,
// relaunch, verify, adoption) is the daemon's own:
//
//   - a waiting job starts on exactly its requested GPUs, spread over as few
//     servers as the free GPUs allow (whole servers first), with its
//     requested plan;
//   - a guaranteed job that does not fit makes the running best-effort job
//     with the most servers shrink to half of them (the first half),
//     keeping its global batch (DP halves, gradient accumulation doubles),
//     and starts on what that frees in the same round.
type shrinkToFit struct{}

// predict is the model's throughput of p on pl (0 when it cannot say).
func predict(j *sched.Job, p perf.Plan, pl perf.Placement) float64 {
	if j.Model == nil {
		return 0
	}
	b, err := j.Model.Predict(p, perf.Resources{Placement: pl, CPUsPerGPU: 1})
	if err != nil {
		return 0
	}
	return b.Throughput(p.GlobalBatch())
}

func (shrinkToFit) Name() string { return "shrink-to-fit" }

func (shrinkToFit) Schedule(s sched.Snapshot) sched.Decisions {
	s.FillFree()
	var d sched.Decisions
	free := make([]int, len(s.Servers))
	for i, sv := range s.Servers {
		free[i] = sv.FreeGPUs
	}
	order := make([]int, len(s.Jobs))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return s.Jobs[order[a]].Submit < s.Jobs[order[b]].Submit })
	// place takes want GPUs, fullest free servers first, whole servers of
	// the same size so torchrun gets the same count everywhere.
	place := func(j *sched.Job) []sched.Alloc {
		want := j.ReqGPUs
		for per := want; per >= 1; per-- {
			if want%per != 0 {
				continue
			}
			var out []sched.Alloc
			for i := range s.Servers {
				if len(out) < want/per && free[i] >= per {
					out = append(out, sched.Alloc{Server: i, GPUs: per, CPUs: max(j.ReqCPUs*per/max(j.ReqGPUs, 1), 1)})
				}
			}
			if len(out) == want/per {
				for _, a := range out {
					free[a.Server] -= a.GPUs
				}
				return out
			}
		}
		return nil
	}
	for _, i := range order {
		j := &s.Jobs[i]
		if j.Running() {
			continue
		}
		alloc := place(j)
		if alloc == nil && j.Class == sched.Guaranteed {
			// Shrink the best-effort job spread widest to half its servers.
			victim := -1
			for k := range s.Jobs {
				v := &s.Jobs[k]
				if v.Running() && v.Class == sched.BestEffort && len(v.Alloc) >= 2 && len(v.Alloc)%2 == 0 && v.Plan.DP%2 == 0 &&
					(victim < 0 || len(v.Alloc) > len(s.Jobs[victim].Alloc)) {
					victim = k
				}
			}
			if victim >= 0 {
				v := &s.Jobs[victim]
				keep := v.Alloc[:len(v.Alloc)/2]
				for _, a := range v.Alloc[len(keep):] {
					free[a.Server] += a.GPUs
				}
				p := v.Plan
				p.DP, p.GA = p.DP/2, p.GA*2
				var pl perf.Placement
				for _, a := range keep {
					pl = append(pl, a.GPUs)
				}
				d.Actions = append(d.Actions, sched.Decision{Kind: sched.Reconfigure, Job: v.ID, Index: victim, Plan: p,
					Alloc: append([]sched.Alloc(nil), keep...), Placement: pl, Tier: perf.TierServer, Throughput: predict(v, p, pl),
					Why: "shrunk to half its servers for a guaranteed job (test policy)"})
				alloc = place(j)
			}
		}
		if alloc == nil {
			d.Waiting = append(d.Waiting, sched.Wait{Job: j.ID, Index: i, Reason: "not enough free GPUs (test policy)"})
			continue
		}
		var pl perf.Placement
		for _, a := range alloc {
			pl = append(pl, a.GPUs)
		}
		tier := perf.TierServer
		if len(alloc) > 1 {
			tier = perf.TierRack
		}
		d.Actions = append(d.Actions, sched.Decision{Kind: sched.Start, Job: j.ID, Index: i, Plan: j.ReqPlan, Alloc: alloc, Placement: pl, Tier: tier, Throughput: predict(j, j.ReqPlan, pl),
			Why: "its request on free GPUs (test policy)"})
	}
	return d
}
