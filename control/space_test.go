package control

import (
	"testing"

	"github.com/replan/replan/jobspec"
	"github.com/replan/replan/perf"
)

// The round's snapshot gives a Megatron job a model limited to what
// Megatron-LM runs (launch refuses ZeRO-2/3, offload and uneven
// placements for it), and a DeepSpeed job of the same model type the
// whole plan space, each with its own pointer (the policy's caches are
// keyed by it).
func TestSnapshotModelHasTheFrameworkSpace(t *testing.T) {
	st, _ := openTest(t)
	d, _ := newDaemon(t, st, &recorder{}, "static")
	a, _ := perf.Builtin("gpt2")
	d.mu.Lock()
	defer d.mu.Unlock()
	of := func(fw jobspec.Framework) *jobspec.Spec {
		return &jobspec.Spec{Arch: a, GlobalBatch: a.GlobalBatch, Framework: fw}
	}
	mg, ds := d.snapModel(of(jobspec.Megatron)), d.snapModel(of(jobspec.DeepSpeed))
	if mg.Space != perf.MegatronSpace {
		t.Errorf("megatron job's model space %+v, want %+v", mg.Space, perf.MegatronSpace)
	}
	if ds.Space != (perf.Space{}) {
		t.Errorf("deepspeed job's model space %+v, want every plan", ds.Space)
	}
	if mg == ds {
		t.Error("one model pointer for both frameworks")
	}
	if again := d.snapModel(of(jobspec.Megatron)); again != mg {
		t.Error("a second megatron job of the type got another pointer")
	}
}
