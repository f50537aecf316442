package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/replan/replan/control"
)

// TestNodesAsksTheDaemon: `replan nodes` is the daemon's view (GET
// /v1/nodes) of a real daemon on the sim executor: every server with its
// state, GPU figures and the job holding each GPU; a job paying its
// restart cost holds GPUs that are idle, and the table flags them.
// Without a daemon the error says how to get the direct view.
func TestNodesAsksTheDaemon(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "s.sock")
	out, err := runCLI(t, "nodes", "--socket", sock)
	if err == nil || !strings.Contains(err.Error(), "no daemon answers") || !strings.Contains(err.Error(), "replan nodes --direct") {
		t.Fatalf("nodes without a daemon: %v\n%s", err, out)
	}
	if _, err := runCLI(t, "nodes", "--socket", sock, "--inventory", "x.yaml"); err == nil || !strings.Contains(err.Error(), "add --direct") {
		t.Errorf("--inventory without --direct: %v", err)
	}

	os.WriteFile(filepath.Join(dir, "inv.yaml"), []byte(smokeInventory), 0o644)
	spec := "version: 1\nname: long\ntenant: research\nclass: best-effort\nmodel: bert\nframework: deepspeed\nworkdir: /w\nentrypoint: train.py\nglobal_batch: 32\niterations: 100000\ncheckpoint_dir: /ckpt/long\nrequest: {gpus: 8}\n"
	os.WriteFile(filepath.Join(dir, "long.yaml"), []byte(spec), 0o644)
	startDaemon(t, dir, "--restart-cost", "1h") // the job's GPUs stay idle while it "restarts"
	out, err = runCLI(t, "submit", filepath.Join(dir, "long.yaml"), "--socket", sock, "--json")
	if err != nil {
		t.Fatalf("submit: %v\n%s", err, out)
	}
	var job control.JobRecord
	if err := json.Unmarshal([]byte(out), &job); err != nil {
		t.Fatalf("submit json: %v: %s", err, out)
	}

	// Until the job holds GPUs and their figures are in: the daemon's
	// rounds and observations run every 100 ms.
	var nodes []control.NodeView
	held := ""
	for deadline := time.Now().Add(30 * time.Second); ; {
		out, err := runCLI(t, "nodes", "--socket", sock, "--json")
		if err != nil {
			t.Fatalf("nodes --json: %v\n%s", err, out)
		}
		nodes = nil
		if err := json.Unmarshal([]byte(out), &nodes); err != nil {
			t.Fatalf("nodes --json is not the daemon's node view: %v\n%s", err, out)
		}
		held = ""
		for _, n := range nodes {
			// The figures are the job's once its GPUs' memory is in use.
			if len(n.GPUOwners) > 0 && n.GPUOwners[0] == job.ID && len(n.GPUStats) == 8 && n.GPUStats[0].MemUsedGB > 1 && len(n.IdleHeld) == 8 {
				held = n.Name
			}
		}
		if held != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the job never showed on a server's GPUs:\n%s", out)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if len(nodes) != 2 || nodes[0].State != "up" || nodes[1].State != "up" {
		t.Fatalf("nodes %+v", nodes)
	}
	free := nodes[0].FreeGPUs + nodes[1].FreeGPUs

	out, err = runCLI(t, "nodes", "--socket", sock)
	if err != nil {
		t.Fatalf("nodes: %v\n%s", err, out)
	}
	for _, want := range []string{
		"SERVER", "UTIL", "MEMORY", "TEMP", "POWER", "ECC/XID", "IDLE HELD",
		job.ID + " [0-7]",
		fmt.Sprintf("2 servers: 2 up · 16 GPUs, %d free", free),
		fmt.Sprintf("%s [0-7]: held by %s but idle (under %d%% utilisation)", held, job.ID, control.IdleUtilPct),
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "GPU  JOB") {
		t.Errorf("per-GPU lines without --gpus:\n%s", out)
	}

	out, err = runCLI(t, "nodes", held, "--socket", sock)
	if err != nil {
		t.Fatalf("nodes %s: %v\n%s", held, err, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	gpuLines := 0
	for _, l := range lines {
		if f := strings.Fields(l); len(f) > 3 && f[0] == held && f[2] == job.ID {
			gpuLines++
			if !strings.HasSuffix(l, "allocated but idle") {
				t.Errorf("GPU line not flagged: %q", l)
			}
		}
	}
	if gpuLines != 8 {
		t.Errorf("%d GPU lines of %s held by %s, want 8:\n%s", gpuLines, held, job.ID, out)
	}
	if _, err := runCLI(t, "nodes", "nosuch", "--socket", sock); err == nil || !strings.Contains(err.Error(), "no server named nosuch") {
		t.Errorf("unknown server: %v", err)
	}
}

// TestNodesTableStates: drained, suspect and down servers read as such,
// their GPUs are not counted free, and what needs a look is named under
// the table.
func TestNodesTableStates(t *testing.T) {
	gpu := func(i int, util float64) control.GPUStat {
		return control.GPUStat{Index: i, UtilPct: util, MemUsedGB: 40, MemTotalGB: 80, TempC: 60, PowerW: 300, XidErrors: map[bool]int{true: 1}[i == 1]}
	}
	nodes := []control.NodeView{
		{ServerInfo: control.ServerInfo{Name: "a1", Rack: "r1", GPUs: 2}, State: "up", GPUOwners: []string{"j-7", ""}, FreeGPUs: 1,
			GPUStats: []control.GPUStat{gpu(0, 1), gpu(1, 0)}, IdleHeld: []int{0}},
		{ServerInfo: control.ServerInfo{Name: "a2", Rack: "r1", GPUs: 2}, State: "drained", Drained: true, GPUOwners: []string{"", ""}, FreeGPUs: 2},
		{ServerInfo: control.ServerInfo{Name: "a3", Rack: "r1", GPUs: 2}, State: "suspect", Suspect: true, SuspectWhy: "launches of j-1, j-2 failed there", GPUOwners: []string{"", ""}, FreeGPUs: 2},
		{ServerInfo: control.ServerInfo{Name: "a4", Rack: "r1", GPUs: 2}, State: "down", Missed: 3, GPUOwners: []string{"", ""}},
	}
	var b strings.Builder
	if err := writeDaemonNodes(&b, nodes, false); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"4 servers: 1 up, 1 drained, 1 suspect, 1 down · 8 GPUs, 1 free (and 4 on servers that take no jobs)",
		"a1 [0]: held by j-7 but idle (under 5% utilisation)",
		"a3 is suspect: launches of j-1, j-2 failed there",
		"a4 is down: 3 heartbeats missed",
		"0/1", "j-7 [0]",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("lacks %q:\n%s", want, out)
		}
	}
}
