package control

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/replan/replan/agent"
	"github.com/replan/replan/jobspec"
)

// runningRatio is a job's measured throughput against its prediction as
// the daemon shows it (0 when either is not known yet).
func runningRatio(d *Daemon, id string) (ratio, pred, meas float64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	js := d.jobs[id]
	if js == nil || js.predSPS <= 0 || js.measSPS <= 0 {
		return 0, 0, 0
	}
	return js.measSPS / js.predSPS, js.predSPS, js.measSPS
}

// TestSlowServerThrottledGPUIsFoundAndLeft: one GPU of a running job's
// server is held at half its SM clock by thermal slowdown mid-run (the
// simulated job slows with it). Within the observation count the job is
// found slow, its server becomes suspect with a reason that names the
// GPU, the clock and the job's speed against its prediction, and the
// job is checkpointed and resumes on the other server at its predicted
// speed, not charged. The slow samples never reach the model. A passing
// launch health check does not clear the server, nor does a restart of
// the daemon; an undrain does.
func TestSlowServerThrottledGPUIsFoundAndLeft(t *testing.T) {
	ctx := context.Background()
	f := newFaultCluster(t)
	victim, err := f.d.Submit(ctx, spec(t, "victim", 4, jobspec.BestEffort))
	if err != nil {
		t.Fatal(err)
	}
	f.d.Round(ctx)
	for i := 0; i < 3; i++ {
		f.step(t, 20*time.Second)
	}
	pl := f.placement(t, victim.ID)
	if len(pl) != 1 || len(pl[0].GPUs) != 4 {
		t.Fatalf("victim placed on %+v", pl)
	}
	server, hot := pl[0].Name, pl[0].GPUs[2]
	r0, pred, _ := runningRatio(f.d, victim.ID)
	if math.Abs(r0-1) > 0.05 {
		t.Fatalf("before the fault the victim runs at %.2f of its prediction", r0)
	}
	// A peer of the same type on the other server, at prediction.
	peer, err := f.d.Submit(ctx, spec(t, "peer", 4, jobspec.BestEffort))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		f.step(t, 20*time.Second)
	}
	before, _ := f.st.GetJob(ctx, victim.ID)
	peerBefore, _ := f.st.GetJob(ctx, peer.ID)
	if before.State != StateRunning || peerBefore.State != StateRunning {
		t.Fatalf("before the fault: victim %s, peer %s", before.State, peerBefore.State)
	}

	if err := f.gpu[server].SetThrottle(hot, 705, agent.ClockEventSWThermal); err != nil {
		t.Fatal(err)
	}
	steps := 0
	for ; steps < 10; steps++ {
		f.step(t, 20*time.Second)
		if n := nodeOf(f.d, server); n.Suspect {
			break
		}
	}
	// The first observation after the fault already measures it (the
	// clock is read at each observation): found at the third.
	if steps+1 > DefaultSlowObservations+1 {
		t.Errorf("found after %d observations, want at most %d", steps+1, DefaultSlowObservations+1)
	}
	n := nodeOf(f.d, server)
	wantWhy := fmt.Sprintf("%s GPU %d: SM clock 0.705 of 1.41 GHz, thermal at 88 °C; %s ran at 50 %% of its predicted %.3g samples/s", server, hot, victim.ID, pred)
	if !n.Suspect || n.State != "suspect" || n.SuspectWhy != wantWhy {
		t.Fatalf("%s: suspect %v (%s) %q\nwant %q", server, n.Suspect, n.State, n.SuspectWhy, wantWhy)
	}
	if evs := f.events(t, "suspect"); len(evs) != 1 || evs[0].Node != server || !strings.Contains(evs[0].Msg, wantWhy) {
		t.Fatalf("suspect events: %+v", evs)
	}
	slow := f.events(t, "slow")
	if len(slow) != 1 || slow[0].JobID != victim.ID || !strings.Contains(slow[0].Msg, "moving it from "+server) {
		t.Fatalf("slow events: %+v", slow)
	}
	var sd slowData
	if err := json.Unmarshal(slow[0].Data, &sd); err != nil || sd.Refit || len(sd.Servers) != 1 || sd.Servers[0] != server || math.Abs(sd.Ratio-0.5) > 0.02 {
		t.Fatalf("slow event data %s: %+v, %v", slow[0].Data, sd, err)
	}
	// Requeued from a checkpoint taken at its stop, not charged (the
	// same round may have started it again).
	vr, _ := f.st.GetJob(ctx, victim.ID)
	if vr.Attempt <= before.Attempt || vr.Failures != 0 || vr.Checkpoint <= before.Checkpoint {
		t.Fatalf("victim after it was found slow: %s, attempt %d (was %d), %d failures, checkpoint %d (was %d): %s", vr.State, vr.Attempt, before.Attempt, vr.Failures, vr.Checkpoint, before.Checkpoint, vr.Reason)
	}
	if evs := f.events(t, "requeue"); len(evs) != 1 || evs[0].JobID != victim.ID || !strings.Contains(evs[0].Msg, "slow on "+server) {
		t.Fatalf("requeue events: %+v", evs)
	}
	// The slow samples were kept from the model.
	f.d.mu.Lock()
	for _, s := range f.d.models[modelTypeOf(spec(t, "victim", 4, jobspec.BestEffort))].Samples {
		if got := 16 / s.IterS; got < 0.8*pred && len(s.Resources.Placement) == 1 && s.Resources.Placement[0] == 4 {
			t.Errorf("a slow sample reached the model: %.2f samples/s of %.2f predicted", got, pred)
		}
	}
	f.d.mu.Unlock()

	// It resumes on the other server at its predicted speed; the peer
	// is not disturbed. The suspect server outlives its health checks.
	for i := 0; i < 6; i++ {
		f.step(t, 20*time.Second)
	}
	vr, _ = f.st.GetJob(ctx, victim.ID)
	if vr.State != StateRunning || vr.Failures != 0 {
		t.Fatalf("victim did not resume: %s (%s)", vr.State, vr.Reason)
	}
	for _, s := range f.placement(t, victim.ID) {
		if s.Name == server {
			t.Fatalf("victim placed on the suspect server again: %+v", s)
		}
	}
	if r, _, _ := runningRatio(f.d, victim.ID); math.Abs(r-1) > 0.1 {
		t.Errorf("after the move the victim runs at %.2f of its prediction", r)
	}
	pr, _ := f.st.GetJob(ctx, peer.ID)
	if pr.State != StateRunning || pr.Attempt != peerBefore.Attempt {
		t.Errorf("peer disturbed: %s, attempt %d (was %d)", pr.State, pr.Attempt, peerBefore.Attempt)
	}
	if n := nodeOf(f.d, server); !n.Suspect {
		t.Fatalf("%s cleared by a launch health check", server)
	}
	d2, err := New(ctx, Config{Store: f.st, Exec: f.ex, Policy: f.d.cfg.Policy, Clock: f.c.now, Servers: f.d.cfg.Servers, Tenants: f.d.cfg.Tenants})
	if err != nil {
		t.Fatal(err)
	}
	f.c.advance(2 * time.Minute)
	if err := d2.healthChecks(ctx); err != nil {
		t.Fatal(err)
	}
	d2.publish()
	if n := nodeOf(d2, server); !n.Suspect || n.SuspectWhy != wantWhy {
		t.Fatalf("after a restart and a health check: suspect %v %q", n.Suspect, n.SuspectWhy)
	}
	if err := d2.Undrain(ctx, server); err != nil {
		t.Fatal(err)
	}
	if n := nodeOf(d2, server); n.Suspect {
		t.Fatalf("undrain left %s suspect", server)
	}
	if recs, err := f.st.SlowServers(ctx); err != nil || len(recs) != 0 {
		t.Fatalf("slow servers after undrain: %+v, %v", recs, err)
	}
}

