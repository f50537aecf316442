package sched_test

import (
	"strings"
	"testing"

	"github.com/replan/replan/internal/labels"
	"github.com/replan/replan/sched"
)

// labelledRacks is twoRacks with servers s5 and s6 (rack r1) labelled
// ib-hdr (s6 also gpu=a800-80g).
func labelledRacks() []sched.Server {
	srv := twoRacks()
	srv[5].Labels = map[string]string{"ib-hdr": ""}
	srv[6].Labels = map[string]string{"ib-hdr": "", "gpu": "a800-80g"}
	return srv
}

// everyPolicy is every policy New knows, and replan with time-shifts.
func everyPolicy(t *testing.T) []sched.Policy {
	t.Helper()
	var out []sched.Policy
	for _, name := range sched.Names() {
		p, err := sched.New(name)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, p)
	}
	rp, _ := sched.New("replan")
	return append(out, sched.WithShifts(rp, 260))
}

// checkLabelled fails when d breaks an invariant or gives a constrained
// job of s GPUs on a server lacking its labels.
func checkLabelled(t *testing.T, name string, s sched.Snapshot, d sched.Decisions) {
	t.Helper()
	if err := sched.CheckInvariants(s, d); err != nil {
		t.Errorf("%s: %v", name, err)
	}
	for _, a := range d.Actions {
		j := s.Jobs[a.Index]
		for _, al := range a.Alloc {
			if al.GPUs > 0 && !labels.Match(s.Servers[al.Server].Labels, j.Labels) {
				t.Errorf("%s: %s %s on %s, which lacks %v", name, a.Kind, a.Job, s.Servers[al.Server].ID, j.Labels)
			}
		}
	}
}

// Node features: a job whose spec requires labels is offered only servers
// that carry them, by every policy. On an idle cluster each policy's
// first choice (the best-fitting or fullest server, s0 upwards) lacks the
// label, so before the mask every policy put the jobs there.
func TestEveryPolicyHonoursLabels(t *testing.T) {
	m := model(t, "gpt2")
	for _, p := range everyPolicy(t) {
		one := waiting(t, "one", m, 8, 900)
		one.Labels = []string{"ib-hdr"}
		two := waiting(t, "two", m, 4, 901)
		two.Labels = []string{"ib-hdr", "gpu=a800-80g"}
		free := waiting(t, "free", m, 8, 902)
		s := snapshot(labelledRacks(), one, two, free)
		d := p.Schedule(s)
		checkLabelled(t, p.Name(), s, d)
		a, ok := find(d, "one")
		if !ok || a.Kind != sched.Start {
			t.Errorf("%s: one not started on an idle cluster with labelled servers free (%s)", p.Name(), reason(d, "one"))
		}
		onS6 := false
		for _, al := range a.Alloc {
			onS6 = onS6 || al.Server == 6
		}
		// two fits only s6: it starts there unless one took s6.
		if b, ok := find(d, "two"); !ok && !onS6 {
			t.Errorf("%s: two not started, s6 is free (%s)", p.Name(), reason(d, "two"))
		} else if !ok && !strings.Contains(reason(d, "two"), "1 such server (8 GPUs, 0 free), 1 of them busy") {
			t.Errorf("%s: two waits for the s6 one took, but its reason is %q", p.Name(), reason(d, "two"))
		} else if ok && (len(b.Alloc) != 1 || b.Alloc[0].Server != 6) {
			t.Errorf("%s: two (gpu=a800-80g) on %+v, only s6 has it", p.Name(), b.Alloc)
		}
	}
}

// A constrained job whose labelled servers are full waits, wherever else
// GPUs are free, and its reason says how many such servers there are and
// how many are busy; a label no server carries says so.
func TestLabelledJobWaitsForItsServers(t *testing.T) {
	m := model(t, "gpt2")
	for _, p := range everyPolicy(t) {
		// Guaranteed holders at their request: no policy shrinks them.
		h5 := running(t, waiting(t, "h5", m, 8, 1), 5, 8)
		h6 := running(t, waiting(t, "h6", m, 8, 2), 6, 8)
		for _, h := range []*sched.Job{&h5, &h6} {
			h.Class, h.Tenant = sched.Guaranteed, "A"
			h.ReqPlan, h.PinPlan = h.Plan, true
			h.LastChange = 999
		}
		j := waiting(t, "ib", m, 8, 900)
		j.Labels = []string{"ib-hdr"}
		none := waiting(t, "none", m, 8, 901)
		none.Labels = []string{"roce"}
		s := snapshot(labelledRacks(), h5, h6, j, none)
		s.Tenants = []sched.Tenant{{Name: "A", QuotaGPUs: 16}, {Name: "B"}}
		d := p.Schedule(s)
		checkLabelled(t, p.Name(), s, d)
		if a, ok := find(d, "ib"); ok && a.Kind == sched.Start {
			continue // it made room on s5 or s6 (checked above)
		}
		r := reason(d, "ib")
		if !strings.Contains(r, "servers labelled ib-hdr: 2 such servers (16 GPUs, 0 free), 2 of them busy") {
			t.Errorf("%s: reason %q does not say its 2 labelled servers are busy", p.Name(), r)
		}
		if _, ok := find(d, "none"); ok {
			t.Errorf("%s: started a job whose label no server has", p.Name())
		}
		if r := reason(d, "none"); !strings.Contains(r, "servers labelled roce: no server carries them") {
			t.Errorf("%s: reason %q", p.Name(), r)
		}
	}
}

// CheckInvariants refuses a start on a server lacking a required label.
func TestCheckInvariantsLabels(t *testing.T) {
	m := model(t, "gpt2")
	j := waiting(t, "ib", m, 8, 900)
	j.Labels = []string{"ib-hdr"}
	s := snapshot(labelledRacks(), j)
	bad := sched.Decisions{Actions: []sched.Decision{{Kind: sched.Start, Job: "ib", Index: 0, Alloc: []sched.Alloc{{Server: 0, GPUs: 8, CPUs: 64}}}}}
	err := sched.CheckInvariants(s, bad)
	if err == nil || !strings.Contains(err.Error(), "lacks its required label ib-hdr") {
		t.Errorf("start on s0: %v", err)
	}
	good := sched.Decisions{Actions: []sched.Decision{{Kind: sched.Start, Job: "ib", Index: 0, Alloc: []sched.Alloc{{Server: 5, GPUs: 8, CPUs: 64}}}}}
	if err := sched.CheckInvariants(s, good); err != nil {
		t.Errorf("start on s5: %v", err)
	}
}
