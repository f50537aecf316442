package control

import (
	"slices"

	"github.com/replan/replan/perf"
)

// memGB is the memory a launch's GPUs report on the simulated cluster:
// perf's estimate of its busiest GPU with the activation factor ActScale,
// as an implementation keeping that share of the activations would use
// (at the default 1, measured peaks fit a factor of 1: nothing changes).
// The caller holds e.mu.
func (e *SimExecutor) memGB(l Launch) float64 {
	if l.Spec == nil || l.Plan.DP < 1 || l.Plan.TP < 1 || l.Plan.PP < 1 || l.Plan.GA < 1 {
		return 0
	}
	pl := make(perf.Placement, 0, len(l.Servers))
	for _, s := range l.Servers {
		pl = append(pl, len(s.GPUs))
	}
	slices.SortFunc(pl, func(a, b int) int { return b - a })
	a := l.Spec.Arch
	a.ActScale = e.ActScale
	return perf.EstimateMemory(a, l.Plan, pl).GPU / perf.GiB
}
