package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestRunHelpListsCommands(t *testing.T) {
	var out, errb bytes.Buffer
	if err := run(context.Background(), []string{"--help"}, &out, &errb); err != nil {
		t.Fatalf("run --help: %v (stderr %q)", err, errb.String())
	}
	for _, want := range []string{"plan", "perf", "demo"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("help output lacks %q:\n%s", want, out.String())
		}
	}
}

func TestRunUnknownCommandFails(t *testing.T) {
	var out, errb bytes.Buffer
	if err := run(context.Background(), []string{"no-such-command"}, &out, &errb); err == nil {
		t.Fatal("unknown command: want error, got nil")
	}
}

func TestRunExitStatus(t *testing.T) {
	var out, errb bytes.Buffer
	if got := Run(context.Background(), []string{"no-such-command"}, &out, &errb); got != 1 {
		t.Fatalf("Run(no-such-command) = %d, want 1", got)
	}
	if !strings.HasPrefix(errb.String(), "replan: ") {
		t.Errorf("stderr %q does not start with \"replan: \"", errb.String())
	}
	if got := Run(context.Background(), []string{"--help"}, &out, &errb); got != 0 {
		t.Fatalf("Run(--help) = %d, want 0", got)
	}
}
