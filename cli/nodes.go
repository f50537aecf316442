package cli

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/replan/replan/cluster"
	"github.com/replan/replan/control"
	"github.com/replan/replan/fleet"
	"github.com/replan/replan/internal/labels"
	"github.com/replan/replan/ssh"
)

// nodesJSON is the stable --json schema of `replan nodes --direct`
// (docs/agent.md); `replan nodes --json` prints the daemon's
// []control.NodeView (GET /v1/nodes).
type nodesJSON struct {
	Servers   int          `json:"servers"`
	Reachable int          `json:"reachable"`
	AgentsUp  int          `json:"agents_up"`
	Nodes     []fleet.Node `json:"nodes"`
}

func newNodesCmd(stdout, stderr io.Writer) *cobra.Command {
	var (
		o              clientOptions
		ff             fleetFlags
		direct, gpus   bool
		timeout, since time.Duration
	)
	cmd := &cobra.Command{
		Use:   "nodes [SERVERS...]",
		Short: "The daemon's view of every server: state, GPU figures, which job holds each GPU (--direct: ask the agents over SSH)",
		Long: "Ask the daemon (GET /v1/nodes) for every server, or the SERVERS named: its state (up,\n" +
			"drained, suspect, down), free GPUs, utilisation, memory, temperature, power and ECC/Xid\n" +
			"errors as the agents last reported them, and the job holding each GPU; GPUs a job holds\n" +
			"that are idle are flagged. --gpus (or naming servers) adds one line per GPU; --json prints\n" +
			"the daemon's node view.\n\n" +
			"--direct asks every server's agent over SSH instead (no daemon needed, e.g. right after\n" +
			"`replan deploy`): a server that cannot be reached is a row with its error, not a failure.\n" +
			"See docs/cli.md and docs/agent.md.",
		RunE: func(cmd *cobra.Command, args []string) error {
			if direct {
				if gpus {
					return fmt.Errorf("--gpus shows the daemon's figures: drop --direct")
				}
				ff.asJSON = o.asJSON
				return directNodes(cmd, &ff, args, timeout, since, stdout, stderr)
			}
			for _, f := range []string{"inventory", "remote-dir", "concurrency", "timeout", "health-window", "verbose"} {
				if cmd.Flags().Changed(f) {
					return fmt.Errorf("--%s is for asking the agents over SSH: add --direct", f)
				}
			}
			c, err := o.client()
			if err != nil {
				return err
			}
			defer o.close()
			all, err := c.Nodes(cmd.Context())
			if err != nil {
				var re *control.RemoteError
				if !errors.As(err, &re) {
					return fmt.Errorf("%w\nno daemon answers (start one with `replan daemon`, or point --socket/--server/--remote at it); "+
						"`replan nodes --direct` asks the servers' agents over SSH instead", err)
				}
				return err
			}
			nodes, err := pickNodes(all, args)
			if err != nil {
				return err
			}
			if o.asJSON {
				return writeJSON(stdout, nodes)
			}
			return writeDaemonNodes(stdout, nodes, gpus || len(args) > 0)
		},
	}
	o.add(cmd)
	fl := cmd.Flags()
	fl.BoolVar(&gpus, "gpus", false, "one line per GPU (the default when SERVERS are named)")
	fl.BoolVar(&direct, "direct", false, "ask every server's agent over SSH (the inventory's view; no daemon needed)")
	fl.StringVar(&ff.inventory, "inventory", "inventory.yaml", "with --direct: inventory file")
	fl.StringVar(&ff.remoteDir, "remote-dir", "", "with --direct: agent directory on every server; {server} is replaced by the server's name (default: the inventory's ssh.remote_dir, else "+fleet.DefaultRemoteDir+")")
	fl.IntVar(&ff.concurrency, "concurrency", fleet.DefaultConcurrency, "with --direct: servers asked at once")
	fl.BoolVarP(&ff.verbose, "verbose", "v", false, "with --direct: log SSH and agent events to stderr")
	fl.DurationVar(&timeout, "timeout", 15*time.Second, "with --direct: time allowed per server")
	fl.DurationVar(&since, "health-window", fleet.DefaultHealthWindow, "with --direct: Xid/ECC events this recent make a server unhealthy")
	return cmd
}

