package cli

import (
	"cmp"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/replan/replan/cluster"
	"github.com/replan/replan/fleet"
	"github.com/replan/replan/ssh"
)

// deployJSON is the stable --json schema of `replan deploy` (docs/agent.md).
type deployJSON struct {
	AgentBinary string               `json:"agent_binary"`
	SHA256      string               `json:"sha256"`
	OK          bool                 `json:"ok"`
	Failed      int                  `json:"failed"`
	Servers     []fleet.DeployResult `json:"servers"`
}

// fleetFlags are the flags deploy and nodes share.
type fleetFlags struct {
	inventory   string
	remoteDir   string
	concurrency int
	asJSON      bool
	verbose     bool
}

func (f *fleetFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.inventory, "inventory", "inventory.yaml", "inventory file")
	fl.StringVar(&f.remoteDir, "remote-dir", "", "agent directory on every server; {server} is replaced by the server's name (default: the inventory's ssh.remote_dir, else "+fleet.DefaultRemoteDir+")")
	fl.IntVar(&f.concurrency, "concurrency", fleet.DefaultConcurrency, "servers worked on at once")
	fl.BoolVar(&f.asJSON, "json", false, "print the result as JSON")
	fl.BoolVarP(&f.verbose, "verbose", "v", false, "log SSH and agent events to stderr")
}

// open loads the inventory, picks the named servers (all when none) and
// builds the fleet over a new SSH pool, which the caller closes.
func (f *fleetFlags) open(names []string, acceptNew bool, stderr io.Writer, quiet slog.Level) (*fleet.Fleet, []cluster.Server, *ssh.Pool, error) {
	inv, err := cluster.Load(f.inventory)
	if err != nil {
		return nil, nil, nil, err
	}
	servers := inv.Servers
	if len(names) > 0 {
		servers = nil
		var unknown []string
		seen := map[string]bool{}
		for _, n := range names {
			if seen[n] {
				continue
			}
			seen[n] = true
			s, ok := inv.Server(n)
			if !ok {
				unknown = append(unknown, n)
				continue
			}
			servers = append(servers, s)
		}
		if len(unknown) > 0 {
			return nil, nil, nil, fmt.Errorf("%s: no server named %s", f.inventory, strings.Join(unknown, ", "))
		}
	}
	level := quiet
	if f.verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	cfg := ssh.FromInventory(inv, log)
	if acceptNew {
		cfg.HostKeys = ssh.NewHostKeys(inv.SSH.KnownHosts, true, log)
	}
	pool, err := ssh.NewPool(cfg)
	if err != nil {
		return nil, nil, nil, err
	}
	fl := fleet.New(pool, fleet.Options{RemoteDir: cmp.Or(f.remoteDir, inv.SSH.RemoteDir), Concurrency: f.concurrency, Logger: log})
	return fl, servers, pool, nil
}

// isTerminal reports whether w is a terminal (progress bars go there only).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

func newDeployCmd(stdout, stderr io.Writer) *cobra.Command {
	var (
		ff                     fleetFlags
		agentBin, fakeGPUs     string
		acceptNew              bool
		readyTimeout, stopWait time.Duration
	)
	cmd := &cobra.Command{
		Use:   "deploy [SERVERS...]",
		Short: "Install or upgrade the agent on the inventory's servers and start it",
		Long: "Upload the agent binary to every server (or the SERVERS named), verify it,\n" +
			"start it detached and wait until it answers over SSH. A server already\n" +
			"running the same binary with the same flags is left alone (\"up to date\");\n" +
			"another binary is replaced in place and the new agent re-adopts the running\n" +
			"processes. Host keys must be trusted first (replan trust), unless\n" +
			"--accept-new. See docs/agent.md.",
		RunE: func(cmd *cobra.Command, args []string) error {
			bin := agentBin
			if bin == "" {
				var why string
				var err error
				if bin, why, err = fleet.DefaultAgentBinary(); err != nil {
					return err
				}
				if !ff.asJSON {
					fmt.Fprintf(stderr, "agent binary: %s (%s)\n", bin, why)
				}
			}
			fl, servers, pool, err := ff.open(args, acceptNew, stderr, slog.LevelWarn)
			if err != nil {
				return err
			}
			defer pool.Close()
			opts := fleet.DeployOptions{AgentBinary: bin, FakeGPUs: fakeGPUs, ReadyTimeout: readyTimeout, StopTimeout: stopWait}
			if isTerminal(stderr) {
				opts.Progress = (&ssh.ProgressBar{W: stderr, Label: "deploy"}).Update
			}
			results, err := fl.Deploy(cmd.Context(), servers, opts)
			if err != nil {
				return err
			}
			failed := 0
			for _, r := range results {
				if r.Status == fleet.StatusFailed {
					failed++
				}
			}
			if ff.asJSON {
				out := deployJSON{AgentBinary: bin, OK: failed == 0, Failed: failed, Servers: results}
				if len(results) > 0 {
					out.SHA256 = results[0].SHA256
				}
				if err := writeJSON(stdout, out); err != nil {
					return err
				}
			} else {
				for _, r := range results {
					fmt.Fprintln(stdout, deployLine(r))
				}
			}
			if failed > 0 {
				return fmt.Errorf("deploy: %d of %d servers failed", failed, len(results))
			}
			return nil
		},
	}
	ff.register(cmd)
	f := cmd.Flags()
	f.StringVar(&agentBin, "agent-binary", "", "local agent binary to deploy (default: replan-agent beside replan, else replan itself)")
	f.StringVar(&fakeGPUs, "fake-gpus", "", `run the agents with fake GPUs, e.g. "8xA800" (tests, demos)`)
	f.BoolVar(&acceptNew, "accept-new", false, "trust and record host keys of servers not yet in known_hosts (a changed key is still refused)")
	f.DurationVar(&readyTimeout, "ready-timeout", 30*time.Second, "how long a started agent has to answer")
	f.DurationVar(&stopWait, "stop-timeout", 10*time.Second, "how long an old agent has to exit after SIGTERM before SIGKILL")
	return cmd
}

// deployLine is the text report of one server.
func deployLine(r fleet.DeployResult) string {
	if r.Status == fleet.StatusFailed {
		return fmt.Sprintf("%s: failed: %s", r.Server, r.Error)
	}
	detail := fmt.Sprintf("agent %s, %d GPUs, pid %d", r.AgentVersion, r.GPUs, r.PID)
	if r.Launcher != "" {
		detail += ", " + r.Launcher
	}
	return fmt.Sprintf("%s: %s (%s, %.1fs)", r.Server, r.Status, detail, r.DurationS)
}
