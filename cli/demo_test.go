package cli

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/replan/replan/control"
	"github.com/replan/replan/internal/waitfor"
	"github.com/replan/replan/tui"
	"github.com/replan/replan/tui/controlbackend"
)

// TestDemoInTmux runs `replan demo` the way a person does, inside tmux:
// the cluster grid appears, the jobs screen shows a plan, the queue and
// events screens answer their keys, and q exits cleanly.
func TestDemoInTmux(t *testing.T) {
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Skip("skipped: tmux is not installed (.ci/run installs it)")
	}
	dir := t.TempDir()
	args := filepath.Join(dir, "args")
	os.WriteFile(args, []byte("demo\n--speed\n300\n--jobs\n40\n"), 0o644)
	script := filepath.Join(dir, "run.sh")
	os.WriteFile(script, []byte("#!/bin/sh\ncd "+mustWd(t)+"\nREPLAN_TEST_ARGS_FILE="+args+" exec "+os.Args[0]+" -test.run '^$'\n"), 0o755)
	sess := "replan-demo-test-" + filepath.Base(dir)
	tmux := func(a ...string) string {
		out, _ := exec.Command("tmux", a...).CombinedOutput()
		return string(out)
	}
	if out, err := exec.Command("tmux", "new-session", "-d", "-s", sess, "-x", "100", "-y", "30", script).CombinedOutput(); err != nil {
		t.Fatalf("tmux: %v\n%s", err, out)
	}
	t.Cleanup(func() { tmux("kill-session", "-t", sess) })
	screen := func() string { return tmux("capture-pane", "-p", "-t", sess) }
	// The screen changes while the demo runs, so these waits are bounded
	// by the overall limit; a frozen screen fails after the stall window.
	waitFor := func(what string, ok func(string) bool) string {
		t.Helper()
		var s string
		waitfor.T(t, context.Background(), what+" on screen", screenWait, func() error {
			if s = screen(); ok(s) {
				return nil
			}
			return fmt.Errorf("screen:\n%s", s)
		})
		return s
	}
	// the first screen: grid, queue head, running jobs with their plan
	// and throughput, the simulated clock and the trace's progress
	s := waitFor("the overview with a running job", func(s string) bool {
		return strings.Contains(s, "a800-08") && strings.Contains(s, "WAITING") && strings.Contains(s, "RUNNING") &&
			strings.Contains(s, "j-0000") && strings.Contains(s, "·TP") && strings.Contains(s, "MEAS/PRED") && strings.Contains(s, "GPUs free · Mon ") && strings.Contains(s, "GPU util ") && strings.Contains(s, "UTIL")
	})
	t.Logf("overview:\n%s", s)
	tmux("send-keys", "-t", sess, "2")
	waitFor("the cluster grid", func(s string) bool { return strings.Contains(s, "rack-a") && strings.Contains(s, "a800-08") })
	tmux("send-keys", "-t", sess, "4")
	waitFor("a job plan", func(s string) bool {
		return strings.Contains(s, "DP") && strings.Contains(s, "·TP") && strings.Contains(s, "ZeRO-")
	})
	tmux("send-keys", "-t", sess, "3")
	waitFor("the queue", func(s string) bool { return strings.Contains(s, "REASON") && strings.Contains(s, "ETA") })
	tmux("send-keys", "-t", sess, "6")
	waitFor("events", func(s string) bool { return strings.Contains(s, "submit") && strings.Contains(s, "start") })
	tmux("send-keys", "-t", sess, "7")
	waitFor("the links report", func(s string) bool { return strings.Contains(s, "shared links") })
	tmux("send-keys", "-t", sess, "q")
	waitfor.T(t, context.Background(), "q exits the demo", screenWait, func() error {
		if _, err := exec.Command("tmux", "has-session", "-t", sess).CombinedOutput(); err != nil {
			return nil // the program exited and took the session with it
		}
		return fmt.Errorf("still running:\n%s", screen())
	})
}

// screenWait bounds the tmux tests' waits: a screen that stays the same
// for a minute, or three minutes in all.
var screenWait = waitfor.Options{Stall: time.Minute, Limit: 3 * time.Minute, Poll: 200 * time.Millisecond}

