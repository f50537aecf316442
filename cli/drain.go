package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/replan/replan/control"
)

// newDrainCmd is `replan drain SERVER [--reason TEXT] [--after-jobs]`.
func newDrainCmd(stdout, stderr io.Writer) *cobra.Command {
	var req control.DrainRequest
	cmd := clientCmd("drain SERVER", "Stop scheduling onto a server; move its jobs off now (checkpoint, stop, requeue) or, with --after-jobs, let them finish", cobra.ExactArgs(1), stdout,
		func(ctx context.Context, c *control.Client, args []string) (any, func(io.Writer) error, error) {
			moved, err := c.Drain(ctx, args[0], req)
			if moved == nil {
				moved = []string{}
			}
			v := map[string]any{"server": args[0], "moved": moved}
			return v, func(w io.Writer) error {
				if req.AfterJobs {
					_, err := fmt.Fprintf(w, "%s draining: no new work goes there; its running jobs finish first (replan nodes shows it drained once they have)\n", args[0])
					return err
				}
				_, err := fmt.Fprintf(w, "%s drained; moved %d jobs %v\n", args[0], len(moved), moved)
				return err
			}, err
		})
	cmd.Flags().StringVar(&req.Reason, "reason", "", "why (shown by `replan nodes` with who drained it and when)")
	cmd.Flags().BoolVar(&req.AfterJobs, "after-jobs", false, "let the running jobs finish instead of moving them off now (like Slurm's DRAIN)")
	return cmd
}

// drainLine says why, by whom, since when and how a server is drained
// ("" when it is not).
func drainLine(n control.NodeView) string {
	if n.State != "drained" && n.State != "draining" {
		return ""
	}
	var b strings.Builder
	b.WriteString(clean(n.Name))
	if n.State == "draining" {
		fmt.Fprintf(&b, " is draining (its jobs finish first: %s)", clean(strings.Join(n.Jobs, ", ")))
	} else {
		b.WriteString(" is drained")
	}
	if n.DrainedBy != "" {
		b.WriteString(" by " + clean(n.DrainedBy))
	}
	if n.DrainedAt != nil {
		b.WriteString(" since " + n.DrainedAt.Local().Format(time.DateTime))
	}
	if n.DrainReason != "" {
		b.WriteString(": " + clean(n.DrainReason))
	}
	return b.String()
}
