package control_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/replan/replan/agent"
	"github.com/replan/replan/cluster"
	"github.com/replan/replan/control"
	"github.com/replan/replan/fleet"
	"github.com/replan/replan/internal/sshtest"
	"github.com/replan/replan/internal/waitfor"
	"github.com/replan/replan/jobspec"
	"github.com/replan/replan/launch"
	"github.com/replan/replan/perf"
	"github.com/replan/replan/sched"
	"github.com/replan/replan/ssh"
)

// TestMain lets the test binary run as the daemon of the end-to-end test
// (REPLAN_SSHEXEC_DAEMON names its configuration), so the test can kill
// it with SIGKILL like the real thing.
func TestMain(m *testing.M) {
	if cfg := os.Getenv("REPLAN_SSHEXEC_DAEMON"); cfg != "" {
		if err := runTestDaemon(cfg); err != nil {
			fmt.Fprintln(os.Stderr, "test daemon:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// testDaemonConfig is what the daemon subprocess runs with.
type testDaemonConfig struct {
	Inventory string `json:"inventory"`
	RemoteDir string `json:"remote_dir"`
	DB        string `json:"db"`
	Socket    string `json:"socket"`
	// Policy is the scheduling policy by name (sched.NewWithRestartCost,
	// a restart priced at 5 s): "" is morphling.
	Policy string `json:"policy,omitempty"`
	// Forwards are profiled forward passes of model types on the test
	// hosts' devices, by model name: the daemon's starting model of such a
	// type is perf.DefaultModel with this Forward (what `replan daemon
	// --data` gives it for the profiled Morphling models); other types get
	// perf.DefaultModel.
	Forwards map[string]perf.Forward `json:"forwards,omitempty"`
	// WaitTimeoutS is the SSH executor's WaitTimeout in seconds (0: 60).
	WaitTimeoutS int `json:"wait_timeout_s,omitempty"`
	// LeaseMS and CallTimeoutMS, when set, are the SSH executor's Lease
	// and CallTimeout (the outage test's short ones).
	LeaseMS       int `json:"lease_ms,omitempty"`
	CallTimeoutMS int `json:"call_timeout_ms,omitempty"`
	// Profile is the daemon's profiling on arrival (off when nil).
	Profile *control.ProfileOptions `json:"profile,omitempty"`
	// Faults: the agent binary and fake GPUs the daemon redeploys with
	// (none: no redeploys), its redeploy bounds, and the hang bound
	// (faults_e2e_test.go).
	AgentBinary       string  `json:"agent_binary,omitempty"`
	AgentFakeGPUs     string  `json:"agent_fake_gpus,omitempty"`
	RedeployTries     int     `json:"redeploy_tries,omitempty"`
	RedeployBackoffMS int     `json:"redeploy_backoff_ms,omitempty"`
	HangFactor        float64 `json:"hang_factor,omitempty"`
	HangFloorMS       int     `json:"hang_floor_ms,omitempty"`
}

// runTestDaemon is `replan daemon --executor ssh` in miniature: the SSH
// executor over a fleet, the policy it names (morphling by default), a
// short tick, the API on a unix socket. It runs until killed.
func runTestDaemon(path string) error {
	ctx := context.Background()
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var cfg testDaemonConfig
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	inv, err := cluster.Load(cfg.Inventory)
	if err != nil {
		return err
	}
	pool, err := ssh.NewPool(ssh.FromInventory(inv, log))
	if err != nil {
		return err
	}
	defer pool.Close()
	fl := fleet.New(pool, fleet.Options{RemoteDir: cfg.RemoteDir, Logger: log})
	wait := 60 * time.Second
	if cfg.WaitTimeoutS > 0 {
		wait = time.Duration(cfg.WaitTimeoutS) * time.Second
	}
	call := 10 * time.Second
	if cfg.CallTimeoutMS > 0 {
		call = time.Duration(cfg.CallTimeoutMS) * time.Millisecond
	}
	var deploy *fleet.DeployOptions
	if cfg.AgentBinary != "" {
		deploy = &fleet.DeployOptions{AgentBinary: cfg.AgentBinary, FakeGPUs: cfg.AgentFakeGPUs}
	}
	ex, err := control.NewSSHExecutor(fl, inv.Servers, control.SSHOptions{Logger: log, StopGrace: 10 * time.Second, KillGrace: 2 * time.Second,
		WaitTimeout: wait, Poll: 100 * time.Millisecond, CallTimeout: call, NoCPUBinding: true, Lease: time.Duration(cfg.LeaseMS) * time.Millisecond, Deploy: deploy})
	if err != nil {
		return err
	}
	st, err := control.OpenSQLite(ctx, cfg.DB)
	if err != nil {
		return err
	}
	defer st.Close()
	name := cfg.Policy
	if name == "" {
		name = "morphling"
	}
	policy, err := sched.NewWithRestartCost(name, 5)
	if err != nil {
		return err
	}
	model := func(a perf.Arch) perf.Model {
		m := perf.DefaultModel(a, perf.A800)
		if f, ok := cfg.Forwards[a.Name]; ok {
			m.Forward = f
		}
		return m
	}
	var servers []control.ServerInfo
	for _, s := range inv.Servers {
		servers = append(servers, control.ServerInfo{Name: s.Name, Address: s.Address, Rack: s.Rack, GPUs: s.GPUs, CPUs: s.CPUCores, MemGB: float64(s.HostMemoryGB)})
	}
	var tenants []control.TenantInfo
	for _, t := range inv.Tenants {
		tenants = append(tenants, control.TenantInfo{Name: t.Name, QuotaGPUs: t.GPUQuota})
	}
	cc := control.Config{Store: st, Exec: ex, Policy: policy, Servers: servers, Tenants: tenants, Model: model, Logger: log, ProgressEvery: 200 * time.Millisecond, Background: true}
	if cfg.Profile != nil {
		cc.Profile = *cfg.Profile
	}
	cc.Redeploy = control.RedeployOptions{Tries: cfg.RedeployTries, Backoff: time.Duration(cfg.RedeployBackoffMS) * time.Millisecond}
	cc.HangFactor, cc.HangFloor = cfg.HangFactor, time.Duration(cfg.HangFloorMS)*time.Millisecond
	d, err := control.New(ctx, cc)
	if err != nil {
		return err
	}
	l, err := control.ListenUnix(cfg.Socket)
	if err != nil {
		return err
	}
	api := &control.API{D: d, Version: "e2e"}
	go control.Serve(ctx, l, api.Handler())
	return d.Run(ctx, 200*time.Millisecond)
}

// Scripts of the fake training stack. deepspeed and torchrun skip their
// own flags and run the entrypoint (node rank exported); python only
// knows ds_to_universal (it creates the output folder); the trainer
// behaves like a DeepSpeed job under replan's contract and keeps a trail
// of where each launch started and what it saved.
const (
	fakeDeepSpeed = `#!/bin/sh
while [ $# -gt 0 ]; do
	case "$1" in
	--no_ssh) shift ;;
	--node_rank) export REPLAN_NODE_RANK="$2"; shift 2 ;;
	--*) shift 2 ;;
	*) break ;;
	esac
done
entry="$1"; shift
exec sh "$entry" "$@"
`
	fakeTorchrun = `#!/bin/sh
while [ $# -gt 0 ]; do
	case "$1" in
	--node-rank) export REPLAN_NODE_RANK="$2"; shift 2 ;;
	--*) shift 2 ;;
	*) break ;;
	esac
done
entry="$1"; shift
exec sh "$entry" "$@"
`
	fakePython = `#!/bin/sh
case "$*" in *ds_to_universal*) ;; *) echo "fake python: only ds_to_universal" >&2; exit 2 ;; esac
out=""
while [ $# -gt 0 ]; do
	if [ "$1" = --output_folder ]; then out="$2"; fi
	shift
done
mkdir -p "$out" && echo "converted into $out"
`
	fakeTrainer = `#!/bin/sh
ckpt="$REPLAN_CHECKPOINT_DIR"
rank="${REPLAN_NODE_RANK:-0}"
it=0
if [ "$REPLAN_RESUME" = 1 ] && [ -f "$ckpt/latest" ]; then it=$(cat "$ckpt/latest"); fi
if [ "$rank" = 0 ]; then echo "start $REPLAN_ATTEMPT $it" >> "$ckpt/trail"; fi
save() {
	if [ "$rank" = 0 ]; then
		echo "saving $REPLAN_ATTEMPT $it" >> "$ckpt/trail"
		echo "$it" > "$ckpt/latest.tmp" && mv "$ckpt/latest.tmp" "$ckpt/latest"
		echo "save $REPLAN_ATTEMPT $it" >> "$ckpt/trail"
	fi
}
trap 'save; exit 0' TERM
while [ "$it" -lt "$REPLAN_ITERATIONS" ]; do
	it=$((it + 1))
	echo "[Rank 0] epoch=0/micro_step=$it/global_step=$it, RunningAvgSamplesPerSec=20.0, CurrSamplesPerSec=20.0"
	sleep 0.05
done
save
`
)

// TestSSHExecutorEndToEnd runs the control plane against real agents on
// three sshd hosts (network namespaces where possible): three jobs start
// through the rendered deepspeed command line, a fourth (guaranteed) job
// makes the morphling policy shrink or preempt one of them, the daemon is
// killed with SIGKILL while jobs run, a new daemon adopts them, and every
// job finishes with its iterations continuing across each restart.
func TestSSHExecutorEndToEnd(t *testing.T) {
	c := newTestCluster(t)
	ctx, tmp, began, invPath, remoteDir, jobSpec := c.ctx, c.tmp, c.began, c.invPath, c.remoteDir, c.jobSpec
	netns := c.netns

	// The daemon, as a subprocess.
	cfg := testDaemonConfig{Inventory: invPath, RemoteDir: remoteDir, DB: filepath.Join(tmp, "replan.db"), Socket: filepath.Join(tmp, "replan.sock")}
	startDaemon, client, daemonLog := startTestDaemon(t, ctx, tmp, cfg)
	t.Cleanup(func() {
		b, _ := os.ReadFile(daemonLog)
		if t.Failed() {
			t.Logf("daemon log:\n%s", tail(string(b), 60))
			return
		}
		// The reconfiguration's steps and anything that went wrong.
		for _, l := range strings.Split(string(b), "\n") {
			if strings.Contains(l, "msg=reconfigure") || strings.Contains(l, "converted") || strings.Contains(l, "level=WARN") || strings.Contains(l, "level=ERROR") || strings.Contains(l, "msg=adopted") {
				t.Log("daemon: " + l)
			}
		}
	})
	// The first three jobs are in the store before the daemon starts, so
	// its first round places all of them (submitted one by one, a quick
	// first round could grow the first job into GPUs that are idle then).
	const total = 400
	var ids []string
	st, err := control.OpenSQLite(ctx, cfg.DB)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"one", "two", "three"} {
		spec, err := jobspec.Parse(n+".yaml", jobSpec(n, "best-effort", 8, total), nil)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := json.Marshal(spec)
		id, err := st.NextJobID(ctx)
		if err != nil {
			t.Fatal(err)
		}
		rec := control.JobRecord{ID: id, Name: spec.Name, Tenant: spec.Tenant, Class: string(spec.Class), Spec: raw, State: control.StateQueued, SubmittedAt: time.Now().UTC(), Version: 1}
		if err := st.CreateJob(ctx, rec); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	d := startDaemon()
	submit := func(name, class string, gpus, iterations int) string {
		r, err := client.Submit(ctx, name+".yaml", jobSpec(name, class, gpus, iterations))
		if err != nil {
			t.Fatalf("submit %s: %v", name, err)
		}
		return r.ID
	}
	names := map[string]string{ids[0]: "one", ids[1]: "two", ids[2]: "three"}
	job := func(id string) control.JobRecord {
		detail, err := client.Job(ctx, id)
		if err != nil {
			t.Fatalf("job %s: %v", id, err)
		}
		return detail.Job
	}
	poll(t, ctx, "three jobs running and making progress", 60*time.Second, func() error {
		for _, id := range ids {
			if r := job(id); r.State != control.StateRunning || r.Iterations < 20 {
				return fmt.Errorf("%s: %s at %d iterations (%s)", id, r.State, r.Iterations, r.Reason)
			}
		}
		return nil
	})
	t.Logf("three jobs running at %s", time.Since(began).Round(time.Millisecond))

	// A guaranteed job arrives: the cluster is full, one job must give
	// way (shrink = reconfigure, or preempt).
	four := submit("four", "guaranteed", 2, total/2)
	ids = append(ids, four)
	names[four] = "four"
	var moved string
	poll(t, ctx, "a reconfigure or preempt decision and the fourth job running", 90*time.Second, func() error {
		for _, id := range ids[:3] {
			for _, dr := range mustDetail(t, ctx, client, id).Decisions {
				if dr.Kind == "reconfigure" || dr.Kind == "preempt" {
					moved = id
				}
			}
		}
		if moved == "" {
			var seen []string
			for _, id := range ids {
				r := job(id)
				seen = append(seen, fmt.Sprintf("%s %s at %d", id, r.State, r.Iterations))
			}
			return fmt.Errorf("no job reconfigured or preempted yet (%s)", strings.Join(seen, ", "))
		}
		if r := job(four); r.State != control.StateRunning {
			return fmt.Errorf("fourth job %s (%s)", r.State, r.Reason)
		}
		return nil
	})
	t.Logf("%s (%s) gave way for the guaranteed job at %s", moved, names[moved], time.Since(began).Round(time.Millisecond))

	// Kill the daemon while jobs run; a new one adopts them.
	poll(t, ctx, "the fourth job making progress", 60*time.Second, func() error {
		if r := job(four); r.Iterations < 10 {
			return fmt.Errorf("%d iterations", r.Iterations)
		}
		return nil
	})
	running := map[string]bool{}
	for _, id := range ids {
		if job(id).State == control.StateRunning {
			running[id] = true
		}
	}
	if err := d.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	d.Wait()
	cut := cutShort(t, daemonLog)
	t.Logf("daemon killed with SIGKILL at %s; running then: %v; between the stop and the launch of a reconfiguration: %v", time.Since(began).Round(time.Millisecond), keys(running), keys(cut))
	startDaemon()

	poll(t, ctx, "every job finished", 90*time.Second, func() error {
		for _, id := range ids {
			if r := job(id); r.State != control.StateFinished {
				return fmt.Errorf("%s: %s at %d iterations (%s)", id, r.State, r.Iterations, r.Reason)
			}
		}
		return nil
	})
	adopted := adoptedJobs(t, ctx, client, cut)
	for id := range running {
		if !adopted[id] && !cut[id] {
			t.Errorf("%s ran when the daemon was killed but was not adopted", id)
		}
	}
	// Iterations continue across every restart: each launch starts where
	// the previous one saved, the last one saved at the end.
	for _, id := range ids {
		r := job(id)
		want := total
		if id == four {
			want = total / 2
		}
		if r.Iterations != want {
			t.Errorf("%s finished at %d iterations, want %d", id, r.Iterations, want)
		}
		trail := readTrail(t, filepath.Join(tmp, "ckpt", names[id], "trail"))
		if err := checkTrail(trail, want); err != nil {
			t.Errorf("%s (%s): %v\ntrail:\n%s", id, names[id], err, strings.Join(trail, "\n"))
		}
		if id == moved && len(trail) < 4 {
			t.Errorf("%s gave way but its trail shows one launch:\n%s", id, strings.Join(trail, "\n"))
		}
	}
	t.Logf("trail of %s: %s", names[moved], strings.Join(readTrail(t, filepath.Join(tmp, "ckpt", names[moved], "trail")), "; "))
	t.Logf("end-to-end (netns %v) took %s", netns, time.Since(began).Round(time.Millisecond))
}

// testCluster is three test hosts with agents deployed, and the fake
// training stack.
type testCluster struct {
	ctx       context.Context
	tmp       string
	began     time.Time
	netns     bool
	invPath   string
	inv       *cluster.Inventory
	remoteDir string
	fl        *fleet.Fleet
	log       *slog.Logger
	binDir    string
	work      string
	trainer   string
	hosts     []testHost // the sshd hosts (the outage test takes them down)
	agentBin  string     // the agent binary deployed
}

// newTestCluster starts three sshd hosts (network namespaces where
// possible), deploys agents with fake 8xA800 GPUs to them and writes the
// fake deepspeed/torchrun/python and the trainer script. It skips in
// -short mode and where sshd is missing.
func newTestCluster(t *testing.T) *testCluster {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end test skipped in -short mode")
	}
	if ok, why := sshtest.Available(); !ok {
		t.Skip(why)
	}
	c := &testCluster{began: time.Now(), tmp: t.TempDir()}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	t.Cleanup(cancel)
	c.ctx = ctx
	c.log = slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	tmp, log := c.tmp, c.log

	agentBin := buildAgent(t, tmp)
	clientKey := sshtest.ClientKey(t)
	hosts, netns := startHosts(t, 3, clientKey)
	c.netns, c.hosts, c.agentBin = netns, hosts, agentBin
	t.Logf("3 test hosts, network namespaces: %v", netns)
	c.remoteDir = filepath.Join(tmp, "{server}")
	var dirs []string
	for _, h := range hosts {
		dirs = append(dirs, fleet.ExpandDir(c.remoteDir, h.Name, "/"))
	}
	t.Cleanup(func() { killLeftovers(dirs) })
	knownHosts := filepath.Join(tmp, "known_hosts")
	for _, h := range hosts {
		h.SSHD.AppendKnownHosts(knownHosts)
	}
	c.invPath = writeInventory(t, tmp, hosts, clientKey, knownHosts)
	inv, err := cluster.Load(c.invPath)
	if err != nil {
		t.Fatal(err)
	}
	c.inv = inv
	pool, err := ssh.NewPool(ssh.FromInventory(inv, log))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pool.Close() })
	c.fl = fleet.New(pool, fleet.Options{RemoteDir: c.remoteDir, Logger: log})
	res, err := c.fl.Deploy(ctx, inv.Servers, fleet.DeployOptions{AgentBinary: agentBin, FakeGPUs: "8xA800"})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Status != fleet.StatusDeployed || r.GPUs != 8 {
			t.Fatalf("deploy %s: %+v", r.Server, r)
		}
	}
	t.Logf("agents deployed at %s", time.Since(c.began).Round(time.Millisecond))

	// The fake training stack.
	c.binDir = filepath.Join(tmp, "bin")
	c.work = filepath.Join(tmp, "work")
	for _, d := range []string{c.binDir, c.work} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, body := range map[string]string{"deepspeed": fakeDeepSpeed, "torchrun": fakeTorchrun, "python": fakePython} {
		if err := os.WriteFile(filepath.Join(c.binDir, name), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	c.trainer = filepath.Join(tmp, "trainer.sh")
	if err := os.WriteFile(c.trainer, []byte(fakeTrainer), 0o755); err != nil {
		t.Fatal(err)
	}
	return c
}

// jobSpec is the YAML of a job running the fake trainer through the fake
// deepspeed, with its own checkpoint directory.
func (c *testCluster) jobSpec(name, class string, gpus, iterations int) []byte {
	ckpt := filepath.Join(c.tmp, "ckpt", name)
	if err := os.MkdirAll(ckpt, 0o755); err != nil {
		panic(err)
	}
	// At most 4 samples per micro-batch: gpt2 with 8 per GPU (dp=2) needs
	// 95 GiB of 80 and admission refuses it.
	mb := min(16/gpus, 4)
	return fmt.Appendf(nil, `version: 1
name: %s
tenant: research
class: %s
model: gpt2
framework: deepspeed
workdir: %s
entrypoint: %s
env: {PATH: "%s:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
global_batch: 16
iterations: %d
checkpoint_dir: %s
request: {gpus: %d, plan: "dp=%d,tp=1,pp=1,mb=%d,ga=%d"}
`, name, class, c.work, c.trainer, c.binDir, iterations, ckpt, gpus, gpus, mb, 16/gpus/mb)
}

func mustDetail(t *testing.T, ctx context.Context, c *control.Client, id string) control.JobDetail {
	t.Helper()
	d, err := c.Job(ctx, id)
	if err != nil {
		t.Fatalf("job %s: %v", id, err)
	}
	return d
}

func readTrail(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("trail: %v", err)
	}
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}

// checkTrail checks a trainer's trail ("start ATTEMPT IT", "saving
// ATTEMPT IT" before a checkpoint is written and "save ATTEMPT IT" after):
// the first launch starts at 0, every later one where the previous one
// last saved, and the last save is the job's end. An attempt killed
// between writing a checkpoint and logging it leaves "saving" without
// "save": the next launch may then start from either checkpoint, as the
// rename that publishes it is atomic (TestOutage's CI run once killed an
// attempt there).
func checkTrail(lines []string, total int) error {
	saved, launches, pending := 0, 0, -1
	for i, l := range lines {
		f := strings.Fields(l)
		if len(f) != 3 {
			return fmt.Errorf("line %d: %q", i+1, l)
		}
		it, err := strconv.Atoi(f[2])
		if err != nil {
			return fmt.Errorf("line %d: %q", i+1, l)
		}
		switch f[0] {
		case "start":
			switch {
			case it == saved:
			case it == pending:
				saved = it
			default:
				return fmt.Errorf("launch %d (attempt %s) started at %d, the last checkpoint was %d", launches+1, f[1], it, saved)
			}
			pending = -1
			launches++
		case "saving":
			if it < saved {
				return fmt.Errorf("line %d: saving %d after %d", i+1, it, saved)
			}
			pending = it
		case "save":
			if it < saved {
				return fmt.Errorf("line %d: saved %d after %d", i+1, it, saved)
			}
			saved, pending = it, -1
		default:
			return fmt.Errorf("line %d: %q", i+1, l)
		}
	}
	if saved != total {
		return fmt.Errorf("last checkpoint %d, want %d", saved, total)
	}
	return nil
}

func atoi(s string) int {
	n, _ := strconv.Atoi(strings.TrimSpace(s))
	return n
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// testHost is one test server (internal/sshtest.StartHosts).
type testHost = sshtest.Host

func startHosts(t *testing.T, n int, clientKey string) ([]testHost, bool) {
	return sshtest.StartHosts(t, n, clientKey, "rp-cx", 7)
}

// writeInventory writes an inventory of the hosts: 8 GPUs and a nominal
// 64 cores each (the executor does not bind cores in this test).
func writeInventory(t *testing.T, dir string, hosts []testHost, clientKey, knownHosts string) string {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "version: 1\ndefaults:\n  user: %s\n  identity_file: %s\n  gpus: 8\n  gpu_memory_gb: 80\n"+
		"  cpu_cores: 64\n  host_memory_gb: 1000\n  nvlink_gbps: 400\n  nic_gbps: 25\n", hosts[0].SSHD.User, clientKey)
	b.WriteString("racks:\n  - {name: r1, spine_gbps: 50}\nservers:\n")
	for _, h := range hosts {
		fmt.Fprintf(&b, "  - {name: %s, address: %s, port: %d, rack: r1}\n", h.Name, h.SSHD.Host, h.SSHD.Port)
	}
	fmt.Fprintf(&b, "tenants:\n  - {name: research, gpu_quota: 16}\n")
	fmt.Fprintf(&b, "ssh:\n  known_hosts: %s\n  connect_timeout: 5s\n  keepalive: 2s\n", knownHosts)
	p := filepath.Join(dir, "inventory.yaml")
	if err := os.WriteFile(p, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// buildAgent builds cmd/replan-agent.
func buildAgent(t *testing.T, dir string) string {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go toolchain not on PATH: cannot build the agent")
	}
	out := filepath.Join(dir, "replan-agent")
	cmd := exec.Command(gobin, "build", "-ldflags", "-X main.version=e2e", "-o", out, "github.com/replan/replan/cmd/replan-agent")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build agent: %v\n%s", err, b)
	}
	return out
}

// killLeftovers stops every agent and supervised process under the
// remote directories, by the PIDs they recorded.
func killLeftovers(dirs []string) {
	for _, d := range dirs {
		recs, _ := filepath.Glob(filepath.Join(d, "agent", "procs", "*", "process.json"))
		for _, r := range recs {
			var p agent.ProcessInfo
			if b, err := os.ReadFile(r); err == nil && json.Unmarshal(b, &p) == nil && p.State == agent.StateRunning && p.PID > 1 {
				_ = syscall.Kill(-p.PID, syscall.SIGKILL)
			}
		}
		if b, err := os.ReadFile(filepath.Join(d, "agent.pid")); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 1 {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
}

// poll calls fn until it returns nil. It waits on progress: timeout is
// how long fn's report (its error) may stay the same; every change
// restarts that window, and the wait is bounded by 20 windows overall and
// by ctx (internal/waitfor). The failure says what was last seen.
func poll(t *testing.T, ctx context.Context, what string, timeout time.Duration, fn func() error) {
	t.Helper()
	waitfor.T(t, ctx, what, waitfor.Options{Stall: timeout}, fn)
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// TestSSHExecutorDirect drives the SSH executor without a daemon: a
// checkpointed stop returns the marker's iteration, a resumed launch over
// two servers continues from it, a second executor adopts it, a
// reconfiguration whose converter is missing fails with a clear error
// after the checkpoint, and a job that exits non-zero is reported so.
func TestSSHExecutorDirect(t *testing.T) {
	c := newTestCluster(t)
	ctx := c.ctx
	opts := control.SSHOptions{Logger: c.log, StopGrace: 10 * time.Second, KillGrace: 2 * time.Second, WaitTimeout: 60 * time.Second, Poll: 100 * time.Millisecond, NoCPUBinding: true}
	ex, err := control.NewSSHExecutor(c.fl, c.inv.Servers, opts)
	if err != nil {
		t.Fatal(err)
	}
	spec, err := jobspec.Parse("five.yaml", c.jobSpec("five", "best-effort", 8, 100000), nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := func(i, gpus int) launch.Server {
		s := c.inv.Servers[i]
		ls := launch.Server{Name: s.Name, Address: s.Address}
		for g := range gpus {
			ls.GPUs = append(ls.GPUs, g)
		}
		return ls
	}
	observe := func(ex *control.SSHExecutor, id string) (control.JobObservation, bool) {
		o, err := ex.Observe(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range o.Nodes {
			if !n.Reachable {
				t.Fatalf("node %s unreachable: %s", n.Name, n.Err)
			}
		}
		for _, j := range o.Jobs {
			if j.JobID == id {
				return j, true
			}
		}
		return control.JobObservation{}, false
	}
	progress := func(ex *control.SSHExecutor, id string, beyond int) int {
		var it int
		poll(t, ctx, fmt.Sprintf("%s beyond iteration %d", id, beyond), 60*time.Second, func() error {
			o, ok := observe(ex, id)
			if !ok || o.Exited || o.Iterations <= beyond || o.SamplesPerSec != 20 {
				return fmt.Errorf("%+v (found %v)", o, ok)
			}
			it = o.Iterations
			return nil
		})
		return it
	}

	l := control.Launch{JobID: "j-900001", Spec: spec, Plan: spec.Request.Plan, Servers: []launch.Server{srv(0, 8)}}
	if err := ex.Start(ctx, l); err != nil {
		t.Fatal(err)
	}
	seen := progress(ex, l.JobID, 10)
	ckpt, err := ex.Stop(ctx, l.JobID, true)
	if err != nil || ckpt < seen {
		t.Fatalf("checkpointed stop: %d, %v (seen %d)", ckpt, err, seen)
	}
	if b, _ := os.ReadFile(launch.CheckpointMarker(spec)); strings.TrimSpace(string(b)) != strconv.Itoa(ckpt) {
		t.Fatalf("marker says %q, stop returned %d", b, ckpt)
	}
	if _, ok := observe(ex, l.JobID); ok {
		t.Fatal("a stopped job is still observed")
	}
	if ok, err := ex.Adopt(ctx, l); ok || err != nil {
		t.Fatalf("adopt a stopped job: %v, %v", ok, err)
	}

	// Resume over two servers: rank 0 on h2, rank 1 on h3.
	l2 := l
	l2.Attempt, l2.Resume, l2.From = 1, true, ckpt
	l2.Servers = []launch.Server{srv(1, 4), srv(2, 4)}
	if err := ex.Start(ctx, l2); err != nil {
		t.Fatal(err)
	}
	progress(ex, l.JobID, ckpt)
	trail := readTrail(t, filepath.Join(c.tmp, "ckpt", "five", "trail"))
	if want := fmt.Sprintf("start 1 %d", ckpt); trail[len(trail)-1] != want {
		t.Fatalf("trail ends %q, want %q", trail[len(trail)-1], want)
	}

	// A new executor (a restarted daemon) adopts it. Its spec names a
	// PATH without the fake python: the conversion a DP change needs
	// fails clearly, after the checkpoint.
	noPython := filepath.Join(c.tmp, "bin-no-python")
	if err := os.MkdirAll(noPython, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(noPython, "deepspeed"), []byte(fakeDeepSpeed), 0o755); err != nil {
		t.Fatal(err)
	}
	spec2 := *spec
	spec2.Env = map[string]string{"PATH": noPython + ":/usr/bin:/bin"}
	l2.Spec = &spec2
	ex2, err := control.NewSSHExecutor(c.fl, c.inv.Servers, opts)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := ex2.Adopt(ctx, l2); !ok || err != nil {
		t.Fatalf("adopt a running job: %v, %v", ok, err)
	}
	last := progress(ex2, l.JobID, ckpt)
	to := l2
	to.Attempt, to.Plan, to.Servers = 2, perf.Plan{DP: 2, TP: 1, PP: 1, MicroBatch: 8, GA: 1}, []launch.Server{srv(0, 2)}
	err = ex2.Reconfigure(ctx, l2, to, last)
	if err == nil || !strings.Contains(err.Error(), "converter is missing") {
		t.Fatalf("reconfigure without a converter: %v", err)
	}
	t.Logf("reconfigure without a converter: %v", err)
	if b, _ := os.ReadFile(launch.CheckpointMarker(spec)); atoi(string(b)) < last {
		t.Errorf("marker %q below the last iteration %d", b, last)
	}
	if _, ok := observe(ex2, l.JobID); ok {
		t.Fatal("the job still runs after a failed reconfiguration")
	}

	// A job that exits 3 is reported with its code and the last lines of
	// its log (issue 28: a failure's reason had no log tail).
	failing := filepath.Join(c.tmp, "fail.sh")
	if err := os.WriteFile(failing, []byte("echo starting\necho 'RuntimeError: CUDA out of memory' >&2\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	spec3 := *spec
	spec3.Name, spec3.Entrypoint = "six", failing
	l3 := control.Launch{JobID: "j-900002", Spec: &spec3, Plan: spec.Request.Plan, Servers: []launch.Server{srv(2, 8)}}
	if err := ex.Start(ctx, l3); err != nil {
		t.Fatal(err)
	}
	poll(t, ctx, "the failing job reported", 60*time.Second, func() error {
		o, ok := observe(ex, l3.JobID)
		if !ok || !o.Exited {
			return fmt.Errorf("%+v", o)
		}
		if o.ExitCode != 3 || !strings.Contains(o.Err, "last lines: ") || !strings.Contains(o.Err, "RuntimeError: CUDA out of memory") {
			t.Fatalf("failing job: %+v", o)
		}
		return nil
	})

	// A launch that resumes at the job's end exits 0 at once, without a
	// step line: it finished, at the checkpoint's iteration.
	spec4, err := jobspec.Parse("seven.yaml", c.jobSpec("seven", "best-effort", 8, 20), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(launch.CheckpointMarker(spec4), []byte("20\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	l4 := control.Launch{JobID: "j-900003", Spec: spec4, Plan: spec4.Request.Plan, Servers: []launch.Server{srv(1, 8)}, Attempt: 4, Resume: true}
	if err := ex.Start(ctx, l4); err != nil {
		t.Fatal(err)
	}
	poll(t, ctx, "the resumed-at-the-end job reported", 60*time.Second, func() error {
		o, ok := observe(ex, l4.JobID)
		if !ok || !o.Exited {
			return fmt.Errorf("%+v", o)
		}
		if o.ExitCode != 0 || o.Iterations != 20 || o.Checkpoint != 20 {
			t.Fatalf("resumed at the end: %+v", o)
		}
		return nil
	})
	t.Logf("direct executor checks (netns %v) took %s", c.netns, time.Since(c.began).Round(time.Millisecond))
}

// startTestDaemon writes cfg beside the test's files and returns a function
// that starts the daemon as a subprocess of this test binary (so it can be
// killed with SIGKILL) and waits until it answers, its client and its log.
func startTestDaemon(t *testing.T, ctx context.Context, tmp string, cfg testDaemonConfig) (start func() *exec.Cmd, client *control.Client, logPath string) {
	t.Helper()
	cfgPath := filepath.Join(tmp, "daemon.json")
	raw, _ := json.Marshal(cfg)
	if err := os.WriteFile(cfgPath, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	logPath = filepath.Join(tmp, "daemon.log")
	client = control.NewUnixClient(cfg.Socket)
	start = func() *exec.Cmd {
		cmd := exec.Command(os.Args[0], "-test.run", "^$")
		cmd.Env = append(os.Environ(), "REPLAN_SSHEXEC_DAEMON="+cfgPath)
		lf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		defer lf.Close()
		cmd.Stdout, cmd.Stderr = lf, lf
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		poll(t, ctx, "the daemon answers", 60*time.Second, func() error {
			_, err := client.Status(ctx)
			return err
		})
		return cmd
	}
	return start, client, logPath
}

// adoptedJobs reads the daemon's events: the jobs a restarted daemon
// adopted; a requeue or a failure is a test error (nothing may be lost).
func adoptedJobs(t *testing.T, ctx context.Context, client *control.Client, cut map[string]bool) map[string]bool {
	t.Helper()
	evs, err := client.Events(ctx, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	adopted := map[string]bool{}
	for _, e := range evs {
		if e.Kind == "adopt" {
			adopted[e.JobID] = true
		}
		if e.Kind == "requeue" && cut[e.JobID] && strings.Contains(e.Msg, "not running after the daemon restarted") {
			t.Logf("event %s %s: %s (its reconfiguration was cut short by the kill)", e.Kind, e.JobID, e.Msg)
			continue
		}
		if e.Kind == "requeue" || e.Kind == "fail" {
			t.Errorf("event %s %s: %s", e.Kind, e.JobID, e.Msg)
		}
	}
	return adopted
}

// cutShort reads the log of a daemon just killed: the jobs it was
// reconfiguring between the stop of the old launch and the start of the
// new one (the last of the job's reconfigure and started lines is a
// reconfigure step before verify). Nothing of such a job runs for a new
// daemon to adopt: it goes back to the queue and resumes from the
// checkpoint the reconfiguration saved.
func cutShort(t *testing.T, logPath string) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	last := map[string]string{}
	for _, l := range strings.Split(string(b), "\n") {
		if !strings.Contains(l, "msg=reconfigure ") && !strings.Contains(l, "msg=started ") {
			continue
		}
		for _, f := range strings.Fields(l) {
			if id, ok := strings.CutPrefix(f, "job="); ok {
				last[id] = l
			}
		}
	}
	cut := map[string]bool{}
	for id, l := range last {
		if strings.Contains(l, "msg=reconfigure ") && !strings.Contains(l, "step=verify") {
			cut[id] = true
		}
	}
	return cut
}

// TestCheckTrail: a launch may start from a checkpoint whose "save" line
// its killed predecessor never wrote, but only from one it began
// ("saving"); any other start is still a lost or invented checkpoint.
func TestCheckTrail(t *testing.T) {
	ok := []string{"start 0 0", "saving 0 25", "save 0 25", "saving 0 50", "start 1 50", "saving 1 75", "save 1 75"}
	if err := checkTrail(ok, 75); err != nil {
		t.Errorf("killed between the rename and its log line: %v", err)
	}
	before := []string{"start 0 0", "saving 0 25", "save 0 25", "saving 0 50", "start 1 25", "saving 1 75", "save 1 75"}
	if err := checkTrail(before, 75); err != nil {
		t.Errorf("killed before the rename: %v", err)
	}
	for _, bad := range [][]string{
		{"start 0 0", "saving 0 25", "save 0 25", "start 1 50", "save 1 75"},
		{"start 0 0", "saving 0 25", "save 0 25", "start 1 0", "save 1 75"},
		{"start 0 0", "saving 0 25", "save 0 25", "saving 0 50", "start 1 75", "saving 1 75", "save 1 75"},
	} {
		if err := checkTrail(bad, 75); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
}

// TestCutShortReadsTheKilledDaemonsLog: a job whose last line is a
// reconfigure step before verify was between its stop and its launch
// when the daemon died (seen in CI: killed right after "step=launch",
// the new launch never started, the job was requeued, not adopted); one
// whose reconfiguration reached verify, or that started since, runs.
func TestCutShortReadsTheKilledDaemonsLog(t *testing.T) {
	log := `time=2026-11-27T15:27:58.100Z level=INFO msg=started job=j-000001 attempt=0 servers=1 master_port=29500 resume=false
time=2026-11-27T15:27:58.200Z level=INFO msg=started job=j-000003 attempt=0 servers=1 master_port=29501 resume=false
time=2026-11-27T15:27:59.282Z level=INFO msg=reconfigure job=j-000003 step=stop detail="stop what is left and confirm every process exited"
time=2026-11-27T15:27:59.335Z level=INFO msg=started job=j-000003 attempt=1 servers=1 master_port=29500 resume=true
time=2026-11-27T15:27:59.335Z level=INFO msg=reconfigure job=j-000003 step=verify detail="the logs must report an iteration beyond 20"
time=2026-11-27T15:28:00.421Z level=INFO msg=reconfigure job=j-000002 step=checkpoint detail="ask every rank to save a checkpoint and exit"
time=2026-11-27T15:28:00.430Z level=INFO msg=reconfigure job=j-000002 step=stop detail="stop what is left and confirm every process exited"
time=2026-11-27T15:28:00.437Z level=INFO msg=reconfigure job=j-000002 step=launch detail="relaunch as DP8·TP1·PP1 mb2 ga1 ZeRO-2 from the checkpoint"
time=2026-11-27T15:28:00.500Z level=INFO msg=reconfigure job=j-000004 step=convert detail="DP 2→4"
time=2026-11-27T15:28:00.600Z level=INFO msg=started job=j-000004 attempt=2 servers=1 master_port=29502 resume=true
`
	p := filepath.Join(t.TempDir(), "daemon.log")
	if err := os.WriteFile(p, []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	got := cutShort(t, p)
	if want := map[string]bool{"j-000002": true}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("cut short: %v, want %v", got, want)
	}
}
