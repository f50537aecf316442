package cli

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/replan/replan/dataset"
	"github.com/replan/replan/perf"
)

func newPerfCmd(stdout, stderr io.Writer) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "perf",
		Short: "Fit, inspect and validate the performance model",
	}
	cmd.AddCommand(newPerfValidateCmd(stdout), newPerfFitCmd(stdout), newPerfCurveCmd(stdout), newPerfBenchCmd(stdout))
	return cmd
}

func newPerfValidateCmd(stdout io.Writer) *cobra.Command {
	var dir, models, archFile string
	var asJSON, loo bool
	var fitRows int
	cmd := &cobra.Command{
		Use:   "validate --data DIR [--models a,b] [--fit-rows N] [--arch-file FILE] [--loo=false] [--json]",
		Short: "Fit on profiles plus a few measured rows, predict the rest, report the error",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dir == "" {
				return fmt.Errorf("validate: --data DIR is required (the layout of ../shared/data/morphling)")
			}
			var list []string
			if models != "" {
				list = strings.Split(models, ",")
			}
			cat, err := loadCatalog(archFile)
			if err != nil {
				return err
			}
			rep, err := dataset.ValidateWith(cmd.Context(), dir, perf.A800, dataset.ValidateOptions{Models: list, FitRows: fitRows, Archs: cat, LOO: loo})
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(stdout, rep)
			}
			return printValidate(stdout, rep)
		},
	}
	cmd.Flags().StringVar(&dir, "data", "", "data directory (profile/, placements/)")
	cmd.Flags().StringVar(&models, "models", "", "comma-separated models (default: all with a profile and a placements table)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.Flags().StringVar(&archFile, "arch-file", "", "YAML file with model architectures beyond the built-ins (a model type in neither is derived from its profile, and the report says what was assumed)")
	cmd.Flags().BoolVar(&loo, "loo", true, "add the leave-one-model-out check: hardware terms fitted on the other model types, per-model error and plan-choice regret, every row's prediction (reads every table of DIR)")
	cmd.Flags().IntVar(&fitRows, "fit-rows", dataset.MaxFitRows, "placements rows fitted per model (0: the profile alone, as the scheduler serves a model with no measured placements)")
	return cmd
}

func printValidate(w io.Writer, rep dataset.Report) error {
	fmt.Fprintf(w, "protocol: %s\n\n", rep.Protocol)
	tw := newTable(w)
	fmt.Fprintln(tw, "MODEL\tPLAN FAMILY\tROWS\tAVG ERR %\tMAX ERR %")
	for _, m := range rep.Models {
		fmt.Fprintf(tw, "%s\t(all)\t%d\t%.2f\t%.2f\n", m.Model, m.Rows, m.AvgErrPct, m.MaxErrPct)
		for _, p := range m.Plans {
			fmt.Fprintf(tw, "\t%s\t%d\t%.2f\t%.2f\n", p.Plan, p.Rows, p.AvgErrPct, p.MaxErrPct)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "\nby placement (uneven: a server holds a GPU count that is not a multiple of its GPUs per NIC), and a constant guess (the fit rows' geometric mean) on the same rows:")
	tw = newTable(w)
	fmt.Fprintln(tw, "MODEL\tPLACEMENTS\tROWS\tAVG ERR %\tMAX ERR %")
	for _, m := range rep.Models {
		for _, p := range m.Splits {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%.2f\t%.2f\n", m.Model, p.Plan, p.Rows, p.AvgErrPct, p.MaxErrPct)
		}
		fmt.Fprintf(tw, "%s\tconstant guess\t%d\t%.2f\t%.2f\n", m.Model, m.Rows, m.ConstAvgErrPct, m.ConstMaxErrPct)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, m := range rep.Models {
		fmt.Fprintf(w, "\n%s: fitted on %d samples (%d offload, rmsle %.3f) incl. rows %s\n", m.Model, m.Fit.Samples, m.Fit.OffloadSamples, m.Fit.RMSLE, strings.Join(m.FitRows, " "))
		fmt.Fprintf(w, "  worst: %s\n", m.Worst)
		for _, r := range m.WorstRows {
			fmt.Fprintf(w, "    %s\n", r)
		}
		for _, n := range m.Notes {
			fmt.Fprintf(w, "  note: %s\n", n)
		}
	}
	if rep.LOOProtocol != "" {
		fmt.Fprintf(w, "\n%s\n\n", rep.LOOProtocol)
		tw = newTable(w)
		fmt.Fprintln(tw, "MODEL\tHELD-OUT ROWS\tLOO AVG ERR %\tLOO MAX ERR %\tPLACEMENTS\tREGRET MEAN %\tREGRET MAX %")
		for _, m := range rep.Models {
			held := 0
			for _, r := range m.LOORows {
				if !r.Fit {
					held++
				}
			}
			fmt.Fprintf(tw, "%s\t%d\t%.2f\t%.2f\t%d\t%.2f\t%.2f\n", m.Model, held, m.LOOAvgErrPct, m.LOOMaxErrPct, m.RegretPlacements, m.RegretMeanPct, m.RegretMaxPct)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		fmt.Fprintln(w, "\nhardware terms per fold (fitted without the held-out tables):")
		tw = newTable(w)
		hdr := "HELD OUT"
		for i, n := range perf.ParamNames {
			if perf.HardwareParams[i] {
				hdr += "\t" + n
			}
		}
		fmt.Fprintln(tw, hdr+"\tNOT IDENTIFIED (held at default)")
		for _, f := range rep.LOOFolds {
			line := strings.Join(f.HeldOut, ",")
			for i, n := range perf.ParamNames {
				if perf.HardwareParams[i] {
					line += fmt.Sprintf("\t%.4g", f.Hardware[n])
				}
			}
			held := strings.Join(f.NotIdentified, ",")
			if held == "" {
				held = "-"
			}
			fmt.Fprintln(tw, line+"\t"+held)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	for _, s := range rep.Skipped {
		fmt.Fprintf(w, "skipped %s\n", s)
	}
	return nil
}
