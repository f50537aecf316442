package jobspec

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/replan/replan/perf"
)

func TestParseExample(t *testing.T) {
	s, err := Load("testdata/gpt2.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	if s.Name != "gpt2-pretrain" || s.Class != Guaranteed || s.Framework != DeepSpeed || s.Arch.Name != "gpt2" || s.Arch.GlobalBatch != 16 {
		t.Fatalf("spec %+v", s)
	}
	want := perf.Plan{DP: 8, TP: 1, PP: 1, MicroBatch: 2, GA: 1, ZeRO: 2}
	if !s.Request.HasPlan || s.Request.Plan != want || s.Request.GPUs != 8 || s.Request.CPUs != 64 {
		t.Errorf("request %+v", s.Request)
	}
	if len(s.Args) != 4 || s.Args[3] != "1024" || s.Env["NCCL_DEBUG"] != "WARN" {
		t.Errorf("args %v env %v", s.Args, s.Env)
	}
	if len(s.Pin.Tiers) != 2 || s.Pin.Tiers[1] != perf.TierRack {
		t.Errorf("pin %+v", s.Pin)
	}
}

func TestParseCustomArchitecture(t *testing.T) {
	data := `version: 1
name: mine
tenant: t
class: best-effort
model: {name: mymodel, params: 1.3e9, layers: 24, hidden: 2048, heads: 16, seq_len: 2048, vocab: 50000}
framework: megatron
workdir: /w
entrypoint: pretrain_gpt.py
global_batch: 64
iterations: 10
checkpoint_dir: /c
request: {gpus: 4}
`
	s, err := Parse("m.yaml", []byte(data), nil)
	if err != nil {
		t.Fatal(err)
	}
	if s.Arch.Name != "mymodel" || s.Arch.GlobalBatch != 64 || s.Request.CPUs != 32 || s.Request.HasPlan {
		t.Errorf("spec %+v", s)
	}
}

func TestParseReportsEveryProblemWithLineAndField(t *testing.T) {
	data := `version: 1
name: Bad Name
tenant: t
class: vip
model: gpt3
framework: jax
workdir: relative/dir
entrypoint: train.py
global_batch: 16
iterations: 0
checkpoint_dir: /c
colour: blue
request:
  gpus: 8
  plan: dp=4,tp=1,pp=1,mb=2,ga=1
env: {"1BAD": x}
`
	_, err := Parse("j.yaml", []byte(data), nil)
	if err == nil {
		t.Fatal("accepted a bad spec")
	}
	msg := err.Error()
	for _, want := range []string{
		"j.yaml:2: name:", "j.yaml:4: class: want guaranteed or best-effort", "j.yaml:5: model: unknown model type",
		"j.yaml:6: framework", "j.yaml:7: workdir: want an absolute path", "j.yaml:10: iterations: must be positive",
		"j.yaml:12: colour: unknown field", "j.yaml:16: env.1BAD",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("missing %q in:\n%s", want, msg)
		}
	}
}

func TestParsePlanChecks(t *testing.T) {
	base, _ := os.ReadFile("testdata/gpt2.yaml")
	cases := []struct{ from, to, want string }{
		{"plan: dp=8,tp=1,pp=1,mb=2,ga=1,zero=2", "plan: dp=4,tp=1,pp=1,mb=2,ga=1,zero=2", "j.yaml:18: request.plan: gpu-count"},
		{"mb=2,ga=1,zero=2", "mb=4,ga=1,zero=2", "j.yaml:18: request.plan: global-batch"},
		{"dp=8,tp=1,pp=1,mb=2,ga=1,zero=2", "dp=8,tp=1,pp=1,mb=2,ga=1,zero=2,offload", ""},
		{"  cpus: 64\n", "  cpus: 4\n", ""},
		{"dp=8,tp=1,pp=1,mb=2,ga=1,zero=2", "dp=4,tp=2,pp=1,mb=4,ga=1,zero=2", "j.yaml:18: request.plan: heads"},
		{"dp=8,tp=1,pp=1,mb=2,ga=1,zero=2", "dp=8,tp=1,pp=1,mb=2,ga=1,zero=7", "j.yaml:18: request.plan: zero-stage"},
	}
	for _, c := range cases[:2] {
		data := strings.Replace(string(base), c.from, c.to, 1)
		_, err := Parse("j.yaml", []byte(data), nil)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: want %q, got %v", c.to, c.want, err)
		}
	}
	// offload with 4 CPUs for 8 GPUs
	data := strings.Replace(strings.Replace(string(base), cases[2].from, cases[2].to, 1), "  cpus: 64\n", "  cpus: 4\n", 1)
	if _, err := Parse("j.yaml", []byte(data), nil); err == nil || !strings.Contains(err.Error(), "request.cpus: optimizer offload needs at least one CPU per GPU") {
		t.Errorf("offload without CPUs: %v", err)
	}
	for _, c := range cases[4:] {
		data := strings.Replace(string(base), c.from, c.to, 1)
		_, err := Parse("j.yaml", []byte(data), nil)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: want %q, got %v", c.to, c.want, err)
		}
	}
	guaranteedNoPlan := strings.Replace(string(base), "  plan: dp=8,tp=1,pp=1,mb=2,ga=1,zero=2\n", "", 1)
	if _, err := Parse("j.yaml", []byte(guaranteedNoPlan), nil); err == nil || !strings.Contains(err.Error(), "request.plan") {
		t.Errorf("guaranteed without plan: %v", err)
	}
	meg := strings.Replace(string(base), "framework: deepspeed", "framework: megatron", 1)
	if _, err := Parse("j.yaml", []byte(meg), nil); err == nil || !strings.Contains(err.Error(), "megatron runs ZeRO-0 or ZeRO-1") {
		t.Errorf("megatron with ZeRO-2: %v", err)
	}
	if _, err := Parse("j.yaml", nil, nil); err == nil || !strings.Contains(err.Error(), "empty job spec") {
		t.Errorf("empty: %v", err)
	}
}

