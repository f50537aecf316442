package control_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/replan/replan/control"
	"github.com/replan/replan/jobspec"
	"github.com/replan/replan/launch"
)

var stepRe = regexp.MustCompile(`global_step=(\d+)`)

// withoutShellNoise drops the lines of a log that are not step lines: the
// shell of a trainer stopped while it sleeps may print "Terminated".
func withoutShellNoise(log string) string {
	var keep []string
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, "global_step=") {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}

// stepLines splits a log into lines and checks each is a DeepSpeed step
// line of rank 0, the steps consecutive; it returns the steps.
func stepLines(t *testing.T, what, log string) []int {
	t.Helper()
	var steps []int
	for _, l := range strings.Split(strings.TrimRight(log, "\n"), "\n") {
		if l == "" {
			continue
		}
		m := stepRe.FindStringSubmatch(l)
		if m == nil || !strings.HasPrefix(l, "[Rank 0] ") {
			t.Fatalf("%s: %q is not a step line of rank 0\nlog:\n%s", what, l, log)
		}
		n, _ := strconv.Atoi(m[1])
		if len(steps) > 0 && n != steps[len(steps)-1]+1 {
			t.Fatalf("%s: step %d after %d\nlog:\n%s", what, n, steps[len(steps)-1], log)
		}
		steps = append(steps, n)
	}
	return steps
}

// TestSSHExecutorLogs reads a job's log through the SSH executor: the last
// lines of rank 0 of the running launch (a two-server job whose trainer
// prints its rank), following it until the context ends, and after the
// job stopped the newest launch's rank 0 that the agents still keep, also
// from a new executor that tracks nothing.
func TestSSHExecutorLogs(t *testing.T) {
	c := newTestCluster(t)
	ctx := c.ctx
	trainer := filepath.Join(c.tmp, "ranked-trainer.sh")
	if err := os.WriteFile(trainer, []byte(strings.ReplaceAll(fakeTrainer, "[Rank 0]", "[Rank $rank]")), 0o755); err != nil {
		t.Fatal(err)
	}
	opts := control.SSHOptions{Logger: c.log, StopGrace: 10 * time.Second, KillGrace: 2 * time.Second, WaitTimeout: 20 * time.Second, Poll: 100 * time.Millisecond, NoCPUBinding: true}
	ex, err := control.NewSSHExecutor(c.fl, c.inv.Servers, opts)
	if err != nil {
		t.Fatal(err)
	}
	spec, err := jobspec.Parse("logs.yaml", c.jobSpec("logs", "best-effort", 8, 100000), nil)
	if err != nil {
		t.Fatal(err)
	}
	spec.Entrypoint = trainer
	srv := func(i, gpus int) launch.Server {
		s := c.inv.Servers[i]
		ls := launch.Server{Name: s.Name, Address: s.Address}
		for g := range gpus {
			ls.GPUs = append(ls.GPUs, g)
		}
		return ls
	}
	read := func(ex *control.SSHExecutor, id string, tail int) string {
		t.Helper()
		rc, err := ex.Logs(ctx, id, tail, false)
		if err != nil {
			t.Fatalf("logs of %s: %v", id, err)
		}
		defer rc.Close()
		b, err := io.ReadAll(rc)
		if err != nil {
			t.Fatalf("read logs of %s: %v", id, err)
		}
		return string(b)
	}

	// Rank 0 on h2, rank 1 on h3.
	l := control.Launch{JobID: "j-910001", Spec: spec, Plan: spec.Request.Plan, Servers: []launch.Server{srv(1, 4), srv(2, 4)}}
	if err := ex.Start(ctx, l); err != nil {
		t.Fatal(err)
	}
	var tailed []int
	poll(t, ctx, "three log lines", 20*time.Second, func() error {
		log := read(ex, l.JobID, 3)
		if strings.Count(log, "global_step=") < 3 {
			return errors.New("log: " + log)
		}
		tailed = stepLines(t, "tail 3", log)
		return nil
	})
	if len(tailed) != 3 {
		t.Fatalf("tail 3 gave %d lines: %v", len(tailed), tailed)
	}

	// Follow until the log grew by 20 lines, then cancel.
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	rc, err := ex.Logs(fctx, l.JobID, 3, true)
	if err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 1000)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(rc)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	var followed []string
	timeout := time.After(10 * time.Second)
grow:
	for len(followed) < 3+20 {
		select {
		case ln, ok := <-lines:
			if !ok {
				t.Fatalf("follow ended before ctx was cancelled, after %d lines", len(followed))
			}
			followed = append(followed, ln)
		case <-timeout:
			break grow
		}
	}
	cancel()
	ended := time.After(5 * time.Second)
