package launch

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/replan/replan/jobspec"
	"github.com/replan/replan/perf"
)

func job(t *testing.T, fw jobspec.Framework, model string, batch int) *jobspec.Spec {
	t.Helper()
	a, ok := perf.Builtin(model)
	if !ok {
		t.Fatalf("no model %s", model)
	}
	a.GlobalBatch = batch
	return &jobspec.Spec{Name: "j1", Tenant: "t", Class: jobspec.BestEffort, Model: model, Arch: a, Framework: fw,
		WorkDir: "/work/j1", Entrypoint: "train.py", Args: []string{"--data", "/d"}, Env: map[string]string{"NCCL_DEBUG": "WARN", "OMP_NUM_THREADS": "99"},
		GlobalBatch: batch, Iterations: 1000, CheckpointDir: "/ckpt/j1"}
}

func servers(perServer ...int) []Server {
	var out []Server
	for i, g := range perServer {
		s := Server{Name: "s" + strconv.Itoa(i), Address: "10.0.0." + strconv.Itoa(i+1)}
		for d := 0; d < g; d++ {
			s.GPUs = append(s.GPUs, d)
			for c := 0; c < 8; c++ {
				s.CPUs = append(s.CPUs, d*8+c)
			}
		}
		out = append(out, s)
	}
	return out
}

func flag(argv []string, name string) (string, bool) {
	i := slices.Index(argv, name)
	if i < 0 || i+1 >= len(argv) {
		return "", false
	}
	return argv[i+1], true
}

func TestRenderDeepSpeedEveryFamily(t *testing.T) {
	plans := map[string]perf.Plan{
		"dp":           {DP: 8, TP: 1, PP: 1, MicroBatch: 2, GA: 1},
		"ga":           {DP: 8, TP: 1, PP: 1, MicroBatch: 1, GA: 2},
		"gc":           {DP: 8, TP: 1, PP: 1, MicroBatch: 2, GA: 1, Ckpt: true},
		"zero-dp":      {DP: 8, TP: 1, PP: 1, MicroBatch: 2, GA: 1, ZeRO: 2},
		"zero-offload": {DP: 8, TP: 1, PP: 1, MicroBatch: 2, GA: 1, ZeRO: 2, Offload: true},
		"3d":           {DP: 2, TP: 2, PP: 2, MicroBatch: 2, GA: 4, ZeRO: 1},
	}
	for name, p := range plans {
		t.Run(name, func(t *testing.T) {
			j := job(t, jobspec.DeepSpeed, "llama7b", 16)
			r, err := Render(Input{Job: j, Plan: p, Servers: servers(4, 4), UsedPorts: map[string][]int{"s0": {29500, 29501}}})
			if err != nil {
				t.Fatal(err)
			}
			if len(r.Servers) != 2 || r.MasterPort != 29502 || r.MasterAddr != "10.0.0.1" {
				t.Fatalf("rendered %+v", r)
			}
			for rank, sl := range r.Servers {
				a := sl.Argv
				if a[0] != "deepspeed" || !slices.Contains(a, "--no_ssh") {
					t.Errorf("argv %v", a)
				}
				if v, _ := flag(a, "--node_rank"); v != strconv.Itoa(rank) {
					t.Errorf("node_rank %s", v)
				}
				if v, _ := flag(a, "--master_port"); v != "29502" {
					t.Errorf("master_port %s", v)
				}
				if v, _ := flag(a, "--include"); v != "s0:0,1,2,3@s1:0,1,2,3" {
					t.Errorf("include %s", v)
				}
				if sl.Env["CUDA_VISIBLE_DEVICES"] != "0,1,2,3" || sl.Env["OMP_NUM_THREADS"] != "8" || sl.Env["NCCL_DEBUG"] != "WARN" {
					t.Errorf("env %v", sl.Env)
				}
				if (p.TP > 1) != (sl.Env["CUDA_DEVICE_MAX_CONNECTIONS"] == "1") {
					t.Errorf("CUDA_DEVICE_MAX_CONNECTIONS with TP %d: %q", p.TP, sl.Env["CUDA_DEVICE_MAX_CONNECTIONS"])
				}
				cfgPath, _ := flag(a, "--deepspeed_config")
				var cfg DSConfig
				if err := json.Unmarshal([]byte(sl.Files[cfgPath]), &cfg); err != nil {
					t.Fatalf("ds_config %q: %v", cfgPath, err)
				}
				// train_batch_size = micro · GA · DP = the job's global batch
				if cfg.TrainBatchSize != cfg.MicroBatchPerGPU*cfg.GradAccumSteps*p.DP || cfg.TrainBatchSize != j.GlobalBatch {
					t.Errorf("batch identity broken: %+v", cfg)
				}
				if cfg.ZeRO["stage"] != float64(p.ZeRO) {
					t.Errorf("zero %v", cfg.ZeRO)
				}
				if _, off := cfg.ZeRO["offload_optimizer"]; off != p.Offload {
					t.Errorf("offload %v", cfg.ZeRO)
				}
				if (cfg.ActivationCkpt != nil) != p.Ckpt || slices.Contains(a, "--checkpoint-activations") != p.Ckpt {
					t.Errorf("checkpointing: %v %v", cfg.ActivationCkpt, a)
				}
				if v, ok := flag(a, "--tensor-model-parallel-size"); (p.TP > 1) != ok || (ok && v != "2") {
					t.Errorf("tp flag %q", v)
				}
				if cfg.StepsPerPrint != 1 || cfg.BF16["enabled"] != true {
					t.Errorf("cfg %+v", cfg)
				}
				if host := sl.Files[strings.Replace(cfgPath, "ds_config.json", "hostfile", 1)]; host != "s0 slots=4\ns1 slots=4\n" {
					t.Errorf("hostfile %q", host)
				}
			}
		})
	}
}