func FuzzParse(f *testing.F) {
	base, _ := os.ReadFile("testdata/gpt2.yaml")
	f.Add(string(base))
	f.Add("version: 1\nmodel: {params: -1}\n")
	f.Add("a: &a [*a, *a]\n")
	f.Add("version: 1\n---\nversion: 1\n")
	f.Fuzz(func(t *testing.T, data string) {
		s, err := Parse("f.yaml", []byte(data), nil)
		if err != nil {
			if s != nil {
				t.Fatal("spec returned with an error")
			}
			return
		}
		if s.Name == "" || s.Request.GPUs < 1 || s.GlobalBatch < 1 || s.Arch.Validate() != nil {
			t.Fatalf("accepted an unusable spec: %+v", s)
		}
		if s.Request.HasPlan {
			if err := perf.Check(s.Arch, s.Request.Plan, perf.Placement{s.Request.GPUs}); err != nil {
				t.Fatalf("accepted a plan that breaks a rule: %v", err)
			}
		}
	})
}

// Issue 12: control characters in any name or path, and a backslash in
// checkpoint_dir (every launch failed with a misleading "sha256 mismatch"),
// are refused with file, line and field.
func TestParseRefusesControlCharactersAndBackslashes(t *testing.T) {
	base := `version: 1
name: x
tenant: %s
class: best-effort
model: gpt2
framework: deepspeed
workdir: /w
entrypoint: %s
args: [%s]
env: {A: %s}
global_batch: 16
iterations: 10
checkpoint_dir: %s
request: {gpus: 1}
`
	ok := []string{"t", "train.py", "--x", "v", "/ckpt/x"}
	fields := []string{"tenant", "entrypoint", "args[0]", "env.A", "checkpoint_dir"}
	lines := []int{3, 8, 9, 10, 13}
	for i, bad := range []string{`"re\u001b[2Jsearch"`, `"train\n.py"`, `"--x\r"`, `"\u009b31m"`, `"/ckpt/a\\b"`} {
		vals := append([]string(nil), ok...)
		vals[i] = bad
		args := make([]any, len(vals))
		for k, v := range vals {
			args[k] = v
		}
		data := fmt.Sprintf(base, args...)
		_, err := Parse("c.yaml", []byte(data), nil)
		if err == nil {
			t.Errorf("%s = %s accepted", fields[i], bad)
			continue
		}
		want := fmt.Sprintf("c.yaml:%d: %s: ", lines[i], fields[i])
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%s = %s: %v (want %q)", fields[i], bad, err, want)
		}
	}
	data := fmt.Sprintf(base, "t", "train.py", "--x", "v", `"/ckpt/a\nb"`)
	if _, err := Parse("c.yaml", []byte(data), nil); err == nil || !strings.Contains(err.Error(), "c.yaml:13: checkpoint_dir: ") {
		t.Errorf("newline in checkpoint_dir: %v", err)
	}
	s, err := Parse("c.yaml", []byte(fmt.Sprintf(base, "t", "train.py", "--x", "v", "/ckpt/x")), nil)
	if err != nil {
		t.Fatal(err)
	}
	if s.File != "c.yaml" || s.Line("tenant") != 3 || s.Line("request.gpus") != 14 || s.Line("pin.tiers") == 0 {
		t.Errorf("file %q lines %v", s.File, s.Lines)
	}
}

// TestParseProfileBlock: the profile block's fields are read, and a bad
// one is named with its line and field.
func TestParseProfileBlock(t *testing.T) {
	base := `version: 1
name: mine
tenant: t
class: best-effort
model: {name: mymodel, params: 1.3e9, layers: 24, hidden: 2048, heads: 16, seq_len: 2048, vocab: 50000}
framework: deepspeed
workdir: /w
entrypoint: train.py
global_batch: 64
iterations: 10
checkpoint_dir: /c
request: {gpus: 4}
`
	s, err := Parse("m.yaml", []byte(base+"profile: {enabled: false, max_configs: 5, iterations: 10, run_seconds: 90, phase_seconds: 300}\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	p := s.Profile
	if p == nil || p.Enabled == nil || *p.Enabled || p.MaxConfigs != 5 || p.Iterations != 10 || p.RunSeconds != 90 || p.PhaseSeconds != 300 {
		t.Errorf("profile %+v", p)
	}
	if s, _ := Parse("m.yaml", []byte(base), nil); s.Profile != nil {
		t.Errorf("no block: got %+v", s.Profile)
	}
	for extra, want := range map[string]string{
		"profile: {max_configs: 9}\n":  "m.yaml:13: profile.max_configs: at most 7, got 9",
		"profile: {run_seconds: -1}\n": "m.yaml:13: profile.run_seconds",
		"profile: {enable: true}\n":    "m.yaml:13: profile.enable",
	} {
		_, err := Parse("m.yaml", []byte(base+extra), nil)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: got %v, want %q", extra, err, want)
		}
	}
}
