package perf

import (
	"errors"
	"testing"
)

// FuzzEnumerate checks the enumerator's contract on arbitrary
// architectures and placements: every valid plan passes Check and uses the
// placement's GPUs, every rejection names a rule that really fails, nothing
// panics, and Predict prices every valid plan with a finite positive time.
func FuzzEnumerate(f *testing.F) {
	f.Add(uint8(25), uint8(48), uint8(16), uint8(4), uint8(4), uint8(0))
	f.Add(uint8(32), uint8(32), uint8(8), uint8(8), uint8(8), uint8(2))
	f.Add(uint8(12), uint8(12), uint8(7), uint8(3), uint8(5), uint8(1))
	f.Add(uint8(1), uint8(1), uint8(1), uint8(1), uint8(0), uint8(0))
	f.Fuzz(func(t *testing.T, heads, layers, batch, g1, g2, g3 uint8) {
		a := Arch{Name: "f", Params: 1e9, Layers: int(layers%96) + 1, Hidden: 64 * (int(heads%64) + 1), Heads: int(heads%64) + 1, SeqLen: 128, GlobalBatch: int(batch%64) + 1}
		var pl Placement
		for _, g := range []uint8{g1, g2, g3} {
			if g%9 > 0 {
				pl = append(pl, int(g%9))
			}
		}
		valid, rejected, err := Enumerate(a, pl)
		if pl.GPUs() == 0 {
			if err == nil {
				t.Fatal("no GPUs: want error")
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		m := DefaultModel(a, A800)
		for _, p := range valid {
			if err := Check(a, p, pl); err != nil {
				t.Fatalf("valid plan %s fails: %v", p, err)
			}
			if !valid2(a, p, pl) {
				t.Fatalf("fast validity disagrees on %s", p)
			}
			b, err := m.Predict(p, Resources{Placement: pl, CPUsPerGPU: 4})
			if err != nil || !(b.Iter > 0) {
				t.Fatalf("predict %s on %s: %v %v", p, pl, b.Iter, err)
			}
		}
		for _, r := range rejected {
			err := Check(a, r.Plan, pl)
			var re *RuleError
			if !errors.As(err, &re) || re.Rule != r.Rule {
				t.Fatalf("rejection %s of %s does not reproduce: %v", r.Rule, r.Plan, err)
			}
		}
	})
}

func valid2(a Arch, p Plan, pl Placement) bool { return valid(a, p, pl) }

func FuzzParsePlanSpec(f *testing.F) {
	for _, s := range []string{"dp=2,tp=4,pp=1,mb=2,ga=4,zero=1", "dp=1,offload,ckpt", "zero=9", "dp=-1", ",,", "ckpt=false"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParsePlanSpec(s)
		if err != nil {
			return
		}
		back, err := ParsePlanSpec(p.Spec())
		if err != nil || back != p {
			t.Fatalf("round trip of %q: %+v -> %q -> %+v, %v", s, p, p.Spec(), back, err)
		}
	})
}

func FuzzLoadArch(f *testing.F) {
	f.Add("version: 1\nmodels:\n  - name: a\n    params: 1e9\n    layers: 2\n    hidden: 8\n    heads: 2\n    seq_len: 4\n    global_batch: 2\n")
	f.Add("version: 2\n")
	f.Add("models: [}")
	f.Fuzz(func(t *testing.T, s string) {
		as, err := ParseArchs("f.yaml", []byte(s))
		if err != nil {
			return
		}
		for _, a := range as {
			if err := a.Validate(); err != nil {
				t.Fatalf("accepted invalid arch %+v: %v", a, err)
			}
		}
	})
}
