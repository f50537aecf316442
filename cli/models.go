package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/replan/replan/control"
	"github.com/replan/replan/dataset"
	"github.com/replan/replan/jobspec"
	"github.com/replan/replan/perf"
)

// newModelsCmd is `replan models` with its export and import.
func newModelsCmd(stdout, stderr io.Writer) *cobra.Command {
	cmd := clientCmd("models", "Every model type the daemon knows: samples, fitted parameters, when fitted, error on its own samples", cobra.NoArgs, stdout,
		func(ctx context.Context, c *control.Client, _ []string) (any, func(io.Writer) error, error) {
			ms, err := c.Models(ctx, false)
			return ms, func(w io.Writer) error { return writeModels(w, ms) }, err
		})
	cmd.Long = `Lists every model type (architecture/global batch/framework) the daemon holds: how many
measured samples it has, its fitted parameters, when they were fitted ("-": never, the unfitted
defaults) and the mean error of its predictions on its own samples. A type being profiled says
which run it is at. --json is an array of objects with type, samples, params, fitted_at and
err_pct (docs/cli.md).`
	cmd.AddCommand(newModelsExportCmd(stdout), newModelsImportCmd(stdout))
	return cmd
}

func writeModels(w io.Writer, ms []control.ModelInfo) error {
	tw := newTable(w)
	fmt.Fprintln(tw, "TYPE\tSAMPLES\tFITTED\tERR\tSTATE\tPARAMS")
	for _, m := range ms {
		fitted, errPct := "-", "-"
		if m.FittedAt != nil {
			fitted = m.FittedAt.Local().Format("2006-01-02 15:04")
		}
		if m.Samples > 0 {
			errPct = fmt.Sprintf("%.1f%%", m.ErrPct)
		}
		state := "unfitted"
		switch {
		case m.Profiling != nil:
			state = fmt.Sprintf("profiling %d/%d", m.Profiling.Run, m.Profiling.Configs)
			if m.Profiling.Current != "" {
				state += ": " + m.Profiling.Current
			}
		case m.Trusted:
			state = "trusted"
		case m.FittedAt != nil:
			state = "fitted"
		}
		var ps []string
		for _, n := range perf.ParamNames {
			ps = append(ps, fmt.Sprintf("%s=%.3g", n, m.Params[n]))
		}
		if m.ActScale > 0 {
			ps = append(ps, fmt.Sprintf("act_scale=%.2f", m.ActScale)) // memory.go
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\n", clean(m.Type), m.Samples, fitted, errPct, clean(state), strings.Join(ps, " "))
	}
	return tw.Flush()
}

func newModelsExportCmd(stdout io.Writer) *cobra.Command {
	return clientCmd("export DIR", "Write every model type's samples to DIR in the Morphling layout (DIR/profile/<name>/{config,data}.csv, arch.yaml)", cobra.ExactArgs(1), stdout,
		func(ctx context.Context, c *control.Client, args []string) (any, func(io.Writer) error, error) {
			ms, err := c.Models(ctx, true)
			if err != nil {
				return nil, nil, err
			}
			names := exportNames(ms)
			type written struct {
				Type    string `json:"type"`
				Dir     string `json:"dir"`
				Samples int    `json:"samples"`
			}
			var out []written
			for i, m := range ms {
				if len(m.Data) == 0 {
					continue
				}
				if err := dataset.WriteProfile(ctx, args[0], dataset.ProfileSet{Name: names[i], Type: m.Type, Arch: m.Arch, Samples: m.Data}); err != nil {
					return nil, nil, err
				}
				out = append(out, written{m.Type, filepath.Join(args[0], "profile", names[i]), len(m.Data)})
			}
			return out, func(w io.Writer) error {
				if len(out) == 0 {
					_, err := fmt.Fprintln(w, "no model type has samples: nothing exported")
					return err
				}
				for _, o := range out {
					fmt.Fprintf(w, "%s: %d samples in %s\n", clean(o.Type), o.Samples, clean(o.Dir))
				}
				return nil
			}, nil
		})
}

// exportNames is each type's directory: its name, with the global batch
// and framework added where two types share a name.
func exportNames(ms []control.ModelInfo) []string {
	count := map[string]int{}
	for _, m := range ms {
		if len(m.Data) > 0 {
			count[m.Arch.Name]++
		}
	}
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.Arch.Name
		if count[m.Arch.Name] > 1 {
			out[i] = strings.ReplaceAll(m.Type, "/", "_")
		}
	}
	return out
}