func TestRenderMegatron(t *testing.T) {
	j := job(t, jobspec.Megatron, "gpt2", 16)
	p := perf.Plan{DP: 2, TP: 1, PP: 4, MicroBatch: 2, GA: 4, ZeRO: 1, Ckpt: true}
	r, err := Render(Input{Job: j, Plan: p, Servers: servers(4, 4)})
	if err != nil {
		t.Fatal(err)
	}
	a := r.Servers[1].Argv
	want := map[string]string{"--nnodes": "2", "--nproc_per_node": "4", "--node_rank": "1", "--master_addr": "10.0.0.1", "--master_port": "29500",
		"--tensor-model-parallel-size": "1", "--pipeline-model-parallel-size": "4", "--micro-batch-size": "2", "--global-batch-size": "16",
		"--save": "/ckpt/j1", "--load": "/ckpt/j1", "--log-interval": "1", "--recompute-granularity": "full"}
	for f, v := range want {
		if got, _ := flag(a, f); got != v {
			t.Errorf("%s = %q, want %q (argv %v)", f, got, v, a)
		}
	}
	for _, f := range []string{"--exit-signal-handler", "--use-distributed-optimizer", "--save-interval"} {
		if !slices.Contains(a, f) {
			t.Errorf("missing %s", f)
		}
	}
	if a[0] != "torchrun" || a[slices.Index(a, "train.py")+1] != "--data" {
		t.Errorf("argv %v", a)
	}
	// Megatron cannot run ZeRO-2 or offload, nor uneven servers.
	if _, err := Render(Input{Job: j, Plan: perf.Plan{DP: 8, TP: 1, PP: 1, MicroBatch: 2, GA: 1, ZeRO: 2}, Servers: servers(4, 4)}); err == nil {
		t.Error("megatron ZeRO-2 rendered")
	}
	if _, err := Render(Input{Job: j, Plan: perf.Plan{DP: 6, TP: 1, PP: 1, MicroBatch: 1, GA: 1}, Servers: servers(4, 2)}); err == nil {
		t.Error("megatron on 4+2 rendered")
	}
}

