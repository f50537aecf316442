// Package launch turns a scheduling decision into exactly what runs on each
// server: the DeepSpeed or torchrun (Megatron) command line, its
// environment, and the files it reads (ds_config.json, hostfile). It also
// spells out the reconfiguration sequence (checkpoint, stop, convert,
// relaunch, verify) as explicit steps for an executor to carry out.
//
// It is pure: a decision in, commands and file contents out. It never talks
// to servers; control/ does, through ssh/ and the agent.
package launch

import (
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"sort"
	"strconv"
	"strings"

	"github.com/replan/replan/jobspec"
	"github.com/replan/replan/perf"
)

// Server is one server of a placement: where it is and which of its GPUs
// and CPU cores the job gets.
type Server struct {
	Name    string `json:"name"`
	Address string `json:"address"`
	GPUs    []int  `json:"gpus"` // device indices
	CPUs    []int  `json:"cpus"` // core ids
}

// Input is a decision to render.
type Input struct {
	Job     *jobspec.Spec
	Plan    perf.Plan
	Servers []Server // rank order: the first is the master
	// UsedPorts are ports other jobs hold, per server name; the master port
	// is the lowest free port from BasePort up.
	UsedPorts map[string][]int
	// Attempt numbers launches of this job (0 for the first); generated
	// files go to RunDir/attempt-N.
	Attempt int
	// RunDir holds generated files on every server; default
	// <checkpoint_dir>/.replan.
	RunDir string
	// Resume loads the latest checkpoint; Universal loads it through
	// DeepSpeed's universal checkpoint (after ds_to_universal).
	Resume, Universal bool
	// SaveInterval is the periodic checkpoint interval in iterations that
	// replan chose (perf.SaveInterval); 0: OfflineSaveInterval. An
	// interval in the job's own args (UserSaveInterval) always wins: it is
	// rendered as the user wrote it and replan adds none.
	SaveInterval int
}

// BasePort is the first master port tried.
const BasePort = 29500

// ServerLaunch is what runs on one server.
type ServerLaunch struct {
	Server string            `json:"server"`
	Argv   []string          `json:"argv"`
	Env    map[string]string `json:"env"`
	Dir    string            `json:"dir"`
	CPUs   []int             `json:"cpus,omitempty"`
	Files  map[string]string `json:"files"` // absolute path → content
}

// Rendered is a whole job's launch.
type Rendered struct {
	Servers    []ServerLaunch `json:"servers"`
	MasterAddr string         `json:"master_addr"`
	MasterPort int            `json:"master_port"`
	RunDir     string         `json:"run_dir"`
}

