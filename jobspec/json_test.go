package jobspec

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/replan/replan/perf"
)

// Issue 28: "has_plan" leaked into the spec JSON the daemon stores and
// shows. It stays out, and a spec decoded from JSON (the daemon's store,
// the TUI) knows again whether it names a plan; specs stored with
// "has_plan" decode the same.
func TestSpecJSONRoundTrip(t *testing.T) {
	withPlan, err := Load("testdata/gpt2.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	noPlan := *withPlan
	noPlan.Request.Plan, noPlan.Request.HasPlan = perf.Plan{}, false
	for _, s := range []*Spec{withPlan, &noPlan} {
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), "has_plan") {
			t.Errorf("spec JSON names has_plan: %s", b)
		}
		var back Spec
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		again, _ := json.Marshal(&back)
		if back.Request != s.Request || string(again) != string(b) {
			t.Errorf("round trip (has plan %v):\n got %+v\nwant %+v", s.Request.HasPlan, back.Request, s.Request)
		}
	}
	for _, old := range []string{
		`{"request":{"gpus":8,"plan":{"dp":8,"tp":1,"pp":1,"micro_batch":2,"ga":1,"zero":2},"has_plan":true}}`,
		`{"request":{"gpus":8,"plan":{"dp":0,"tp":0,"pp":0,"micro_batch":0,"ga":0,"zero":0},"has_plan":false}}`,
	} {
		var s Spec
		if err := json.Unmarshal([]byte(old), &s); err != nil {
			t.Fatal(err)
		}
		if want := strings.Contains(old, "true"); s.Request.HasPlan != want {
			t.Errorf("stored spec %s: has plan %v", old, s.Request.HasPlan)
		}
	}
}
