package cli

import (
	"context"
	"fmt"
	"io"
	"sort"
	"time"

	"github.com/spf13/cobra"

	"github.com/replan/replan/dataset"
	"github.com/replan/replan/perf"
)

// Targets of the performance-model issue, printed by `replan perf bench`.
const (
	targetAvgErrPct = 7.4
	targetMaxErrPct = 15.0
	targetFit       = 50 * time.Millisecond
	targetCurve64   = 5 * time.Millisecond
)

func newPerfBenchCmd(stdout io.Writer) *cobra.Command {
	var dir string
	var reps int
	cmd := &cobra.Command{
		Use:   "bench --data DIR",
		Short: "Print the performance model's accuracy and speed against its targets",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dir == "" {
				return fmt.Errorf("perf bench: --data DIR is required")
			}
			if _, _, err := dataset.ListDir(dir); err != nil {
				fmt.Fprintf(stdout, "perf bench: skipped: %v (the measured data lives in ../shared/data/morphling)\n", err)
				return nil
			}
			ctx := cmd.Context()
			rep, err := dataset.Validate(ctx, dir, nil, perf.A800)
			if err != nil {
				return err
			}
			fmt.Fprintln(stdout, "accuracy (replan perf validate; protocol printed there)")
			tw := newTable(stdout)
			fmt.Fprintf(tw, "MODEL\tROWS\tAVG ERR %%\tTARGET\tMAX ERR %%\tTARGET\tMET\n")
			for _, m := range rep.Models {
				met := m.AvgErrPct <= targetAvgErrPct && m.MaxErrPct <= targetMaxErrPct
				fmt.Fprintf(tw, "%s\t%d\t%.2f\t<= %.1f\t%.2f\t<= %.0f\t%v\n", m.Model, m.Rows, m.AvgErrPct, targetAvgErrPct, m.MaxErrPct, targetMaxErrPct, yesNo(met))
			}
			if err := tw.Flush(); err != nil {
				return err
			}

			fmt.Fprintln(stdout, "\nspeed (median of runs in this process)")
			tw = newTable(stdout)
			fmt.Fprintf(tw, "WHAT\tMEDIAN\tTARGET\tRATIO TO TARGET\n")
			for _, name := range []string{"bert", "gpt2", "t5", "llama7"} {
				m, _, err := dataset.FitModel(ctx, dir, name, perf.A800, false)
				if err != nil {
					continue
				}
				samples, err := fitSamples(ctx, dir, name, m)
				if err != nil {
					return err
				}
				d := medianDuration(reps, func() { _, _, _ = perf.Fit(m, samples, perf.FitOptions{}) })
				fmt.Fprintf(tw, "fit %s (%d samples)\t%s\t%s\t%.2f\n", name, len(samples), d.Round(10*time.Microsecond), targetFit, float64(d)/float64(targetFit))
			}
			gpt2, _, err := dataset.FitModel(ctx, dir, "gpt2", perf.A800, false)
			if err != nil {
				return err
			}
			d := medianDuration(reps, func() { gpt2.Curve(64, 8) })
			fmt.Fprintf(tw, "curve gpt2 1..64 GPUs\t%s\t%s\t%.2f\n", d.Round(10*time.Microsecond), targetCurve64, float64(d)/float64(targetCurve64))
			return tw.Flush()
		},
	}
	cmd.Flags().StringVar(&dir, "data", "", "data directory (../shared/data/morphling)")
	cmd.Flags().IntVar(&reps, "reps", 15, "runs per timing")
	return cmd
}

// fitSamples rebuilds the validation fit set of a model: its profile
// samples plus the protocol's fit rows.
func fitSamples(ctx context.Context, dir, name string, m perf.Model) ([]perf.Sample, error) {
	return dataset.FitSet(ctx, dir, name, m)
}

func medianDuration(n int, f func()) time.Duration {
	if n < 1 {
		n = 1
	}
	ds := make([]time.Duration, n)
	for i := range ds {
		t0 := time.Now()
		f()
		ds[i] = time.Since(t0)
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return ds[n/2]
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
