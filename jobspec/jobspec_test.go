package jobspec

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/replan/replan/internal/labels"
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
	f.Add(string(base) + "constraint: {labels: [ib-hdr, gpu=a800-80g]}\n")
	f.Add(string(base) + "constraint: {labels: [\"a b\", a=, a]}\n")
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
		for _, r := range s.RequiredLabels() {
			if labels.CheckRequirement(r) != nil {
				t.Fatalf("accepted an invalid label requirement %q", r)
			}
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

// envSpec is a valid spec with n environment variables.
func envSpec(n int) []byte {
	var b strings.Builder
	b.WriteString("version: 1\nname: many-env\ntenant: t\nclass: best-effort\nmodel: gpt2\nframework: deepspeed\nworkdir: /w\nentrypoint: train.py\nglobal_batch: 16\niterations: 10\ncheckpoint_dir: /c\nrequest: {gpus: 1}\nenv:\n")
	for i := range n {
		fmt.Fprintf(&b, "  K%06d: v\n", i)
	}
	return []byte(b.String())
}

// argsSpec is a valid spec with n arguments: as many YAML nodes as
// envSpec(n/2), each checked like an env value.
func argsSpec(n int) []byte {
	var b strings.Builder
	b.WriteString("version: 1\nname: many-args\ntenant: t\nclass: best-effort\nmodel: gpt2\nframework: deepspeed\nworkdir: /w\nentrypoint: train.py\nglobal_batch: 16\niterations: 10\ncheckpoint_dir: /c\nrequest: {gpus: 1}\nargs:\n")
	for i := range n {
		fmt.Fprintf(&b, "  - K%06d\n", i)
	}
	return []byte(b.String())
}

// Checking env is linear in the number of variables: each key's node was
// looked up again by a scan of the mapping, 6.7 s of CPU for one 1 MiB
// spec. A spec with 40,000 env variables is compared with one of the same
// number of YAML nodes in args (each also checked, linearly): they take
// about as long (the quadratic check took 60 times as long: 7.6 s against
// 0.12 s). The best of several runs of each is compared, interleaved and
// garbage collected before each, so a loaded machine slows both alike.
func TestEnvCheckIsLinear(t *testing.T) {
	const n = 40000 // keys: 2n nodes stay under the walker's node limit
	env, args := envSpec(n), argsSpec(2*n)
	if len(env) > 1<<20 || len(args) > 1<<20 {
		t.Fatalf("test setup: %d and %d bytes, above the API's 1 MiB", len(env), len(args))
	}
	best := func(data []byte, prev time.Duration) time.Duration {
		runtime.GC()
		start := time.Now()
		s, err := Parse("env.yaml", data, nil)
		el := time.Since(start)
		if err != nil || len(s.Env)+len(s.Args) == 0 {
			t.Fatalf("parse: %v", err)
		}
		if prev == 0 || el < prev {
			return el
		}
		return prev
	}
	var te, ta time.Duration
	for range 5 {
		te, ta = best(env, te), best(args, ta)
	}
	ratio := float64(te) / float64(ta)
	t.Logf("%d env variables %v, %d args %v: ratio %.2f", n, te, 2*n, ta, ratio)
	if ratio > 5 {
		t.Errorf("%d env variables took %.1f× as long as %d args (%v against %v): the env check is not linear", n, ratio, 2*n, te, ta)
	}
}

func BenchmarkParseEnv(b *testing.B) {
	for _, n := range []int{10000, 20000, 40000} {
		data := envSpec(n)
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				if _, err := Parse("env.yaml", data, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// ParseAuthorized asks about the tenant before validating: a refusal is
// returned alone (none of the spec's problems), and a spec whose tenant
// cannot be read is validated without asking.
func TestParseAuthorizedAsksFirst(t *testing.T) {
	refuse := errors.New("not yours")
	var asked []string
	auth := func(tenant string) error { asked = append(asked, tenant); return refuse }
	bad := strings.Replace(string(envSpec(2)), "class: best-effort", "class: vip", 1) + "  \"1BAD\": x\n"
	if _, err := ParseAuthorized("b.yaml", []byte(bad), nil, auth); err != refuse || strings.Join(asked, ",") != "t" {
		t.Errorf("refused caller: %v (asked %v)", err, asked)
	}
	asked = nil
	noTenant := strings.Replace(bad, "tenant: t\n", "", 1)
	_, err := ParseAuthorized("b.yaml", []byte(noTenant), nil, auth)
	if len(asked) != 0 || err == nil || !strings.Contains(err.Error(), "tenant: missing required field") || !strings.Contains(err.Error(), "class:") {
		t.Errorf("spec without a tenant: asked %v, %v", asked, err)
	}
	ok := func(string) error { return nil }
	if s, err := ParseAuthorized("g.yaml", envSpec(3), nil, ok); err != nil || len(s.Env) != 3 {
		t.Errorf("allowed: %v", err)
	}
}

// Issue 24: invisible format characters (a right-to-left override, a
// zero-width space, any of Unicode's category Cf) in args and model.name
// were accepted, so a job could be listed as something it is not. Every
// name, path, argument and env value refuses them, naming file, line and
// field.
func TestParseRefusesFormatCharacters(t *testing.T) {
	base := `version: 1
name: x
tenant: %s
class: best-effort
model: {name: %s, params: 1.3e9, layers: 24, hidden: 2048, heads: 16, seq_len: 2048, vocab: 50000}
framework: deepspeed
workdir: %s
entrypoint: %s
args: ["--lr", %s]
env: {A: %s}
global_batch: 16
iterations: 10
checkpoint_dir: %s
request: {gpus: 1}
`
	ok := []string{"t", "mine", "/w", "train.py", "--x", "v", "/ckpt/x"}
	fields := []string{"tenant", "model.name", "workdir", "entrypoint", "args[1]", "env.A", "checkpoint_dir"}
	lines := []int{3, 5, 7, 8, 9, 10, 13}
	bads := []string{"\"re\u202Esearch\"", "\"gpt\u200B2\"", "\"/w\u2066\"", "\"train\uFEFF.py\"", "\"--out=\u202Efdp.exe\"", "\"a\u00ADb\"", "\"/ckpt/\u2028x\""}
	s, err := Parse("f.yaml", []byte(fmt.Sprintf(base, "t", "mine", "/w", "train.py", "--x", "v", "/ckpt/x")), nil)
	if err != nil || s.Arch.Name != "mine" {
		t.Fatalf("the clean spec: %v", err)
	}
	for i, bad := range bads {
		args := make([]any, len(ok))
		for k, v := range ok {
			args[k] = v
		}
		args[i] = bad
		_, err := Parse("f.yaml", []byte(fmt.Sprintf(base, args...)), nil)
		want := fmt.Sprintf("f.yaml:%d: %s: invisible format character U+", lines[i], fields[i])
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s = %s: %v (want %q)", fields[i], bad, err, want)
		}
	}
}

// TestParseHang: hang: {factor, floor} is read; a bad factor or floor is
// refused with file, line and field.
func TestParseHang(t *testing.T) {
	base := limitsBase // a minimal spec of 12 lines
	s, err := Parse("h.yaml", []byte(base+"hang: {factor: 20, floor: 5m}\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if s.Hang == nil || s.Hang.Factor != 20 || s.Hang.FloorS != 300 {
		t.Fatalf("hang %+v", s.Hang)
	}
	if s, err := Parse("h.yaml", []byte(base), nil); err != nil || s.Hang != nil {
		t.Fatalf("no hang: %+v, %v", s, err)
	}
	_, err = Parse("h.yaml", []byte(base+"hang: {factor: -1, floor: soon}\n"), nil)
	for _, want := range []string{"h.yaml:13: hang.factor: must be positive", `h.yaml:13: hang.floor: want a duration like "10s", got "soon"`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("bad hang: %v; want %q", err, want)
		}
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

// TestParseSlow: slow: {fraction, observations} is read; a fraction of 1
// or more, or a count that is not positive, is refused with file, line
// and field.
func TestParseSlow(t *testing.T) {
	base := limitsBase // a minimal spec of 12 lines
	s, err := Parse("s.yaml", []byte(base+"slow: {fraction: 0.8, observations: 5}\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if s.Slow == nil || s.Slow.Fraction != 0.8 || s.Slow.Observations != 5 {
		t.Fatalf("slow %+v", s.Slow)
	}
	if s, err := Parse("s.yaml", []byte(base), nil); err != nil || s.Slow != nil {
		t.Fatalf("no slow: %+v, %v", s, err)
	}
	_, err = Parse("s.yaml", []byte(base+"slow: {fraction: 1.5, observations: 0}\n"), nil)
	for _, want := range []string{"s.yaml:13: slow.fraction: want a fraction of the predicted throughput below 1, got 1.5", "s.yaml:13: slow.observations: must be positive"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("bad slow: %v; want %q", err, want)
		}
	}
}
