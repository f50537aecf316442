package fleet_test

import (
	"context"
	"encoding/json"
	"errors"
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
	"github.com/replan/replan/fleet"
	"github.com/replan/replan/internal/sshtest"
	"github.com/replan/replan/internal/waitfor"
	"github.com/replan/replan/ssh"
)

// testHost is one test server (internal/sshtest.StartHosts).
type testHost = sshtest.Host

func startHosts(t *testing.T, n int, clientKey string) ([]testHost, bool) {
	return sshtest.StartHosts(t, n, clientKey, "rp-e2e", 0)
}

func writeInventory(t *testing.T, dir string, hosts []testHost, clientKey, knownHosts string) string {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "version: 1\ndefaults:\n  user: %s\n  identity_file: %s\n  gpus: 8\n  gpu_memory_gb: 80\n"+
		"  cpu_cores: 2\n  host_memory_gb: 8\n  nvlink_gbps: 400\n  nic_gbps: 25\n", hosts[0].SSHD.User, clientKey)
	b.WriteString("racks:\n  - {name: r1, spine_gbps: 50}\nservers:\n")
	for _, h := range hosts {
		fmt.Fprintf(&b, "  - {name: %s, address: %s, port: %d, rack: r1}\n", h.Name, h.SSHD.Host, h.SSHD.Port)
	}
	fmt.Fprintf(&b, "ssh:\n  known_hosts: %s\n  connect_timeout: 5s\n  keepalive: 2s\n", knownHosts)
	p := filepath.Join(dir, "inventory.yaml")
	if err := os.WriteFile(p, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// buildAgent builds cmd/replan-agent with a version stamp.
func buildAgent(t *testing.T, dir, version string) string {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go toolchain not on PATH: cannot build the agent")
	}
	out := filepath.Join(dir, "replan-agent-"+version)
	cmd := exec.Command(gobin, "build", "-ldflags", "-X main.version="+version, "-o", out, "github.com/replan/replan/cmd/replan-agent")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build agent: %v\n%s", err, b)
	}
	return out
}

