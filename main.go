// Command replan manages a bare-metal GPU training cluster: it chooses
// execution plans for DeepSpeed and Megatron jobs with a fitted performance
// model, places them on server/rack tiers with self-tuning delay timers,
// time-shifts jobs that share links and reconfigures them as the cluster
// changes. See README.md and docs/ for the tour.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "replan:", err)
		os.Exit(1)
	}
}

// run builds the command tree and executes it with args. It is the whole CLI,
// callable from tests.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	root := newRootCmd(stdout, stderr)
	root.SetArgs(args)
	return root.ExecuteContext(ctx)
}
