package control

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// torchrun's report after a worker failed is left out of a failure's
// quoted lines: what the worker said is quoted, with torchrun's line that
// it failed. Before, the five last lines were the report's (rank,
// exitcode, error_file: <N/A>, traceback: To enable traceback see…, a
// rule), never the worker's message.
func TestQuoteLinesSkipsTorchrunsReport(t *testing.T) {
	report := strings.Join([]string{
		"Traceback (most recent call last):",
		`  File "/usr/bin/torchrun", line 33, in <module>`,
		"torch.distributed.elastic.multiprocessing.errors.ChildFailedError:",
		"============================================================",
		"train.py FAILED",
		"Root Cause (first observed failure):",
		"[0]:",
		"  rank      : 0 (local_rank: 0)",
		"  exitcode  : 1 (pid: 14637)",
		"  error_file: <N/A>",
		"  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html",
		"============================================================",
	}, "\n")
	for _, c := range []struct{ name, failed string }{
		{"torch 1.13", "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: 1) local_rank: 0 (pid: 14637) of binary: /usr/bin/python3.11"},
		{"torch 2.x", "E1127 12:59:06.123000 14600 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: 1) local_rank: 0 (pid: 14637) of binary: /usr/bin/python3"},
	} {
		out := "[default0]:step 1 loss 3.2\ntrainer: only TP = PP = 1 (data parallel) is supported\n" + c.failed + "\n" + report + "\n"
		got := quoteLines(out, failTailLines)
		want := "; last lines: [default0]:step 1 loss 3.2 ⏎ trainer: only TP = PP = 1 (data parallel) is supported ⏎ torchrun: failed (exitcode: 1) local_rank: 0 (pid: 14637)"
		if got != want {
			t.Errorf("%s:\n got %q\nwant %q", c.name, got, want)
		}
	}
	// A log without torchrun's report is quoted as before: its last lines.
	if got := quoteLines("a\nb\n\nc\nd\ne\nf\n", 5); got != "; last lines: b ⏎ c ⏎ d ⏎ e ⏎ f" {
		t.Errorf("plain log: %q", got)
	}
	// A worker's own line that mentions a failure is not torchrun's.
	if got := quoteLines("x\nmy job failed (exitcode: 3) local_rank: 0\ny\n", 5); !strings.HasSuffix(got, " ⏎ y") {
		t.Errorf("a worker's line read as torchrun's: %q", got)
	}
}

// The same with the real torchrun (python3-torch): a worker that prints
// and exits with a message; the quote of torchrun's whole output has the
// worker's message and torchrun's failed line, and none of its report.
func TestQuoteLinesOfARealTorchrunFailure(t *testing.T) {
	if testing.Short() {
		t.Skip("runs torchrun")
	}
	torchrun, err := exec.LookPath("torchrun")
	if err != nil {
		t.Skip("no torchrun (apt-get install python3-torch)")
	}
	dir := t.TempDir()
	script := filepath.Join(dir, "fail.py")
	if err := os.WriteFile(script, []byte("import sys\nprint('step 1 loss 3.2', flush=True)\nsys.exit('trainer: only TP = PP = 1 is supported')\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// The flags replan renders (launch.megatron).
	out, err := exec.CommandContext(ctx, torchrun, "--nnodes", "1", "--nproc_per_node", "1", "--node_rank", "0",
		"--master_addr", "127.0.0.1", "--master_port", "0", "--redirects", "1", "--tee", "1", script).CombinedOutput()
	if err == nil {
		t.Fatalf("torchrun of a failing worker exited 0:\n%s", out)
	}
	if !strings.Contains(string(out), "error_file") {
		t.Skipf("this torchrun prints no failure report; output:\n%s", out)
	}
	got := quoteLines(string(out), failTailLines)
	for _, w := range []string{"trainer: only TP = PP = 1 is supported", "torchrun: failed (exitcode: 1)"} {
		if !strings.Contains(got, w) {
			t.Errorf("quote %q lacks %q; torchrun said:\n%s", got, w, out)
		}
	}
	if strings.Contains(got, "error_file") || strings.Contains(got, "=====") {
		t.Errorf("quote %q has torchrun's report", got)
	}
}
