package control

import (
	"context"
	"strings"
	"testing"

	"github.com/replan/replan/jobspec"
	"github.com/replan/replan/perf"
)

// Issue 28: the spec JSON the daemon stores leaves "has_plan" out; a
// daemon that recovers its jobs from the SQLite store still knows which
// specs name a plan (a guaranteed job's promise, a pinned plan).
func TestRecoveredSpecKnowsItsPlan(t *testing.T) {
	ctx := context.Background()
	st, _ := openTest(t)
	d, _ := newDaemon(t, st, &recorder{}, "morphling")
	withPlan := spec(t, "g", 8, jobspec.Guaranteed)
	noPlan := spec(t, "b", 4, jobspec.BestEffort)
	noPlan.Request.Plan, noPlan.Request.HasPlan = perf.Plan{}, false
	want := map[string]bool{}
	for _, s := range []*jobspec.Spec{withPlan, noPlan} {
		rec, err := d.Submit(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		want[rec.ID] = s.Request.HasPlan
		if strings.Contains(string(rec.Spec), "has_plan") {
			t.Errorf("stored spec names has_plan: %s", rec.Spec)
		}
	}
	d2, _ := newDaemon(t, st, &recorder{}, "morphling")
	for id, has := range want {
		js := d2.jobs[id]
		if js == nil {
			t.Fatalf("%s not recovered", id)
		}
		if js.spec.Request.HasPlan != has {
			t.Errorf("%s recovered with has plan %v, want %v", id, js.spec.Request.HasPlan, has)
		}
		if has && (js.spec.Request.Plan != withPlan.Request.Plan || d2.promised(js) <= 0) {
			t.Errorf("%s recovered plan %v, promise %v", id, js.spec.Request.Plan, d2.promised(js))
		}
	}
}
