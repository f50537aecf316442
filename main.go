// Command replan manages a bare-metal GPU training cluster: it chooses
// execution plans for DeepSpeed and Megatron jobs with a fitted performance
// model, places them on server/rack tiers with self-tuning delay timers,
// time-shifts jobs that share links and reconfigures them as the cluster
// changes. See README.md and docs/ for the tour; the commands live in cli/.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/replan/replan/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	status := cli.Run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(status)
}
