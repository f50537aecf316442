package agent

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func startTestAgent(t *testing.T) (*Agent, *Client, string, context.CancelFunc, chan error) {
	t.Helper()
	dir := t.TempDir()
	sock := filepath.Join(dir, "agent.sock")
	ctx, cancel := context.WithCancel(context.Background())
	a, err := New(ctx, testConfig(t, dir, sock))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := ListenUnix(ctx, sock)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- a.Serve(ctx, ln) }()
	t.Cleanup(func() {
		for _, p := range a.sup.List() {
			if p.State == StateRunning {
				a.sup.Stop(context.Background(), p.Spec.ID, 100*time.Millisecond)
			}
		}
		cancel()
	})
	return a, NewSocketClient(sock), sock, cancel, served
}

// testConfig is a test agent's configuration: 8 fake A800, fast polling,
// state and socket under dir, no cgroups.
func testConfig(t *testing.T, dir, sock string) Config {
	return Config{
		SocketPath: sock, StateDir: filepath.Join(dir, "state"), FakeGPUs: "8xA800",
		SampleInterval: 50 * time.Millisecond, Version: "test", Log: testLogger(t),
		Supervisor: SupervisorConfig{PollInterval: 20 * time.Millisecond, CgroupRoot: filepath.Join(dir, "no-cgroup")},
	}
}

