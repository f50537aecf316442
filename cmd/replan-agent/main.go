// Command replan-agent is replan's per-server agent as a small standalone
// binary (the same agent as `replan agent serve`, without the rest of
// replan). It serves the agent API on a unix socket only; the manager
// reaches it through SSH. See docs/agent.md.
//
//	replan-agent [serve] [--socket PATH] [--state-dir DIR] [--fake-gpus 8xA800] [--sample-interval 1s]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/replan/replan/agent"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// Losing the SSH session that started the agent must not stop it.
	signal.Ignore(syscall.SIGHUP)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "replan-agent:", err)
		os.Exit(1)
	}
}

// run parses args and runs the agent until ctx is done.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "version" {
		fmt.Fprintln(stdout, version)
		return nil
	}
	if len(args) > 0 && args[0] == "serve" {
		args = args[1:]
	}
	sock, state := agent.DefaultPaths()
	cfg := agent.Config{Version: version}
	fs := flag.NewFlagSet("replan-agent", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&cfg.SocketPath, "socket", sock, "unix socket to serve the API on (mode 0600)")
	fs.StringVar(&cfg.StateDir, "state-dir", state, "directory for process records and logs")
	fs.StringVar(&cfg.FakeGPUs, "fake-gpus", "", `fake GPUs, e.g. "8xA800" (empty: use NVML when available)`)
	fs.DurationVar(&cfg.SampleInterval, "sample-interval", agent.DefaultSampleInterval, "GPU sampling interval")
	debug := fs.Bool("debug", false, "debug logging")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	level := slog.LevelInfo
	if *debug {
		level = slog.LevelDebug
	}
	cfg.Log = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	return agent.Run(ctx, cfg)
}