func TestRenderRejects(t *testing.T) {
	j := job(t, jobspec.DeepSpeed, "gpt2", 16)
	for name, in := range map[string]Input{
		"gpu count":    {Job: j, Plan: perf.Plan{DP: 4, TP: 1, PP: 1, MicroBatch: 4, GA: 1}, Servers: servers(4, 4)},
		"batch":        {Job: j, Plan: perf.Plan{DP: 8, TP: 1, PP: 1, MicroBatch: 4, GA: 1}, Servers: servers(4, 4)},
		"no servers":   {Job: j, Plan: perf.Plan{DP: 8, TP: 1, PP: 1, MicroBatch: 2, GA: 1}},
		"heads":        {Job: j, Plan: perf.Plan{DP: 4, TP: 2, PP: 1, MicroBatch: 4, GA: 1}, Servers: servers(4, 4)},
		"dup server":   {Job: j, Plan: perf.Plan{DP: 8, TP: 1, PP: 1, MicroBatch: 2, GA: 1}, Servers: append(servers(4), servers(4)...)},
		"tp spans two": {Job: job(t, jobspec.DeepSpeed, "llama7b", 8), Plan: perf.Plan{DP: 1, TP: 4, PP: 1, MicroBatch: 8, GA: 1}, Servers: servers(2, 2)},
	} {
		if _, err := Render(in); err == nil {
			t.Errorf("%s: rendered", name)
		}
	}
}

func TestReconfigureSteps(t *testing.T) {
	j := job(t, jobspec.DeepSpeed, "llama7b", 16)
	old := Input{Job: j, Plan: perf.Plan{DP: 8, TP: 1, PP: 1, MicroBatch: 2, GA: 1, ZeRO: 2}, Servers: servers(4, 4)}
	next := Input{Job: j, Plan: perf.Plan{DP: 4, TP: 1, PP: 1, MicroBatch: 2, GA: 2, ZeRO: 2}, Servers: servers(4)}
	steps, err := Reconfigure(old, next, 120)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []StepKind
	for _, s := range steps {
		kinds = append(kinds, s.Kind)
	}
	want := []StepKind{StepCheckpoint, StepWaitCheckpoint, StepStop, StepConvert, StepLaunch, StepVerify}
	if !slices.Equal(kinds, want) {
		t.Fatalf("steps %v, want %v", kinds, want)
	}
	l := steps[4].Launch
	if l.Servers[0].Env["REPLAN_RESUME"] != "1" || l.Servers[0].Env["REPLAN_ATTEMPT"] != "1" {
		t.Errorf("relaunch env %v", l.Servers[0].Env)
	}
	cfgPath, _ := flag(l.Servers[0].Argv, "--deepspeed_config")
	var cfg DSConfig
	json.Unmarshal([]byte(l.Servers[0].Files[cfgPath]), &cfg)
	if cfg.TrainBatchSize != 16 || cfg.Checkpoint["load_universal"] != true {
		t.Errorf("relaunch config %+v", cfg)
	}
	// Same DP and ZeRO: no conversion.
	same := Input{Job: j, Plan: perf.Plan{DP: 8, TP: 1, PP: 1, MicroBatch: 1, GA: 2, ZeRO: 2}, Servers: servers(4, 4)}
	steps, _ = Reconfigure(old, same, 10)
	for _, s := range steps {
		if s.Kind == StepConvert {
			t.Error("converted without a DP/ZeRO/TP/PP change")
		}
	}
	// The global batch never changes.
	bad := Input{Job: j, Plan: perf.Plan{DP: 8, TP: 1, PP: 1, MicroBatch: 1, GA: 1, ZeRO: 2}, Servers: servers(4, 4)}
	if _, err := Reconfigure(old, bad, 10); err == nil {
		t.Error("reconfigure changed the global batch")
	}
}

