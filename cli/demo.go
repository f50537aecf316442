package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/replan/replan/control"
	"github.com/replan/replan/demo"
	"github.com/replan/replan/tui"
	"github.com/replan/replan/tui/controlbackend"
	"github.com/replan/replan/tui/data"
)

func newDemoCmd(stdout, stderr io.Writer) *cobra.Command {
	var (
		o        demo.Options
		headless bool
		asJSON   bool
		timeout  time.Duration
	)
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run replan against a simulated 64-GPU A800 cluster replaying a real trace",
		Long: `Starts the control plane in-process (store, scheduling loop, API) with a simulated executor on a
64-GPU A800 cluster (2 racks × 4 servers × 8 GPUs) and replays workload-base.csv from
../shared/data/morphling when present, a generated Philly-like trace otherwise, at --speed virtual
seconds per real second. --headless runs without the TUI and prints a summary when the trace ends.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if !cmd.Flags().Changed("data") {
				o.DataDir = defaultDataDir()
			}
			d, err := demo.Start(ctx, o)
			if err != nil {
				return err
			}
			defer d.Stop()
			if !headless {
				b := demoBackend{Backend: controlbackend.New(control.NewUnixClient(d.Socket)), clock: d.Clock, demo: d}
				title := fmt.Sprintf("replan demo · 64 A800 GPUs · %s", filepath.Base(d.Source))
				err := tui.Run(ctx, b, tui.Options{Title: title, Input: os.Stdin, Output: stdout})
				// on quit, what the run did so far
				if s, serr := d.Summary(context.WithoutCancel(ctx)); serr == nil {
					s.Print(stdout)
				}
				return err
			}
			fmt.Fprintf(stderr, "replan demo: %d jobs from %s at %gx; API on %s\n", len(d.Trace), d.Source, d.Clock.Speed(), d.Socket)
			wctx := ctx
			if timeout > 0 {
				var cancel func()
				wctx, cancel = contextWithTimeout(ctx, timeout)
				defer cancel()
			}
			s, err := d.Wait(wctx)
			if asJSON {
				if jerr := writeJSON(stdout, s); jerr != nil {
					return jerr
				}
			} else {
				s.Print(stdout)
			}
			if err != nil && ctx.Err() == nil {
				return fmt.Errorf("demo: %w", err)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.BoolVar(&headless, "headless", false, "run without the TUI and print a summary when the trace ends")
	f.Float64Var(&o.Speed, "speed", 60, "virtual seconds per real second (60 = a minute per second)")
	f.StringVar(&o.DataDir, "data", "", "Morphling data directory (default $REPLAN_DATA or ../shared/data/morphling when present)")
	f.StringVar(&o.Trace, "trace", "", "workload CSV to replay (default the data's workload-base.csv)")
	f.IntVar(&o.Jobs, "jobs", 0, "replay only the first N jobs")
	f.StringVar(&o.Policy, "policy", "replan", "scheduling policy (replan = morphling allocation + Dally placement + CASSINI shifts)")
	f.DurationVar(&o.RestartCost, "restart-cost", 260*time.Second, "checkpoint-restart cost of the simulated cluster")
	f.DurationVar(&timeout, "timeout", 0, "stop after this much real time (0: when the trace ends)")
	f.StringVar(&o.Dir, "dir", "", "keep the store and socket in this directory (default: a temporary one, removed at the end)")
	f.BoolVar(&asJSON, "json", false, "print the summary as JSON")
	return cmd
}

// demoBackend is the TUI's view of the demo: the control API, plus the
// demo clock's speed on "+" and "-". Embedding the tui.Backend interface
// hides the optional methods of the value inside (Links), so each one is
// passed on explicitly.
type demoBackend struct {
	tui.Backend
	clock *demo.Clock
	demo  *demo.Demo
}

// Undrain, Hold and Release implement tui.Operator when the backend
// inside does.
func (b demoBackend) Undrain(ctx context.Context, server string) error {
	op, ok := b.Backend.(tui.Operator)
	if !ok {
		return errors.New("undrain: not supported by this backend")
	}
	return op.Undrain(ctx, server)
}

// Hold implements tui.Operator.
func (b demoBackend) Hold(ctx context.Context, id string) error {
	op, ok := b.Backend.(tui.Operator)
	if !ok {
		return errors.New("hold: not supported by this backend")
	}
	return op.Hold(ctx, id)
}

// Release implements tui.Operator.
func (b demoBackend) Release(ctx context.Context, id string) error {
	op, ok := b.Backend.(tui.Operator)
	if !ok {
		return errors.New("release: not supported by this backend")
	}
	return op.Release(ctx, id)
}

// History implements tui.Historian when the backend inside does.
func (b demoBackend) History(ctx context.Context) ([]data.HistoryRow, error) {
	hb, ok := b.Backend.(tui.Historian)
	if !ok {
		return nil, errors.New("history: not kept by this backend")
	}
	return hb.History(ctx)
}

// Replay implements tui.Replayer: the simulated clock and the trace's
// progress.
func (b demoBackend) Replay(ctx context.Context) (data.Replay, error) {
	if b.demo == nil {
		return data.Replay{}, errors.New("replay: no demo")
	}
	sub, ended, total, err := b.demo.Progress(ctx)
	return data.Replay{Clock: b.clock.Now(), Speed: b.clock.Speed(), Submitted: sub, Ended: ended, Total: total, Done: total > 0 && ended >= total}, err
}

// Links implements tui.LinksBackend when the backend inside does.
func (b demoBackend) Links(ctx context.Context) (data.Links, error) {
	lb, ok := b.Backend.(tui.LinksBackend)
	if !ok {
		return data.Links{}, errors.New("links: not reported by this backend")
	}
	return lb.Links(ctx)
}

// SetSpeed implements tui.Speeder.
func (b demoBackend) SetSpeed(ctx context.Context, factor float64) (float64, error) {
	b.clock.SetSpeed(b.clock.Speed() * factor)
	return b.clock.Speed(), nil
}

func newTUICmd(stdout, stderr io.Writer) *cobra.Command {
	o := &clientOptions{}
	cmd := &cobra.Command{
		Use:   "tui",
		Short: "The live terminal UI of a running daemon (cluster, queue, jobs, events)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := o.client()
			if err != nil {
				return err
			}
			return tui.Run(cmd.Context(), controlbackend.New(c), tui.Options{Input: os.Stdin, Output: stdout})
		},
	}
	o.add(cmd)
	return cmd
}

func contextWithTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, d)
}
