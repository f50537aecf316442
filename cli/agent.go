package cli

import (
	"io"
	"log/slog"
	"os/signal"
	"syscall"

	"github.com/replan/replan/agent"
	"github.com/spf13/cobra"
)

// newAgentCmd is `replan agent`: the per-server agent (see docs/agent.md).
// The standalone cmd/replan-agent binary runs the same code and is the
// small one to deploy.
func newAgentCmd(stdout, stderr io.Writer) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "The per-server agent: GPU state, process supervision, throughput samples",
	}
	sock, state := agent.DefaultPaths()
	cfg := agent.Config{Version: version}
	var debug bool
	serve := &cobra.Command{
		Use:   "serve",
		Short: "Serve the agent API on a unix socket (the manager reaches it over SSH)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			// Losing the SSH session that started the agent must not stop it.
			signal.Ignore(syscall.SIGHUP)
			level := slog.LevelInfo
			if debug {
				level = slog.LevelDebug
			}
			c := cfg
			c.Log = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
			return agent.Run(cmd.Context(), c)
		},
	}
	f := serve.Flags()
	f.StringVar(&cfg.SocketPath, "socket", sock, "unix socket to serve the API on (mode 0600)")
	f.StringVar(&cfg.StateDir, "state-dir", state, "directory for process records and logs")
	f.StringVar(&cfg.FakeGPUs, "fake-gpus", "", `fake GPUs, e.g. "8xA800" (empty: use NVML when available)`)
	f.DurationVar(&cfg.SampleInterval, "sample-interval", agent.DefaultSampleInterval, "GPU sampling interval")
	f.BoolVar(&debug, "debug", false, "debug logging")
	cmd.AddCommand(serve)
	return cmd
}