// killLeftovers stops every agent and supervised process under the
// remote directories, by the PIDs they recorded.
func killLeftovers(t *testing.T, dirs []string) {
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
		// An agent whose PID file is gone is still found by its socket.
		for _, p := range pgrep("--socket " + filepath.Join(d, "agent.sock")) {
			if pid, err := strconv.Atoi(p); err == nil && pid > 1 {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
}

// poll calls fn until it returns nil. It waits on progress
// (internal/waitfor): timeout is how long fn's report (its error) may
// stay the same, every change restarts it, 20 windows bound the whole
// wait, and the failure says what was last seen.
func poll(t *testing.T, what string, timeout time.Duration, fn func() error) {
	t.Helper()
	waitfor.T(t, context.Background(), what, waitfor.Options{Stall: timeout}, fn)
}

func pgrep(pattern string) []string {
	out, _ := exec.Command("pgrep", "-f", "--", pattern).Output()
	return strings.Fields(string(out))
}

const trainScript = `i=1
while :; do
	echo "[Rank 0] epoch=0/micro_step=$i/global_step=$i, RunningAvgSamplesPerSec=12.5, CurrSamplesPerSec=13.1, MemAllocated=1.2GB, MaxMemAllocated=3.4GB"
	i=$((i+1))
	sleep 0.2
done`

// TestEndToEnd deploys real agents to three real sshd servers (in network
// namespaces where possible) and drives them through SSH only: trust,
// deploy, nodes, a supervised fake training run with throughput samples,
// an in-place upgrade that re-adopts it, a dead and recovered server, a
// changed host key and a cancelled command.
func TestEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test skipped in -short mode")
	}
	if ok, why := sshtest.Available(); !ok {
		t.Skip(why)
	}
	if _, err := exec.LookPath("pgrep"); err != nil {
		t.Skip("pgrep (procps) not installed")
	}
	began := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	tmp := t.TempDir()
	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))

	bin1 := buildAgent(t, tmp, "e2e-1")
	clientKey := sshtest.ClientKey(t)
	hosts, netns := startHosts(t, 3, clientKey)
	t.Logf("3 test hosts, network namespaces: %v", netns)
	remoteDir := filepath.Join(tmp, "{server}")
	var dirs []string
	for _, h := range hosts {
		dirs = append(dirs, fleet.ExpandDir(remoteDir, h.Name, "/"))
	}
	t.Cleanup(func() { killLeftovers(t, dirs) })

	knownHosts := filepath.Join(tmp, "known_hosts")
	invPath := writeInventory(t, tmp, hosts, clientKey, knownHosts)
	inv, err := cluster.Load(invPath)
	if err != nil {
		t.Fatal(err)
	}

	// Nothing is trusted yet: deploy refuses.
	newFleet := func() *fleet.Fleet {
		pool, err := ssh.NewPool(ssh.FromInventory(inv, log))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { pool.Close() })
		return fleet.New(pool, fleet.Options{RemoteDir: remoteDir, Logger: log})
	}
	fl := newFleet()
	res, err := fl.Deploy(ctx, inv.Servers[:1], fleet.DeployOptions{AgentBinary: bin1, FakeGPUs: "8xA800"})
	if err != nil || res[0].Status != fleet.StatusFailed || !errors.Is(res[0].Err, ssh.ErrUnknownHost) {
		t.Fatalf("deploy to an untrusted host: %+v, %v", res, err)
	}

	// replan trust SERVER --yes
	for i, s := range inv.Servers {
		info, err := ssh.Trust(ctx, s.Addr(), knownHosts, 5*time.Second)
		if err != nil {
			t.Fatalf("trust %s: %v", s.Name, err)
		}
		if want := ssh.Fingerprint(hosts[i].SSHD.HostPublicKey("ed25519")); info.Fingerprint != want || info.Status != ssh.KeyUnknown {
			t.Fatalf("trust %s: %s %v, want %s unknown", s.Name, info.Fingerprint, info.Status, want)
		}
		if err := ssh.AppendKnownHost(knownHosts, s.Addr(), info.Key); err != nil {
			t.Fatal(err)
		}
	}

	// Deploy: three agents with fake GPUs.
	opts := fleet.DeployOptions{AgentBinary: bin1, FakeGPUs: "8xA800"}
	res, err = fl.Deploy(ctx, inv.Servers, opts)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Status != fleet.StatusDeployed || r.GPUs != 8 || r.AgentVersion != "e2e-1" || r.PID == 0 {
			t.Fatalf("deploy %s: %+v", r.Server, r)
		}
	}
	t.Logf("deployed to 3 hosts (launcher %s) at %s", res[0].Launcher, time.Since(began).Round(time.Millisecond))

	nodes := fl.Nodes(ctx, inv.Servers, fleet.NodesOptions{})
	for _, n := range nodes {
		if n.State != fleet.NodeUp || !n.Reachable || n.GPUs != 8 || n.GPUsUsed != 0 || n.AgentVersion != "e2e-1" || !n.Healthy {
			t.Fatalf("nodes %s: %+v", n.Server, n)
		}
	}

	// Re-running deploy does nothing.
	res, err = fl.Deploy(ctx, inv.Servers, opts)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if r.Status != fleet.StatusUpToDate || r.PID != nodesPID(t, dirs[i]) {
			t.Fatalf("second deploy %s: %+v", r.Server, r)
		}
	}

	// Without its PID file the agent is found through its socket.
	pid3 := nodesPID(t, dirs[2])
	if err := os.Remove(filepath.Join(dirs[2], "agent.pid")); err != nil {
		t.Fatal(err)
	}
	res, err = fl.Deploy(ctx, inv.Servers[2:], opts)
	if err != nil || res[0].Status != fleet.StatusUpToDate || res[0].PID != pid3 || nodesPID(t, dirs[2]) != pid3 {
		t.Fatalf("deploy without agent.pid: %+v, %v", res, err)
	}

	// A fake training run on h1, through the agent API over SSH.
	h1 := inv.Servers[0]
	c, err := fl.AgentClient(ctx, h1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Start(ctx, agent.ProcessSpec{ID: "train-1", Argv: []string{"sh", "-c", trainScript}}); err != nil {
		t.Fatalf("start training: %v", err)
	}
	var samples []agent.Sample
	poll(t, "three throughput samples", 60*time.Second, func() error {
		samples, err = c.Samples(ctx, "train-1", time.Time{})
		if err == nil && len(samples) < 3 {
			err = fmt.Errorf("%d samples", len(samples))
		}
		return err
	})
	if s := samples[0]; s.SamplesPerSec != 13.1 || s.AvgSamplesPerSec != 12.5 || s.Step < 1 {
		t.Errorf("sample: %+v", s)
	}
	nodes = fl.Nodes(ctx, inv.Servers[:1], fleet.NodesOptions{})
	if nodes[0].ProcessesRunning != 1 || nodes[0].Processes[0] != "train-1" {
		t.Errorf("nodes while training: %+v", nodes[0])
	}

	// Upgrade h1 in place: the running job is re-adopted by the new agent.
	bin2 := buildAgent(t, tmp, "e2e-2")
	res, err = fl.Deploy(ctx, inv.Servers[:1], fleet.DeployOptions{AgentBinary: bin2, FakeGPUs: "8xA800"})
	if err != nil || res[0].Status != fleet.StatusUpgraded || res[0].AgentVersion != "e2e-2" || res[0].PreviousSHA256 == res[0].SHA256 {
		t.Fatalf("upgrade: %+v, %v", res, err)
	}
	p, err := c.Process(ctx, "train-1")
	if err != nil || p.State != agent.StateRunning || !p.Adopted {
		t.Fatalf("training after the upgrade: %+v, %v", p, err)
	}
	last := samples[len(samples)-1].Time
	poll(t, "samples from the re-adopted job", 60*time.Second, func() error {
		s, err := c.Samples(ctx, "train-1", last)
		if err == nil && len(s) == 0 {
			err = errors.New("no new samples")
		}
		return err
	})
	p, err = c.Stop(ctx, "train-1", 5*time.Second)
	if err != nil || p.State != agent.StateExited || p.ExitCode == nil || !p.StopRequested {
		t.Fatalf("stop: %+v, %v", p, err)
	}
	t.Logf("training stopped: exit %d (%s)", *p.ExitCode, p.ExitReason)

	// h2's sshd dies: nodes reports it unreachable (a row, not a failure);
	// it comes back once sshd is restarted.
	hosts[1].SSHD.Stop()
	nodes = fl.Nodes(ctx, inv.Servers, fleet.NodesOptions{Timeout: 10 * time.Second})
	if nodes[1].State != fleet.NodeUnreachable || nodes[1].Reachable || nodes[1].Error == "" ||
		nodes[0].State != fleet.NodeUp || nodes[2].State != fleet.NodeUp {
		t.Fatalf("nodes with h2 down: %+v", nodes)
	}
	t.Logf("h2 down: %s", nodes[1].Error)
	hosts[1].SSHD.Restart()
	poll(t, "h2 recovered", 60*time.Second, func() error {
		n := fl.Nodes(ctx, inv.Servers[1:2], fleet.NodesOptions{})[0]
		if n.State != fleet.NodeUp || n.GPUs != 8 {
			return fmt.Errorf("%s: %s", n.State, n.Error)
		}
		return nil
	})

	// h3 gets a new host key: refused, naming both fingerprints.
	oldFP := ssh.Fingerprint(hosts[2].SSHD.HostPublicKey("ed25519"))
	hosts[2].SSHD.RegenerateHostKey("ed25519")
	hosts[2].SSHD.Restart()
	newFP := ssh.Fingerprint(hosts[2].SSHD.HostPublicKey("ed25519"))
	res, err = newFleet().Deploy(ctx, inv.Servers[2:], opts)
	if err != nil || res[0].Status != fleet.StatusFailed || !errors.Is(res[0].Err, ssh.ErrHostKeyMismatch) ||
		!strings.Contains(res[0].Error, oldFP) || !strings.Contains(res[0].Error, newFP) {
		t.Fatalf("deploy after a host key change: %+v, %v", res, err)
	}

	// A cancelled command leaves nothing behind on the server.
	marker := fmt.Sprintf("rp-e2e-cancel-%d", os.Getpid())
	rctx, rcancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- fl.Pool().Run(rctx, ssh.HostFromServer(h1), ssh.Command("sh", "-c", "sleep 300; echo "+marker))
	}()
	poll(t, "the remote sleep runs", 60*time.Second, func() error {
		if len(pgrep(marker)) == 0 {
			return errors.New("not yet")
		}
		return nil
	})
	rcancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled Run: %v", err)
	}
	poll(t, "the cancelled command is gone", 60*time.Second, func() error {
		if p := pgrep(marker); len(p) > 0 {
			return fmt.Errorf("still running: %v", p)
		}
		return nil
	})
	t.Logf("end-to-end (netns %v) took %s", netns, time.Since(began).Round(time.Millisecond))
}

// nodesPID reads the PID an agent recorded.
func nodesPID(t *testing.T, dir string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "agent.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
