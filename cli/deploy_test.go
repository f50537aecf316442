package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/replan/replan/agent"
	"github.com/replan/replan/fleet"
	"github.com/replan/replan/internal/sshtest"
)

func runSplit(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errb bytes.Buffer
	err = run(context.Background(), args, &out, &errb)
	return out.String(), errb.String(), err
}

// TestDeployAndNodesCLI drives `replan trust`, `replan deploy` and `replan
// nodes --direct` against one real sshd on loopback (fleet/e2e_test.go covers
// several servers in network namespaces).
func TestDeployAndNodesCLI(t *testing.T) {
	if testing.Short() {
		t.Skip("deploy CLI test skipped in -short mode")
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go toolchain not on PATH: cannot build the agent")
	}
	s := sshtest.Start(t, sshtest.Config{})
	tmp := t.TempDir()
	bin := filepath.Join(tmp, "replan-agent")
	if out, err := exec.Command(gobin, "build", "-ldflags", "-X main.version=cli-test", "-o", bin, "../cmd/replan-agent").CombinedOutput(); err != nil {
		t.Fatalf("build agent: %v\n%s", err, out)
	}
	remote := filepath.Join(tmp, "{server}")
	t.Cleanup(func() { stopAgent(t, filepath.Join(tmp, "box")) })
	inv := filepath.Join(tmp, "inventory.yaml")
	data := fmt.Sprintf("version: 1\ndefaults: {user: %s, identity_file: %s, gpus: 4, gpu_memory_gb: 80, cpu_cores: 2, host_memory_gb: 8, nvlink_gbps: 400, nic_gbps: 25}\n"+
		"racks: [{name: r1, spine_gbps: 50}]\nservers:\n  - {name: box, address: %s, port: %d, rack: r1}\nssh: {known_hosts: %s, remote_dir: %q}\n",
		s.User, s.ClientKey, s.Host, s.Port, filepath.Join(tmp, "known_hosts"), remote)
	if err := os.WriteFile(inv, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	// The agent's directory comes from the inventory's ssh.remote_dir
	// (issue 28: --remote-dir had to be repeated on every command); the
	// flag still overrides it (the --accept-new deploy below).
	common := []string{"--inventory", inv}
	deploy := append([]string{"deploy", "--agent-binary", bin, "--fake-gpus", "4xH100"}, common...)

	if out, errOut, err := runSplit(t, deploy...); err == nil || !strings.Contains(out, "box: failed:") || !strings.Contains(out, "replan trust") {
		t.Fatalf("deploy to an untrusted server: %v\n%s%s", err, out, errOut)
	}
	// --accept-new records the key (trust then finds it known); the
	// agent comes up.
	if out, errOut, err := runSplit(t, append(deploy, "--accept-new", "--remote-dir", filepath.Join(tmp, "first"))...); err != nil ||
		!strings.HasPrefix(out, "box: deployed") {
		t.Fatalf("deploy --accept-new: %v\n%s%s", err, out, errOut)
	}
	stopAgent(t, filepath.Join(tmp, "first"))
	if out, errOut, err := runSplit(t, "trust", "box", "--yes", "--inventory", inv); err != nil || !strings.Contains(out, "already trusted") {
		t.Fatalf("trust: %v\n%s%s", err, out, errOut)
	}
	// Trusted, but no agent yet.
	out, _, err := runSplit(t, append([]string{"nodes", "--direct"}, common...)...)
	if err != nil || !strings.Contains(out, "no agent") || !strings.Contains(out, "connect failed") {
		t.Fatalf("nodes before deploy: %v\n%s", err, out)
	}
	out, errOut, err := runSplit(t, append(deploy, "--json")...)
	if err != nil {
		t.Fatalf("deploy: %v\n%s%s", err, out, errOut)
	}
	var dj deployJSON
	if err := json.Unmarshal([]byte(out), &dj); err != nil {
		t.Fatalf("deploy --json: %v\n%s", err, out)
	}
	if !dj.OK || len(dj.Servers) != 1 || dj.Servers[0].Status != fleet.StatusDeployed || dj.Servers[0].GPUs != 4 ||
		dj.Servers[0].AgentVersion != "cli-test" || dj.SHA256 == "" {
		t.Fatalf("deploy --json: %s", out)
	}
	if out, errOut, err = runSplit(t, deploy...); err != nil || !strings.HasPrefix(out, "box: up to date (agent cli-test, 4 GPUs") {
		t.Fatalf("second deploy: %v\n%s%s", err, out, errOut)
	}
	// Upgrade to the whole replan binary, which serves the agent as
	// `replan agent serve`.
	full := filepath.Join(tmp, "replan")
	if out, err := exec.Command(gobin, "build", "-ldflags", "-X github.com/replan/replan/cli.version=cli-full", "-o", full, "..").CombinedOutput(); err != nil {
		t.Fatalf("build replan: %v\n%s", err, out)
	}
	upgrade := append([]string{"deploy", "--agent-binary", full, "--fake-gpus", "4xH100"}, common...)
	if out, errOut, err = runSplit(t, upgrade...); err != nil || !strings.HasPrefix(out, "box: upgraded (agent cli-full, 4 GPUs") {
		t.Fatalf("upgrade to replan itself: %v\n%s%s", err, out, errOut)
	}

	out, errOut, err = runSplit(t, append([]string{"nodes", "--direct", "--json"}, common...)...)
	if err != nil {
		t.Fatalf("nodes: %v\n%s%s", err, out, errOut)
	}
	var nj nodesJSON
	if err := json.Unmarshal([]byte(out), &nj); err != nil {
		t.Fatalf("nodes --json: %v\n%s", err, out)
	}
	if nj.Servers != 1 || nj.Reachable != 1 || nj.AgentsUp != 1 || nj.Nodes[0].GPUs != 4 || nj.Nodes[0].NVML.Available ||
		nj.Nodes[0].AgentVersion != "cli-full" {
		t.Fatalf("nodes --json: %s", out)
	}
	out, _, err = runSplit(t, append([]string{"nodes", "--direct"}, common...)...)
	if err != nil || !strings.Contains(out, "box") || !strings.Contains(out, " up ") || !strings.Contains(out, "1 servers, 1 reachable, 1 agents up") {
		t.Fatalf("nodes table: %v\n%s", err, out)
	}

	// A dead server is a row, not a failure.
	s.Stop()
	out, _, err = runSplit(t, append([]string{"nodes", "--direct"}, common...)...)
	if err != nil || !strings.Contains(out, "unreachable") || !strings.Contains(out, "box: connect box") {
		t.Fatalf("nodes with the server down: %v\n%s", err, out)
	}
	if _, _, err := runSplit(t, append([]string{"nodes", "--direct", "nosuch"}, common...)...); err == nil || !strings.Contains(err.Error(), "no server named nosuch") {
		t.Errorf("unknown server: %v", err)
	}
}

// stopAgent kills the agent deployed under dir, by the PID it recorded.
func stopAgent(t *testing.T, dir string) {
	if b, err := os.ReadFile(filepath.Join(dir, "agent.pid")); err == nil {
		if pid, _ := strconv.Atoi(strings.TrimSpace(string(b))); pid > 1 {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// TestNodesTableAndDeployLines pins the text people read.
func TestNodesTableAndDeployLines(t *testing.T) {
	out := nodesJSON{Servers: 3, Reachable: 2, AgentsUp: 1, Nodes: []fleet.Node{
		{Server: "a800-01", Addr: "10.0.1.11:22", State: fleet.NodeUp, Reachable: true, AgentUp: true, AgentVersion: "v1",
			NVML: agent.NVMLStatus{Available: true}, GPUs: 8, GPUsUsed: 3, Healthy: false, ProcessesRunning: 2,
			Health: []agent.HealthEvent{{Kind: agent.HealthECCDBE, GPUIndex: 1}, {Kind: agent.HealthXid, Xid: 79, GPUIndex: 5}}},
		{Server: "a800-02", Addr: "10.0.1.12:22", State: fleet.NodeNoAgent, Reachable: true, Error: "agent at /x/agent.sock: refused"},
		{Server: "a800-03", Addr: "10.0.1.13:2222", State: fleet.NodeUnreachable, Error: "connect a800-03: refused"},
	}}
	var b bytes.Buffer
	writeNodesTable(&b, out)
	want := `SERVER   ADDRESS         STATE        AGENT  GPUS  USED  NVML  HEALTH                           PROCS
a800-01  10.0.1.11:22    up           v1     8     3     yes   2 events (last xid 79 on GPU 5)  2
a800-02  10.0.1.12:22    no agent     -      -     -     -     -                                -
a800-03  10.0.1.13:2222  unreachable  -      -     -     -     -                                -
3 servers, 2 reachable, 1 agents up
a800-02: agent at /x/agent.sock: refused
a800-03: connect a800-03: refused
`
	if b.String() != want {
		t.Errorf("nodes table:\n%s\nwant:\n%s", b.String(), want)
	}
	for _, tc := range []struct {
		r    fleet.DeployResult
		want string
	}{
		{fleet.DeployResult{Server: "a", Status: fleet.StatusDeployed, AgentVersion: "v1", GPUs: 8, PID: 42, Launcher: "setsid", DurationS: 1.26},
			"a: deployed (agent v1, 8 GPUs, pid 42, setsid, 1.3s)"},
		{fleet.DeployResult{Server: "b", Status: fleet.StatusUpToDate, AgentVersion: "v1", GPUs: 8, PID: 7, DurationS: 0.31},
			"b: up to date (agent v1, 8 GPUs, pid 7, 0.3s)"},
		{fleet.DeployResult{Server: "c", Status: fleet.StatusFailed, Error: "deploy agent to c: boom"},
			"c: failed: deploy agent to c: boom"},
	} {
		if got := deployLine(tc.r); got != tc.want {
			t.Errorf("deployLine = %q, want %q", got, tc.want)
		}
	}
}