// Render renders in. It checks that the plan is valid for the job's model
// on this placement and that the framework can run it.
func Render(in Input) (Rendered, error) {
	j := in.Job
	if j == nil {
		return Rendered{}, errors.New("render: no job")
	}
	if len(in.Servers) == 0 {
		return Rendered{}, fmt.Errorf("render %s: no servers", j.Name)
	}
	pl := make(perf.Placement, len(in.Servers))
	seen := map[string]bool{}
	for i, s := range in.Servers {
		if s.Name == "" || s.Address == "" {
			return Rendered{}, fmt.Errorf("render %s: server %d: name and address required", j.Name, i)
		}
		if seen[s.Name] {
			return Rendered{}, fmt.Errorf("render %s: server %s twice", j.Name, s.Name)
		}
		seen[s.Name] = true
		if len(s.GPUs) == 0 {
			return Rendered{}, fmt.Errorf("render %s: server %s: no GPUs", j.Name, s.Name)
		}
		pl[i] = len(s.GPUs)
	}
	arch := j.Arch
	arch.GlobalBatch = j.GlobalBatch
	if err := perf.Check(arch, in.Plan, pl); err != nil {
		return Rendered{}, fmt.Errorf("render %s: plan %s on %s: %w", j.Name, in.Plan, pl, err)
	}
	if j.Framework == jobspec.Megatron {
		if err := CheckMegatronArgs(j.Arch, j.Args); err != nil {
			return Rendered{}, fmt.Errorf("render %s: %w", j.Name, err)
		}
		if in.Plan.ZeRO > 1 || in.Plan.Offload {
			return Rendered{}, fmt.Errorf("render %s: megatron runs ZeRO-0/1 without offload, plan is %s", j.Name, in.Plan)
		}
		for _, g := range pl {
			if g != pl[0] {
				return Rendered{}, fmt.Errorf("render %s: torchrun needs the same GPU count on every server, placement is %s", j.Name, pl)
			}
		}
	}
	runDir := in.RunDir
	if runDir == "" {
		runDir = path.Join(j.CheckpointDir, ".replan")
	}
	runDir = path.Join(runDir, "attempt-"+strconv.Itoa(in.Attempt))
	master := in.Servers[0]
	port := freePort(in.UsedPorts[master.Name])
	out := Rendered{MasterAddr: master.Address, MasterPort: port, RunDir: runDir}
	for rank, s := range in.Servers {
		var sl ServerLaunch
		switch j.Framework {
		case jobspec.Megatron:
			sl = megatron(in, rank, s, port)
		default:
			sl = deepSpeed(in, rank, s, port, runDir)
		}
		sl.Server, sl.Dir, sl.CPUs = s.Name, j.WorkDir, append([]int(nil), s.CPUs...)
		sl.Env = env(in, s, port, sl.Env)
		out.Servers = append(out.Servers, sl)
	}
	return out, nil
}

// freePort is the lowest port from BasePort not in used.
func freePort(used []int) int {
	taken := map[int]bool{}
	for _, p := range used {
		taken[p] = true
	}
	p := BasePort
	for taken[p] {
		p++
	}
	return p
}

func itoa(i int) string { return strconv.Itoa(i) }

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = itoa(x)
	}
	return strings.Join(s, ",")
}

// env is the environment of one server's launcher: the job's own, then
// what replan sets (which wins).
func env(in Input, s Server, port int, extra map[string]string) map[string]string {
	j := in.Job
	e := map[string]string{}
	for k, v := range j.Env {
		e[k] = v
	}
	for k, v := range extra {
		e[k] = v
	}
	e["CUDA_VISIBLE_DEVICES"] = joinInts(s.GPUs)
	threads := 1
	if len(s.GPUs) > 0 && len(s.CPUs) >= len(s.GPUs) {
		threads = len(s.CPUs) / len(s.GPUs)
	}
	e["OMP_NUM_THREADS"] = itoa(threads)
	if in.Plan.TP > 1 {
		e["CUDA_DEVICE_MAX_CONNECTIONS"] = "1"
	}
	// replan measures jobs from their log lines: Python must not hold
	// them in an 8 KiB block buffer because stdout is a file (torchrun's
	// --tee copier never flushes; a print() in a training script neither).
	e["PYTHONUNBUFFERED"] = "1"
	e["MASTER_ADDR"] = in.Servers[0].Address
	e["MASTER_PORT"] = itoa(port)
	e["REPLAN_JOB"] = j.Name
	e["REPLAN_ATTEMPT"] = itoa(in.Attempt)
	e["REPLAN_CHECKPOINT_DIR"] = j.CheckpointDir
	e["REPLAN_ITERATIONS"] = itoa(j.Iterations)
	// The checkpoint interval in force, for scripts that take it from
	// the environment: the job's own when its args give one.
	if n := SaveIntervalOf(in); n > 0 {
		e["REPLAN_SAVE_INTERVAL"] = itoa(n)
	}
	if in.Resume {
		e["REPLAN_RESUME"] = "1"
	}
	return e
}

// DSConfig is the ds_config.json replan generates.
type DSConfig struct {
	TrainBatchSize     int            `json:"train_batch_size"`
	MicroBatchPerGPU   int            `json:"train_micro_batch_size_per_gpu"`
	GradAccumSteps     int            `json:"gradient_accumulation_steps"`
	StepsPerPrint      int            `json:"steps_per_print"`
	WallClockBreakdown bool           `json:"wall_clock_breakdown"`
	BF16               map[string]any `json:"bf16"`
	ZeRO               map[string]any `json:"zero_optimization"`
	ActivationCkpt     map[string]any `json:"activation_checkpointing,omitempty"`
	Checkpoint         map[string]any `json:"checkpoint,omitempty"`
	GradientClipping   float64        `json:"gradient_clipping"`
}

