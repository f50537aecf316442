package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestMainExitsWithCLIStatus builds nothing new: it runs this test binary's
// main through `go run` to check the exit status reaches the shell.
func TestMainExitsWithCLIStatus(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go tool not on PATH")
	}
	cmd := exec.Command(gobin, "run", ".", "no-such-command")
	cmd.Env = os.Environ()
	out, err := cmd.CombinedOutput()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != 1 {
		t.Fatalf("replan no-such-command: err %v, want exit status 1\n%s", err, out)
	}
	if !strings.Contains(string(out), "replan: unknown command") {
		t.Errorf("output %q lacks \"replan: unknown command\"", out)
	}
}
