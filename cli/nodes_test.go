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
