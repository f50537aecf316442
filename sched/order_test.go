package sched_test

import (
	"strings"
	"testing"

	"github.com/replan/replan/perf"
	"github.com/replan/replan/sched"
)

// orderPair is one server of 8 GPUs and two waiting best-effort jobs
// pinned to the same plan on all 8: "long" (1e6 iterations, submitted
// first) and "short" (1e3 iterations, submitted at shortSubmit). Their
// slopes tie: each is a single step to its request.
func orderPair(t *testing.T, shortSubmit, now float64) sched.Snapshot {
	m := model(t, "gpt2")
	plan := perf.Plan{DP: 8, TP: 1, PP: 1, MicroBatch: 2, GA: 1, ZeRO: 2}
	long := waiting(t, "long", m, 8, 1)
	short := waiting(t, "short", m, 8, shortSubmit)
	for _, j := range []*sched.Job{&long, &short} {
		j.ReqPlan, j.PinPlan = plan, true
	}
	short.ItersTotal = 1e3
	s := snapshot(servers(1, 8), long, short)
	s.Now = now
	return s
}

func startedOf(d sched.Decisions) []string {
	var out []string
	for _, x := range d.Actions {
		if x.Kind == sched.Start {
			out = append(out, x.Job)
		}
	}
	return out
}

// Issue 29 ("look at the order"): among jobs Morphling's slopes tie,
// replan starts the one that finishes first (NetOptions.ShortestFirst);
// morphling keeps submission order. Before, replan started "long", the
// earlier submission, and every job behind it waited its whole run.
func TestShortestFirstAmongSlopeTies(t *testing.T) {
	s := orderPair(t, 2, 1000)
	for _, c := range []struct {
		name string
		p    sched.Policy
		want string
	}{
		{"replan", sched.NewReplan(sched.DefaultOptions(), sched.DefaultNetOptions()), "short"},
		{"morphling", sched.NewMorphling(sched.DefaultOptions()), "long"},
		{"replan, ShortestFirst off", func() sched.Policy {
			n := sched.DefaultNetOptions()
			n.ShortestFirst = false
			return sched.NewReplan(sched.DefaultOptions(), n)
		}(), "long"},
	} {
		got := startedOf(c.p.Schedule(s))
		if len(got) != 1 || got[0] != c.want {
			t.Errorf("%s started %v, want [%s]", c.name, got, c.want)
		}
	}
}

// The key is submission plus predicted run: a job submitted after the
// long one's key has passed does not overtake it, however short (no job
// waits for ever behind a stream of shorter ones).
func TestShortestFirstDoesNotStarve(t *testing.T) {
	s := orderPair(t, 1e9, 1e9+1)
	p := sched.NewReplan(sched.DefaultOptions(), sched.DefaultNetOptions())
	if got := startedOf(p.Schedule(s)); len(got) != 1 || got[0] != "long" {
		t.Errorf("started %v, want [long]: it was submitted 1e9 s before the short one", got)
	}
}

// SetOrder (replan daemon --order, replan sim --order): "submission"
// gives replan Morphling's order back; only replan takes an order, and an
// unknown one is refused with the choices.
func TestSetOrder(t *testing.T) {
	s := orderPair(t, 2, 1000)
	p, _ := sched.New("replan")
	if err := sched.SetOrder(p, "submission"); err != nil {
		t.Fatal(err)
	}
	if got := startedOf(p.Schedule(s)); len(got) != 1 || got[0] != "long" {
		t.Errorf("replan in submission order started %v, want [long]", got)
	}
	if err := sched.SetOrder(p, "shortest"); err != nil {
		t.Fatal(err)
	}
	if got := startedOf(p.Schedule(s)); len(got) != 1 || got[0] != "short" {
		t.Errorf("replan in shortest order started %v, want [short]", got)
	}
	m, _ := sched.New("morphling")
	if err := sched.SetOrder(m, ""); err != nil {
		t.Errorf("no order given: %v", err)
	}
	for _, c := range []struct {
		p     sched.Policy
		order string
		want  string
	}{{m, "shortest", "only replan"}, {p, "fifo", "want one of shortest, submission"}} {
		if err := sched.SetOrder(c.p, c.order); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s --order %s: %v, want an error saying %q", c.p.Name(), c.order, err, c.want)
		}
	}
}
