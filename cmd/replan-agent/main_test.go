package main

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/replan/replan/agent"
)

func TestRunServesAndStops(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "agent.sock")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errb bytes.Buffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"serve", "--socket", sock, "--state-dir", filepath.Join(dir, "state"), "--fake-gpus", "8xA800"}, &out, &errb)
	}()
	c := agent.NewSocketClient(sock)
	deadline := time.Now().Add(20 * time.Second)
	for {
		st, err := c.Status(ctx)
		if err == nil && st.GPUCount == 8 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("agent never answered: %v\n%s", err, errb.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}
}

func TestRunRejectsStrayArgs(t *testing.T) {
	var out, errb bytes.Buffer
	if err := run(context.Background(), []string{"serve", "extra"}, &out, &errb); err == nil {
		t.Fatal("stray argument: want error")
	}
	if err := run(context.Background(), []string{"--no-such-flag"}, &out, &errb); err == nil {
		t.Fatal("unknown flag: want error")
	}
	out.Reset()
	if err := run(context.Background(), []string{"version"}, &out, &errb); err != nil || out.String() != "dev\n" {
		t.Fatalf("version = %q, %v", out.String(), err)
	}
}
