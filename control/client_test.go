package control

import (
	"bufio"
	"context"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Issue 24 item 13: the client had no timeout, so every command hung
// while the daemon was stopped: the kernel still accepts connections on
// its socket (into the listen backlog) and nobody answers. A socket that
// is listened on but never accepted from is exactly that. Now the request
// ends after the client's timeout, and the error names the daemon and the
// likely cause.
func TestClientNamesAStoppedDaemon(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "replan.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close() // never accepted from: a stopped daemon
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cl := NewUnixClient(sock)
	cl.Timeout = time.Second
	start := time.Now()
	_, err = cl.Status(ctx)
	el := time.Since(start)
	var te *TimeoutError
	if !errors.As(err, &te) || ctx.Err() != nil {
		t.Fatalf("a stopped daemon: %v after %s (want the client's own timeout, well before the test's 20 s)", err, el)
	}
	for _, want := range []string{sock, "did not answer within 1s", "replan daemon"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	// Logs too, followed or not: the answer must start in time.
	for _, follow := range []bool{false, true} {
		if _, err := cl.Logs(ctx, "j-000001", 10, follow); !errors.As(err, &te) {
			t.Errorf("logs (follow %v) from a stopped daemon: %v", follow, err)
		}
	}
	// No daemon at all: said so at once.
	_, err = NewUnixClient(filepath.Join(t.TempDir(), "none.sock")).Status(ctx)
	if err == nil || !strings.Contains(err.Error(), "no daemon listens at") || !strings.Contains(err.Error(), "replan daemon") {
		t.Errorf("no daemon: %v", err)
	}
	// The hint comes before Go's error, which a narrow line (the TUI's
	// banner) cuts: "… no daemon listens at S: is `replan daemon`
	// running? (Get …: dial unix …)".
	if err != nil && strings.Index(err.Error(), "replan daemon") > strings.Index(err.Error(), "dial unix") {
		t.Errorf("no daemon: the hint comes after Go's error: %v", err)
	}
}

// The timeout spares the streams: a long poll waits its full wait on top
// of it, and a followed log goes on as long as the caller reads.
func TestClientTimeoutSparesStreams(t *testing.T) {
	ctx := context.Background()
	cl, _, c, _, _ := startAPI(t, "")
	cl.Timeout = 300 * time.Millisecond
	start := time.Now()
	evs, err := cl.Events(ctx, 1<<40, 1500*time.Millisecond)
	if err != nil || len(evs) != 0 || time.Since(start) < 1500*time.Millisecond {
		t.Fatalf("a 1.5 s long poll with a 300 ms timeout: %v %v after %s", evs, err, time.Since(start))
	}

	long := strings.Replace(strings.Replace(specYAML, "%s", "a", 1), "iterations: 50", "iterations: 100000", 1)
	rec, err := cl.Submit(ctx, "a.yaml", []byte(long))
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if det, _ := cl.Job(ctx, rec.ID); det.Job.State == StateRunning {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("job never started")
		}
	}
	c.advance(3 * time.Second)
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	rc, err := cl.Logs(fctx, rec.ID, 1, true)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	sc := bufio.NewScanner(rc)
	if !sc.Scan() {
		t.Fatalf("no first line: %v", sc.Err())
	}
	opened := time.Now()
	// Lines that arrive after several timeouts' worth of silence still come.
	go func() {
		for time.Since(opened) < 4*cl.Timeout {
			time.Sleep(50 * time.Millisecond)
		}
		c.advance(2 * time.Second)
	}()
	if !sc.Scan() {
		t.Fatalf("the followed log ended after %s: %v", time.Since(opened), sc.Err())
	}
	if el := time.Since(opened); el < 4*cl.Timeout || !strings.Contains(sc.Text(), "global_step=") {
		t.Fatalf("line %q after %s", sc.Text(), el)
	}
}
