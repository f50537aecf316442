package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/replan/replan/cluster"
	"github.com/replan/replan/control"
	"github.com/replan/replan/launch"
	"github.com/replan/replan/perf"
)

// clientOptions are the connection flags every daemon client command has.
type clientOptions struct {
	socket, server, tokenFile, fingerprint string
	asJSON                                 bool
	timeout                                time.Duration
	cmd                                    *cobra.Command
	closers                                []func()
}

func (o *clientOptions) add(cmd *cobra.Command) {
	o.cmd = cmd
	cmd.Flags().StringVar(&o.socket, "socket", defaultSocket(), "the daemon's unix socket (with --remote: on the head node, default "+DefaultRemoteSocket+")")
	cmd.Flags().StringVar(&o.server, "server", "", "the daemon's TCP listener (https://HOST:PORT) instead of the socket; several, comma-separated: the members of a highly available control plane, the next tried when one cannot be reached")
	cmd.Flags().StringVar(&o.tokenFile, "token-file", "", "bearer token for --server")
	cmd.Flags().StringVar(&o.fingerprint, "tls-fingerprint", "", "SHA-256 fingerprint of the daemon's TLS certificate for --server (as the daemon printed it; several, comma-separated: one per member); empty: verify against the system's CAs")
	cmd.Flags().BoolVar(&o.asJSON, "json", false, "print JSON (stable schema, docs/cli.md)")
	cmd.Flags().DurationVar(&o.timeout, "daemon-timeout", control.DefaultTimeout, "how long to wait for the daemon's answer (logs -f, events -f: for it to start); 0: for ever")
}

// close releases what client opened (an SSH connection for --remote).
func (o *clientOptions) close() {
	for _, c := range o.closers {
		c()
	}
	o.closers = nil
}

func (o *clientOptions) client() (*control.Client, error) {
	c, err := o.newClient()
	if err != nil {
		return nil, err
	}
	c.Timeout = o.timeout
	if o.timeout == 0 {
		c.Timeout = -1 // none
	}
	if o.cmd != nil {
		// A follower's answer from a stale view says so (docs/ha.md).
		c.Warn = func(msg string) { fmt.Fprintln(o.cmd.ErrOrStderr(), "replan: note: "+msg) }
	}
	return c, nil
}

func (o *clientOptions) newClient() (*control.Client, error) {
	if r := remoteOf(o.cmd); r != "" {
		if o.server != "" {
			return nil, fmt.Errorf("--remote and --server: choose one")
		}
		sock := ""
		if o.cmd.Flags().Changed("socket") {
			sock = o.socket
		}
		c, closer, err := remoteClient(r, sock)
		if err != nil {
			return nil, err
		}
		o.closers = append(o.closers, closer)
		return c, nil
	}
	if o.server == "" {
		return control.NewUnixClient(o.socket), nil
	}
	tok := ""
	if o.tokenFile != "" {
		b, err := os.ReadFile(o.tokenFile)
		if err != nil {
			return nil, err
		}
		tok = strings.TrimSpace(string(b))
	}
	// Several, comma-separated: the members of a highly available control
	// plane, tried in order when one cannot be reached (docs/ha.md).
	urls := strings.Split(o.server, ",")
	for i, u := range urls {
		urls[i] = strings.TrimSpace(u)
		if err := control.CheckServerURL(urls[i], tok); err != nil {
			return nil, err // a token never goes over plain http
		}
		if strings.HasPrefix(urls[i], "https://") != strings.HasPrefix(urls[0], "https://") {
			return nil, fmt.Errorf("--server %s: mixes https:// and http:// members; give one kind", o.server)
		}
	}
	var c *control.Client
	if strings.HasPrefix(urls[0], "https://") {
		var err error
		if c, err = control.NewTLSClient(urls[0], tok, o.fingerprint); err != nil {
			return nil, err
		}
	} else {
		c = control.NewTCPClient(urls[0], tok)
	}
	c.SetOthers(urls[1:])
	return c, nil
}