// TestSlowEverywhereRefitsTheModel: every job runs at half the model's
// prediction on every server (the model is wrong, no GPU signal): no
// server becomes suspect and no job moves; the kept samples refit the
// model, after which the jobs run at its prediction.
func TestSlowEverywhereRefitsTheModel(t *testing.T) {
	ctx := context.Background()
	f := newFaultCluster(t)
	f.ex.Pace = 0.5
	var ids []string
	for _, name := range []string{"one", "two"} {
		r, err := f.d.Submit(ctx, spec(t, name, 8, jobspec.BestEffort))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r.ID)
	}
	f.d.Round(ctx)
	attempts := map[string]int{}
	refitted := false
	for i := 0; i < 20 && !refitted; i++ {
		f.step(t, 20*time.Second)
		if i == 2 {
			for _, id := range ids {
				r, _ := f.st.GetJob(ctx, id)
				if r.State != StateRunning {
					t.Fatalf("%s: %s", id, r.State)
				}
				attempts[id] = r.Attempt
			}
		}
		refitted = true
		for _, id := range ids {
			if r, _, _ := runningRatio(f.d, id); math.Abs(r-1) > 0.1 {
				refitted = false
			}
		}
	}
	if !refitted {
		for _, id := range ids {
			r, p, m := runningRatio(f.d, id)
			t.Errorf("%s runs at %.2f of its prediction (%.2f of %.2f samples/s)", id, r, m, p)
		}
		t.Fatal("the model was not refitted to the cluster's speed")
	}
	for _, n := range f.d.Nodes() {
		if n.Suspect {
			t.Errorf("%s suspect: %s", n.Name, n.SuspectWhy)
		}
	}
	if evs := f.events(t, "suspect"); len(evs) != 0 {
		t.Errorf("suspect events: %+v", evs)
	}
	slow := f.events(t, "slow")
	if len(slow) == 0 || !strings.Contains(slow[0].Msg, "the model is refitted, no server is blamed") || !strings.Contains(slow[0].Msg, "ran at 50 %") {
		t.Fatalf("slow events: %+v", slow)
	}
	if evs := f.events(t, "refit"); len(evs) == 0 {
		t.Errorf("no refit event")
	}
	for _, id := range ids {
		r, _ := f.st.GetJob(ctx, id)
		if r.State != StateRunning || r.Attempt != attempts[id] {
			t.Errorf("%s moved: %s, attempt %d (was %d): %s", id, r.State, r.Attempt, attempts[id], r.Reason)
		}
	}
}

