package launch

import (
	"encoding/json"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/replan/replan/jobspec"
	"github.com/replan/replan/perf"
)

// Regression (issue 13): torch 1.13's torchrun knows only the underscore
// forms of its flags; replan rendered --nproc-per-node, --node-rank,
// --master-addr and --master-port, which it refuses.
func TestRenderTorchrunUnderscoreFlags(t *testing.T) {
	j := job(t, jobspec.Megatron, "gpt2", 16)
	r, err := Render(Input{Job: j, Plan: perf.Plan{DP: 8, TP: 1, PP: 1, MicroBatch: 2, GA: 1}, Servers: servers(4, 4)})
	if err != nil {
		t.Fatal(err)
	}
	for rank, sl := range r.Servers {
		a := sl.Argv
		launcher := a[:slices.Index(a, j.Entrypoint)]
		for _, f := range launcher[1:] {
			if strings.HasPrefix(f, "--") && strings.Contains(f[2:], "-") {
				t.Errorf("rank %d: torchrun flag %s has a hyphen: torch 1.13 refuses it (argv %v)", rank, f, launcher)
			}
		}
		for _, f := range TorchrunFlags {
			if _, ok := flag(launcher, f); !ok {
				t.Errorf("rank %d: no %s in %v", rank, f, launcher)
			}
		}
	}
}