// clientCmd builds a daemon client command: run gets a client and prints
// either JSON (the value it returns) or its own table.
func clientCmd(use, short string, args cobra.PositionalArgs, stdout io.Writer, run func(ctx context.Context, c *control.Client, args []string) (any, func(io.Writer) error, error)) *cobra.Command {
	o := &clientOptions{}
	cmd := &cobra.Command{Use: use, Short: short, Args: args,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := o.client()
			if err != nil {
				return err
			}
			defer o.close()
			v, table, err := run(cmd.Context(), c, args)
			if err != nil {
				return err
			}
			if o.asJSON {
				return writeJSON(stdout, v)
			}
			return table(stdout)
		}}
	o.add(cmd)
	return cmd
}

func age(d float64) string {
	return (time.Duration(d) * time.Second).Round(time.Second).String()
}

func planOf(raw json.RawMessage) string {
	if len(raw) == 0 {
		return "-"
	}
	var p perf.Plan
	if json.Unmarshal(raw, &p) != nil || p.DP == 0 {
		return "-"
	}
	return p.String()
}

// placementOf is a job's placement for the jobs table: its GPU count and
// where they are, "a800-03 [0-3]" on one server, "2 servers × 8 GPUs" on
// several; "-", "-" when it holds none.
func placementOf(raw json.RawMessage) (gpus, where string) {
	servers := serversOf(raw)
	if len(servers) == 0 {
		return "-", "-"
	}
	n, counts := 0, make([]int, len(servers))
	for i, s := range servers {
		n, counts[i] = n+len(s.GPUs), len(s.GPUs)
	}
	if len(servers) == 1 {
		return strconv.Itoa(n), clean(cluster.ServerGPUs(servers[0].Name, servers[0].GPUs))
	}
	return strconv.Itoa(n), cluster.PlacementText(counts)
}

// placementLong is a job's placement for `replan job`: "8 GPUs: a800-03
// [0-7]", "16 GPUs, 2 servers × 8 GPUs: a800-01 [0-7], a800-02 [0-7]"; ""
// when it holds none.
func placementLong(raw json.RawMessage) string {
	servers := serversOf(raw)
	if len(servers) == 0 {
		return ""
	}
	n, counts, parts := 0, make([]int, len(servers)), make([]string, len(servers))
	for i, s := range servers {
		n, counts[i], parts[i] = n+len(s.GPUs), len(s.GPUs), clean(cluster.ServerGPUs(s.Name, s.GPUs))
	}
	if len(servers) == 1 {
		return cluster.GPUCount(n) + ": " + parts[0]
	}
	return cluster.GPUCount(n) + ", " + cluster.PlacementText(counts) + ": " + strings.Join(parts, ", ")
}

// serversOf decodes a job record's placement (nil when it has none).
func serversOf(raw json.RawMessage) []launch.Server {
	var servers []launch.Server
	if len(raw) == 0 || json.Unmarshal(raw, &servers) != nil {
		return nil
	}
	return servers
}

func newSubmitCmd(stdout, stderr io.Writer) *cobra.Command {
	return clientCmd("submit JOB.yaml", "Submit a job spec to the daemon", cobra.ExactArgs(1), stdout,
		func(ctx context.Context, c *control.Client, args []string) (any, func(io.Writer) error, error) {
			data, err := os.ReadFile(args[0])
			if err != nil {
				return nil, nil, err
			}
			r, err := c.Submit(ctx, args[0], data)
			if err != nil {
				return nil, nil, err
			}
			return r, func(w io.Writer) error {
				_, err := fmt.Fprintf(w, "submitted %s (%s)\n", r.ID, clean(r.Name))
				return err
			}, nil
		})
}

