package sched_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/replan/replan/perf"
	"github.com/replan/replan/sched"
)

// twoRacks is 2 racks of 4 servers of 8 GPUs.
func twoRacks() []sched.Server {
	var out []sched.Server
	for i := 0; i < 8; i++ {
		out = append(out, sched.Server{ID: "s" + string(rune('0'+i)), Rack: []string{"r0", "r1"}[i/4], GPUs: 8, CPUs: 96, MemGB: 1600})
	}
	return out
}

// Issue 12: a job pinned to tiers [server, rack] (the docs' example)
// never started on an idle cluster: the policies offered it more GPUs
// across racks and the daemon vetoed the offer every round. Every policy
// now offers it a placement inside its tiers in the first round.
func TestPinnedTiersStartInOneRoundOnAnIdleCluster(t *testing.T) {
	m := model(t, "gpt2")
	plan := perf.Plan{DP: 8, TP: 1, PP: 1, MicroBatch: 2, GA: 1, ZeRO: 2}
	for _, name := range sched.Names() {
		for _, tiers := range [][]perf.Tier{{perf.TierServer, perf.TierRack}, {perf.TierServer}} {
			p, _ := sched.New(name)
			j := sched.Job{ID: "pinned", Tenant: "B", Model: m, ReqGPUs: 8, ReqCPUs: 64, ReqPlan: plan, Submit: 900, ItersTotal: 1e6, Tiers: tiers}
			d := p.Schedule(snapshot(twoRacks(), j))
			a, ok := find(d, "pinned")
			if !ok || a.Kind != sched.Start {
				t.Errorf("%s %v: no start on an idle cluster (%s)", name, tiers, reason(d, "pinned"))
				continue
			}
			racks := map[string]bool{}
			for _, al := range a.Alloc {
				racks[twoRacks()[al.Server].Rack] = true
			}
			if len(racks) > 1 || (len(tiers) == 1 && len(a.Alloc) > 1) {
				t.Errorf("%s %v: placed on %+v", name, tiers, a.Alloc)
			}
		}
	}
}

// A plan-pinned job is offered only its plan on its GPU count, by every
// policy (morphling grows unpinned jobs on an idle cluster).
func TestPinnedPlanIsTheOnlyOffer(t *testing.T) {
	m := model(t, "gpt2")
	plan := perf.Plan{DP: 8, TP: 1, PP: 1, MicroBatch: 2, GA: 1, ZeRO: 2}
	for _, name := range sched.Names() {
		p, _ := sched.New(name)
		j := sched.Job{ID: "pinned", Tenant: "B", Model: m, ReqGPUs: 8, ReqCPUs: 64, ReqPlan: plan, Submit: 900, ItersTotal: 1e6, PinPlan: true}
		d := p.Schedule(snapshot(twoRacks(), j))
		a, ok := find(d, "pinned")
		if !ok || a.Kind != sched.Start {
			t.Errorf("%s: no start (%s)", name, reason(d, "pinned"))
			continue
		}
		if a.Plan != plan || a.Placement.GPUs() != 8 {
			t.Errorf("%s: offered %s on %s, pinned %s on 8", name, a.Plan, a.Placement, plan)
		}
	}
}

