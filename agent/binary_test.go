package agent

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// buildAgent builds cmd/replan-agent into dir.
func buildAgent(t *testing.T, dir string) string {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("go tool not on PATH")
	}
	bin := filepath.Join(dir, "replan-agent")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/replan-agent").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	return bin
}

func startAgentBinary(t *testing.T, bin, sock, state, logName string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(bin, "serve", "--socket", sock, "--state-dir", state, "--fake-gpus", "2xA800", "--sample-interval", "100ms")
	logf, err := os.Create(filepath.Join(filepath.Dir(sock), logName))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("%s:\n%s", logName, b)
		}
	})
	return cmd
}

// The agent is killed with SIGKILL: its process keeps running, a new agent
// re-adopts it over the same state dir, stops it and records the exit code
// the wrapper wrote.
func TestAgentKillNineThenReadopt(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the agent binary")
	}
	dir := t.TempDir()
	bin := buildAgent(t, dir)
	sock, state := filepath.Join(dir, "agent.sock"), filepath.Join(dir, "state")
	ctx := context.Background()
	a := startAgentBinary(t, bin, sock, state, "agent-a.log")
	c := NewSocketClient(sock)
	waitFor(t, "agent A", func() bool { _, err := c.Status(ctx); return err == nil })

	script := `trap 'echo bye; exit 4' TERM; echo up; while :; do sleep 0.05; done`
	started, err := c.Start(ctx, ProcessSpec{ID: "survivor", Argv: []string{"sh", "-c", script}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = killGroup(started.PID) })
	waitFor(t, "process output", func() bool {
		b, err := c.Logs(ctx, "survivor", 10)
		return err == nil && strings.Contains(string(b), "up")
	})

	a.Process.Kill()
	a.Wait()
	if !sameProcessAlive(started.PID, started.StartTicks) {
		t.Fatal("process died with the agent")
	}

	startAgentBinary(t, bin, sock, state, "agent-b.log")
	waitFor(t, "agent B", func() bool { _, err := c.Status(ctx); return err == nil })
	p, err := c.Process(ctx, "survivor")
	if err != nil {
		t.Fatal(err)
	}
	if p.State != StateRunning || !p.Adopted || p.PID != started.PID {
		t.Fatalf("agent B sees %+v", p)
	}
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	p, err = c.Stop(sctx, "survivor", 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if p.State != StateExited || p.ExitCode == nil || *p.ExitCode != 4 {
		t.Errorf("after stop: %+v", p)
	}
}

// killGroup sends SIGKILL to a process group (test cleanup).
func killGroup(pgid int) error {
	if pgid <= 1 {
		return nil
	}
	return syscall.Kill(-pgid, syscall.SIGKILL)
}