func newWhoamiCmd(stdout, stderr io.Writer) *cobra.Command {
	return clientCmd("whoami", "Who the daemon says you are: user, role, the tenants you may submit under and act for", cobra.NoArgs, stdout,
		func(ctx context.Context, c *control.Client, _ []string) (any, func(io.Writer) error, error) {
			w, err := c.WhoAmI(ctx)
			return w, func(wr io.Writer) error {
				note := ""
				if w.SingleUser {
					note = " (single-user daemon: the inventory lists no tenants[].users)"
				}
				fmt.Fprintf(wr, "user     %s (uid %d, via %s)\nrole     %s%s\ntenants  %s\nadmin of %s\n",
					clean(w.User), w.UID, w.Via, w.Role, note, clean(strings.Join(w.Tenants, ", ")), clean(strings.Join(w.AdminOf, ", ")))
				return nil
			}, err
		})
}

func newQueueCmd(stdout, stderr io.Writer) *cobra.Command {
	var start bool
	var ff filterFlags // usage.go
	cmd := clientCmd("queue", "Waiting jobs: why each waits, how long, its delay timers and its estimated start (--start: by start time, like squeue --start)", cobra.NoArgs, stdout,
		func(ctx context.Context, c *control.Client, _ []string) (any, func(io.Writer) error, error) {
			f, err := ff.filter(time.Now())
			if err != nil {
				return nil, nil, err
			}
			q, err := c.QueueWhere(ctx, f)
			if start {
				sortByETA(q)
			}
			return q, func(w io.Writer) error {
				if start {
					return writeStartTable(w, q)
				}
				tw := newTable(w)
				fmt.Fprintln(tw, "ID\tNAME\tTENANT\tCLASS\tGPUS\tSTATE\tWAITING\tETA\tSERVER TIMER\tRACK TIMER\tACCEPTS\tNW_SENS\tREASON")
				for _, e := range q {
					st, rt, acc, nw := "-", "-", "-", "-"
					if t := e.Timers; t != nil {
						st, rt = age(max(t.ServerTimer-t.Starved, 0)), age(max(t.RackTimer-t.Starved, 0))
						acc, nw = t.AcceptTier.String(), fmt.Sprintf("%.2f", min(max(t.NwSens, 0), 1))
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", e.Job.ID, clean(e.Job.Name), clean(e.Job.Tenant), e.Job.Class, e.GPUs, e.Job.State, age(e.WaitingS), etaShort(e), st, rt, acc, nw, clean(e.Reason))
				}
				return tw.Flush()
			}, err
		})
	cmd.Flags().BoolVar(&start, "start", false, "expected start times (a forward simulation of the scheduler), soonest first, like squeue --start")
	ff.add(cmd, true, false)
	return cmd
}

// etaShort is a queue entry's estimated start: "in 12m (10:42)", "now",
// or "-" without an estimate.
func etaShort(e control.QueueEntry) string {
	if e.ETAS == nil || e.ETAAt == nil {
		return "-"
	}
	if *e.ETAS < 1 {
		return "now"
	}
	return "in " + age(*e.ETAS) + " (" + e.ETAAt.Local().Format("15:04") + ")"
}

// sortByETA orders entries by estimated start, those without one last.
func sortByETA(q []control.QueueEntry) {
	sort.SliceStable(q, func(a, b int) bool {
		x, y := q[a].ETAS, q[b].ETAS
		if (x == nil) != (y == nil) {
			return y == nil
		}
		if x != nil && *x != *y {
			return *x < *y
		}
		return q[a].Job.ID < q[b].Job.ID
	})
}

// writeStartTable is `queue --start`: squeue --start's columns.
func writeStartTable(w io.Writer, q []control.QueueEntry) error {
	tw := newTable(w)
	fmt.Fprintln(tw, "ID\tNAME\tTENANT\tGPUS\tSTATE\tSTART_TIME\tIN\tREASON")
	for _, e := range q {
		at, in := "N/A", "-"
		if e.ETAAt != nil && e.ETAS != nil {
			at, in = e.ETAAt.Local().Format("2006-01-02T15:04:05"), age(*e.ETAS)
		}
		why := e.Reason
		if e.ETAS == nil && e.ETAReason != "" {
			why = e.ETAReason
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", e.Job.ID, clean(e.Job.Name), clean(e.Job.Tenant), e.GPUs, e.Job.State, at, in, clean(why))
	}
	return tw.Flush()
}

func newJobsCmd(stdout, stderr io.Writer) *cobra.Command {
	var all bool
	var ff filterFlags // usage.go
	cmd := clientCmd("jobs", "Running and waiting jobs (--all: every job)", cobra.NoArgs, stdout,
		func(ctx context.Context, c *control.Client, _ []string) (any, func(io.Writer) error, error) {
			states := []control.JobState{control.StateQueued, control.StateHeld, control.StateRunning, control.StatePreempted, control.StateUnschedulable}
			if all {
				states = nil
			}
			f, err := ff.filter(time.Now())
			if err != nil {
				return nil, nil, err
			}
			if len(f.States) == 0 {
				f.States = states
			}
			js, err := c.JobsWhere(ctx, f)
			return js, func(w io.Writer) error {
				tw := newTable(w)
				fmt.Fprintln(tw, "ID\tNAME\tTENANT\tCLASS\tSTATE\tGPUS\tWHERE\tITERS\tRESTARTS\tPLAN")
				for _, j := range js {
					gpus, where := placementOf(j.Placement)
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\n", j.ID, clean(j.Name), clean(j.Tenant), j.Class, j.State, gpus, where, j.Iterations, j.Restarts, planOf(j.Plan))
				}
				return tw.Flush()
			}, err
		})
	cmd.Flags().BoolVar(&all, "all", false, "include finished, failed and cancelled jobs")
	ff.add(cmd, true, false)
	return cmd
}

func newJobCmd(stdout, stderr io.Writer) *cobra.Command {
	return clientCmd("job ID", "One job: state, plan, plan history and decisions with their reasons", cobra.ExactArgs(1), stdout,
		func(ctx context.Context, c *control.Client, args []string) (any, func(io.Writer) error, error) {
			d, err := c.Job(ctx, args[0])
			var q []control.QueueEntry
			if err == nil && d.Job.State != control.StateRunning && !d.Job.State.Final() {
				q, _ = c.Queue(ctx)
			}
			return d, func(w io.Writer) error {
				j := d.Job
				fmt.Fprintf(w, "%s  %s  tenant %s  %s\nstate %s  iterations %d (checkpoint %d)  restarts %d\nplan %s\n", j.ID, clean(j.Name), clean(j.Tenant), j.Class, j.State, j.Iterations, j.Checkpoint, j.Restarts, planOf(j.Plan))
				if where := placementLong(j.Placement); where != "" {
					fmt.Fprintf(w, "runs on %s\n", where)
				}
				if !writeWaiting(w, j.ID, q) && j.Reason != "" {
					fmt.Fprintf(w, "reason: %s\n", clean(j.Reason))
				}
				if tp := d.Throughput; tp.PredictedSPS > 0 {
					fmt.Fprintf(w, "throughput: predicted %.2f samples/s, measured %s\n", tp.PredictedSPS, measured(tp))
				}
				if c := d.Checkpointing; c != nil {
					fmt.Fprintf(w, "checkpoint: %s\n", checkpointWords(*c))
				}
				if m := d.Memory; m != nil {
					fmt.Fprintf(w, "memory: %s\n", memoryWords(*m)) // memory.go
				}
				fmt.Fprintln(w, "\nhistory:")
				for _, h := range d.History {
					fmt.Fprintf(w, "  %s  %s -> %s  %s\n", h.At.Format(time.DateTime), h.From, h.To, clean(h.Reason))
				}
				fmt.Fprintln(w, "\ndecisions (newest first):")
				for _, x := range d.Decisions {
					fmt.Fprintf(w, "  %s  %-11s %s\n", x.At.Format(time.DateTime), x.Kind, clean(x.Reason))
				}
				return nil
			}, err
		})
}

func newJobOpCmd(op, short string) func(stdout, stderr io.Writer) *cobra.Command {
	return func(stdout, stderr io.Writer) *cobra.Command {
		return clientCmd(op+" ID", short, cobra.ExactArgs(1), stdout,
			func(ctx context.Context, c *control.Client, args []string) (any, func(io.Writer) error, error) {
				r, err := c.JobOp(ctx, args[0], op)
				return r, func(w io.Writer) error { _, err := fmt.Fprintf(w, "%s: %s\n", r.ID, r.State); return err }, err
			})
	}
}

func newNodeOpCmd(op, short string) func(stdout, stderr io.Writer) *cobra.Command {
	return func(stdout, stderr io.Writer) *cobra.Command {
		return clientCmd(op+" SERVER", short, cobra.ExactArgs(1), stdout,
			func(ctx context.Context, c *control.Client, args []string) (any, func(io.Writer) error, error) {
				moved, err := c.NodeOp(ctx, args[0], op)
				v := map[string]any{"server": args[0], "moved": moved}
				return v, func(w io.Writer) error {
					if op == "drain" {
						_, err := fmt.Fprintf(w, "%s drained; moved %d jobs %v\n", args[0], len(moved), moved)
						return err
					}
					_, err := fmt.Fprintf(w, "%s back in service\n", args[0])
					return err
				}, err
			})
	}
}

func newEventsCmd(stdout, stderr io.Writer) *cobra.Command {
	o := &clientOptions{}
	var follow bool
	var ff filterFlags // usage.go
	cmd := &cobra.Command{Use: "events [-f]", Short: "Decisions and state changes with their reasons (-f follows)", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := o.client()
			if err != nil {
				return err
			}
			defer o.close()
			f, err := ff.filter(time.Now())
			if err != nil {
				return err
			}
			var after int64
			for {
				wait := time.Duration(0)
				if follow {
					wait = 30 * time.Second
				}
				evs, err := c.EventsWhere(cmd.Context(), after, wait, f)
				if err != nil {
					if cmd.Context().Err() != nil {
						return nil
					}
					return err
				}
				for _, e := range evs {
					after = e.ID
					if o.asJSON {
						b, _ := json.Marshal(e)
						fmt.Fprintln(stdout, string(b))
						continue
					}
					by := ""
					if e.User != "" {
						by = "  (by " + clean(e.User) + ")"
					}
					fmt.Fprintf(stdout, "%s  %-10s %-9s %s%s\n", e.At.Format(time.DateTime), clean(e.Kind), clean(e.JobID+e.Node), clean(e.Msg), by)
				}
				if !follow && len(evs) < 1000 {
					return nil
				}
			}
		}}
	o.add(cmd)
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep following new events")
	ff.add(cmd, true, false)
	return cmd
}

func newLogsCmd(stdout, stderr io.Writer) *cobra.Command {
	o := &clientOptions{}
	var follow bool
	var tail, attempt int
	cmd := &cobra.Command{Use: "logs ID [-f] [--attempt N]", Short: "A job's training log (-f follows it; --attempt N an earlier launch's)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := o.client()
			if err != nil {
				return err
			}
			defer o.close()
			rc, err := c.AttemptLogs(cmd.Context(), args[0], attempt, tail, follow)
			if err != nil {
				return err
			}
			defer rc.Close()
			// The log is the job's own output: its terminal control
			// sequences are stripped line by line.
			br := bufio.NewReader(rc)
			for {
				line, err := br.ReadString('\n')
				if line != "" {
					if _, werr := io.WriteString(stdout, cleanLine(line)); werr != nil {
						return werr
					}
				}
				if err == io.EOF {
					return nil
				}
				if err != nil {
					if cmd.Context().Err() != nil {
						return nil
					}
					return err
				}
			}
		}}
	o.add(cmd)
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep following the log")
	cmd.Flags().IntVar(&tail, "tail", 100, "lines from the end to start with")
	cmd.Flags().IntVar(&attempt, "attempt", 0, "the log of launch N of the job (1 is the first, the job record's attempt the newest; default: the newest)")
	return cmd
}

