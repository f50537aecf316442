package cli

import (
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/replan/replan/fleet"
	"github.com/replan/replan/ssh"
)

// nodesJSON is the stable --json schema of `replan nodes` (docs/agent.md).
type nodesJSON struct {
	Servers   int          `json:"servers"`
	Reachable int          `json:"reachable"`
	AgentsUp  int          `json:"agents_up"`
	Nodes     []fleet.Node `json:"nodes"`
}

func newNodesCmd(stdout, stderr io.Writer) *cobra.Command {
	var (
		ff             fleetFlags
		timeout, since time.Duration
	)
	cmd := &cobra.Command{
		Use:   "nodes [SERVERS...]",
		Short: "Show every server: reachable, agent version, GPUs used, NVML, health, processes",
		Long: "Ask every server's agent (or the SERVERS named) for its state over SSH.\n" +
			"A server that cannot be reached is a row with its error, not a failure:\n" +
			"the command fails only when the inventory itself is bad. See docs/agent.md.",
		RunE: func(cmd *cobra.Command, args []string) error {
			fl, servers, pool, err := ff.open(args, false, stderr, slog.LevelError)
			if err != nil {
				return err
			}
			defer pool.Close()
			opts := fleet.NodesOptions{Timeout: timeout, HealthWindow: since}
			if isTerminal(stderr) && len(servers) > 1 {
				opts.Progress = (&ssh.ProgressBar{W: stderr, Label: "nodes"}).Update
			}
			nodes := fl.Nodes(cmd.Context(), servers, opts)
			out := nodesJSON{Servers: len(nodes), Nodes: nodes}
			for _, n := range nodes {
				if n.Reachable {
					out.Reachable++
				}
				if n.AgentUp {
					out.AgentsUp++
				}
			}
			if ff.asJSON {
				return writeJSON(stdout, out)
			}
			writeNodesTable(stdout, out)
			return nil
		},
	}
	ff.register(cmd)
	cmd.Flags().DurationVar(&timeout, "timeout", 15*time.Second, "time allowed per server")
	cmd.Flags().DurationVar(&since, "health-window", fleet.DefaultHealthWindow, "Xid/ECC events this recent make a server unhealthy")
	return cmd
}

// writeNodesTable prints one row per server, then the errors.
func writeNodesTable(w io.Writer, out nodesJSON) {
	tw := newTable(w)
	fmt.Fprintln(tw, "SERVER\tADDRESS\tSTATE\tAGENT\tGPUS\tUSED\tNVML\tHEALTH\tPROCS")
	for _, n := range out.Nodes {
		if !n.AgentUp {
			fmt.Fprintf(tw, "%s\t%s\t%s\t-\t-\t-\t-\t-\t-\n", n.Server, n.Addr, n.State)
			continue
		}
		nvml := "yes"
		if !n.NVML.Available {
			nvml = n.NVML.Reason
		}
		health := "ok"
		if !n.Healthy {
			e := n.Health[len(n.Health)-1]
			last := e.Kind
			if e.Kind == "xid" {
				last += " " + strconv.FormatUint(e.Xid, 10)
			}
			health = fmt.Sprintf("%d events (last %s on GPU %d)", len(n.Health), last, e.GPUIndex)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\t%d\n", n.Server, n.Addr, n.State, n.AgentVersion,
			n.GPUs, n.GPUsUsed, nvml, health, n.ProcessesRunning)
	}
	tw.Flush()
	fmt.Fprintf(w, "%d servers, %d reachable, %d agents up\n", out.Servers, out.Reachable, out.AgentsUp)
	for _, n := range out.Nodes {
		if n.Error != "" {
			fmt.Fprintf(w, "%s: %s\n", n.Server, n.Error)
		}
	}
}
