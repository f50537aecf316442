// Package cli is replan's command line: one file per command or command
// group (daemon.go, jobs.go, sim.go, perf.go, ...). Commands stay thin: they
// parse flags, call the package that does the work and print a table or
// --json. cli is the only package that knows every other package, and no
// package but main imports it.
package cli

import (
	"context"
	"fmt"
	"io"
)

// Run executes the replan command line args and returns the process exit
// status: 0 on success, 1 on any error (printed to stderr as "replan: ...").
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if err := run(ctx, args, stdout, stderr); err != nil {
		fmt.Fprintln(stderr, "replan:", err)
		return 1
	}
	return 0
}

// run builds the command tree and executes it with args. It is the whole CLI,
// callable from tests.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	root := newRootCmd(stdout, stderr)
	root.SetArgs(args)
	return root.ExecuteContext(ctx)
}