// TestRenderKeepsTheUserSaveInterval: a checkpoint interval in the job's
// own args is the one the script sees: replan renders none after it (it
// rendered --save-interval 1000 after the user's args, and argparse keeps
// the last). Without one, replan's chosen interval is rendered; both are
// in REPLAN_SAVE_INTERVAL.
func TestRenderKeepsTheUserSaveInterval(t *testing.T) {
	p := perf.Plan{DP: 2, TP: 1, PP: 1, MicroBatch: 2, GA: 4}
	// lastValue is what argparse makes of argv: the last --save-interval
	// or --save_interval given, in either form.
	lastValue := func(argv []string) (string, int) {
		v, n := "", 0
		for i, a := range argv {
			for _, f := range []string{"--save-interval", "--save_interval"} {
				if a == f && i+1 < len(argv) {
					v, n = argv[i+1], n+1
				} else if rest, ok := strings.CutPrefix(a, f+"="); ok {
					v, n = rest, n+1
				}
			}
		}
		return v, n
	}
	for _, own := range [][]string{{"--save-interval", "50"}, {"--save-interval=50"}, {"--save_interval", "50"}} {
		j := job(t, jobspec.Megatron, "gpt2", 16)
		j.Args = append(j.Args, own...)
		r, err := Render(Input{Job: j, Plan: p, Servers: servers(2), SaveInterval: 7})
		if err != nil {
			t.Fatal(err)
		}
		a := r.Servers[0].Argv
		if v, n := lastValue(a); v != "50" || n != 1 {
			t.Errorf("args %v: the script's interval is %q (%d given), want the user's 50 only: %v", own, v, n, a)
		}
		if e := r.Servers[0].Env["REPLAN_SAVE_INTERVAL"]; e != "50" {
			t.Errorf("args %v: REPLAN_SAVE_INTERVAL %q, want 50", own, e)
		}
	}
	j := job(t, jobspec.Megatron, "gpt2", 16)
	r, err := Render(Input{Job: j, Plan: p, Servers: servers(2), SaveInterval: 7})
	if err != nil {
		t.Fatal(err)
	}
	if v, n := lastValue(r.Servers[0].Argv); v != "7" || n != 1 || r.Servers[0].Env["REPLAN_SAVE_INTERVAL"] != "7" {
		t.Errorf("replan's interval 7: argv gives %q (%d times), env %q", v, n, r.Servers[0].Env["REPLAN_SAVE_INTERVAL"])
	}
	if r, _ := Render(Input{Job: j, Plan: p, Servers: servers(2)}); r.Servers[0].Env["REPLAN_SAVE_INTERVAL"] != strconv.Itoa(OfflineSaveInterval) {
		t.Errorf("no interval chosen: env %q, want Megatron's default", r.Servers[0].Env["REPLAN_SAVE_INTERVAL"])
	}
	// DeepSpeed scripts get it in the environment only (their flags are
	// their own), the user's when their args give one.
	ds := job(t, jobspec.DeepSpeed, "gpt2", 16)
	r, err = Render(Input{Job: ds, Plan: p, Servers: servers(2), SaveInterval: 7})
	if err != nil {
		t.Fatal(err)
	}
	if _, n := lastValue(r.Servers[0].Argv); n != 0 || r.Servers[0].Env["REPLAN_SAVE_INTERVAL"] != "7" {
		t.Errorf("deepspeed: %d interval flags rendered, env %q; want none and 7", n, r.Servers[0].Env["REPLAN_SAVE_INTERVAL"])
	}
	ds.Args = append(ds.Args, "--save_steps=20")
	if r, _ := Render(Input{Job: ds, Plan: p, Servers: servers(2), SaveInterval: 7}); r.Servers[0].Env["REPLAN_SAVE_INTERVAL"] != "20" {
		t.Errorf("deepspeed with --save_steps=20: env %q, want 20", r.Servers[0].Env["REPLAN_SAVE_INTERVAL"])
	}
	if n, ok := UserSaveInterval([]string{"--save-interval", "x"}); !ok || n != 0 {
		t.Errorf("a non-numeric interval: %d %v, want 0 true", n, ok)
	}
}