// dsConfig renders ds_config.json for plan p of job j.
func dsConfig(in Input) DSConfig {
	p := in.Plan
	c := DSConfig{
		TrainBatchSize:   p.MicroBatch * p.GA * p.DP,
		MicroBatchPerGPU: p.MicroBatch,
		GradAccumSteps:   p.GA,
		StepsPerPrint:    1,
		BF16:             map[string]any{"enabled": true},
		GradientClipping: 1.0,
	}
	z := map[string]any{"stage": p.ZeRO}
	if p.ZeRO > 0 {
		z["overlap_comm"] = true
		z["contiguous_gradients"] = true
	}
	if p.Offload {
		z["offload_optimizer"] = map[string]any{"device": "cpu", "pin_memory": true}
	}
	c.ZeRO = z
	if p.Ckpt {
		c.ActivationCkpt = map[string]any{"partition_activations": p.TP > 1, "contiguous_memory_optimization": false, "cpu_checkpointing": false}
	}
	if in.Universal {
		c.Checkpoint = map[string]any{"load_universal": true}
	}
	return c
}

func deepSpeed(in Input, rank int, s Server, port int, runDir string) ServerLaunch {
	j, p := in.Job, in.Plan
	cfgPath := path.Join(runDir, "ds_config.json")
	hostPath := path.Join(runDir, "hostfile")
	cfg, _ := json.MarshalIndent(dsConfig(in), "", "  ")
	var hosts, include []string
	for _, srv := range in.Servers {
		hosts = append(hosts, fmt.Sprintf("%s slots=%d", srv.Name, len(srv.GPUs)))
		include = append(include, srv.Name+":"+joinInts(srv.GPUs))
	}
	argv := []string{"deepspeed", "--no_ssh",
		"--node_rank", itoa(rank),
		"--master_addr", in.Servers[0].Address,
		"--master_port", itoa(port),
		"--hostfile", hostPath,
		"--include", strings.Join(include, "@"),
		j.Entrypoint}
	argv = append(argv, j.Args...)
	argv = append(argv, "--deepspeed", "--deepspeed_config", cfgPath)
	// Megatron-DeepSpeed reads the model-parallel sizes as flags; plain
	// DeepSpeed scripts get plans with TP = PP = 1 (pin the plan otherwise).
	if p.TP > 1 {
		argv = append(argv, "--tensor-model-parallel-size", itoa(p.TP))
	}
	if p.PP > 1 {
		argv = append(argv, "--pipeline-model-parallel-size", itoa(p.PP))
	}
	if p.Ckpt {
		argv = append(argv, "--checkpoint-activations")
	}
	return ServerLaunch{
		Argv:  argv,
		Files: map[string]string{cfgPath: string(cfg) + "\n", hostPath: strings.Join(hosts, "\n") + "\n"},
	}
}

// OfflineSaveInterval is the periodic checkpoint interval rendered for a
// Megatron job when nothing chose one: `replan launch render` and `replan
// launch` outside the daemon, which has no model, cost or failure rate to
// compute it from (Input.SaveInterval 0). The daemon always passes the
// interval it computed (perf.SaveInterval, Young/Daly), and a job's own
// flag always wins. Reconfiguration does not wait for it (SIGTERM saves at
// once with --exit-signal-handler).
const OfflineSaveInterval = 1000

// SaveIntervalFlags are the flags by which a job's args set its own
// checkpoint interval: Megatron-LM's and Megatron-DeepSpeed's
// --save-interval, its underscore spelling (argparse scripts of
// DeepSpeed's examples), and the Hugging Face Trainer's --save_steps.
var SaveIntervalFlags = []string{"--save-interval", "--save_interval", "--save-steps", "--save_steps"}