// TestRenderedTorchrunParses feeds the rendered torchrun command line to
// the real torchrun's own argument parser (/usr/bin/python3 with torch)
// and checks what it understood.
func TestRenderedTorchrunParses(t *testing.T) {
	py := "/usr/bin/python3"
	if err := exec.Command(py, "-c", "import torch.distributed.run").Run(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI: torch is missing (%s -c 'import torch.distributed.run': %v); install python3-torch", py, err)
		}
		t.Skipf("no torch for %s (%v): install python3-torch", py, err)
	}
	j := job(t, jobspec.Megatron, "gpt2", 16)
	r, err := Render(Input{Job: j, Plan: perf.Plan{DP: 8, TP: 1, PP: 1, MicroBatch: 2, GA: 1}, Servers: servers(4, 4)})
	if err != nil {
		t.Fatal(err)
	}
	argv, _ := json.Marshal(r.Servers[1].Argv[1:])
	script := `import json, sys
from torch.distributed.run import get_args_parser
from torch.distributed.elastic.multiprocessing.api import Std
a = get_args_parser().parse_args(json.loads(sys.argv[1]))
# what torchrun does next with them (None: the crash of torch 1.13 on Python 3.11)
r, t = Std.from_str(a.redirects), Std.from_str(a.tee)
print(json.dumps({"redirects": None if r is None else int(r), "tee": None if t is None else int(t), "nnodes": a.nnodes, "nproc_per_node": a.nproc_per_node, "node_rank": a.node_rank,
  "master_addr": a.master_addr, "master_port": a.master_port, "script": a.training_script, "args": a.training_script_args}))
`
	out, err := exec.Command(py, "-c", script, string(argv)).CombinedOutput()
	if err != nil {
		t.Fatalf("torchrun's parser refused the rendered command: %v\n%s", err, out)
	}
	var got struct {
		NNodes       string   `json:"nnodes"`
		NProcPerNode string   `json:"nproc_per_node"`
		NodeRank     int      `json:"node_rank"`
		MasterAddr   string   `json:"master_addr"`
		MasterPort   int      `json:"master_port"`
		Script       string   `json:"script"`
		Args         []string `json:"args"`
		Redirects    int      `json:"redirects"`
		Tee          int      `json:"tee"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if got.Redirects != 1 || got.Tee != 1 {
		t.Errorf("redirects %d, tee %d: want 1 (the default 0 crashes torch 1.13 on Python 3.11)", got.Redirects, got.Tee)
	}
	if got.NNodes != "2" || got.NProcPerNode != "4" || got.NodeRank != 1 || got.MasterAddr != "10.0.0.1" || got.MasterPort != 29500 || got.Script != "train.py" {
		t.Errorf("torchrun understood %+v", got)
	}
	if i := slices.Index(got.Args, "--global-batch-size"); i < 0 || got.Args[i+1] != "16" {
		t.Errorf("the trainer's args: %v", got.Args)
	}
}

func TestRenderMegatronArchFlags(t *testing.T) {
	small := perf.Arch{Name: "tiny", Params: 1e5, Layers: 2, Hidden: 64, Heads: 4, SeqLen: 32, Vocab: 256, GlobalBatch: 16}
	j := job(t, jobspec.Megatron, "gpt2", 16)
	j.Arch, j.Model = small, "tiny"
	p := perf.Plan{DP: 4, TP: 1, PP: 1, MicroBatch: 2, GA: 2}

	// From the model, NullTokenizer gets --vocab-size.
	j.Args = []string{"--mock-data", "--tokenizer-type", "NullTokenizer"}
	r, err := Render(Input{Job: j, Plan: p, Servers: servers(2, 2)})
	if err != nil {
		t.Fatal(err)
	}
	a := r.Servers[0].Argv
	for f, v := range map[string]string{"--num-layers": "2", "--hidden-size": "64", "--num-attention-heads": "4", "--seq-length": "32", "--max-position-embeddings": "32", "--vocab-size": "256"} {
		if got, _ := flag(a, f); got != v {
			t.Errorf("%s = %q, want %s (argv %v)", f, got, v, a)
		}
	}
	// Another tokenizer brings its vocabulary: no --vocab-size.
	j.Args = []string{"--tokenizer-type", "GPT2BPETokenizer", "--vocab-file", "/v.json"}
	r, _ = Render(Input{Job: j, Plan: p, Servers: servers(2, 2)})
	if slices.Contains(r.Servers[0].Argv, "--vocab-size") {
		t.Errorf("--vocab-size with GPT2BPETokenizer: %v", r.Servers[0].Argv)
	}
	// Args that agree are kept once; a longer position table is allowed.
	j.Args = []string{"--hidden-size", "64", "--max-position-embeddings=64"}
	r, err = Render(Input{Job: j, Plan: p, Servers: servers(2, 2)})
	if err != nil {
		t.Fatal(err)
	}
	a = r.Servers[0].Argv
	count := 0
	for _, x := range a {
		if x == "--hidden-size" || strings.HasPrefix(x, "--max-position-embeddings") {
			count++
		}
	}
	if count != 2 {
		t.Errorf("given flags repeated: %v", a)
	}
}

func TestCheckMegatronArgs(t *testing.T) {
	gpt2, _ := perf.Builtin("gpt2")
	if err := CheckMegatronArgs(gpt2, []string{"--data-path", "/d", "--num-layers", itoa(gpt2.Layers)}); err != nil {
		t.Errorf("agreeing args refused: %v", err)
	}
	for name, c := range map[string]struct {
		args []string
		want string
	}{
		"hidden":    {[]string{"--hidden-size", "128"}, "--hidden-size 128 contradicts model gpt2's hidden"},
		"layers=":   {[]string{"--num-layers=3"}, "--num-layers 3 contradicts model gpt2's layers"},
		"positions": {[]string{"--max-position-embeddings", "8"}, "--max-position-embeddings 8 is below model gpt2's seq_len"},
		"not a num": {[]string{"--seq-length", "long"}, `--seq-length "long": want a positive integer`},
		"batch":     {[]string{"--global-batch-size", "32"}, "--global-batch-size is rendered by replan from global_batch"},
		"tp":        {[]string{"--tensor-model-parallel-size=2"}, "--tensor-model-parallel-size is rendered by replan"},
	} {
		err := CheckMegatronArgs(gpt2, c.args)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", name, err, c.want)
		}
	}
	// Render refuses them too.
	j := job(t, jobspec.Megatron, "gpt2", 16)
	j.Args = []string{"--num-attention-heads", "7"}
	if _, err := Render(Input{Job: j, Plan: perf.Plan{DP: 8, TP: 1, PP: 1, MicroBatch: 2, GA: 1}, Servers: servers(4, 4)}); err == nil || !strings.Contains(err.Error(), "--num-attention-heads") {
		t.Errorf("render with contradicting heads: %v", err)
	}
}

// Regression (issue 13): torchrun's --tee copier writes the workers' lines
// to its stdout without flushing; with stdout a file (the agent's log)
// Python buffered them 8 KiB at a time, so the agent saw Megatron's
// iteration lines ~26 at a time and a reconfiguration's verify step
// waited for a buffer to fill. Every launch runs Python unbuffered.
func TestRenderPythonUnbuffered(t *testing.T) {
	for _, fw := range []jobspec.Framework{jobspec.Megatron, jobspec.DeepSpeed} {
		j := job(t, fw, "gpt2", 16)
		j.Env["PYTHONUNBUFFERED"] = ""
		r, err := Render(Input{Job: j, Plan: perf.Plan{DP: 8, TP: 1, PP: 1, MicroBatch: 2, GA: 1}, Servers: servers(4, 4)})
		if err != nil {
			t.Fatal(err)
		}
		for _, sl := range r.Servers {
			if sl.Env["PYTHONUNBUFFERED"] != "1" {
				t.Errorf("%s on %s: PYTHONUNBUFFERED=%q", fw, sl.Server, sl.Env["PYTHONUNBUFFERED"])
			}
		}
	}
}

// deepSpeedKeys are the ds_config.json keys replan may write, each one
// DeepSpeed reads (deepspeed/runtime/constants.py, zero/config.py,
// activation_checkpointing/config.py, runtime/config.py's "checkpoint"
// block). Regression (issue 13): replan wrote "log_level", which no
// DeepSpeed version reads (its logger is INFO by default; steps_per_print
// is what prints the throughput lines).
var deepSpeedKeys = map[string][]string{
	"train_batch_size": nil, "train_micro_batch_size_per_gpu": nil, "gradient_accumulation_steps": nil,
	"steps_per_print": nil, "wall_clock_breakdown": nil, "gradient_clipping": nil,
	"bf16":                     {"enabled"},
	"zero_optimization":        {"stage", "overlap_comm", "contiguous_gradients", "offload_optimizer"},
	"activation_checkpointing": {"partition_activations", "contiguous_memory_optimization", "cpu_checkpointing"},
	"checkpoint":               {"load_universal"},
}

func TestDSConfigKeysAreDeepSpeeds(t *testing.T) {
	j := job(t, jobspec.DeepSpeed, "llama7b", 16)
	for _, in := range []Input{
		{Job: j, Plan: perf.Plan{DP: 8, TP: 1, PP: 1, MicroBatch: 2, GA: 1, ZeRO: 2, Offload: true, Ckpt: true}, Servers: servers(4, 4), Universal: true},
		{Job: j, Plan: perf.Plan{DP: 2, TP: 2, PP: 2, MicroBatch: 2, GA: 4, ZeRO: 1}, Servers: servers(4, 4)},
	} {
		var cfg map[string]any
		b, _ := json.Marshal(dsConfig(in))
		if err := json.Unmarshal(b, &cfg); err != nil {
			t.Fatal(err)
		}
		for k, v := range cfg {
			sub, ok := deepSpeedKeys[k]
			if !ok {
				t.Errorf("ds_config key %q is not one DeepSpeed reads", k)
				continue
			}
			if m, isMap := v.(map[string]any); isMap {
				for sk := range m {
					if !slices.Contains(sub, sk) {
						t.Errorf("ds_config key %s.%s is not one DeepSpeed reads", k, sk)
					}
				}
				if off, ok := m["offload_optimizer"].(map[string]any); ok {
					for ok := range off {
						if ok != "device" && ok != "pin_memory" {
							t.Errorf("ds_config key zero_optimization.offload_optimizer.%s", ok)
						}
					}
				}
			}
		}
	}
}
