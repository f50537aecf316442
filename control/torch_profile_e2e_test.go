package control_test

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/replan/replan/control"
	"github.com/replan/replan/internal/sshtest"
	"github.com/replan/replan/internal/waitfor"
	"github.com/replan/replan/launch"
)

// TestTorchProfileEndToEnd (issue 25, item 5): the trainer fixture's
// model type has no profile and no injected model. The daemon (SSH
// executor, replan's policy, profiling on arrival) profiles it with real
// torchrun over the sshd hosts (≤ 7 configurations, each a stored sample;
// the fixture refuses model parallelism, so a PP run "does not fit"),
// fits, and places the job on 2 servers × 2 processes. The policy's
// prediction at the start is compared with the throughput then measured
// (≤ 25 % apart on the emulated device). Then one of its hosts' link goes
// down: the job goes back to the queue from its last checkpoint and
// resumes on the servers left, losing at most one save interval. Its
// summary is the second line `make e2e-torch` prints.
func TestTorchProfileEndToEnd(t *testing.T) {
	e := beginTorchE2E(t, "make e2e-torch", 10*time.Minute)
	trainer, began, tmp, ctx, log := e.trainer, e.began, e.tmp, e.ctx, e.log

	th := startTorchHosts(t, ctx, tmp, "rp-tp", 23, log)
	hosts, netns, invPath, remoteDir, dirs := th.hosts, th.netns, th.invPath, th.remoteDir, th.dirs
	t.Logf("3 hosts (network namespaces, routed: %v) with agents at %s", netns, time.Since(began).Round(time.Millisecond))

	work := filepath.Join(tmp, "work")
	ckpt := filepath.Join(tmp, "ckpt", "torch")
	for _, d := range []string{work, ckpt} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// 100 iterations: after the host failure the job runs ~70 more (~35
	// s), long enough to be observed running again while each observation
	// waits out the cut host's call timeout (70 left it ~20 s, and a CI run
	// saw it only finished).
	const iterations, saveInterval = 100, 10
	lossLog := filepath.Join(tmp, "loss.txt")
	// The job's own save interval (never overridden): a host failure
	// loses at most that many iterations. Each profile run measures 10
	// iterations within 90 s (with 6, a run's median was of 2
	// measurements, and on a loaded machine its figure and the job's
	// differed by a third on the same plan and placement); the phase is
	// bounded at 5 minutes.
	spec := fmt.Appendf(nil, `version: 1
name: torch-profiled
tenant: research
class: best-effort
model: %s
framework: megatron
workdir: %s
entrypoint: %s
args: [--mock-data, --tokenizer-type, NullTokenizer, --seed, "1234", --lr, "0.003", --save-interval, "%d"]
env: {PATH: "/usr/bin:/bin:/usr/sbin:/sbin", TRAINER_FORWARD_S: %q, TRAINER_LOSS_LOG: %q}
global_batch: 16
iterations: %d
checkpoint_dir: %s
request: {gpus: 4, cpus: 4}
profile: {iterations: 10, run_seconds: 90, phase_seconds: 300}
`, tinyModel, work, trainer, saveInterval, forwardS, lossLog, iterations, ckpt)

	cfg := testDaemonConfig{Inventory: invPath, RemoteDir: remoteDir, DB: filepath.Join(tmp, "replan.db"), Socket: filepath.Join(tmp, "replan.sock"), WaitTimeoutS: 120,
		Policy: "replan", Profile: &control.ProfileOptions{Enabled: true}}
	startDaemon, client, daemonLog := startTestDaemon(t, ctx, tmp, cfg)
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		b, _ := os.ReadFile(daemonLog)
		t.Logf("daemon log:\n%s", tail(string(b), 80))
		for _, d := range dirs {
			logs, _ := filepath.Glob(filepath.Join(d, "agent", "procs", "*", "*.log"))
			for _, l := range logs {
				if c, err := os.ReadFile(l); err == nil {
					t.Logf("%s:\n%s", l, tail(string(c), 10))
				}
			}
		}
	})
	startDaemon()
	r, err := client.Submit(ctx, "torch.yaml", spec)
	if err != nil {
		t.Fatalf("submit: %v", err)
	}
	id := r.ID
	trace := waitfor.Options{Stall: 150 * time.Second, Log: func(s string) { t.Logf("%s: %s", time.Since(began).Round(time.Millisecond), s) }}
	placed := func(rec control.JobRecord) []launch.Server {
		var pl []launch.Server
		_ = json.Unmarshal(rec.Placement, &pl)
		return pl
	}

	// Profiled, fitted, started on 2 servers × 2 processes, measured.
	var first control.JobDetail
	reasons := map[string]bool{}
	waitfor.T(t, ctx, "the job profiled, started on 2 servers × 2 processes and measured", trace, func() error {
		first = mustDetail(t, ctx, client, id)
		j := first.Job
		if strings.HasPrefix(j.Reason, "profiling ") {
			reasons[j.Reason] = true
		}
		pl := placed(j)
		if j.State != control.StateRunning || j.Iterations < 8 || first.Throughput.MeasuredSPS <= 0 || len(pl) != 2 || len(pl[0].GPUs) != 2 || len(pl[1].GPUs) != 2 {
			return fmt.Errorf("%s at %d iterations on %d servers, measured %.2f samples/s (%s)", j.State, j.Iterations, len(pl), first.Throughput.MeasuredSPS, j.Reason)
		}
		return nil
	})
	evs, err := client.Events(ctx, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var phaseFrom, phaseTo time.Time
	runs, measured := 0, 0
	var profiled string
	for _, e := range evs {
		switch {
		case e.Kind == "profile" && phaseFrom.IsZero():
			phaseFrom = e.At
		case e.Kind == "profile" && (strings.Contains(e.Msg, " s per iteration") || strings.Contains(e.Msg, "does not fit")):
			runs++
			if strings.Contains(e.Msg, " s per iteration") {
				measured++
			}
			t.Logf("event: %s", e.Msg)
		case e.Kind == "profiled":
			phaseTo, profiled = e.At, e.Msg
		}
	}
	t.Logf("event: %s", profiled)
	if runs < 3 || runs > 7 || measured < 3 || phaseTo.IsZero() {
		t.Fatalf("profiling: %d runs, %d measured, ended %v (%s)", runs, measured, phaseTo, profiled)
	}
	if len(reasons) == 0 {
		t.Errorf("the job's reason never said it was profiling")
	}
	models, err := client.Models(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	var fitted *control.ModelInfo
	for i, m := range models {
		if m.Type == "tinygpt/16/megatron" {
			fitted = &models[i]
		}
	}
	if fitted == nil || fitted.FittedAt == nil || fitted.Samples < measured {
		t.Fatalf("models: %+v", models)
	}
	// The policy's prediction when it started the job (the profiled
	// model's), against what the job then measured: the mean of its
	// measurements over a few more iterations.
	predicted := 0.0
	for _, dr := range first.Decisions {
		if dr.Kind == "start" {
			var det struct {
				Throughput float64 `json:"throughput"`
			}
			_ = json.Unmarshal(dr.Detail, &det)
			predicted = det.Throughput
		}
	}
	var sum float64
	var n, lastIter int
	waitfor.T(t, ctx, "eight measurements of the running job", trace, func() error {
		d := mustDetail(t, ctx, client, id)
		if d.Job.State == control.StateRunning && d.Throughput.MeasuredSPS > 0 && d.Job.Iterations != lastIter {
			sum += d.Throughput.MeasuredSPS // one per iteration seen
			n++
			lastIter = d.Job.Iterations
		}
		if n < 8 {
			return fmt.Errorf("%d measurements (%s at %d iterations)", n, d.Job.State, d.Job.Iterations)
		}
		return nil
	})
	meas := sum / float64(n)
	t.Logf("profiled %d configurations (%d measured) in %s; model %s: %d samples, %.1f%% error on them; the job started on %s, plan %s: predicted %.2f samples/s, measured %.2f",
		runs, measured, phaseTo.Sub(phaseFrom).Round(time.Second), fitted.Type, fitted.Samples, fitted.ErrPct, serverList(placed(first.Job)), first.Job.Plan, predicted, meas)
	if predicted <= 0 || math.Abs(predicted-meas)/meas > 0.25 {
		t.Errorf("predicted %.2f samples/s at the start, measured %.2f: more than 25%% apart", predicted, meas)
	}

	// A host's link goes down past a checkpoint: the job resumes on the
	// servers left from its last checkpoint.
	// (with eight iterations measured above, the job is past its first)
	waitfor.T(t, ctx, "the job past its second checkpoint", trace, func() error {
		d := mustDetail(t, ctx, client, id)
		if d.Job.Checkpoint < 2*saveInterval || d.Job.Iterations < 2*saveInterval+3 {
			return fmt.Errorf("%s at %d iterations, checkpoint %d", d.Job.State, d.Job.Iterations, d.Job.Checkpoint)
		}
		return nil
	})
	pl := placed(mustDetail(t, ctx, client, id).Job)
	var cut *sshtest.Host
	for i := range hosts {
		if hosts[i].Name == pl[len(pl)-1].Name {
			cut = &hosts[i]
		}
	}
	if cut == nil || cut.NS == nil {
		t.Fatalf("no network namespace to cut for %s (netns %v)", pl[len(pl)-1].Name, netns)
	}
	if out, err := exec.Command("ip", "link", "set", cut.NS.HostIf, "down").CombinedOutput(); err != nil {
		t.Fatalf("link down: %v: %s", err, out)
	}
	cutAt := time.Now()
	t.Logf("%s: the link of %s (%s) is down; the job ran on %s", time.Since(began).Round(time.Millisecond), cut.Name, cut.NS.HostIf, serverList(pl))
	var resumed control.JobDetail
	waitfor.T(t, ctx, "the job running again on the servers left, past its checkpoint", trace, func() error {
		resumed = mustDetail(t, ctx, client, id)
		j := resumed.Job
		for _, s := range placed(j) {
			if s.Name == cut.Name {
				return fmt.Errorf("%s on %s (%s)", j.State, serverList(placed(j)), j.Reason)
			}
		}
		if j.State != control.StateRunning || j.Restarts < 1 || resumed.Throughput.MeasuredSPS <= 0 {
			return fmt.Errorf("%s on %s at %d iterations, %d restarts (%s)", j.State, serverList(placed(j)), j.Iterations, j.Restarts, j.Reason)
		}
		return nil
	})
	// What the trainer logged twice: the iterations done before the
	// failure past the checkpoint the new launch resumed from (none when
	// the link went down just after a checkpoint).
	resumedFrom := resumedAt(t, dirs, id) - 1
	lost := lostIterations(lossLog)
	maxBefore := resumedFrom + lost
	t.Logf("%s: resumed on %s from checkpoint %d after %s; the trainer had logged iteration %d: %d iterations lost (save interval %d)",
		time.Since(began).Round(time.Millisecond), serverList(placed(resumed.Job)), resumedFrom, time.Since(cutAt).Round(time.Second), maxBefore, lost, saveInterval)
	if lost < 0 || lost > saveInterval {
		t.Errorf("lost %d iterations on the host failure, want at most one save interval (%d)", lost, saveInterval)
	}
	if t.Failed() {
		return
	}
	summary := fmt.Sprintf("torch profile: profiled %d configs in %.0f s, predicted %.2f samples/s, measured %.2f, lost %d iterations on host failure, ok",
		runs, phaseTo.Sub(phaseFrom).Seconds(), predicted, meas, lost)
	writeTorchSummary(t, summary)
	t.Logf("end-to-end took %s", time.Since(began).Round(time.Millisecond))
	t.Log(summary)
}

// lossIterations are the iterations of the trainer's loss log in the
// order it logged them.
func lossIterations(path string) []int {
	b, _ := os.ReadFile(path)
	var out []int
	for _, l := range strings.Split(string(b), "\n") {
		if it, _, ok := parseLossLine(l); ok {
			out = append(out, it)
		}
	}
	return out
}

// serverList names servers: "h2, h3".
func serverList(pl []launch.Server) string {
	var names []string
	for _, s := range pl {
		names = append(names, s.Name)
	}
	if len(names) == 0 {
		return "no server"
	}
	return strings.Join(names, ", ")
}