func newModelsImportCmd(stdout io.Writer) *cobra.Command {
	var fw string
	cmd := clientCmd("import DIR", "Add the measured runs under DIR/profile/ (Morphling layout, as export writes it or the shared data) to the daemon's model types and fit them", cobra.ExactArgs(1), stdout,
		func(ctx context.Context, c *control.Client, args []string) (any, func(io.Writer) error, error) {
			if fw != string(jobspec.DeepSpeed) && fw != string(jobspec.Megatron) {
				return nil, nil, fmt.Errorf("--framework %q: want deepspeed or megatron", fw)
			}
			sets, err := dataset.ReadProfiles(ctx, args[0])
			if err != nil {
				return nil, nil, err
			}
			sort.Slice(sets, func(a, b int) bool { return sets[a].Name < sets[b].Name })
			var out []control.ModelInfo
			for _, s := range sets {
				typ := s.Type
				if typ == "" {
					typ = fmt.Sprintf("%s/%d/%s", s.Arch.Name, s.Arch.GlobalBatch, fw)
				}
				mi, err := c.ImportModel(ctx, control.ImportRequest{Type: typ, Arch: s.Arch, Samples: s.Samples, Source: filepath.Join(args[0], "profile", s.Name)})
				if err != nil {
					return nil, nil, fmt.Errorf("%s: %w", filepath.Join(args[0], "profile", s.Name), err)
				}
				out = append(out, mi)
			}
			return out, func(w io.Writer) error {
				for _, m := range out {
					fmt.Fprintf(w, "%s: fitted on %d samples, %.1f%% mean error on them\n", clean(m.Type), m.Samples, m.ErrPct)
				}
				return nil
			}, nil
		})
	cmd.Flags().StringVar(&fw, "framework", "deepspeed", "framework of the types whose files do not name one (the shared data)")
	return cmd
}

// newProfileCmd is `replan profile SPEC`.
func newProfileCmd(stdout, stderr io.Writer) *cobra.Command {
	var wait bool
	var timeout time.Duration
	cmd := clientCmd("profile JOB.yaml", "Profile the spec's model type now: a few bounded test runs on free GPUs, then a fit (docs/perf.md)", cobra.ExactArgs(1), stdout,
		func(ctx context.Context, c *control.Client, args []string) (any, func(io.Writer) error, error) {
			data, err := os.ReadFile(args[0])
			if err != nil {
				return nil, nil, err
			}
			began := time.Now()
			r, err := c.Profile(ctx, args[0], data)
			if err != nil {
				return nil, nil, err
			}
			if !wait {
				return r, func(w io.Writer) error {
					_, err := fmt.Fprintf(w, "profiling %s (replan models shows its progress)\n", clean(r.Type))
					return err
				}, nil
			}
			ctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			last := ""
			for {
				ms, err := c.Models(ctx, false)
				if err != nil {
					return nil, nil, err
				}
				for _, m := range ms {
					if m.Type != r.Type {
						continue
					}
					if p := m.Profiling; p != nil {
						line := fmt.Sprintf("profiling %d/%d", p.Run, p.Configs)
						if p.Current != "" {
							line += ": " + p.Current
						}
						if line != last {
							fmt.Fprintln(stderr, clean(line))
							last = line
						}
						continue
					}
					if m.ProfiledAt != nil {
						return m, func(w io.Writer) error {
							fmt.Fprintf(w, "profiled %s in %s\n", clean(m.Type), time.Since(began).Round(time.Second))
							return writeModels(w, []control.ModelInfo{m})
						}, nil
					}
				}
				select {
				case <-ctx.Done():
					return nil, nil, fmt.Errorf("profile %s: still running after %s (replan models shows it)", r.Type, timeout)
				case <-time.After(time.Second):
				}
			}
		})
	cmd.Flags().BoolVar(&wait, "wait", true, "wait for the phase to end and print the fitted model (progress on stderr)")
	cmd.Flags().DurationVar(&timeout, "timeout", 15*time.Minute, "how long --wait waits")
	return cmd
}
