package agent

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(b []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

func openSup(t *testing.T, dir string, mod func(*SupervisorConfig)) *Supervisor {
	t.Helper()
	cfg := SupervisorConfig{StateDir: dir, Log: testLogger(t), PollInterval: 20 * time.Millisecond,
		CgroupRoot: filepath.Join(t.TempDir(), "no-cgroup")}
	if mod != nil {
		mod(&cfg)
	}
	s, err := OpenSupervisor(context.Background(), cfg)
	if err != nil {
		t.Fatalf("OpenSupervisor: %v", err)
	}
	return s
}

// stopAll makes sure no test process outlives the test.
func stopAll(t *testing.T, s *Supervisor) {
	t.Cleanup(func() {
		for _, p := range s.List() {
			if p.State == StateRunning {
				s.Stop(context.Background(), p.Spec.ID, 100*time.Millisecond)
			}
		}
		s.Close()
	})
}

// waitFor polls cond; it is a wait, not a timing assertion: the deadline
// only keeps a broken test from hanging.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func waitExit(t *testing.T, s *Supervisor, id string) ProcessInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	info, err := s.Wait(ctx, id)
	if err != nil {
		t.Fatalf("wait %s: %v", id, err)
	}
	return info
}

func readLog(t *testing.T, s *Supervisor, id string) string {
	t.Helper()
	p, err := s.LogPath(id)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(p)
	return string(b)
}

func TestStartAppliesEnvDirAndAffinity(t *testing.T) {
	s := openSup(t, t.TempDir(), nil)
	stopAll(t, s)
	work := t.TempDir()
	info, err := s.Start(context.Background(), ProcessSpec{
		ID:   "env-test",
		Argv: []string{"sh", "-c", `echo "FOO=$FOO ID=$REPLAN_PROCESS_ID"; pwd; grep Cpus_allowed_list /proc/self/status; echo to-stderr >&2`},
		Env:  map[string]string{"FOO": "bar baz"},
		Dir:  work,
		CPUs: []int{0},
	})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	if info.PID <= 0 || info.State != StateRunning || info.StartTicks == 0 {
		t.Errorf("Start returned %+v", info)
	}
	info = waitExit(t, s, "env-test")
	if info.ExitCode == nil || *info.ExitCode != 0 {
		t.Errorf("exit code = %v, want 0 (%s)", info.ExitCode, info.ExitReason)
	}
	out := readLog(t, s, "env-test")
	for _, want := range []string{"FOO=bar baz ID=env-test", work + "\n", "Cpus_allowed_list:\t0\n", "to-stderr"} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
}

