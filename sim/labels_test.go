package sim_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/replan/replan/internal/labels"
	"github.com/replan/replan/perf"
	"github.com/replan/replan/sched"
	"github.com/replan/replan/sim"
)

// labelWatch wraps a policy and checks every round it decides: a job with
// labels is started or reconfigured only onto servers that carry them
// (the simulator also runs sched.CheckInvariants, which has the same
// rule). It counts such placements, so a test knows the rule was tried.
type labelWatch struct {
	sched.Policy
	t      *testing.T
	desc   string
	placed int
}

func (w *labelWatch) Schedule(s sched.Snapshot) sched.Decisions {
	d := w.Policy.Schedule(s)
	if err := sched.CheckInvariants(s, d); err != nil {
		w.t.Errorf("%s: %s at %.0f s: %v", w.desc, w.Name(), s.Now, err)
	}
	for _, a := range d.Actions {
		j := s.Jobs[a.Index]
		if len(j.Labels) == 0 || a.Kind == sched.Preempt {
			continue
		}
		w.placed++
		for _, al := range a.Alloc {
			if sv := s.Servers[al.Server]; al.GPUs > 0 && !labels.Match(sv.Labels, j.Labels) {
				w.t.Errorf("%s: %s at %.0f s: %s %s on %s, which lacks %v", w.desc, w.Name(), s.Now, a.Kind, a.Job, sv.ID, j.Labels)
			}
		}
	}
	return d
}

// Node features in the simulator: on shapes where only some servers are
// labelled ib-hdr (and one also gpu=a800-80g), a third of the jobs
// require ib-hdr and some both; every policy runs the trace to the end
// and never places a constrained job elsewhere (checked every round).
func TestEveryPolicyHonoursLabelsInTheSimulator(t *testing.T) {
	models := sim.DefaultModels(perf.A800)
	cases := 4
	if testing.Short() {
		cases = 2
	}
	placed := 0
	for c := range cases {
		rng := rand.New(rand.NewPCG(uint64(c), 28))
		servers := 4 + rng.IntN(5)
		shape := []int{0, 2, 4}[rng.IntN(3)]
		ib := 1 + rng.IntN(servers-1) // servers 0..ib-1 carry ib-hdr; the rest none
		srvLabels, err := sim.ParseServerLabels(fmt.Sprintf("ib-hdr:0-%d,gpu=a800-80g:0", ib-1), servers)
		if err != nil {
			t.Fatal(err)
		}
		cfg := sim.Config{Servers: servers, ServersPerRack: shape, ServerLabels: srvLabels}
		jobs, err := sim.Generate(sim.GenConfig{Jobs: 30, Servers: servers, Seed: uint64(2800 + c), Load: 1.2, MedianMinutes: 15, SLAShare: 0.3})
		if err != nil {
			t.Fatal(err)
		}
		constrained := 0
		for k := range jobs {
			switch {
			case k%6 == 0 && jobs[k].GPUs <= 8:
				jobs[k].Labels = "ib-hdr;gpu=a800-80g"
			case k%3 == 0 && jobs[k].GPUs <= 8*ib:
				jobs[k].Labels = "ib-hdr"
			default:
				continue
			}
			constrained++
		}
		desc := fmt.Sprintf("case %d: %d servers (%d labelled ib-hdr), %d per rack, %d of %d jobs constrained", c, servers, ib, shape, constrained, len(jobs))
		var policies []sched.Policy
		for _, name := range sched.Names() {
			p, _ := sched.New(name)
			policies = append(policies, p)
		}
		rp, _ := sched.New("replan")
		policies = append(policies, sched.WithShifts(rp, 260))
		for _, p := range policies {
			w := &labelWatch{Policy: p, t: t, desc: desc}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			r, err := sim.Run(ctx, jobs, models, w, cfg)
			cancel()
			if err != nil {
				t.Errorf("%s: %s: %v", desc, p.Name(), err)
				continue
			}
			if r.Finished != len(jobs) {
				t.Errorf("%s: %s: %d of %d jobs finished", desc, p.Name(), r.Finished, len(jobs))
			}
			placed += w.placed
		}
	}
	if placed == 0 {
		t.Fatal("no constrained job was ever placed: the test checks nothing")
	}
}

// A trace job whose labels no server carries, or that asks for more GPUs
// than its labelled servers have, is refused up front; so is a bad
// --server-labels value.
func TestSimLabelsRefusedUpFront(t *testing.T) {
	models := sim.DefaultModels(perf.A800)
	jobs, err := sim.Generate(sim.GenConfig{Jobs: 3, Servers: 4, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := sim.ParseServerLabels("ib-hdr:1", 4)
	if err != nil {
		t.Fatal(err)
	}
	static, _ := sched.New("static")
	jobs[0].Labels = "roce"
	if _, err := sim.Run(context.Background(), jobs, models, static, sim.Config{Servers: 4, ServerLabels: srv}); err == nil || !strings.Contains(err.Error(), "labels roce: no server carries them") {
		t.Errorf("unknown label: %v", err)
	}
	jobs[0].Labels, jobs[0].GPUs = "ib-hdr", 16
	if _, err := sim.Run(context.Background(), jobs, models, static, sim.Config{Servers: 4, ServerLabels: srv}); err == nil || !strings.Contains(err.Error(), "asks for 16 GPUs, the 1 servers labelled ib-hdr have 8") {
		t.Errorf("too large: %v", err)
	}
	for _, bad := range []string{"ib-hdr", "ib hdr:0", "ib-hdr:3-1", "ib-hdr:0-4", "gpu=:0-1x"} {
		if _, err := sim.ParseServerLabels(bad, 4); err == nil {
			t.Errorf("--server-labels %q accepted", bad)
		}
	}
}
