package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/replan/replan/dataset"
	"github.com/replan/replan/perf"
)

type fitOutput struct {
	Model perf.Model    `json:"model"`
	Fit   perf.FitStats `json:"fit"`
	Note  string        `json:"note,omitempty"`
}

func newPerfFitCmd(stdout io.Writer) *cobra.Command {
	var samplesFile, model, out, archFile string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "fit --samples FILE --model M [--out model.json]",
		Short: "Fit the model's fourteen parameters (and the forward profile) from measured samples",
		Long: `Reads a CSV of measured runs (header: plan,placement,iter_s[,fwd_s][,opt_s][,cpus_per_gpu][,cross_rack];
plan is a spec like "dp=2,tp=4,pp=1,mb=2,ga=4,zero=1" or a Morphling code like 248 or zero-offload),
fits the forward profile from rows with fwd_s and TP = PP = 1, then the parameters (opt_s, the
measured optimizer phase of a run without offload, pins k_opt against k_const), and prints
or saves the fitted model. A saved model is reused with --model-file by plan and curve.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if samplesFile == "" || model == "" {
				return fmt.Errorf("perf fit: --samples FILE and --model M are required")
			}
			cat, err := loadCatalog(archFile)
			if err != nil {
				return err
			}
			arch, err := cat.Lookup(model)
			if err != nil {
				return fmt.Errorf("perf fit: %w", err)
			}
			f, err := os.Open(samplesFile)
			if err != nil {
				return fmt.Errorf("perf fit: %w", err)
			}
			defer f.Close()
			samples, err := dataset.ParseSamples(samplesFile, f, arch)
			if err != nil {
				return err
			}
			m := perf.DefaultModel(arch, perf.A800)
			res := fitOutput{}
			if fwd, err := perf.FitForward(arch, samples); err == nil {
				m.Forward = fwd
			} else {
				res.Note = "no forward times in the samples: forward profile estimated from the architecture"
			}
			// with no measured forward, the fit also scales the
			// architecture's guessed compute (k_fwd)
			params, st, err := perf.Fit(m, samples, perf.FitOptions{FreeForward: res.Note != ""})
			if err != nil {
				return fmt.Errorf("perf fit: %w", err)
			}
			m.Params = params
			res.Model, res.Fit = m, st
			if out != "" {
				data, err := json.MarshalIndent(m, "", "  ")
				if err != nil {
					return err
				}
				tmp := out + ".tmp"
				if err := os.WriteFile(tmp, append(data, '\n'), 0o644); err != nil {
					return err
				}
				if err := os.Rename(tmp, out); err != nil {
					return err
				}
			}
			if asJSON {
				return writeJSON(stdout, res)
			}
			fmt.Fprintf(stdout, "%s: fitted on %d samples (%d with offload), rmsle %.4f, trusted: %v\n", arch.Name, st.Samples, st.OffloadSamples, st.RMSLE, st.Trusted)
			if !st.Trusted {
				fmt.Fprintf(stdout, "  not trusted for scheduling: needs >= %d samples, >= %d with ZeRO-Offload\n", perf.MinSamples, perf.MinOffloadSamples)
			}
			if res.Note != "" {
				fmt.Fprintf(stdout, "  note: %s\n", res.Note)
			}
			fmt.Fprintf(stdout, "  forward: %.4f s + %.5f s/sample\n", m.Forward.Alpha, m.Forward.Beta)
			v := params.Vector()
			for i, n := range perf.ParamNames {
				fmt.Fprintf(stdout, "  %-9s %.6g\n", n, v[i])
			}
			if out != "" {
				fmt.Fprintf(stdout, "saved to %s\n", out)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&samplesFile, "samples", "", "CSV of measured samples")
	cmd.Flags().StringVar(&model, "model", "", "model type")
	cmd.Flags().StringVar(&archFile, "arch-file", "", "YAML file with user-defined model architectures")
	cmd.Flags().StringVar(&out, "out", "", "save the fitted model as JSON")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

type curveOutput struct {
	Model  string            `json:"model"`
	Source modelSource       `json:"model_source"`
	Points []perf.CurvePoint `json:"points"`
}

func newPerfCurveCmd(stdout io.Writer) *cobra.Command {
	var model, data, modelFile, archFile string
	var gpus, maxCPUs int
	var cpus float64
	var asJSON, byCPU bool
	cmd := &cobra.Command{
		Use:   "curve --model M [--gpus N] [--cpus-per-gpu C] [--by-cpu] [--json]",
		Short: "Resource sensitivity curve: best plan and throughput for 1..N GPUs (or 1..C CPUs per GPU)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if model == "" {
				return fmt.Errorf("perf curve: --model is required")
			}
			if gpus < 1 || gpus > 8192 {
				return fmt.Errorf("perf curve: --gpus must be 1..8192, got %d", gpus)
			}
			if !cmd.Flags().Changed("data") {
				data = defaultDataDir()
			}
			m, src, err := resolveModel(cmd.Context(), model, data, modelFile, archFile)
			if err != nil {
				return fmt.Errorf("perf curve: %w", err)
			}
			pts := m.Curve(gpus, cpus)
			if byCPU {
				if maxCPUs < 1 {
					return fmt.Errorf("perf curve: --max-cpus-per-gpu must be >= 1")
				}
				pts = m.CPUCurve(perf.PackedPlacement(gpus, m.Env.GPUsPerServer), maxCPUs)
			}
			if asJSON {
				return writeJSON(stdout, curveOutput{Model: m.Arch.Name, Source: src, Points: pts})
			}
			fmt.Fprintf(stdout, "%s sensitivity curve (global batch %d, %.0f CPUs/GPU); model: %s\n\n", m.Arch.Name, m.Arch.GlobalBatch, cpus, src.Source)
			tw := newTable(stdout)
			fmt.Fprintln(tw, "GPUS\tCPUS/GPU\tPLACEMENT\tSAMPLES/s\tSLOPE\tBEST PLAN")
			for _, p := range pts {
				plan := p.PlanString
				if !p.Feasible {
					plan = "(no feasible plan)"
				}
				fmt.Fprintf(tw, "%d\t%.0f\t%s\t%.2f\t%+.2f\t%s\n", p.GPUs, p.CPUsPerGPU, p.Placement, p.Throughput, p.Slope, plan)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVar(&model, "model", "", "model type")
	cmd.Flags().IntVar(&gpus, "gpus", 64, "largest GPU count")
	cmd.Flags().Float64Var(&cpus, "cpus-per-gpu", 8, "CPU cores per GPU")
	cmd.Flags().BoolVar(&byCPU, "by-cpu", false, "curve over CPU cores per GPU at --gpus GPUs instead of over GPUs")
	cmd.Flags().IntVar(&maxCPUs, "max-cpus-per-gpu", 12, "largest CPU count per GPU with --by-cpu")
	cmd.Flags().StringVar(&data, "data", "", "fit on this data directory (default $REPLAN_DATA or ../shared/data/morphling when present)")
	cmd.Flags().StringVar(&modelFile, "model-file", "", "use a fitted model saved by `replan perf fit --out`")
	cmd.Flags().StringVar(&archFile, "arch-file", "", "YAML file with user-defined model architectures")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}