func TestStartValidation(t *testing.T) {
	s := openSup(t, t.TempDir(), nil)
	stopAll(t, s)
	for _, tc := range []struct {
		spec  ProcessSpec
		field string
	}{
		{ProcessSpec{ID: "../x", Argv: []string{"true"}}, "id"},
		{ProcessSpec{ID: "a"}, "argv"},
		{ProcessSpec{ID: "a", Argv: []string{"/no/such/binary"}}, "argv"},
		{ProcessSpec{ID: "a", Argv: []string{"true"}, Dir: "relative"}, "dir"},
		{ProcessSpec{ID: "a", Argv: []string{"true"}, CPUs: []int{100000}}, "cpus"},
		{ProcessSpec{ID: "a", Argv: []string{"true"}, Env: map[string]string{"A=B": "x"}}, "env"},
	} {
		_, err := s.Start(context.Background(), tc.spec)
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != tc.field {
			t.Errorf("Start(%+v) = %v, want field error on %q", tc.spec, err, tc.field)
		}
	}
	if _, err := s.Start(context.Background(), ProcessSpec{ID: "dup", Argv: []string{"true"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Start(context.Background(), ProcessSpec{ID: "dup", Argv: []string{"true"}}); !errors.Is(err, ErrConflict) {
		t.Errorf("duplicate id: %v, want ErrConflict", err)
	}
}

func TestExitStatusRecorded(t *testing.T) {
	dir := t.TempDir()
	s := openSup(t, dir, nil)
	stopAll(t, s)
	if _, err := s.Start(context.Background(), ProcessSpec{ID: "seven", Argv: []string{"sh", "-c", "exit 7"}}); err != nil {
		t.Fatal(err)
	}
	info := waitExit(t, s, "seven")
	if info.State != StateExited || info.ExitCode == nil || *info.ExitCode != 7 || info.ExitedAt == nil {
		t.Fatalf("info = %+v", info)
	}
	var disk ProcessInfo
	b, err := os.ReadFile(filepath.Join(dir, "procs", "seven", "process.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &disk); err != nil || disk.ExitCode == nil || *disk.ExitCode != 7 {
		t.Errorf("record on disk = %s (%v)", b, err)
	}
}

func TestMemoryLimitNotEnforcedStillStarts(t *testing.T) {
	s := openSup(t, t.TempDir(), func(c *SupervisorConfig) { c.CgroupMount = t.TempDir() })
	stopAll(t, s)
	info, err := s.Start(context.Background(), ProcessSpec{ID: "mem", Argv: []string{"true"}, MemoryBytes: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(info.MemoryLimit, "memory limit not enforced: ") {
		t.Errorf("MemoryLimit = %q", info.MemoryLimit)
	}
	waitExit(t, s, "mem")
}

func TestStopTermThenKill(t *testing.T) {
	s := openSup(t, t.TempDir(), nil)
	stopAll(t, s)
	ctx := context.Background()
	// Exits on SIGTERM.
	if _, err := s.Start(ctx, ProcessSpec{ID: "polite", Argv: []string{"sh", "-c", "echo ready; while :; do sleep 0.05; done"}}); err != nil {
		t.Fatal(err)
	}
	// Ignores SIGTERM: needs SIGKILL.
	if _, err := s.Start(ctx, ProcessSpec{ID: "stubborn", Argv: []string{"sh", "-c", `trap "echo got TERM" TERM; echo ready; while :; do sleep 0.05; done`}}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"polite", "stubborn"} {
		waitFor(t, id+" ready", func() bool { return strings.Contains(readLog(t, s, id), "ready") })
	}
	info, err := s.Stop(ctx, "polite", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if info.ExitCode == nil || *info.ExitCode != 143 || info.Signal != "SIGTERM" || !info.StopRequested {
		t.Errorf("polite: %+v", info)
	}
	info, err = s.Stop(ctx, "stubborn", 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if info.ExitCode == nil || *info.ExitCode != 137 || info.Signal != "SIGKILL" {
		t.Errorf("stubborn: %+v", info)
	}
	if !strings.Contains(readLog(t, s, "stubborn"), "got TERM") {
		t.Errorf("stubborn never saw SIGTERM:\n%s", readLog(t, s, "stubborn"))
	}
}

func TestLogRotation(t *testing.T) {
	s := openSup(t, t.TempDir(), func(c *SupervisorConfig) { c.LogMaxBytes = 2000; c.LogKeep = 2 })
	ctx := context.Background()
	script := `i=0; while [ $i -lt 200 ]; do i=$((i+1)); echo "epoch=0/micro_step=$i/global_step=$i, RunningAvgSamplesPerSec=10.0, CurrSamplesPerSec=11.5, MemAllocated=1GB"; [ $((i%25)) = 0 ] && sleep 0.1; done; echo done`
	if _, err := s.Start(ctx, ProcessSpec{ID: "chatty", Argv: []string{"sh", "-c", script}}); err != nil {
		t.Fatal(err)
	}
	waitExit(t, s, "chatty")
	s.Close() // waits for the tailer's last pass
	p, _ := s.LogPath("chatty")
	if _, err := os.Stat(p + ".1"); err != nil {
		t.Errorf("no rotated log: %v", err)
	}
	if _, err := os.Stat(p + ".2"); err != nil {
		t.Errorf("no second rotated log: %v", err)
	}
	if _, err := os.Stat(p + ".3"); err == nil {
		t.Errorf("keep=2 but %s.3 exists", p)
	}
	for _, f := range []string{p, p + ".1", p + ".2"} {
		if st, err := os.Stat(f); err == nil && st.Size() > 2000+3000 { // rotation is polled: one burst (25 lines) may overshoot
			t.Errorf("%s is %d bytes, limit 2000", f, st.Size())
		}
	}
	samples, _ := s.Samples("chatty", time.Time{})
	if len(samples) < 100 {
		t.Errorf("parsed %d samples, want most of 200", len(samples))
	}
	tail, err := tailLines(p, 3)
	if err != nil || !strings.HasSuffix(string(tail), "done\n") || countLines(tail) != 3 {
		t.Errorf("tail = %q, %v", tail, err)
	}
}

func TestReadoptAfterAgentRestart(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	a := openSup(t, dir, nil)
	script := `trap 'echo stopping; exit 3' TERM; echo up; while :; do sleep 0.05; done`
	started, err := a.Start(ctx, ProcessSpec{ID: "train", Argv: []string{"sh", "-c", script}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Start(ctx, ProcessSpec{ID: "short", Argv: []string{"sh", "-c", "read x < /dev/null; exit 5"}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "train up", func() bool { return strings.Contains(readLog(t, a, "train"), "up") })
	shortInfo, _ := a.Get("short")
	a.Close() // agent A goes away; its processes keep running

	// "short" ends while no agent watches it.
	waitFor(t, "short to end", func() bool { return !sameProcessAlive(shortInfo.PID, shortInfo.StartTicks) })
	if !sameProcessAlive(started.PID, started.StartTicks) {
		t.Fatal("train died with agent A")
	}

	b := openSup(t, dir, nil)
	stopAll(t, b)
	info, err := b.Get("train")
	if err != nil {
		t.Fatal(err)
	}
	if info.State != StateRunning || !info.Adopted || info.PID != started.PID {
		t.Fatalf("agent B sees train as %+v", info)
	}
	short, err := b.Get("short")
	if err != nil {
		t.Fatal(err)
	}
	if short.State != StateExited || short.ExitCode == nil || *short.ExitCode != 5 {
		t.Errorf("agent B sees short as %+v", short)
	}
	info, err = b.Stop(ctx, "train", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if info.State != StateExited || info.ExitCode == nil || *info.ExitCode != 3 {
		t.Errorf("after stop: %+v", info)
	}
	if !strings.Contains(readLog(t, b, "train"), "stopping") {
		t.Errorf("train log lacks its TERM handler output")
	}
	// A third agent sees the recorded exit.
	b.Close()
	c := openSup(t, dir, nil)
	defer c.Close()
	if got, _ := c.Get("train"); got.State != StateExited || got.ExitCode == nil || *got.ExitCode != 3 {
		t.Errorf("agent C sees train as %+v", got)
	}
}

func TestStaleRecordMarkedExited(t *testing.T) {
	dir := t.TempDir()
	rec := ProcessInfo{Spec: ProcessSpec{ID: "ghost", Argv: []string{"x"}}, PID: os.Getpid(), StartTicks: 1, State: StateRunning, BootID: bootID()}
	if err := os.MkdirAll(filepath.Join(dir, "procs", "ghost"), 0o700); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(rec)
	if err := os.WriteFile(filepath.Join(dir, "procs", "ghost", "process.json"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	s := openSup(t, dir, nil)
	defer s.Close()
	got, err := s.Get("ghost")
	if err != nil {
		t.Fatal(err)
	}
	if got.State != StateExited || got.ExitCode != nil || !strings.Contains(got.ExitReason, "not running") {
		t.Errorf("ghost = %+v", got)
	}
	if err := s.Delete(context.Background(), "ghost"); err != nil {
		t.Errorf("Delete: %v", err)
	}
	if _, err := s.Get("ghost"); !errors.Is(err, ErrNotFound) {
		t.Errorf("after delete: %v", err)
	}
}

// A directory that looks like cgroup v2 but is not one: the group is
// prepared, starting into it fails, and the process starts anyway without
// the limit, saying why.
func TestMemoryLimitFallsBackWhenCgroupStartFails(t *testing.T) {
	mount := t.TempDir()
	for _, f := range []string{"cgroup.controllers", "cgroup.subtree_control"} {
		if err := os.WriteFile(filepath.Join(mount, f), []byte("cpu memory pids\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(mount, "replan"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(mount, "replan", "cgroup.subtree_control"), []byte(""), 0o644); err != nil {
		t.Fatal(err)
	}
	s := openSup(t, t.TempDir(), func(c *SupervisorConfig) { c.CgroupMount = mount; c.CgroupRoot = "" })
	stopAll(t, s)
	info, err := s.Start(context.Background(), ProcessSpec{ID: "limited", Argv: []string{"sh", "-c", "exit 0"}, MemoryBytes: 123456789})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	b, err := os.ReadFile(filepath.Join(mount, "replan", "limited", "memory.max"))
	if err == nil && string(b) != "123456789" {
		t.Errorf("memory.max = %q", b)
	}
	if got, _ := os.ReadFile(filepath.Join(mount, "replan", "cgroup.subtree_control")); !strings.Contains(string(got), "+memory") {
		t.Errorf("memory controller not enabled in replan subtree: %q", got)
	}
	if !strings.HasPrefix(info.MemoryLimit, "memory limit not enforced: start in cgroup") {
		t.Errorf("MemoryLimit = %q", info.MemoryLimit)
	}
	if info := waitExit(t, s, "limited"); info.ExitCode == nil || *info.ExitCode != 0 {
		t.Errorf("exit: %+v", info)
	}
}

func TestParseLinesAcrossChunksAndOverlongLines(t *testing.T) {
	p := &proc{s: &Supervisor{cfg: SupervisorConfig{MaxSamples: 3}, clock: SystemClock{}}}
	var st tailState
	long := strings.Repeat("x", 3*maxLogLine) + " CurrSamplesPerSec=9"
	for _, chunk := range []string{
		"CurrSamplesPerSec=1\nCurrSamples", // a line split across reads
		"PerSec=2\n" + long[:maxLogLine/2], // then a line too long to parse,
		long[maxLogLine/2:],                // arriving in pieces,
		"\nnoise\nCurrSamplesPerSec=3\n",   // ended, then normal lines again
		"CurrSamplesPerSec=4\n",
	} {
		if n := p.parseLines(strings.NewReader(chunk), &st); n != int64(len(chunk)) {
			t.Fatalf("consumed %d of %d bytes", n, len(chunk))
		}
	}
	var got []float64
	for _, s := range p.samples {
		got = append(got, s.SamplesPerSec)
	}
	if len(got) != 3 || got[0] != 2 || got[1] != 3 || got[2] != 4 {
		t.Errorf("samples = %v, want [2 3 4] (1 dropped by MaxSamples=3, 9 by the length limit)", got)
	}
}