// UserSaveInterval is the checkpoint interval the job's args give
// (SaveIntervalFlags, as "--flag N" or "--flag=N", the last one winning as
// in argparse): ok is false when they give none. n is 0 when the value is
// not a positive integer (the script's own parser will say so).
func UserSaveInterval(args []string) (n int, ok bool) {
	for i, a := range args {
		for _, f := range SaveIntervalFlags {
			v, found := "", false
			if a == f {
				found = true
				if i+1 < len(args) {
					v = args[i+1]
				}
			} else if rest, cut := strings.CutPrefix(a, f+"="); cut {
				v, found = rest, true
			}
			if found {
				ok = true
				n = 0
				if x, err := strconv.Atoi(v); err == nil && x > 0 {
					n = x
				}
			}
		}
	}
	return n, ok
}

// SaveIntervalOf is the checkpoint interval in force for in: the job's
// own (UserSaveInterval), else in.SaveInterval, else, for Megatron,
// OfflineSaveInterval; 0 when none is known.
func SaveIntervalOf(in Input) int {
	if n, ok := UserSaveInterval(in.Job.Args); ok {
		return n
	}
	if in.SaveInterval > 0 {
		return in.SaveInterval
	}
	if in.Job.Framework == jobspec.Megatron {
		return OfflineSaveInterval
	}
	return 0
}

// TorchrunFlags are the flags replan gives torchrun, in the underscore
// forms every torch from 1.13 on accepts (1.13's torchrun knows no
// hyphenated --nproc-per-node, --node-rank, --master-addr, --master-port).
var TorchrunFlags = []string{"--nnodes", "--nproc_per_node", "--node_rank", "--master_addr", "--master_port"}

func megatron(in Input, rank int, s Server, port int) ServerLaunch {
	j, p := in.Job, in.Plan
	argv := []string{"torchrun",
		"--nnodes", itoa(len(in.Servers)),
		"--nproc_per_node", itoa(len(s.GPUs)),
		"--node_rank", itoa(rank),
		"--master_addr", in.Servers[0].Address,
		"--master_port", itoa(port),
		// torch 1.13's torchrun on Python >= 3.11 (Debian 12's) crashes
		// parsing the default "0" of --redirects and --tee (Std.from_str
		// iterates an IntFlag, which no longer yields NONE): give values
		// that parse everywhere. Workers' stdout goes to a per-rank file
		// and is copied to torchrun's stdout as "[default<rank>]:<line>".
		"--redirects", "1",
		"--tee", "1",
		j.Entrypoint}
	argv = append(argv, j.Args...)
	argv = append(argv, megatronArchArgs(j.Arch, j.Args)...)
	argv = append(argv,
		"--tensor-model-parallel-size", itoa(p.TP),
		"--pipeline-model-parallel-size", itoa(p.PP),
		"--micro-batch-size", itoa(p.MicroBatch),
		"--global-batch-size", itoa(j.GlobalBatch),
		"--train-iters", itoa(j.Iterations),
		"--save", j.CheckpointDir,
		"--load", j.CheckpointDir)
	// The user's own interval is in their args already; replan's would
	// come after it and win (argparse keeps the last).
	if _, own := UserSaveInterval(j.Args); !own {
		argv = append(argv, "--save-interval", itoa(SaveIntervalOf(in)))
	}
	argv = append(argv,
		"--ckpt-format", "torch_dist", // resharded on load when TP/PP/DP change
		"--exit-signal-handler",
		"--log-interval", "1",
		"--bf16")
	if p.Ckpt {
		argv = append(argv, "--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1")
	}
	if p.ZeRO == 1 {
		argv = append(argv, "--use-distributed-optimizer")
	}
	return ServerLaunch{Argv: argv, Files: map[string]string{}}
}

// SortedEnv lists an environment as KEY=VALUE lines in key order.
func SortedEnv(e map[string]string) []string {
	keys := make([]string, 0, len(e))
	for k := range e {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = k + "=" + e[k]
	}
	return out
}