// TestJudgeSlow: the cause of a slow job, from its GPUs' signals, its
// peers of the same type and its servers' history.
func TestJudgeSlow(t *testing.T) {
	ok := &GPUStat{Index: 0, SMClockMHz: 1980, SMClockMaxMHz: 1980, PowerLimitW: 700, PowerDefaultLimitW: 700, PCIeGen: 5, PCIeGenMax: 5, PCIeWidth: 16, PCIeWidthMax: 16}
	capped := *ok
	capped.Index, capped.PowerLimitW = 1, 350
	narrow := *ok
	narrow.Index, narrow.PCIeWidth, narrow.NVLinksDown = 1, 8, 2
	powerCap := *ok // at its power cap but at full clock: not slow
	powerCap.ClockEvents = []string{"sw_power_cap"}
	hw := *ok // a hardware slowdown, whatever the clock reads
	hw.ClockEvents, hw.SMClockMHz = []string{"hw_slowdown"}, 0
	base := slowCase{Job: "j-1", Ratio: 0.55, PredSPS: 40, MeasSPS: 22, Fraction: 0.7}
	one := func(name string, gpus ...*GPUStat) []slowServer {
		s := slowServer{Name: name}
		for _, g := range gpus {
			s.GPUs = append(s.GPUs, slowGPU{Index: g.Index, Stat: g})
		}
		return []slowServer{s}
	}
	cases := []struct {
		name   string
		c      func(c *slowCase)
		blame  []string // server: why contains
		refit  bool
		whyHas string
	}{
		{"power limit", func(c *slowCase) { c.Servers = one("s1", ok, &capped) }, []string{"s1 GPU 1: power limit 350 of 700 W; j-1 ran at 55 % of its predicted 40 samples/s"}, false, ""},
		{"PCIe and NVLink", func(c *slowCase) { c.Servers = one("s1", &narrow) }, []string{"s1 GPU 1: PCIe x8 of x16; 2 NVLinks down"}, false, ""},
		{"hardware slowdown", func(c *slowCase) { c.Servers = one("s1", &hw) }, []string{"s1 GPU 0: hardware slowdown"}, false, ""},
		{"power cap at full clock, no peers: model", func(c *slowCase) { c.Servers = one("s1", &powerCap) }, nil, true, "no other job of its type runs"},
		{"peers as slow: model", func(c *slowCase) {
			c.Servers = one("s1", ok)
			c.Peers = []slowPeer{{Job: "j-2", Ratio: 0.5, Servers: []string{"s2"}}}
		}, nil, true, "no other job of its type ran at prediction"},
		{"peer at prediction on the same server: model", func(c *slowCase) {
			c.Servers = one("s1", ok)
			c.Peers = []slowPeer{{Job: "j-2", Ratio: 1, Servers: []string{"s1"}}}
		}, nil, true, ""},
		{"peer at prediction elsewhere: its one server", func(c *slowCase) {
			c.Servers = one("s1", ok)
			c.Peers = []slowPeer{{Job: "j-2", Ratio: 0.98, Servers: []string{"s2"}}}
		}, []string{"s1: j-1 ran at 55 % of its predicted 40 samples/s while 1 job of its type ran at prediction elsewhere (j-2 at 98 %)"}, false, ""},
		{"several servers: the one with slow history", func(c *slowCase) {
			c.Servers = append(one("s1", ok), one("s2", ok)...)
			c.Servers[1].Others = []slowMark{{job: "j-7", ratio: 0.5}}
			c.Servers[0].Others = []slowMark{{job: "j-8", ratio: 1}}
			c.Peers = []slowPeer{{Job: "j-2", Ratio: 1, Servers: []string{"s3"}}}
		}, []string{"s2: j-1 ran at 55 %", "other jobs ran slow there too (j-7 at 50 %)"}, false, ""},
		{"several servers, no history: not known", func(c *slowCase) {
			c.Servers = append(one("s1", ok), one("s2", ok)...)
			c.Peers = []slowPeer{{Job: "j-2", Ratio: 1, Servers: []string{"s3"}}}
		}, nil, false, "which of s1, s2 is slow is not known"},
	}
	for _, tc := range cases {
		c := base
		tc.c(&c)
		v := judgeSlow(c)
		if v.Refit != tc.refit || (tc.whyHas != "" && !strings.Contains(v.Why, tc.whyHas)) {
			t.Errorf("%s: refit %v, why %q; want refit %v, why with %q", tc.name, v.Refit, v.Why, tc.refit, tc.whyHas)
		}
		if tc.blame == nil {
			if len(v.Blame) != 0 {
				t.Errorf("%s: blamed %+v", tc.name, v.Blame)
			}
			continue
		}
		if len(v.Blame) != 1 {
			t.Errorf("%s: blamed %+v, want one server", tc.name, v.Blame)
			continue
		}
		for _, want := range tc.blame {
			if !strings.Contains(v.Blame[0].Why, want) {
				t.Errorf("%s: why %q, want %q in it", tc.name, v.Blame[0].Why, want)
			}
		}
	}
}