// A job pinned to one server waits while no server has room, and its
// reason names the pin; it is never offered GPUs on two servers.
func TestPinnedWaitReasonNamesThePin(t *testing.T) {
	m := model(t, "gpt2")
	srv := servers(2, 8)
	busy := waiting(t, "busy", m, 4, 1)
	busy2 := waiting(t, "busy2", m, 4, 2)
	j := waiting(t, "pinned", m, 8, 900)
	j.Tiers = []perf.Tier{perf.TierServer}
	j.PinPlan = true
	j.ReqPlan = perf.Plan{DP: 8, TP: 1, PP: 1, MicroBatch: 2, GA: 1, ZeRO: 2}
	j.ReqGPUs = 8
	for _, name := range []string{"static", "morphling", "replan"} {
		p, _ := sched.New(name)
		s := snapshot(srv, running(t, busy, 0, 4), running(t, busy2, 1, 4), j)
		d := p.Schedule(s)
		if a, ok := find(d, "pinned"); ok && a.Kind == sched.Start && len(a.Alloc) > 1 {
			t.Errorf("%s: a server-pinned job was offered %+v", name, a.Alloc)
		}
		r := reason(d, "pinned")
		if name == "static" && r == "" {
			t.Errorf("static: the pinned job neither started nor waits")
		}
		if r != "" && !strings.HasPrefix(r, "pinned to plan "+j.ReqPlan.String()+" on 8 GPUs in one server: ") {
			t.Errorf("%s: reason %q", name, r)
		}
	}
}

// A plan-pinned job larger than a rack can only run across racks: on an
// empty cluster with an oversubscribed spine Morphling and replan must
// still start it (they compared its cross-rack placement with the packed
// curve priced inside one rack, lost more than FragTolerance to the
// spine and left it waiting forever).
func TestPinnedLargerThanRackStarts(t *testing.T) {
	m := model(t, "roberta")
	m.Env.SpineFactor = 0.25 // 4:1
	srv := make([]sched.Server, 16)
	for i := range srv {
		srv[i] = sched.Server{ID: fmt.Sprint("s", i), Rack: fmt.Sprint("r", i/2), GPUs: 8, CPUs: 96, MemGB: 1600}
	}
	j := waiting(t, "big", m, 32, 0)
	j.ReqPlan = dpPlan(t, m, 32)
	j.PinPlan = true
	for _, name := range []string{"morphling", "replan"} {
		p, _ := sched.New(name)
		s := snapshot(srv, j)
		s.SpineGBps = 50
		d := p.Schedule(s)
		a, ok := find(d, "big")
		if !ok {
			t.Fatalf("%s: pinned 32-GPU job not started on an empty cluster of 2-server racks: %s", name, reason(d, "big"))
		}
		checkCapacity(t, s, d)
		if a.Plan != j.ReqPlan || len(a.Alloc) != 4 {
			t.Fatalf("%s: started with %s on %v, want its pinned plan on 4 whole servers", name, a.Plan, a.Alloc)
		}
	}
}

// Two plan-pinned jobs larger than a rack on an oversubscribed spine: the
// running one must not be preempted for the waiting one, which would run
// no faster (both only ever run across racks). Pricing the waiting job's
// request inside one rack made its slope look higher, and the two swapped
// places every MinDwell.
func TestPinnedLargerThanRackNoSwap(t *testing.T) {
	m := model(t, "roberta")
	m.Env.SpineFactor = 0.25
	srv := make([]sched.Server, 4)
	for i := range srv {
		srv[i] = sched.Server{ID: fmt.Sprint("s", i), Rack: fmt.Sprint("r", i/2), GPUs: 8, CPUs: 96, MemGB: 1600}
	}
	plan := dpPlan(t, m, 32)
	a := waiting(t, "a", m, 32, 0)
	a.ReqPlan, a.PinPlan, a.Plan = plan, true, plan
	for s := range srv {
		a.Alloc = append(a.Alloc, sched.Alloc{Server: s, GPUs: 8, CPUs: 64})
	}
	a.ItersDone, a.LastChange, a.LastRun, a.RunSeconds = 1000, 0, 50000, 50000
	b := waiting(t, "b", m, 32, 10)
	b.ReqPlan, b.PinPlan = plan, true
	for _, name := range []string{"morphling", "replan"} {
		p, _ := sched.New(name)
		s := snapshot(srv, a, b)
		s.Now, s.SpineGBps = 50000, 25
		d := p.Schedule(s)
		if x, ok := find(d, "a"); ok {
			t.Fatalf("%s: running pinned job a %s for b, which would run no faster", name, x.Kind)
		}
		checkCapacity(t, s, d)
	}
}