// checkpointWords says how often a job checkpoints and why.
func checkpointWords(c control.CheckpointInfo) string {
	every := fmt.Sprintf("every %s", iterationsWord(c.IntervalIters))
	if c.IntervalS > 0 {
		every += fmt.Sprintf(" (~%s)", age(c.IntervalS))
	}
	if c.Source == "args" {
		return every + ", the job's own interval (its args)"
	}
	how := "estimated from the model's size"
	if c.CostMeasured {
		how = "measured"
	}
	return fmt.Sprintf("%s: Young/Daly from a %.1f s checkpoint (%s) and a %s MTBF", every, c.CostS, how, age(c.MTBFS))
}

func iterationsWord(n int) string {
	if n == 1 {
		return "iteration"
	}
	return fmt.Sprintf("%d iterations", n)
}

func measured(tp control.Throughput) string {
	if tp.MeasuredSPS <= 0 {
		return "none yet"
	}
	return fmt.Sprintf("%.2f samples/s (the prediction is %+.0f%% off)", tp.MeasuredSPS, 100*(tp.PredictedSPS-tp.MeasuredSPS)/tp.MeasuredSPS)
}

func newLinksCmd(stdout, stderr io.Writer) *cobra.Command {
	return clientCmd("links", "Links that jobs share (rack uplinks), their compatibility and each job's time-shift", cobra.NoArgs, stdout,
		func(ctx context.Context, c *control.Client, _ []string) (any, func(io.Writer) error, error) {
			lr, err := c.Links(ctx)
			return lr, func(w io.Writer) error {
				fmt.Fprintf(w, "%d shared links, demand-weighted compatibility %.2f\n", lr.Shared, lr.Score)
				for _, d := range lr.Dropped {
					fmt.Fprintf(w, "dropped (a cycle of the affinity graph): %s\n", d)
				}
				tw := newTable(w)
				fmt.Fprintln(tw, "LINK\tSCORE\tJOBS (SHIFT)")
				for _, l := range lr.Links {
					parts := make([]string, len(l.Jobs))
					for i, j := range l.Jobs {
						parts[i] = fmt.Sprintf("%s (%.2fs)", j, l.Offsets[i])
					}
					fmt.Fprintf(tw, "%s\t%.2f\t%s\n", l.Name, l.Score, strings.Join(parts, ", "))
				}
				return tw.Flush()
			}, err
		})
}

