package sched_test

import (
	"testing"

	"github.com/replan/replan/perf"
	"github.com/replan/replan/sched"
)

// tpFragmented is two racks whose free GPUs (7+4 and 4+1 on four servers,
// plus one free server in each rack) hold 16 GPUs but only two blocks of
// 8: a DP2·TP8 request, waiting long enough that every delay timer has
// expired, can only run without splitting a TP group on the two free
// servers, across racks.
func tpFragmented(t *testing.T) sched.Snapshot {
	small := model(t, "bert")
	srv := servers(6, 8)
	for i := range srv {
		srv[i].ID = "s" + string(rune('0'+i))
		if i >= 3 {
			srv[i].Rack = "r1"
		}
	}
	jobs := []sched.Job{
		running(t, waiting(t, "a", small, 1, 0), 0, 1),
		running(t, waiting(t, "b", small, 4, 0), 1, 4),
		running(t, waiting(t, "c", small, 4, 0), 3, 4),
		running(t, waiting(t, "d", small, 4, 0), 4, 4),
		running(t, waiting(t, "e", small, 2, 0), 4, 2),
		running(t, waiting(t, "f", small, 1, 0), 4, 1),
	}
	big := model(t, "llama7b")
	w := sched.Job{ID: "w", Tenant: "B", Class: sched.BestEffort, Model: big, ReqGPUs: 16, ReqCPUs: 128,
		ReqPlan: perf.Plan{DP: 2, TP: 8, PP: 1, MicroBatch: 4, GA: 1, ZeRO: 1}, Submit: 0, ItersTotal: 1e6}
	jobs = append(jobs, w)
	s := snapshot(srv, jobs...)
	s.Now = 48 * 3600
	return s
}

