package control_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/replan/replan/agent"
	"github.com/replan/replan/control"
	"github.com/replan/replan/internal/waitfor"
	"github.com/replan/replan/launch"
)

// TestFaultsEndToEnd (issue 26, item 5): faults handled without a person,
// with real torchrun over the sshd test hosts (three, two fake GPUs each)
// and a daemon on the SSH executor (static policy: each job on exactly
// the 2 GPUs of one server it asks for). One cluster, one daemon, the
// cases in order:
//
//   - xid: Xid 79 on one GPU of a running job (written to its agent's
//     fault file, agent.FaultFileName): the GPU is cordoned at the
//     observation after the agent's sample, the job is checkpointed and
//     resumes on another server from that checkpoint, and the job beside
//     it is not touched;
//   - hang: one rank of a job is SIGSTOPped: the job logs no iteration
//     and is restarted from its checkpoint once its spec's hang bound
//     has passed (not before);
//   - reboot: an idle host's agent is killed and its state directory
//     removed, as a reboot leaves it: the daemon redeploys the agent by
//     itself and the host takes a job again.
//
// Each case logs one summary line (`fault e2e: …`), also written to
// $REPLAN_TORCH_E2E_SUMMARY for `make e2e-faults`.
func TestFaultsEndToEnd(t *testing.T) {
	e := beginTorchE2E(t, "make e2e-faults", 8*time.Minute)
	trainer, began, tmp, ctx, log := e.trainer, e.began, e.tmp, e.ctx, e.log
	th := startTorchHosts(t, ctx, tmp, "rp-tf", 31, log)
	t.Logf("3 hosts (network namespaces, routed: %v) with agents at %s", th.netns, time.Since(began).Round(time.Millisecond))
	dirOf := map[string]string{}
	for i, h := range th.hosts {
		dirOf[h.Name] = th.dirs[i]
	}
	work := filepath.Join(tmp, "work")
	if err := os.MkdirAll(work, 0o755); err != nil {
		t.Fatal(err)
	}
	const saveInterval = 5
	// spec is a 2-GPU trainer job on one server; hang adds a spec hang:
	// bound.
	spec := func(name string, iterations int, hang string) (yaml []byte, lossLog string) {
		ckpt := filepath.Join(tmp, "ckpt", name)
		if err := os.MkdirAll(ckpt, 0o755); err != nil {
			t.Fatal(err)
		}
		lossLog = filepath.Join(tmp, "loss-"+name+".txt")
		return fmt.Appendf(nil, `version: 1
name: %s
tenant: research
class: best-effort
model: %s
framework: megatron
workdir: %s
entrypoint: %s
args: [--mock-data, --tokenizer-type, NullTokenizer, --seed, "1234", --lr, "0.003", --save-interval, "%d"]
env: {PATH: "/usr/bin:/bin:/usr/sbin:/sbin", TRAINER_FORWARD_S: %q, TRAINER_LOSS_LOG: %q}
global_batch: 16
iterations: %d
checkpoint_dir: %s
request: {gpus: 2, cpus: 2, plan: "dp=2,tp=1,pp=1,mb=4,ga=2"}
supports: {tp: false, pp: false}
%s`, name, tinyModel, work, trainer, saveInterval, forwardS, lossLog, iterations, ckpt, hang), lossLog
	}

	cfg := testDaemonConfig{Inventory: th.invPath, RemoteDir: th.remoteDir, DB: filepath.Join(tmp, "replan.db"), Socket: filepath.Join(tmp, "replan.sock"), WaitTimeoutS: 120,
		Policy: "static", AgentBinary: th.agentBin, AgentFakeGPUs: "2xA800", RedeployTries: 3, RedeployBackoffMS: 2000}
	startDaemon, client, daemonLog := startTestDaemon(t, ctx, tmp, cfg)
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		b, _ := os.ReadFile(daemonLog)
		t.Logf("daemon log:\n%s", tail(string(b), 80))
		for _, d := range th.dirs {
			logs, _ := filepath.Glob(filepath.Join(d, "agent", "procs", "*", "*.log"))
			for _, l := range logs {
				if c, err := os.ReadFile(l); err == nil {
					t.Logf("%s:\n%s", l, tail(string(c), 10))
				}
			}
		}
	})
	startDaemon()
	trace := waitfor.Options{Stall: 120 * time.Second, Log: func(s string) { t.Logf("%s: %s", time.Since(began).Round(time.Millisecond), s) }}
	placed := func(id string) []launch.Server {
		var pl []launch.Server
		_ = json.Unmarshal(mustDetail(t, ctx, client, id).Job.Placement, &pl)
		return pl
	}
	events := func(kind, node string) []control.Event {
		evs, err := client.Events(ctx, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		var out []control.Event
		for _, e := range evs {
			if e.Kind == kind && (node == "" || e.Node == node) {
				out = append(out, e)
			}
		}
		return out
	}
	running := func(id string, past int) func() error {
		return func() error {
			j := mustDetail(t, ctx, client, id).Job
			if j.State != control.StateRunning || j.Iterations < past {
				return fmt.Errorf("%s: %s at %d iterations, checkpoint %d (%s)", id, j.State, j.Iterations, j.Checkpoint, j.Reason)
			}
			return nil
		}
	}

	// Two jobs, one per server: x (the Xid's) and y (the bystander, then
	// the hang's), the hang bound in y's spec.
	xSpec, xLoss := spec("x", 30, "")
	// The bound also covers a relaunch's silence until its first
	// iteration (torchrun's start: up to 40 s on a loaded 2-core
	// machine), so it is not much shorter than the daemon's default.
	const hangFloor = 45 * time.Second
	ySpec, yLoss := spec("y", 100000, fmt.Sprintf("hang: {factor: 1, floor: %s}\n", hangFloor))
	x, err := client.Submit(ctx, "x.yaml", xSpec)
	if err != nil {
		t.Fatal(err)
	}
	y, err := client.Submit(ctx, "y.yaml", ySpec)
	if err != nil {
		t.Fatal(err)
	}
	waitfor.T(t, ctx, "x past its first checkpoint, y running", trace, func() error {
		if err := running(y.ID, 1)(); err != nil {
			return err
		}
		j := mustDetail(t, ctx, client, x.ID).Job
		if j.State != control.StateRunning || j.Checkpoint < saveInterval || j.Iterations < j.Checkpoint+2 {
			return fmt.Errorf("x: %s at %d iterations, checkpoint %d (%s)", j.State, j.Iterations, j.Checkpoint, j.Reason)
		}
		return nil
	})

	t.Run("xid", func(t *testing.T) {
		xOn, yOn := placed(x.ID), placed(y.ID)
		if len(xOn) != 1 || len(yOn) != 1 || xOn[0].Name == yOn[0].Name {
			t.Fatalf("x on %s, y on %s: want one server each", serverList(xOn), serverList(yOn))
		}
		host, gpu := xOn[0].Name, xOn[0].GPUs[1]
		yBefore := mustDetail(t, ctx, client, y.ID).Job
		fault := filepath.Join(dirOf[host], "agent", agent.FaultFileName)
		if err := os.WriteFile(fault+".tmp", fmt.Appendf(nil, "xid %d 79\n", gpu), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(fault+".tmp", fault); err != nil {
			t.Fatal(err)
		}
		injected := time.Now()
		var cordon control.Event
		waitfor.T(t, ctx, "the GPU cordoned", trace, func() error {
			if evs := events("cordon", host); len(evs) > 0 {
				cordon = evs[0]
				return nil
			}
			return fmt.Errorf("no cordon event on %s yet", host)
		})
		detect := cordon.At.Sub(injected)
		if !strings.Contains(cordon.Msg, fmt.Sprintf("%s GPU %d cordoned: Xid 79", host, gpu)) || !strings.Contains(cordon.Msg, x.ID) {
			t.Errorf("cordon event: %s", cordon.Msg)
		}
		// Within one heartbeat of the agent's sample (1 s) and the
		// daemon's observation (200 ms ticks), with room for a loaded
		// machine.
		if detect > 10*time.Second {
			t.Errorf("cordoned %s after the Xid, want within a heartbeat", detect)
		}
		var xNow control.JobRecord
		waitfor.T(t, ctx, "x running on another server past its checkpoint", trace, func() error {
			xNow = mustDetail(t, ctx, client, x.ID).Job
			pl := placed(x.ID)
			if xNow.State != control.StateRunning || len(pl) != 1 || pl[0].Name == host || xNow.Restarts < 1 || xNow.Iterations < xNow.Checkpoint+2 {
				return fmt.Errorf("x: %s on %s at %d iterations, checkpoint %d, %d restarts (%s)", xNow.State, serverList(pl), xNow.Iterations, xNow.Checkpoint, xNow.Restarts, xNow.Reason)
			}
			return nil
		})
		if xNow.Failures != 0 {
			t.Errorf("x was charged %d failures for its cordoned GPU", xNow.Failures)
		}
		// No other job disturbed: y ran on, same attempt, no restart.
		yNow := mustDetail(t, ctx, client, y.ID).Job
		if yNow.State != control.StateRunning || yNow.Restarts != yBefore.Restarts || yNow.Attempt != yBefore.Attempt || yNow.Iterations <= yBefore.Iterations {
			t.Errorf("y during the Xid: %s, restarts %d → %d, attempt %d → %d, iterations %d → %d", yBefore.State, yBefore.Restarts, yNow.Restarts, yBefore.Attempt, yNow.Attempt, yBefore.Iterations, yNow.Iterations)
		}
		if n := nodeNamed(t, ctx, client, host); len(n.CordonedGPUs) != 1 || n.CordonedGPUs[0].GPU != gpu {
			t.Errorf("%s cordoned GPUs: %+v", host, n.CordonedGPUs)
		}
		resumed, lost, xOnNow := resumedAt(t, th.dirs, x.ID), lostIterations(xLoss), serverList(placed(x.ID))
		if _, err := client.JobOp(ctx, x.ID, "cancel"); err != nil { // it has shown what it had to
			t.Error(err)
		}
		if t.Failed() {
			return
		}
		summary := fmt.Sprintf("fault e2e: xid79 detected in %.1f s, cordoned %s GPU %d, resumed at iteration %d on %s, lost %d, other job undisturbed, ok",
			detect.Seconds(), host, gpu, resumed, xOnNow, lost)
		writeTorchSummary(t, summary)
		t.Log(summary)
	})

	t.Run("hang", func(t *testing.T) {
		j := mustDetail(t, ctx, client, y.ID).Job
		waitfor.T(t, ctx, "y past a checkpoint", trace, func() error {
			j = mustDetail(t, ctx, client, y.ID).Job
			if j.State != control.StateRunning || j.Checkpoint < saveInterval || j.Iterations < j.Checkpoint+2 {
				return fmt.Errorf("y: %s at %d iterations, checkpoint %d", j.State, j.Iterations, j.Checkpoint)
			}
			return nil
		})
		pl := placed(y.ID)
		if len(pl) != 1 {
			t.Fatalf("y on %s", serverList(pl))
		}
		worker := rankWorker(t, dirOf[pl[0].Name], y.ID, 1)
		if err := syscall.Kill(worker, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		stopped := time.Now()
		t.Logf("y's local rank 1 (pid %d on %s) SIGSTOPped at iteration %d", worker, pl[0].Name, j.Iterations)
		var hang control.Event
		waitfor.T(t, ctx, "y found hung", trace, func() error {
			for _, e := range events("hang", "") {
				if e.JobID == y.ID {
					hang = e
					return nil
				}
			}
			return fmt.Errorf("no hang event for y yet (%s at %d)", mustDetail(t, ctx, client, y.ID).Job.State, mustDetail(t, ctx, client, y.ID).Job.Iterations)
		})
		detect := hang.At.Sub(stopped)
		// Silent from its last iteration (before the SIGSTOP): restarted
		// once the bound passed, and within a few heartbeats of it.
		var data struct {
			SilentS float64 `json:"silent_s"`
		}
		_ = json.Unmarshal(hang.Data, &data)
		if data.SilentS < hangFloor.Seconds() || detect > hangFloor+15*time.Second {
			t.Errorf("hang event %.1f s after the SIGSTOP, silent %.1f s: want silent ≥ %s, within the bound and a few heartbeats: %s", detect.Seconds(), data.SilentS, hangFloor, hang.Msg)
		}
		waitfor.T(t, ctx, "y running again past its checkpoint", trace, func() error {
			n := mustDetail(t, ctx, client, y.ID).Job
			if n.State != control.StateRunning || n.Attempt == j.Attempt || n.Iterations < n.Checkpoint+2 || n.Checkpoint < j.Checkpoint {
				return fmt.Errorf("y: %s attempt %d at %d iterations, checkpoint %d (%s)", n.State, n.Attempt, n.Iterations, n.Checkpoint, n.Reason)
			}
			return nil
		})
		resumed, lost := resumedAt(t, th.dirs, y.ID), lostIterations(yLoss)
		if t.Failed() {
			return
		}
		summary := fmt.Sprintf("fault e2e: hang (one rank SIGSTOPped) detected in %.1f s (bound %s, silent %.1f s), resumed at iteration %d, lost %d, ok",
			detect.Seconds(), hangFloor, data.SilentS, resumed, lost)
		writeTorchSummary(t, summary)
		t.Log(summary)
	})

	t.Run("reboot", func(t *testing.T) {
		// The idle host: neither y's nor the one with the cordoned GPU.
		busy := map[string]bool{}
		for _, s := range placed(y.ID) {
			busy[s.Name] = true
		}
		for _, e := range events("cordon", "") {
			busy[e.Node] = true
		}
		host := ""
		for _, h := range th.hosts {
			if !busy[h.Name] {
				host = h.Name
			}
		}
		if host == "" {
			t.Fatalf("no idle host (busy: %v)", busy)
		}
		lost := rebootAgent(t, dirOf[host])
		var back control.Event
		states := map[string]bool{}
		waitfor.T(t, ctx, host+"'s agent redeployed by the daemon", trace, func() error {
			if n := nodeNamed(t, ctx, client, host); n.State != "up" {
				states[n.State] = true
			}
			for _, e := range events("redeploy", host) {
				if !e.At.Before(lost) {
					back = e
					return nil
				}
			}
			n := nodeNamed(t, ctx, client, host)
			return fmt.Errorf("%s: %s %s", host, n.State, n.DownWhy)
		})
		backIn := back.At.Sub(lost)
		var data struct {
			Status    string  `json:"status"`
			DowntimeS float64 `json:"downtime_s"`
		}
		_ = json.Unmarshal(back.Data, &data)
		if data.Status != "deployed" || data.DowntimeS <= 0 {
			t.Errorf("redeploy event %s: %s", back.Data, back.Msg)
		}
		// It takes a job again: the only server with 2 healthy free GPUs.
		zSpec, _ := spec("z", 12, "")
		z, err := client.Submit(ctx, "z.yaml", zSpec)
		if err != nil {
			t.Fatal(err)
		}
		defer client.JobOp(ctx, z.ID, "cancel")
		waitfor.T(t, ctx, "z running on "+host, trace, func() error {
			if n := nodeNamed(t, ctx, client, host); n.State != "up" {
				return fmt.Errorf("%s: %s", host, n.State)
			}
			pl := placed(z.ID)
			if err := running(z.ID, 1)(); err != nil || len(pl) != 1 || pl[0].Name != host {
				return fmt.Errorf("z on %s: %v", serverList(pl), err)
			}
			return nil
		})
		// The redeployed agent keeps its state in a new state directory
		// (it makes it for its first process: z's).
		if _, err := os.Stat(filepath.Join(dirOf[host], "agent", "procs")); err != nil {
			t.Errorf("the redeployed agent, running z, has no state directory: %v", err)
		}
		if t.Failed() {
			return
		}
		summary := fmt.Sprintf("fault e2e: reboot of %s (agent killed, state directory removed): agent back in %.1f s (redeploy: %s, downtime %.1f s), took job %s again, ok",
			host, backIn.Seconds(), data.Status, data.DowntimeS, z.ID)
		writeTorchSummary(t, summary)
		t.Log(summary)
	})
	client.JobOp(ctx, y.ID, "cancel")
	t.Logf("fault end to end took %s", time.Since(began).Round(time.Millisecond))
}

// nodeNamed is the daemon's view of one server.
func nodeNamed(t *testing.T, ctx context.Context, c *control.Client, name string) control.NodeView {
	t.Helper()
	nodes, err := c.Nodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		if n.Name == name {
			return n
		}
	}
	t.Fatalf("no node %s", name)
	return control.NodeView{}
}

// resumedAt is the iteration the job's newest launch resumed at, as its
// rank 0 said ("resuming at iteration K") on whichever test host it ran.
func resumedAt(t *testing.T, dirs []string, job string) int {
	t.Helper()
	newest, at := -1, 0
	for _, d := range dirs {
		logs, _ := filepath.Glob(filepath.Join(d, "agent", "procs", job+"-a*-r0", "output.log"))
		for _, l := range logs {
			a, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(filepath.Base(filepath.Dir(l)), job+"-a"), "-r0"))
			b, _ := os.ReadFile(l)
			if _, rest, ok := strings.Cut(string(b), "resuming at iteration "); ok && a > newest {
				n, _ := strconv.Atoi(strings.Fields(rest)[0])
				newest, at = a, n
			}
		}
	}
	if at == 0 {
		t.Errorf("no launch of %s resumed from a checkpoint", job)
	}
	return at
}

