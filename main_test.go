package main

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
