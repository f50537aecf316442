package launch

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/replan/replan/jobspec"
	"github.com/replan/replan/perf"
)

// localRun is a trainer process run by the test executor: the fake trainer
// stands in for the rendered deepspeed command, with the rendered
// environment.
type localRun struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	its  []int
	done chan struct{}
}

var stepRE = regexp.MustCompile(`global_step=(\d+)`)

func startLocal(t *testing.T, sl ServerLaunch) *localRun {
	t.Helper()
	cmd := exec.Command("sh", "testdata/fake-trainer.sh")
	cmd.Env = append(cmd.Env, SortedEnv(sl.Env)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := &localRun{cmd: cmd, done: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if m := stepRE.FindStringSubmatch(sc.Text()); m != nil {
				n, _ := strconv.Atoi(m[1])
				r.mu.Lock()
				r.its = append(r.its, n)
				r.mu.Unlock()
			}
		}
		cmd.Wait()
		close(r.done)
	}()
	t.Cleanup(func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	return r
}

func (r *localRun) iterations() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]int(nil), r.its...)
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestReconfigureSequenceAgainstAFakeJob carries out Reconfigure's steps
// on a real process that checkpoints on SIGTERM: progress must continue
// from the checkpoint, nothing repeated or lost beyond it.
func TestReconfigureSequenceAgainstAFakeJob(t *testing.T) {
	ckpt := t.TempDir()
	j := job(t, jobspec.DeepSpeed, "llama7b", 16)
	j.CheckpointDir = ckpt
	old := Input{Job: j, Plan: perf.Plan{DP: 8, TP: 1, PP: 1, MicroBatch: 2, GA: 1, ZeRO: 2}, Servers: servers(8)}
	first, err := Render(old)
	if err != nil {
		t.Fatal(err)
	}
	run := startLocal(t, first.Servers[0])
	waitFor(t, "some progress", func() bool { return len(run.iterations()) >= 20 })
	last := run.iterations()[len(run.iterations())-1]

	next := Input{Job: j, Plan: perf.Plan{DP: 4, TP: 1, PP: 1, MicroBatch: 2, GA: 2, ZeRO: 1}, Servers: servers(4)}
	steps, err := Reconfigure(old, next, last)
	if err != nil {
		t.Fatal(err)
	}
	var marker int
	var resumed *localRun
	for _, s := range steps {
		switch s.Kind {
		case StepCheckpoint:
			if err := syscall.Kill(-run.cmd.Process.Pid, syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
		case StepWaitCheckpoint:
			if s.Path != filepath.Join(ckpt, "latest") {
				t.Fatalf("marker %s", s.Path)
			}
			waitFor(t, "the checkpoint marker", func() bool {
				b, err := os.ReadFile(s.Path)
				if err != nil {
					return false
				}
				marker, _ = strconv.Atoi(strings.TrimSpace(string(b)))
				return marker >= s.Iteration
			})
		case StepStop:
			select {
			case <-run.done:
			case <-time.After(20 * time.Second):
				t.Fatal("the job did not exit after its checkpoint")
			}
			if code := run.cmd.ProcessState.ExitCode(); code != 0 {
				t.Fatalf("exit code %d after SIGTERM", code)
			}
		case StepConvert:
			if len(s.Argv) == 0 || !strings.Contains(strings.Join(s.Argv, " "), "ds_to_universal") {
				t.Fatalf("convert %v", s.Argv)
			}
		case StepLaunch:
			resumed = startLocal(t, s.Launch.Servers[0])
		case StepVerify:
			waitFor(t, "progress beyond the checkpoint", func() bool {
				its := resumed.iterations()
				return len(its) > 0 && its[len(its)-1] > s.Iteration
			})
		default:
			t.Fatalf("unknown step %s", s.Kind)
		}
	}
	its := resumed.iterations()
	if its[0] != marker+1 {
		t.Errorf("resumed at iteration %d, checkpoint was %d", its[0], marker)
	}
	if marker < last {
		t.Errorf("checkpoint %d is behind the last iteration seen before it %d", marker, last)
	}
	t.Logf("reconfigured at iteration %d, resumed at %d", marker, its[0])
}