// TestDemoQueueCountsDownInTmux replays a trace that fills the cluster with
// guaranteed jobs and then submits two more: they wait with their delay
// timers, and the queue screen counts them down.
func TestDemoQueueCountsDownInTmux(t *testing.T) {
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Skip("skipped: tmux is not installed (.ci/run installs it)")
	}
	dir := t.TempDir()
	trace := "name,submission_time,duration,application,num_gpus,num_cpus,bandwidth,exec_plan,steps,is_sla\n"
	for i := 1; i <= 8; i++ {
		trace += "t5-" + string(rune('0'+i)) + ",0,3600,t5,8,64,0,ga,200000,1\n"
	}
	trace += "bert-9,60,3600,bert,4,32,0,ga,100000,0\n"
	os.WriteFile(filepath.Join(dir, "trace.csv"), []byte(trace), 0o644)
	args := filepath.Join(dir, "args")
	os.WriteFile(args, []byte("demo\n--speed\n60\n--trace\n"+filepath.Join(dir, "trace.csv")+"\n"), 0o644)
	script := filepath.Join(dir, "run.sh")
	os.WriteFile(script, []byte("#!/bin/sh\ncd "+mustWd(t)+"\nREPLAN_TEST_ARGS_FILE="+args+" exec "+os.Args[0]+" -test.run '^$'\n"), 0o755)
	sess := "replan-queue-test-" + filepath.Base(dir)
	tmux := func(a ...string) string {
		out, _ := exec.Command("tmux", a...).CombinedOutput()
		return string(out)
	}
	if out, err := exec.Command("tmux", "new-session", "-d", "-s", sess, "-x", "120", "-y", "20", script).CombinedOutput(); err != nil {
		t.Fatalf("tmux: %v\n%s", err, out)
	}
	t.Cleanup(func() { tmux("kill-session", "-t", sess) })
	rack := func() (string, string) {
		col := -1
		for _, line := range strings.Split(tmux("capture-pane", "-p", "-t", sess), "\n") {
			r := []rune(line)
			if i := strings.Index(line, "RACK-T"); i >= 0 {
				col = len([]rune(line[:i]))
			}
			if strings.Contains(line, "bert-9") && col >= 0 && col+6 <= len(r) {
				// the rack timer is the cell under RACK-T
				if w := strings.TrimSpace(string(r[col : col+6])); timerRE.MatchString(w) {
					return w, line
				}
			}
		}
		return "", ""
	}
	var first string
	waitfor.T(t, context.Background(), "a waiting job with timers", screenWait, func() error {
		tmux("send-keys", "-t", sess, "3")
		if first, _ = rack(); first == "" {
			return fmt.Errorf("screen:\n%s", tmux("capture-pane", "-p", "-t", sess))
		}
		return nil
	})
	if !strings.Contains(tmux("capture-pane", "-p", "-t", sess), "RACK-T") {
		t.Fatal("no timer columns")
	}
	waitfor.T(t, context.Background(), "the rack timer counting down from "+first, screenWait, func() error {
		now, line := rack()
		if now != "" && now != first {
			t.Logf("rack timer %s -> %s: %s", first, now, line)
			return nil
		}
		return fmt.Errorf("rack timer %q: %s", now, line)
	})
	tmux("send-keys", "-t", sess, "q")
}

var timerRE = regexp.MustCompile(`^\d+h\d+m$`)

// mustWd is the repository root: the demo runs from there, as `make demo`
// does, so its default data directory (../shared/data/morphling) resolves.
func mustWd(t *testing.T) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Dir(wd)
}

// TestDemoBackendHasLinks: the demo's backend passes on the optional
// Links capability of the control backend (screen 6 loads in the demo);
// embedding tui.Backend alone hid it.
func TestDemoBackendHasLinks(t *testing.T) {
	var b tui.Backend = demoBackend{Backend: controlbackend.New(control.NewUnixClient(filepath.Join(t.TempDir(), "none.sock")))}
	if _, ok := b.(tui.LinksBackend); !ok {
		t.Fatal("the demo backend does not offer Links: the links screen never loads in the demo")
	}
	if _, ok := b.(tui.Speeder); !ok {
		t.Fatal("the demo backend lost SetSpeed")
	}
	if _, ok := b.(tui.Historian); !ok {
		t.Fatal("the demo backend hides the history")
	}
	if _, ok := b.(tui.Operator); !ok {
		t.Fatal("the demo backend hides undrain, hold and release")
	}
}
