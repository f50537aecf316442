package control

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/replan/replan/jobspec"
	"github.com/replan/replan/sched"
)

// Issue 28: a guaranteed job that was not plan-pinned got PP2, which its
// data-parallel-only trainer refuses, and failed 4 times in 72 s. A spec
// now says what its entrypoint runs (supports), and every policy chooses
// only such plans. Without supports the same jobs get TP or PP plans from
// some policy (the check can fail).
func TestEveryPolicyHonoursSupports(t *testing.T) {
	ctx := context.Background()
	mk := func(name string, gpus int, class jobspec.Class, supports string) *jobspec.Spec {
		data := fmt.Sprintf("version: 1\nname: %s\ntenant: research\nclass: %s\nmodel: gpt2\nframework: deepspeed\nworkdir: /w\n"+
			"entrypoint: train.py\nglobal_batch: 16\niterations: 1000\ncheckpoint_dir: /ckpt/%s\nrequest: {gpus: %d, plan: \"dp=%d,tp=1,pp=1,mb=1,ga=%d,zero=1\"}\n%s",
			name, class, name, gpus, gpus, 16/gpus, supports)
		s, err := jobspec.Parse(name+".yaml", []byte(data), nil)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	const dpOnly = "supports: {tp: false, pp: false, zero: [0, 1]}\n"
	for _, withSupports := range []bool{false, true} {
		sup := ""
		if withSupports {
			sup = dpOnly
		}
		outside := 0
		for _, policy := range sched.Names() {
			st, _ := openTest(t)
			ex := &recorder{}
			d, _ := newDaemon(t, st, ex, policy)
			for i, g := range []int{4, 2, 8} {
				class := jobspec.BestEffort
				if i == 0 {
					class = jobspec.Guaranteed
				}
				if _, err := d.Submit(ctx, mk(fmt.Sprintf("j%d", i), g, class, sup)); err != nil {
					t.Fatal(err)
				}
			}
			for r := 0; r < 3; r++ {
				d.Round(ctx)
			}
			ex.mu.Lock()
			launches := append([]Launch{}, ex.starts...)
			for _, rc := range ex.reconfs {
				launches = append(launches, rc[1])
			}
			ex.mu.Unlock()
			if len(launches) == 0 {
				t.Errorf("%s: nothing started", policy)
			}
			for _, l := range launches {
				p := l.Plan
				if p.TP > 1 || p.PP > 1 || p.ZeRO > 1 || p.Offload {
					outside++
					if withSupports {
						t.Errorf("%s: %s launched with %s, outside its supports {tp: false, pp: false, zero: [0, 1]}", policy, l.JobID, p)
					}
				}
			}
		}
		if !withSupports && outside == 0 {
			t.Errorf("without supports no policy chose a TP, PP, ZeRO-2/3 or offload plan: the test shows nothing")
		}
	}
}

// A spec's supports are parsed strictly and the requested plan must be
// inside them.
func TestSupportsParse(t *testing.T) {
	base := "version: 1\nname: x\ntenant: research\nclass: guaranteed\nmodel: gpt2\nframework: deepspeed\nworkdir: /w\n" +
		"entrypoint: train.py\nglobal_batch: 16\niterations: 10\ncheckpoint_dir: /c\nrequest: {gpus: 4, plan: \"dp=2,tp=1,pp=2,mb=1,ga=8\"}\n"
	for _, c := range []struct{ sup, want string }{
		{"supports: {pp: false}\n", "x.yaml:12: request.plan: the job's entrypoint does not run pipeline parallelism (supports.pp: false)"},
		{"supports: {zero: [1, 7]}\n", "x.yaml:13: supports.zero[1]: want a ZeRO stage 0, 1, 2 or 3, got 7"},
		{"supports: {zero: []}\n", "x.yaml:13: supports.zero: an empty list allows no plan"},
		{"supports: {zero: [0, 0]}\n", "x.yaml:13: supports.zero[1]: ZeRO stage 0 listed twice"},
		{"supports: {fsdp: true}\n", "x.yaml:13: supports.fsdp"},
	} {
		_, err := jobspec.Parse("x.yaml", []byte(base+c.sup), nil)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", strings.TrimSpace(c.sup), err, c.want)
		}
	}
	s, err := jobspec.Parse("x.yaml", []byte(base+"supports: {tp: false, zero: [0, 1]}\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if sp := s.Supports.Space(); !sp.NoTP || sp.NoPP || sp.ZeROStages != 0b11 || sp.NoOffload {
		t.Errorf("space %+v", sp)
	}
}
