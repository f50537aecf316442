package perf

import "testing"

// TestSplitTPGroupNotAtNVLinkSpeed: a TP group split over servers (issue
// 29: DP2·TP8 on 7+4+4+1 GPUs) pays the inter-server links for its
// all-reduces, not NVLink's; the same plan packed (8+8) keeps NVLink.
func TestSplitTPGroupNotAtNVLinkSpeed(t *testing.T) {
	a, _ := Builtin("llama7b")
	m := DefaultModel(a, A800)
	p := Plan{DP: 2, TP: 8, PP: 1, MicroBatch: 4, GA: 1, ZeRO: 1}
	packed, err := m.Predict(p, Resources{Placement: Placement{8, 8}, CPUsPerGPU: 8})
	if err != nil {
		t.Fatal(err)
	}
	split, err := m.Predict(p, Resources{Placement: Placement{7, 4, 4, 1}, CPUsPerGPU: 8})
	if err != nil {
		t.Fatal(err)
	}
	if ratio := split.CommTP / packed.CommTP; ratio < 2 {
		t.Errorf("TP all-reduce of a split group %.3fs, packed %.3fs (%.2f×): priced at in-server speed", split.CommTP, packed.CommTP, ratio)
	}
	if split.Throughput(a.GlobalBatch) >= packed.Throughput(a.GlobalBatch) {
		t.Errorf("split %.3f samples/s ≥ packed %.3f", split.Throughput(a.GlobalBatch), packed.Throughput(a.GlobalBatch))
	}
	if Check(a, p, Placement{7, 4, 4, 1}) == nil {
		t.Error("Check accepts a split TP group")
	}
}
