package sched_test

import (
	"testing"

	"github.com/replan/replan/perf"
	"github.com/replan/replan/sched"
)

// racked is n servers of 8 GPUs, per servers to a rack.
func racked(n, per int) []sched.Server {
	s := servers(n, 8)
	for i := range s {
		s[i].Rack = "r" + string(rune('0'+i/per))
	}
	return s
}

// TestGuaranteedAcrossRacksIsPlaced is issue 15's third defect: a
// guaranteed request larger than a rack was promised its in-rack speed
// while every placement it could get spans racks and is priced with the
// spine, so the guarantee check rejected them all and the job waited
// forever. Its promise is now the request packed across racks.
func TestGuaranteedAcrossRacksIsPlaced(t *testing.T) {
	for _, name := range []string{"gpt2", "bert", "t5"} {
		m := model(t, name)
		m.Env.SpineFactor = 0.25 // 4:1 oversubscribed spine
		g := waiting(t, "g", m, 24, 0)
		g.Class, g.Tenant = sched.Guaranteed, "A"
		for _, p := range []sched.Policy{sched.NewMorphling(cheap()), sched.NewReplan(cheap(), sched.DefaultNetOptions()), sched.NewResourcesOnly(cheap())} {
			s := snapshot(racked(4, 2), g)
			s.Tenants = []sched.Tenant{{Name: "A", QuotaGPUs: 32}, {Name: "B"}}
			d := p.Schedule(s)
			a, ok := find(d, "g")
			if !ok || a.Kind != sched.Start {
				t.Errorf("%s/%s: guaranteed 24-GPU job on two racks of 16 GPUs not started: %q", name, p.Name(), reason(d, "g"))
				continue
			}
			if err := sched.CheckInvariants(s, d); err != nil {
				t.Error(err)
			}
			b, err := m.Predict(g.ReqPlan, perf.Resources{Placement: perf.Placement{8, 8, 8}, CrossRack: true, CPUsPerGPU: 8})
			if err != nil {
				t.Fatal(err)
			}
			if promise := float64(m.Arch.GlobalBatch) / b.Iter; a.Throughput < promise*(1-1e-9) {
				t.Errorf("%s/%s: started at %.3f samples/s below its promise %.3f", name, p.Name(), a.Throughput, promise)
			}
		}
	}
}