drain:
	for {
		select {
		case ln, ok := <-lines:
			if !ok {
				break drain
			}
			followed = append(followed, ln)
		case <-ended:
			t.Fatal("follow still streams 5 s after its context was cancelled")
		}
	}
	rc.Close()
	steps := stepLines(t, "follow", strings.Join(followed, "\n"))
	if len(steps) < 3+20 || steps[len(steps)-1] <= tailed[2] {
		t.Fatalf("follow gave %d lines (steps %d..%d) after a tail ending at %d", len(steps), steps[0], steps[len(steps)-1], tailed[2])
	}
	t.Logf("tail 3: steps %v; follow: %d lines, steps %d..%d", tailed, len(steps), steps[0], steps[len(steps)-1])

	// Stopped with a checkpoint the job is no longer tracked: its newest
	// process, rank 0 of attempt 0, still has the log, which ends at the
	// checkpoint; following it ends by itself once the log is drained.
	ckpt, err := ex.Stop(ctx, l.JobID, true)
	if err != nil {
		t.Fatal(err)
	}
	after := stepLines(t, "tail after stop", withoutShellNoise(read(ex, l.JobID, 4)))
	if len(after) < 3 || after[len(after)-1] != ckpt {
		t.Fatalf("after a stop at checkpoint %d the log ends %v", ckpt, after)
	}
	dctx, dcancel := context.WithTimeout(ctx, 10*time.Second)
	defer dcancel()
	rc, err = ex.Logs(dctx, l.JobID, 3, true)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || dctx.Err() != nil {
		t.Fatalf("follow of an exited process did not end by itself: %v (ctx %v)", err, dctx.Err())
	}
	if s := stepLines(t, "follow after stop", withoutShellNoise(string(b))); len(s) < 2 || s[len(s)-1] != ckpt {
		t.Fatalf("follow after the stop: %v, want lines ending at %d", s, ckpt)
	}

	// A resumed launch (attempt 1, on h1), stopped: a new executor, which
	// tracks nothing, reads attempt 1's log, which begins after the
	// checkpoint.
	l2 := l
	l2.Attempt, l2.Resume, l2.From = 1, true, ckpt
	l2.Servers = []launch.Server{srv(0, 8)}
	if err := ex.Start(ctx, l2); err != nil {
		t.Fatal(err)
	}
	poll(t, ctx, "the resumed launch logging", 20*time.Second, func() error {
		if n := strings.Count(read(ex, l.JobID, 5), "global_step="); n < 5 {
			return errors.New("fewer than 5 lines")
		}
		return nil
	})
	if _, err := ex.Stop(ctx, l.JobID, false); err != nil {
		t.Fatal(err)
	}
	ex2, err := control.NewSSHExecutor(c.fl, c.inv.Servers, opts)
	if err != nil {
		t.Fatal(err)
	}
	all := stepLines(t, "attempt 1 from a new executor", withoutShellNoise(read(ex2, l.JobID, -1)))
	if len(all) < 5 || all[0] != ckpt+1 {
		t.Fatalf("a new executor read steps %d..%d (%d lines), want attempt 1's from %d", all[0], all[len(all)-1], len(all), ckpt+1)
	}

	// Every attempt's log (issue 28: `logs` showed only the current
	// attempt): attempt 0's ends at the checkpoint, attempt 1's begins
	// after it, and an attempt that never ran is not found, by name.
	readAttempt := func(attempt int) (string, error) {
		rc, err := ex2.AttemptLogs(ctx, l.JobID, attempt, -1, false)
		if err != nil {
			return "", err
		}
		defer rc.Close()
		b, err := io.ReadAll(rc)
		return string(b), err
	}
	a0, err := readAttempt(0)
	if err != nil {
		t.Fatal(err)
	}
	if s := stepLines(t, "attempt 0", withoutShellNoise(a0)); len(s) < 3 || s[0] != 1 || s[len(s)-1] != ckpt {
		t.Fatalf("attempt 0's log: steps %v, want 1..%d", s, ckpt)
	}
	a1, err := readAttempt(1)
	if err != nil {
		t.Fatal(err)
	}
	if s := stepLines(t, "attempt 1", withoutShellNoise(a1)); len(s) < 5 || s[0] != ckpt+1 {
		t.Fatalf("attempt 1's log: steps %v, want from %d", s, ckpt+1)
	}
	if _, err := readAttempt(5); !errors.Is(err, control.ErrNotFound) || !strings.Contains(err.Error(), "its attempt 5") {
		t.Fatalf("logs of an attempt that never ran: %v", err)
	}

	// No process of the job anywhere: a clear not-found error.
	_, err = ex2.Logs(ctx, "j-919999", 10, false)
	if !errors.Is(err, control.ErrNotFound) || !strings.Contains(err.Error(), "no process of the job") {
		t.Fatalf("logs of an unknown job: %v", err)
	}
	t.Logf("logs checks (netns %v) took %s", c.netns, time.Since(c.began).Round(time.Millisecond))
}
