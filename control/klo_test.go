package control

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/replan/replan/jobspec"
	"github.com/replan/replan/perf"
)

// TestModelStoredBeforeLaunchOverlap: a model row stored before k_lo (its
// params without "k_lo") is recovered at a restart with k_lo 1, the
// additive form it was fitted with, and `replan models` shows it in the
// params map.
func TestModelStoredBeforeLaunchOverlap(t *testing.T) {
	ctx := context.Background()
	st, _ := openTest(t)
	ds := spec(t, "j", 8, jobspec.BestEffort)
	o := perf.Online{Model: perf.DefaultModel(ds.Arch, perf.A800)}
	o.Model.Params.KLaunch = 0.4e-3
	raw, err := json.Marshal(&o)
	if err != nil {
		t.Fatal(err)
	}
	old := strings.Replace(string(raw), `,"k_lo":1`, "", 1)
	if old == string(raw) {
		t.Fatalf("no k_lo to remove in %s", raw)
	}
	typ := newModelType(ds.Arch, jobspec.DeepSpeed).String()
	if err := st.SaveModel(ctx, typ, json.RawMessage(old), time.Now()); err != nil {
		t.Fatal(err)
	}
	d, _ := newDaemon(t, st, &recorder{}, "static")
	found := false
	for _, mi := range d.Models(false) {
		if mi.Type != typ {
			continue
		}
		found = true
		if mi.Params["k_lo"] != 1 || mi.Params["k_launch"] != 0.4e-3 {
			t.Errorf("%s: params k_lo %v k_launch %v, want 1 and 0.0004", typ, mi.Params["k_lo"], mi.Params["k_launch"])
		}
	}
	if !found {
		t.Fatalf("model type %s not recovered", typ)
	}
}