// directNodes is `replan nodes --direct`: every server's agent over SSH.
func directNodes(cmd *cobra.Command, ff *fleetFlags, args []string, timeout, since time.Duration, stdout, stderr io.Writer) error {
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
}

// pickNodes keeps the servers named (all when none), in the daemon's
// order; a name the daemon does not know is an error.
func pickNodes(all []control.NodeView, names []string) ([]control.NodeView, error) {
	out := []control.NodeView{}
	if len(names) == 0 {
		return append(out, all...), nil
	}
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	for _, n := range all {
		if want[n.Name] {
			out = append(out, n)
			delete(want, n.Name)
		}
	}
	if len(want) > 0 {
		var unknown []string
		for _, n := range names {
			if want[n] {
				unknown = append(unknown, clean(n))
				delete(want, n)
			}
		}
		return nil, fmt.Errorf("the daemon has no server named %s", strings.Join(unknown, ", "))
	}
	return out, nil
}

// writeDaemonNodes prints the daemon's node view: one line per server
// (the GPUs' mean utilisation, memory used of total, hottest GPU, power
// drawn, ECC/Xid errors, the job holding each GPU, the GPUs held but
// idle), a summary line, then what needs a look: held-but-idle GPUs,
// suspect and down servers. perGPU adds one line per GPU.
func writeDaemonNodes(w io.Writer, nodes []control.NodeView, perGPU bool) error {
	tw := newTable(w)
	fmt.Fprintln(tw, "SERVER\tRACK\tSTATE\tGPUS\tFREE\tUTIL\tMEMORY\tTEMP\tPOWER\tECC/XID\tIDLE HELD\tJOBS\tLABELS")
	states := map[string]int{}
	var order []string
	total, free, elsewhere := 0, 0, 0
	for _, n := range nodes {
		if states[n.State] == 0 {
			order = append(order, n.State)
		}
		states[n.State]++
		total += n.GPUs
		if n.State == "up" {
			free += n.FreeGPUs
		} else {
			elsewhere += n.FreeGPUs // a drained, suspect or down server takes no job
		}
		util, mem, temp, power, errs := "-", "-", "-", "-", "-"
		if len(n.GPUStats) > 0 {
			var u, used, tot, hot, pw float64
			ecc, xid := 0, 0
			for _, g := range n.GPUStats {
				u += g.UtilPct
				used += g.MemUsedGB
				tot += g.MemTotalGB
				hot = max(hot, g.TempC)
				pw += g.PowerW
				ecc += g.ECCErrors
				xid += g.XidErrors
			}
			util = fmt.Sprintf("%.0f%%", u/float64(len(n.GPUStats)))
			mem = fmt.Sprintf("%.0f/%.0f GB", used, tot)
			temp = fmt.Sprintf("%.0f°C", hot)
			power = fmt.Sprintf("%.0f W", pw)
			errs = fmt.Sprintf("%d/%d", ecc, xid)
		}
		idle := "-"
		if len(n.IdleHeld) > 0 {
			idle = "[" + cluster.Ranges(n.IdleHeld) + "]"
		}
		lbl := labels.Format(n.Labels)
		if lbl == "" {
			lbl = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", clean(n.Name), clean(n.Rack), n.State, n.GPUs, n.FreeGPUs,
			util, mem, temp, power, errs, idle, holders(n.GPUOwners), clean(lbl))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	parts := make([]string, 0, len(order))
	for _, s := range order {
		parts = append(parts, fmt.Sprintf("%d %s", states[s], s))
	}
	asOf := ""
	if len(nodes) > 0 && !nodes[0].AsOf.IsZero() {
		asOf = " · as of " + nodes[0].AsOf.Local().Format("15:04:05")
	}
	servers := "servers"
	if len(nodes) == 1 {
		servers = "server"
	}
	more := ""
	if elsewhere > 0 {
		more = fmt.Sprintf(" (and %d on servers that take no jobs)", elsewhere)
	}
	fmt.Fprintf(w, "%d %s: %s · %d GPUs, %d free%s%s\n", len(nodes), servers, strings.Join(parts, ", "), total, free, more, asOf)
	for _, n := range nodes {
		byJob := map[string][]int{}
		for _, g := range n.IdleHeld {
			if g >= 0 && g < len(n.GPUOwners) {
				byJob[n.GPUOwners[g]] = append(byJob[n.GPUOwners[g]], g)
			}
		}
		for _, job := range sortedKeys(byJob) {
			fmt.Fprintf(w, "%s: held by %s but idle (under %d%% utilisation)\n", cluster.ServerGPUs(clean(n.Name), byJob[job]), clean(job), control.IdleUtilPct)
		}
		for _, c := range n.CordonedGPUs {
			fmt.Fprintf(w, "%s GPU %d is cordoned (no new work; `replan uncordon %s:%d` clears it): %s\n", clean(n.Name), c.GPU, clean(n.Name), c.GPU, clean(c.Why))
		}
		switch {
		case n.State == "suspect" && n.SuspectWhy != "":
			fmt.Fprintf(w, "%s is suspect: %s\n", clean(n.Name), clean(n.SuspectWhy))
		case n.State == "down" && n.DownWhy != "":
			fmt.Fprintf(w, "%s is down: %d heartbeats missed; its agent could not be started: %s\n", clean(n.Name), n.Missed, clean(n.DownWhy))
		case n.State == "down":
			fmt.Fprintf(w, "%s is down: %d heartbeats missed\n", clean(n.Name), n.Missed)
		case n.State == "redeploying":
			why := ""
			if n.DownWhy != "" {
				why = "; last try: " + clean(n.DownWhy)
			}
			fmt.Fprintf(w, "%s is redeploying: %d heartbeats missed, the daemon starts its agent again%s\n", clean(n.Name), n.Missed, why)
		}
		if line := drainLine(n); line != "" { // drain.go
			fmt.Fprintln(w, line)
		}
	}
	if perGPU {
		fmt.Fprintln(w)
		return writeNodeGPUs(w, nodes)
	}
	return nil
}

// writeNodeGPUs prints one line per GPU of each server.
func writeNodeGPUs(w io.Writer, nodes []control.NodeView) error {
	var buf bytes.Buffer
	defer func() {
		for _, l := range strings.SplitAfter(buf.String(), "\n") {
			io.WriteString(w, strings.TrimRight(l, " \n")+strings.Repeat("\n", strings.Count(l, "\n")))
		}
	}()
	tw := newTable(&buf)
	fmt.Fprintln(tw, "SERVER\tGPU\tJOB\tUTIL\tMEMORY\tTEMP\tPOWER\tECC\tXID\tNOTE")
	for _, n := range nodes {
		idle := map[int]bool{}
		for _, g := range n.IdleHeld {
			idle[g] = true
		}
		if len(n.GPUStats) == 0 {
			fmt.Fprintf(tw, "%s\t-\t%s\t-\t-\t-\t-\t-\t-\tno figures (%s)\n", clean(n.Name), holders(n.GPUOwners), n.State)
			continue
		}
		for _, g := range n.GPUStats {
			job := "-"
			if g.Index >= 0 && g.Index < len(n.GPUOwners) && n.GPUOwners[g.Index] != "" {
				job = clean(n.GPUOwners[g.Index])
			}
			note := ""
			if idle[g.Index] {
				note = "allocated but idle"
			}
			if g.Cordoned {
				note = "cordoned: " + clean(g.CordonWhy)
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%.0f%%\t%.1f/%.0f GB\t%.0f°C\t%.0f W\t%d\t%d\t%s\n", clean(n.Name), g.Index, job,
				g.UtilPct, g.MemUsedGB, g.MemTotalGB, g.TempC, g.PowerW, g.ECCErrors, g.XidErrors, note)
		}
	}
	return tw.Flush()
}

// holders is the jobs holding a server's GPUs, each with its GPU indices:
// "j-000001 [0-3], j-000002 [4-7]", or "-" when all are free.
func holders(owners []string) string {
	byJob := map[string][]int{}
	var order []string
	for i, j := range owners {
		if j == "" {
			continue
		}
		if _, ok := byJob[j]; !ok {
			order = append(order, j)
		}
		byJob[j] = append(byJob[j], i)
	}
	if len(order) == 0 {
		return "-"
	}
	parts := make([]string, len(order))
	for i, j := range order {
		parts[i] = cluster.ServerGPUs(clean(j), byJob[j])
	}
	return strings.Join(parts, ", ")
}

func sortedKeys(m map[string][]int) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
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
