package perf

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestParamsJSONLaunchOverlap: a model stored before k_lo (no "k_lo" in
// its params) loads with k_lo 1 and prices every plan as before the
// term; a stored k_lo reads back; one below 1 is an error naming it.
func TestParamsJSONLaunchOverlap(t *testing.T) {
	m := DefaultModel(Arch{Name: "bert", Params: 3.36e8, Layers: 24, Hidden: 1024, Heads: 16, SeqLen: 512, Vocab: 30522, GlobalBatch: 32}, A800)
	m.Params.KLaunch = 0.5e-3
	raw, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(raw), `"k_lo":1`) {
		t.Fatalf("marshalled params lack k_lo: %s", raw)
	}
	old := strings.Replace(string(raw), `,"k_lo":1`, "", 1)
	if old == string(raw) {
		t.Fatalf("could not remove k_lo from %s", raw)
	}
	var got Model
	if err := json.Unmarshal([]byte(old), &got); err != nil {
		t.Fatal(err)
	}
	if got.Params.KLO != 1 || got.Params != m.Params {
		t.Errorf("old params %+v, want %+v (k_lo 1)", got.Params, m.Params)
	}
	p := Plan{DP: 1, TP: 1, PP: 1, MicroBatch: 1, GA: 32}
	r := Resources{Placement: Placement{1}, CPUsPerGPU: 8}
	a, _ := m.Predict(p, r)
	b, _ := got.Predict(p, r)
	if a.Iter != b.Iter {
		t.Errorf("old model prices %s at %v s, the model it was stored from at %v", p, b.Iter, a.Iter)
	}
	// a fitted k_lo round-trips and moves the price
	m.Params.KLO = 4
	raw, _ = json.Marshal(m)
	got = Model{}
	if err := json.Unmarshal(raw, &got); err != nil || got.Params.KLO != 4 {
		t.Errorf("k_lo 4: read back %v (%v)", got.Params.KLO, err)
	}
	if c, _ := got.Predict(p, r); !(c.Iter < a.Iter) {
		t.Errorf("k_lo 4 prices %s at %v s, not below the additive %v", p, c.Iter, a.Iter)
	}
	var q Params
	if err := json.Unmarshal([]byte(`{"k_bwd":2,"k_lo":0.5}`), &q); err == nil || !strings.Contains(err.Error(), "k_lo") {
		t.Errorf("k_lo 0.5: got %v, want an error naming k_lo", err)
	}
}
