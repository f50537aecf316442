package dataset

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/replan/replan/perf"
)

// TestProfileExportImportRoundTrip: what WriteProfile writes, ReadProfiles
// reads back run for run (plan, placement, cores, times, type, arch), and
// the files are the Morphling layout LoadProfile reads.
func TestProfileExportImportRoundTrip(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	a := perf.Arch{Name: "mine", Params: 1.3e9, Layers: 24, Hidden: 2048, Heads: 16, SeqLen: 1024, Vocab: 50257, GlobalBatch: 32}
	in := ProfileSet{Name: "mine", Type: "mine/32/deepspeed", Arch: a, Samples: []perf.Sample{
		{Plan: perf.Plan{DP: 1, TP: 1, PP: 1, MicroBatch: 8, GA: 4}, Resources: perf.Resources{Placement: perf.Placement{1}, CPUsPerGPU: 8}, IterS: 1.25},
		{Plan: perf.Plan{DP: 8, TP: 1, PP: 1, MicroBatch: 2, GA: 2, ZeRO: 1, Offload: true, Ckpt: true}, Resources: perf.Resources{Placement: perf.Placement{4, 4}, CPUsPerGPU: 6}, IterS: 0.5, FwdS: 0.05},
		{Plan: perf.Plan{DP: 1, TP: 2, PP: 1, MicroBatch: 32, GA: 1}, Resources: perf.Resources{Placement: perf.Placement{2}, CPUsPerGPU: 8}, IterS: 0.75},
	}}
	if err := WriteProfile(ctx, dir, in); err != nil {
		t.Fatal(err)
	}
	prof, err := LoadProfile(ctx, dir, "mine")
	if err != nil || len(prof.Rows) != 3 || prof.Rows[1].ZeroType != 1 || !prof.Rows[1].Recompute || prof.Rows[1].Nodes != 2 {
		t.Fatalf("the Morphling reader: %+v, %v", prof.Rows, err)
	}
	out, err := ReadProfiles(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 1 || out[0].Type != in.Type || out[0].Arch != a || !reflect.DeepEqual(out[0].Samples, in.Samples) {
		t.Fatalf("read back %+v\nwant %+v", out, in)
	}
	// A profile of an unknown model without arch.yaml is named.
	os.Remove(filepath.Join(dir, "profile", "mine", "arch.yaml"))
	if _, err := ReadProfiles(ctx, dir); err == nil || !strings.Contains(err.Error(), "mine is not a built-in model and has no arch.yaml") {
		t.Fatalf("got %v", err)
	}
}

// TestReadSharedProfiles: the shared data is one more import: every
// profile of it reads, with its built-in architecture.
func TestReadSharedProfiles(t *testing.T) {
	dir := filepath.Join("..", "..", "shared", "data", "morphling")
	if _, err := os.Stat(filepath.Join(dir, "profile")); err != nil {
		t.Skipf("no shared data at %s", dir)
	}
	sets, err := ReadProfiles(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, s := range sets {
		if s.Type != "" || s.Arch.GlobalBatch == 0 || len(s.Samples) == 0 {
			t.Errorf("%s: type %q, arch %+v, %d samples", s.Name, s.Type, s.Arch, len(s.Samples))
		}
		n += len(s.Samples)
	}
	if len(sets) != 7 || n < 30 {
		t.Errorf("%d profiles, %d samples", len(sets), n)
	}
}