// writeWaiting prints a waiting job's "waiting" block: queue position,
// reason, estimated start, and each tier timer with when it expires and
// what the job accepts then. It reports whether the job was in q.
func writeWaiting(w io.Writer, id string, q []control.QueueEntry) bool {
	sortByETA(q)
	for i, e := range q {
		if e.Job.ID != id {
			continue
		}
		pos := i + 1
		fmt.Fprintf(w, "waiting: %s (position %d of %d by estimated start)\n", age(e.WaitingS), pos, len(q))
		fmt.Fprintf(w, "  reason: %s\n", clean(e.Reason))
		if e.ETAS != nil && e.ETAAt != nil {
			fmt.Fprintf(w, "  estimated start: in %s, at %s\n", age(*e.ETAS), e.ETAAt.Local().Format(time.DateTime))
		} else {
			fmt.Fprintf(w, "  estimated start: none (%s)\n", e.ETAReason)
		}
		if t := e.Timers; t != nil {
			for _, tm := range []struct {
				name  string
				timer float64
				then  string
			}{{"server timer", t.ServerTimer, "it accepts a placement within one rack"}, {"rack timer", t.RackTimer, "it accepts a placement across racks"}} {
				left := tm.timer - t.Starved
				if left <= 0 {
					fmt.Fprintf(w, "  %s: expired; %s\n", tm.name, tm.then)
					continue
				}
				at := e.AsOf.Add(time.Duration(left * float64(time.Second)))
				fmt.Fprintf(w, "  %s: %s left, expires at %s; then %s\n", tm.name, age(left), at.Local().Format(time.DateTime), tm.then)
			}
			fmt.Fprintf(w, "  accepts now: %s (%s)\n", t.AcceptTier, t.Why)
		}
		return true
	}
	return false
}