// lostIterations is how many iterations the trainer logged twice: done
// before a failure, after the checkpoint it resumed from.
func lostIterations(lossLog string) int {
	its := lossIterations(lossLog)
	seen := map[int]bool{}
	for _, it := range its {
		seen[it] = true
	}
	return len(its) - len(seen)
}

// rankWorker finds the torchrun worker of local rank `local` of the job's
// running launch on a test host (its process record's PID is the
// launch's process group).
func rankWorker(t *testing.T, dir, job string, local int) int {
	t.Helper()
	recs, _ := filepath.Glob(filepath.Join(dir, "agent", "procs", job+"-a*-r0", "process.json"))
	var p agent.ProcessInfo
	for _, r := range recs {
		var q agent.ProcessInfo
		if b, err := os.ReadFile(r); err == nil && json.Unmarshal(b, &q) == nil && q.State == agent.StateRunning {
			p = q
		}
	}
	if p.PID <= 1 {
		t.Fatalf("no running launch of %s under %s (%v)", job, dir, recs)
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, st := range procs {
		pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(st)))
		b, err := os.ReadFile(st)
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp ...
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if len(f) < 3 || f[2] != strconv.Itoa(p.PID) {
			continue
		}
		env, _ := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		for _, kv := range strings.Split(string(env), "\x00") {
			if kv == "LOCAL_RANK="+strconv.Itoa(local) {
				return pid
			}
		}
	}
	t.Fatalf("no worker of local rank %d in process group %d (%s)", local, p.PID, p.Spec.ID)
	return 0
}
