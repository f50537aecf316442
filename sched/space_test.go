package sched_test

import (
	"testing"

	"github.com/replan/replan/perf"
	"github.com/replan/replan/sched"
)

// A job whose framework runs only some plans (Megatron-LM: ZeRO-0/1
// without offload, the same GPU count on every server) is never started
// or reconfigured with another: launch would refuse it and the job would
// burn restarts (the torch end-to-end test saw "megatron runs ZeRO-0/1
// without offload, plan is DP2·TP1·PP1 mb1 ga8 ZeRO-2"). The same
// scenarios without the restriction do choose such plans, so the test can
// fail.
func TestFrameworkSpaceRespected(t *testing.T) {
	violates := 0
	for _, name := range []string{"gpt2", "t5", "bert", "llama7b"} {
		for _, free := range [][]int{{8, 8}, {8, 4}, {4, 2, 2}, {8, 8, 8, 8}} {
			for _, req := range []int{1, 4, 8, 16} {
				for _, sp := range []perf.Space{{}, perf.MegatronSpace} {
					m := model(t, name)
					m.Space = sp
					srv := servers(len(free), 8)
					var jobs []sched.Job
					for i, f := range free {
						if f < 8 {
							jobs = append(jobs, running(t, waiting(t, "hold"+string(rune('0'+i)), model(t, "bert"), 8-f, 0), i, 8-f))
						}
					}
					// No plan asked for: the policy chooses.
					jobs = append(jobs, sched.Job{ID: "a", Tenant: "B", Class: sched.BestEffort, Model: m, ReqGPUs: req, ReqCPUs: 8 * req, Submit: 1, ItersTotal: 1e6})
					s := snapshot(srv, jobs...)
					for _, p := range []sched.Policy{sched.NewMorphling(cheap()), sched.NewReplan(cheap(), sched.NetOptions{})} {
						d := p.Schedule(s)
						a, ok := find(d, "a")
						if !ok || len(a.Placement) == 0 {
							continue
						}
						err := perf.MegatronSpace.Check(a.Plan, a.Placement)
						if sp == (perf.Space{}) {
							if err != nil {
								violates++
							}
							continue
						}
						if err != nil {
							t.Errorf("%s %s, free %v, %d GPUs asked: %s chose %s on %s: %v", p.Name(), name, free, req, a.Kind, a.Plan, a.Placement, err)
						}
					}
				}
			}
		}
	}
	if violates == 0 {
		t.Fatal("no scenario where an unrestricted job gets a plan Megatron cannot run: the test proves nothing")
	}
	t.Logf("%d unrestricted decisions Megatron could not run", violates)
}
