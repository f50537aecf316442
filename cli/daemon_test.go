package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/replan/replan/control"
)

// TestMain lets the test binary run as `replan daemon` for the end-to-end
// test, so it can be killed with SIGKILL like the real thing.
func TestMain(m *testing.M) {
	if f := os.Getenv("REPLAN_TEST_ARGS_FILE"); f != "" {
		b, err := os.ReadFile(f)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		os.Setenv("REPLAN_TEST_RUN", strings.Join(strings.Split(strings.TrimSpace(string(b)), "\n"), "\x1f"))
	}
	if args := os.Getenv("REPLAN_TEST_RUN"); args != "" {
		ctx, stop := context.WithCancel(context.Background())
		defer stop()
		if err := run(ctx, strings.Split(args, "\x1f"), os.Stdout, os.Stderr); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

const smokeInventory = `version: 1
defaults: {user: replan, ssh_agent: true, gpus: 8, gpu_memory_gb: 80, cpu_cores: 96, host_memory_gb: 1600, nvlink_gbps: 400, nic_gbps: 100}
racks: [{name: r1, spine_gbps: 200}]
servers:
  - {name: s1, address: 127.0.0.1, port: 2201, rack: r1}
  - {name: s2, address: 127.0.0.1, port: 2202, rack: r1}
tenants: [{name: research, gpu_quota: 16}]
`

// startDaemon runs `replan daemon` (sim executor) on dir's inventory;
// extra flags come last, so they override the defaults here.
func startDaemon(t *testing.T, dir string, extra ...string) *exec.Cmd {
	t.Helper()
	args := []string{"daemon", "--inventory", filepath.Join(dir, "inv.yaml"), "--db", filepath.Join(dir, "r.db"), "--socket", filepath.Join(dir, "s.sock"),
		"--tick", "100ms", "--restart-cost", "0s", "--data", ""}
	args = append(args, extra...)
	cmd := exec.Command(os.Args[0], "-test.run", "^$")
	cmd.Env = append(os.Environ(), "REPLAN_TEST_RUN="+strings.Join(args, "\x1f"))
	log, _ := os.OpenFile(filepath.Join(dir, "daemon.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	c := control.NewUnixClient(filepath.Join(dir, "s.sock"))
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, err := c.Status(context.Background()); err == nil {
			return cmd
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(filepath.Join(dir, "daemon.log"))
			t.Fatalf("daemon did not come up:\n%s", b)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestDaemonEndToEndSurvivesKill9(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "inv.yaml"), []byte(smokeInventory), 0o644)
	sock := filepath.Join(dir, "s.sock")
	for _, n := range []string{"a", "b", "c"} {
		spec := fmt.Sprintf("version: 1\nname: job-%s\ntenant: research\nclass: best-effort\nmodel: bert\nframework: deepspeed\nworkdir: /w\nentrypoint: train.py\nglobal_batch: 32\niterations: 40\ncheckpoint_dir: /ckpt/%s\nrequest: {gpus: 8}\n", n, n)
		os.WriteFile(filepath.Join(dir, n+".yaml"), []byte(spec), 0o644)
	}
	d := startDaemon(t, dir)
	var ids []string
	for _, n := range []string{"a", "b", "c"} {
		out, err := runCLI(t, "submit", filepath.Join(dir, n+".yaml"), "--socket", sock, "--json")
		if err != nil {
			t.Fatalf("submit: %v\n%s", err, out)
		}
		var r control.JobRecord
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("submit json: %v: %s", err, out)
		}
		ids = append(ids, r.ID)
	}
	if out, err := runCLI(t, "queue", "--socket", sock); err != nil || !strings.Contains(out, "REASON") {
		t.Fatalf("queue: %v\n%s", err, out)
	}
	time.Sleep(300 * time.Millisecond)
	d.Process.Signal(syscall.SIGKILL)
	d.Wait()
	startDaemon(t, dir)
	// Every job is still known and all of them finish.
	deadline := time.Now().Add(60 * time.Second)
	for {
		out, err := runCLI(t, "history", "--socket", sock, "--json")
		if err != nil {
			t.Fatalf("history: %v\n%s", err, out)
		}
		var h []control.HistoryEntry
		json.Unmarshal([]byte(out), &h)
		if len(h) == 3 {
			for _, e := range h {
				if e.Job.State != control.StateFinished || e.Job.Iterations != 40 {
					t.Errorf("%s: %s at %d iterations", e.Job.ID, e.Job.State, e.Job.Iterations)
				}
			}
			break
		}
		if time.Now().After(deadline) {
			out, _ := runCLI(t, "jobs", "--socket", sock)
			t.Fatalf("only %d jobs finished after the restart:\n%s", len(h), out)
		}
		time.Sleep(200 * time.Millisecond)
	}
	out, err := runCLI(t, "job", ids[0], "--socket", sock)
	if err != nil || !strings.Contains(out, "history:") || !strings.Contains(out, "finished") {
		t.Errorf("job: %v\n%s", err, out)
	}
	if out, err := runCLI(t, "events", "--socket", sock); err != nil || !strings.Contains(out, "submit") {
		t.Errorf("events: %v\n%s", err, out)
	}
	if _, err := runCLI(t, "cancel", ids[0], "--socket", sock); err == nil {
		t.Error("cancelled a finished job")
	}
}