// TestNoPolicySplitsATPGroup: issue 29 found dally, dally-manual and
// tiresias placing DP2·TP8 on 7+4+4+1 GPUs (FIFO.placeNet took GPUs
// without the TP-block rule). Every policy either starts the job in
// blocks of a multiple of TP per server or leaves it waiting, and
// CheckInvariants holds.
func TestNoPolicySplitsATPGroup(t *testing.T) {
	for _, name := range sched.Names() {
		p, err := sched.New(name)
		if err != nil {
			t.Fatal(err)
		}
		s := tpFragmented(t)
		d := p.Schedule(s)
		for _, a := range d.Actions {
			if a.Kind == sched.Preempt || a.Plan.TP <= 1 {
				continue
			}
			for _, al := range a.Alloc {
				if al.GPUs%a.Plan.TP != 0 {
					t.Errorf("%s: %s %s with %s on %s: %d GPUs on server %d split a TP group", name, a.Kind, a.Job, a.Plan, a.Placement, al.GPUs, al.Server)
				}
			}
		}
		if err := sched.CheckInvariants(s, d); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestInvariantsRefuseSplitTPAndWrongPlacement: CheckInvariants names a
// TP group across servers, a Placement that is not the allocation's, and
// a plan that changes the global batch.
func TestInvariantsRefuseSplitTPAndWrongPlacement(t *testing.T) {
	s := tpFragmented(t)
	w := len(s.Jobs) - 1
	good := sched.Decision{Kind: sched.Start, Job: "w", Index: w, Plan: s.Jobs[w].ReqPlan,
		Alloc:     []sched.Alloc{{Server: 2, GPUs: 8, CPUs: 64}, {Server: 5, GPUs: 8, CPUs: 64}},
		Placement: perf.Placement{8, 8}}
	if err := sched.CheckInvariants(s, sched.Decisions{Actions: []sched.Decision{good}}); err != nil {
		t.Fatalf("a valid start refused: %v", err)
	}
	split := good
	split.Alloc = []sched.Alloc{{Server: 0, GPUs: 7, CPUs: 56}, {Server: 1, GPUs: 4, CPUs: 32}, {Server: 3, GPUs: 4, CPUs: 32}, {Server: 4, GPUs: 1, CPUs: 8}}
	split.Placement = perf.Placement{7, 4, 4, 1}
	wrongPl := good
	wrongPl.Placement = perf.Placement{16}
	batch := good
	batch.Plan.MicroBatch = 8
	for name, d := range map[string]sched.Decision{"split TP": split, "placement": wrongPl, "global batch": batch} {
		if err := sched.CheckInvariants(s, sched.Decisions{Actions: []sched.Decision{d}}); err == nil {
			t.Errorf("%s: accepted %v", name, d)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
}

// TestInvariantsRefuseGuaranteedAboveQuota: CheckInvariants refuses a
// round after which a tenant's guaranteed jobs hold more than its quota
// (issue 29), and accepts the same start within it.
func TestInvariantsRefuseGuaranteedAboveQuota(t *testing.T) {
	m := model(t, "bert")
	g := running(t, waiting(t, "g", m, 4, 0), 0, 4)
	g.Class, g.Tenant = sched.Guaranteed, "A"
	w := waiting(t, "w", m, 4, 0)
	w.Class, w.Tenant = sched.Guaranteed, "A"
	s := snapshot(servers(2, 8), g, w)
	start := sched.Decisions{Actions: []sched.Decision{{Kind: sched.Start, Job: "w", Index: 1, Plan: w.ReqPlan,
		Alloc: []sched.Alloc{{Server: 1, GPUs: 4, CPUs: 32}}, Placement: perf.Placement{4}}}}
	s.Tenants = []sched.Tenant{{Name: "A", QuotaGPUs: 8}}
	if err := sched.CheckInvariants(s, start); err != nil {
		t.Fatalf("within the quota: %v", err)
	}
	s.Tenants = []sched.Tenant{{Name: "A", QuotaGPUs: 6}}
	if err := sched.CheckInvariants(s, start); err == nil {
		t.Fatal("8 GPUs of guaranteed jobs under a quota of 6 accepted")
	} else {
		t.Log(err)
	}
}

// TestGandivaMigrationKeepsTPBlocks: Gandiva's migration into one rack
// took the rack's free GPUs without the TP-block rule (issue 29): a
// DP2·TP8 job across racks moved onto 8+7+1 GPUs. It moves only onto
// blocks of TP, else stays.
func TestGandivaMigrationKeepsTPBlocks(t *testing.T) {
	small := model(t, "bert")
	big := model(t, "llama7b")
	srv := servers(6, 8)
	for i := range srv {
		if i >= 3 {
			srv[i].Rack = "r1"
		}
	}
	plan := perf.Plan{DP: 2, TP: 8, PP: 1, MicroBatch: 4, GA: 1, ZeRO: 1}
	w := sched.Job{ID: "w", Tenant: "B", Class: sched.BestEffort, Model: big, ReqGPUs: 16, ReqCPUs: 128, ReqPlan: plan, Plan: plan,
		Alloc: []sched.Alloc{{Server: 0, GPUs: 8, CPUs: 64}, {Server: 3, GPUs: 8, CPUs: 64}}, ItersDone: 1, ItersTotal: 1e6}
	s := snapshot(srv,
		running(t, waiting(t, "a", small, 8, 0), 1, 8),
		running(t, waiting(t, "b", small, 8, 0), 2, 8),
		running(t, waiting(t, "c", small, 1, 0), 4, 1),
		running(t, waiting(t, "d", small, 4, 0), 5, 4),
		running(t, waiting(t, "e", small, 2, 0), 5, 2),
		running(t, waiting(t, "f", small, 1, 0), 5, 1),
		w)
	p := sched.NewGandiva()
	d := p.Schedule(s)
	if err := sched.CheckInvariants(s, d); err != nil {
		t.Fatal(err)
	}
	if a, ok := find(d, "w"); ok {
		for _, al := range a.Alloc {
			if al.GPUs%8 != 0 {
				t.Fatalf("migrated onto %s: a TP group across servers", a.Placement)
			}
		}
	}
}
