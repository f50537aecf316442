package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	"github.com/replan/replan/cluster"
	"github.com/replan/replan/dataset"
	"github.com/replan/replan/perf"
)

// defaultDataDir finds measured data for fitting when --data is not given:
// $REPLAN_DATA, else ../shared/data/morphling when it exists.
func defaultDataDir() string {
	if d := os.Getenv("REPLAN_DATA"); d != "" {
		return d
	}
	d := filepath.Join("..", "shared", "data", "morphling")
	if st, err := os.Stat(filepath.Join(d, "profile")); err == nil && st.IsDir() {
		return d
	}
	return ""
}

// modelSource says where a model's parameters came from, for the output.
type modelSource struct {
	Source string        `json:"source"`
	Fit    perf.FitStats `json:"fit"`
}

// resolveModel returns the performance model of a model type: a saved fit
// (--model-file), a fit on a data directory, or the unfitted defaults.
// loadCatalog is the built-in model types plus those of archFile (none
// when "").
func loadCatalog(archFile string) (perf.Catalog, error) {
	if archFile == "" {
		return perf.NewCatalog(), nil
	}
	data, err := os.ReadFile(archFile)
	if err != nil {
		return nil, err
	}
	archs, err := perf.ParseArchs(archFile, data)
	if err != nil {
		return nil, err
	}
	return perf.NewCatalog(archs...), nil
}

func resolveModel(ctx context.Context, name, dataDir, modelFile, archFile string) (perf.Model, modelSource, error) {
	if modelFile != "" {
		m, err := readModelFile(modelFile)
		if err != nil {
			return perf.Model{}, modelSource{}, err
		}
		return m, modelSource{Source: "fitted model " + modelFile}, nil
	}
	cat, err := loadCatalog(archFile)
	if err != nil {
		return perf.Model{}, modelSource{}, err
	}
	arch, err := cat.Lookup(name)
	if err != nil {
		return perf.Model{}, modelSource{}, err
	}
	// A built-in type as built in, or one of --arch-file that is not
	// built in, is fitted on its profile (and tables) when dataDir has one.
	if _, builtin := perf.Builtin(arch.Name); (!builtin || archFile == "") && dataDir != "" {
		m, st, err := dataset.FitModelFor(ctx, dataDir, arch, perf.A800, true)
		if err == nil {
			return m, modelSource{Source: "fitted on " + dataDir, Fit: st}, nil
		}
	}
	return perf.DefaultModel(arch, perf.A800), modelSource{Source: "unfitted defaults (no samples for this model: pass --data DIR or --model-file)"}, nil
}

func readModelFile(path string) (perf.Model, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return perf.Model{}, err
	}
	var m perf.Model
	if err := json.Unmarshal(data, &m); err != nil {
		return perf.Model{}, fmt.Errorf("%s: %w", path, err)
	}
	if err := m.Arch.Validate(); err != nil {
		return perf.Model{}, fmt.Errorf("%s: arch: %w", path, err)
	}
	if m.Env.GPUsPerServer == 0 {
		m.Env = perf.A800
	}
	return m, nil
}

type planOutput struct {
	Model     string           `json:"model"`
	GPUs      int              `json:"gpus"`
	Placement perf.Placement   `json:"placement"`
	Source    modelSource      `json:"model_source"`
	Plans     []perf.Ranked    `json:"plans"`
	Rejected  []perf.Rejection `json:"rejected"`
}

