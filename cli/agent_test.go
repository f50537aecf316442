package cli

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/replan/replan/agent"
)

func TestAgentServe(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "agent.sock")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errb bytes.Buffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"agent", "serve", "--socket", sock, "--state-dir", filepath.Join(dir, "state"),
			"--fake-gpus", "2xA800", "--sample-interval", "50ms"}, &out, &errb)
	}()
	c := agent.NewSocketClient(sock)
	deadline := time.Now().Add(20 * time.Second)
	for {
		st, err := c.Status(ctx)
		if err == nil && st.GPUCount == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("agent never answered: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("agent serve: %v", err)
	}
}

func TestAgentServeBadFakeSpec(t *testing.T) {
	dir := t.TempDir()
	var out, errb bytes.Buffer
	err := run(context.Background(), []string{"agent", "serve", "--socket", filepath.Join(dir, "s"), "--state-dir", dir, "--fake-gpus", "eightxA800"}, &out, &errb)
	if err == nil {
		t.Fatal("bad --fake-gpus: want error")
	}
}