func rawPost(t *testing.T, sock, path, body string) (int, string) {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}}
	resp, err := hc.Post("http://agent"+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestAPIEndToEnd(t *testing.T) {
	_, c, sock, cancel, served := startTestAgent(t)
	ctx := context.Background()

	st, err := os.Stat(sock)
	if err != nil || st.Mode().Perm() != 0o600 || st.Mode()&os.ModeSocket == 0 {
		t.Fatalf("socket %s: mode %v, %v", sock, st.Mode(), err)
	}
	waitFor(t, "first GPU sample", func() bool {
		s, err := c.Status(ctx)
		return err == nil && s.GPUCount == 8
	})
	status, _ := c.Status(ctx)
	if status.Version != "test" || status.NVML.Available || !strings.HasPrefix(status.NVML.Reason, "no NVML") || status.GPUBackend != "fake 8xA800" || status.Hostname == "" {
		t.Errorf("status = %+v", status)
	}
	// The boot id, by which the daemon tells a rebooted server.
	if b, err := os.ReadFile("/proc/sys/kernel/random/boot_id"); err == nil && status.BootID != strings.TrimSpace(string(b)) {
		t.Errorf("status boot id %q, want the kernel's %q", status.BootID, strings.TrimSpace(string(b)))
	}
	gpus, err := c.GPUs(ctx)
	if err != nil || len(gpus.GPUs) != 8 || gpus.GPUs[7].MemoryTotalBytes != 80<<30 {
		t.Fatalf("GPUs = %+v, %v", gpus, err)
	}

	// Bad requests name the field.
	for _, tc := range []struct{ body, field string }{
		{`{"id":"x"}`, "argv"},
		{`{"id":"x","argvv":["true"]}`, "argvv"},
		{`{"id":"x","argv":["true"],"cpus":"0-3"}`, "cpus"},
		{`{"id":"x y","argv":["true"]}`, "id"},
		{`{"id":`, "body"},
		{``, "body"},
	} {
		code, body := rawPost(t, sock, "/v1/processes", tc.body)
		if code != http.StatusBadRequest || !strings.Contains(body, `"field": "`+tc.field+`"`) {
			t.Errorf("POST %s: %d %s; want 400 naming %q", tc.body, code, body, tc.field)
		}
	}
	if code, body := rawPost(t, sock, "/v1/processes/nope/stop", `{"grace_seconds":-1}`); code != http.StatusNotFound && code != http.StatusBadRequest {
		t.Errorf("stop with bad grace: %d %s", code, body)
	}
	_, err = c.Start(ctx, ProcessSpec{ID: "bad", Argv: []string{"/nonexistent/deepspeed"}})
	if e, ok := AsAPIError(err); !ok || e.StatusCode != 400 || e.Field != "argv" {
		t.Errorf("start missing binary: %v", err)
	}
	if _, err := c.Process(ctx, "nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("unknown process: %v, want ErrNotFound", err)
	}

	script := `i=0; while :; do i=$((i+1)); echo "[Rank 0] epoch=0/micro_step=$i/global_step=$i, RunningAvgSamplesPerSec=12.5, CurrSamplesPerSec=13.0, MemAllocated=1.1GB, MaxMemAllocated=2.2GB"; sleep 0.05; done`
	info, err := c.Start(ctx, ProcessSpec{ID: "ds-job", Argv: []string{"sh", "-c", script}, Env: map[string]string{"MASTER_PORT": "29500"}})
	if err != nil {
		t.Fatal(err)
	}
	if info.State != StateRunning || info.PID == 0 {
		t.Fatalf("started %+v", info)
	}
	if _, err := c.Start(ctx, ProcessSpec{ID: "ds-job", Argv: []string{"true"}}); !errors.Is(err, ErrConflict) {
		t.Errorf("duplicate start: %v, want ErrConflict", err)
	}

	var samples []Sample
	waitFor(t, "3 samples", func() bool {
		samples, err = c.Samples(ctx, "ds-job", time.Time{})
		return err == nil && len(samples) >= 3
	})
	newer, err := c.Samples(ctx, "ds-job", samples[1].Time)
	if err != nil || len(newer) == 0 || !newer[0].Time.After(samples[1].Time) {
		t.Errorf("Samples since %v = %d samples, %v", samples[1].Time, len(newer), err)
	}
	if s := samples[0]; s.SamplesPerSec != 13 || s.AvgSamplesPerSec != 12.5 || s.Step != 1 || s.Format != "deepspeed-throughput" || s.Time.IsZero() {
		t.Errorf("first sample = %+v", s)
	}

	logs, err := c.Logs(ctx, "ds-job", 2)
	if err != nil || bytes.Count(logs, []byte("\n")) != 2 || !bytes.Contains(logs, []byte("CurrSamplesPerSec")) {
		t.Errorf("Logs(tail=2) = %q, %v", logs, err)
	}

	// Follow: new lines keep arriving; stop reading, the stream ends.
	fctx, fcancel := context.WithCancel(ctx)
	rc, err := c.FollowLogs(fctx, "ds-job", 0)
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(rc)
	seen := map[string]bool{}
	for len(seen) < 3 {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("follow: %v", err)
		}
		seen[line] = true
	}
	fcancel()
	rc.Close()

	procs, err := c.Processes(ctx)
	if err != nil || len(procs) != 1 || procs[0].Spec.ID != "ds-job" || procs[0].Spec.Env["MASTER_PORT"] != "29500" {
		t.Errorf("Processes = %+v, %v", procs, err)
	}

	info, err = c.Stop(ctx, "ds-job", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if info.State != StateExited || info.ExitCode == nil || *info.ExitCode != 143 || info.Signal != "SIGTERM" {
		t.Errorf("after stop: %+v", info)
	}
	// Following an exited process returns its tail and ends by itself.
	rc, err = c.FollowLogs(ctx, "ds-job", 1)
	if err != nil {
		t.Fatal(err)
	}
	rest, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || !bytes.Contains(rest, []byte("CurrSamplesPerSec")) {
		t.Errorf("follow after exit = %q, %v", rest, err)
	}
	if err := c.Delete(ctx, "ds-job"); err != nil {
		t.Errorf("Delete: %v", err)
	}

	cancel()
	if err := <-served; err != nil {
		t.Errorf("Serve returned %v", err)
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Errorf("socket left behind: %v", err)
	}
}

func TestSecondAgentRefused(t *testing.T) {
	a, _, sock, _, _ := startTestAgent(t)
	if _, err := ListenUnix(context.Background(), sock); err == nil || !strings.Contains(err.Error(), "already serving") {
		t.Errorf("second listen: %v", err)
	}
	_, err := New(context.Background(), Config{StateDir: a.cfg.StateDir, FakeGPUs: "1xA800"})
	if err == nil || !strings.Contains(err.Error(), "in use by another agent") {
		t.Errorf("second agent on the same state dir: %v", err)
	}
	code, body := rawPost(t, sock, "/v1/processes/x/stop", `{"grace_seconds":"soon"}`)
	if code != http.StatusBadRequest || !strings.Contains(body, `"field": "grace_seconds"`) {
		t.Errorf("stop with string grace: %d %s", code, body)
	}
}

// slowBackend is a fake backend whose GPU reads take delay.
type slowBackend struct {
	GPUBackend
	delay time.Duration
}

func (b slowBackend) GPUs(ctx context.Context) ([]GPU, error) {
	time.Sleep(b.delay)
	return b.GPUBackend.GPUs(ctx)
}

// The agent answers only once it has sampled its GPUs: a status read
// made the moment it serves (as replan deploy's) reports them, however
// slow the first read of the backend is (it reported 0 GPUs when it won
// the race with the sampler; a deploy then failed "GPUs:0").
func TestFirstStatusHasTheGPUs(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "agent.sock")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fake, err := NewFakeBackend("8xA800")
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t, dir, sock)
	cfg.FakeGPUs, cfg.Backend, cfg.SampleInterval = "", slowBackend{fake, 300 * time.Millisecond}, time.Hour
	a, err := New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := ListenUnix(ctx, sock)
	if err != nil {
		t.Fatal(err)
	}
	go a.Serve(ctx, ln)
	st, err := NewSocketClient(sock).Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.GPUCount != 8 {
		t.Errorf("the first status reports %d GPUs, want 8", st.GPUCount)
	}
}