func newPlanCmd(stdout, stderr io.Writer) *cobra.Command {
	var (
		model, data, modelFile, archFile string
		gpus, servers, top               int
		cpus                             float64
		asJSON                           bool
	)
	cmd := &cobra.Command{
		Use:   "plan --model M --gpus N [--servers S] [--json]",
		Short: "Rank every feasible execution plan for a model on a GPU count",
		Long: `Enumerates every execution plan (DP/TP/PP sizes, micro-batch, gradient accumulation,
ZeRO stage, offload, activation checkpointing) for the model on N GPUs spread evenly over S
servers, estimates each plan's memory, and ranks the feasible ones by predicted throughput.
Every rejected plan is listed with the rule that rejected it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if model == "" {
				return fmt.Errorf("plan: --model is required (one of vit, roberta, bert, t5, gpt2, llama7b, llama30b, or a model of --arch-file)")
			}
			if gpus < 1 {
				return fmt.Errorf("plan: --gpus must be >= 1, got %d", gpus)
			}
			if !cmd.Flags().Changed("data") {
				data = defaultDataDir()
			}
			m, src, err := resolveModel(cmd.Context(), model, data, modelFile, archFile)
			if err != nil {
				return fmt.Errorf("plan: %w", err)
			}
			if servers == 0 {
				servers = (gpus + m.Env.GPUsPerServer - 1) / m.Env.GPUsPerServer
			}
			if servers < 1 || servers > gpus {
				return fmt.Errorf("plan: --servers must be between 1 and --gpus (%d), got %d", gpus, servers)
			}
			pl := perf.EvenPlacement(gpus, servers)
			for _, g := range pl {
				if g > m.Env.GPUsPerServer {
					return fmt.Errorf("plan: %d GPUs on %d servers puts %d on one server, servers have %d", gpus, servers, g, m.Env.GPUsPerServer)
				}
			}
			ranked, rejected, err := m.Rank(perf.Resources{Placement: pl, CPUsPerGPU: cpus})
			if err != nil {
				return fmt.Errorf("plan: %w", err)
			}
			if top > 0 && len(ranked) > top {
				ranked = ranked[:top]
			}
			out := planOutput{Model: m.Arch.Name, GPUs: gpus, Placement: pl, Source: src, Plans: ranked, Rejected: rejected}
			if out.Plans == nil {
				out.Plans = []perf.Ranked{}
			}
			if asJSON {
				err = writeJSON(stdout, out)
			} else {
				err = printPlans(stdout, out, m.Arch.GlobalBatch)
			}
			if err == nil && len(out.Plans) == 0 {
				// Nothing can run: a script must not read success.
				err = fmt.Errorf("plan: no feasible plan for %s on %s (%d plans rejected)", m.Arch.Name, placementSummary(pl), len(rejected))
			}
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&model, "model", "", "model type (built-in or from --arch-file)")
	f.IntVar(&gpus, "gpus", 0, "number of GPUs")
	f.IntVar(&servers, "servers", 0, "servers to spread the GPUs over (default: as few as fit)")
	f.Float64Var(&cpus, "cpus-per-gpu", 8, "CPU cores per GPU (for the offloaded optimizer)")
	f.StringVar(&data, "data", "", "fit on this data directory (default $REPLAN_DATA or ../shared/data/morphling when present)")
	f.StringVar(&modelFile, "model-file", "", "use a fitted model saved by `replan perf fit --out`")
	f.StringVar(&archFile, "arch-file", "", "YAML file with user-defined model architectures")
	f.IntVar(&top, "top", 0, "show only the best N plans (0: all)")
	f.BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func printPlans(w io.Writer, out planOutput, batch int) error {
	fmt.Fprintf(w, "%s on %d GPUs, %s (global batch %d); model: %s\n\n", out.Model, out.GPUs, placementSummary(out.Placement), batch, out.Source.Source)
	tw := newTable(w)
	fmt.Fprintln(tw, "#\tPLAN\tITER s\tSAMPLES/s\tGPU GiB\tHOST GiB/server")
	for i, r := range out.Plans {
		fmt.Fprintf(tw, "%d\t%s\t%.3f\t%.2f\t%.1f\t%.0f\n", i+1, r.PlanString, r.Predicted.Iter, r.Throughput, r.Memory.GPU/perf.GiB, r.Memory.HostPerServer/perf.GiB)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(out.Plans) == 0 {
		fmt.Fprintln(w, "no feasible plan")
	}
	// Rejections grouped by rule: count and one example each.
	type group struct {
		n       int
		example perf.Rejection
	}
	groups := map[perf.Rule]*group{}
	for _, r := range out.Rejected {
		g := groups[r.Rule]
		if g == nil {
			g = &group{example: r}
			groups[r.Rule] = g
		}
		g.n++
	}
	rules := make([]string, 0, len(groups))
	for r := range groups {
		rules = append(rules, string(r))
	}
	sort.Strings(rules)
	fmt.Fprintf(w, "\n%d plans rejected (all of them with --json):\n", len(out.Rejected))
	for _, r := range rules {
		g := groups[perf.Rule(r)]
		fmt.Fprintf(w, "  %-13s %4d  e.g. %s: %s\n", r, g.n, g.example.Plan, g.example.Reason)
	}
	return nil
}

// placementSummary says a placement as people do ("2 servers × 8 GPUs"),
// in a line of bounded length however many servers it spans: "12500
// servers: 12499 × 8 GPUs, 1 × 4 GPUs".
func placementSummary(pl perf.Placement) string {
	if len(pl) <= 8 {
		return cluster.PlacementText(pl)
	}
	counts := map[int]int{}
	var sizes []int
	for _, g := range pl {
		if counts[g] == 0 {
			sizes = append(sizes, g)
		}
		counts[g]++
	}
	if len(sizes) == 1 {
		return cluster.PlacementText(pl)
	}
	sort.Sort(sort.Reverse(sort.IntSlice(sizes)))
	parts := make([]string, len(sizes))
	for i, g := range sizes {
		parts[i] = fmt.Sprintf("%d × %s", counts[g], cluster.GPUCount(g))
	}
	return fmt.Sprintf("%d servers: %s", len(pl), strings.Join(parts, ", "))
}
