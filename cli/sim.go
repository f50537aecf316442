package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/replan/replan/cluster"
	"github.com/replan/replan/control"
	"github.com/replan/replan/dataset"
	"github.com/replan/replan/perf"
	"github.com/replan/replan/sched"
	"github.com/replan/replan/sim"
)

func newSimCmd(stdout, stderr io.Writer) *cobra.Command {
	var (
		trace, dir, policies, archFile string
		order, hold                    string
		serverLabels                   string
		asJSON                         bool
		cfg                            sim.Config
		racks                          int
		spine                          float64
		both                           bool
	)
	cmd := &cobra.Command{
		Use:   "sim --trace FILE [--data DIR] [--policy a,b] [--json]",
		Short: "Replay a job trace against scheduling policies and compare them (Table 4 style)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if trace == "" {
				return fmt.Errorf("sim: --trace FILE is required (e.g. ../shared/data/morphling/workloads/workload-base.csv)")
			}
			ctx := cmd.Context()
			control.TuneGC() // a replay allocates snapshots every round, as the daemon does
			limitSimMemory()
			if err := applyRacks(&cfg, racks); err != nil {
				return err
			}
			srvLabels, err := sim.ParseServerLabels(serverLabels, cfg.Servers)
			if err != nil {
				return fmt.Errorf("sim: --server-labels: %w", err)
			}
			cfg.ServerLabels = srvLabels
			jobs, err := dataset.LoadWorkload(ctx, trace)
			if err != nil {
				return err
			}
			models, err := simModels(ctx, dir, archFile, jobs, cfg.GPUsPerServer, stderr)
			if err != nil {
				return err
			}
			models.SetSpine(spine, cfg.ServersPerRack)
			ps, err := simPolicies(policies, order, hold, cfg.RestartCost)
			if err != nil {
				return err
			}
			// A failing policy is reported in its row (and the exit
			// status), not at the cost of the others' results.
			results, runErr := sim.RunAll(ctx, jobs, models, ps, cfg)
			var oracle []*sim.Result
			if both && !cfg.Oracle {
				ocfg := cfg
				ocfg.Oracle = true
				ops, err := simPolicies(policies, order, hold, cfg.RestartCost)
				if err != nil {
					return err
				}
				var oErr error
				oracle, oErr = sim.RunAll(ctx, jobs, models, ops, ocfg)
				runErr = errors.Join(runErr, oErr)
			}
			if asJSON {
				if err := writeJSON(stdout, sim.Report{Policies: results, Oracle: oracle}); err != nil {
					return err
				}
				return runErr
			}
			fmt.Fprintf(stdout, "%s: %d jobs, %d servers × %d GPUs, restart cost %.0f s\n", trace, len(jobs), cfg.Servers, cfg.GPUsPerServer, cfg.RestartCost)
			if cfg.ServersPerRack > 0 && cfg.ServersPerRack < cfg.Servers {
				fmt.Fprintf(stdout, "%d racks of %d servers, spine %.0f GB/s per rack (the policies price cross-rack bandwidth ×%.2f)\n", (cfg.Servers+cfg.ServersPerRack-1)/cfg.ServersPerRack, cfg.ServersPerRack, spine, sim.SpineFactor(spine, cfg.ServersPerRack))
			}
			if oracle != nil {
				fmt.Fprintln(stdout, "honest: the policies see the fitted models and the measured speed of configurations a job has run in")
			}
			if err := sim.WriteTable(stdout, results); err != nil {
				return err
			}
			if oracle != nil {
				fmt.Fprintln(stdout, "\noracle: the policies see the whole measured tables (--oracle)")
				if err := sim.WriteTable(stdout, oracle); err != nil {
					return err
				}
			}
			return runErr
		},
	}
	f := cmd.Flags()
	f.StringVar(&trace, "trace", "", "workload trace CSV (Morphling layout)")
	f.StringVar(&archFile, "arch-file", "", "YAML file with the architectures of model types that are not built in (one the trace names with neither is derived from its profile under --data)")
	f.StringVar(&dir, "data", "", "data directory for fitting and measured tables (default $REPLAN_DATA or ../shared/data/morphling)")
	f.StringVar(&policies, "policy", "replan", "policies to compare, comma-separated: "+strings.Join(sched.Names(), ","))
	f.BoolVar(&asJSON, "json", false, "print JSON")
	f.StringVar(&order, "order", "", "replan's order among jobs whose slopes tie: shortest (replan's default) or submission (Morphling's); the other policies keep their own")
	f.StringVar(&hold, "hold", "", "replan's uplink hold: priced (replan's default: a job is held off an uplink it would not interleave on only when a job about as long can take its turn), unpriced (held for any job behind it: less sharing, longer average JCT) or off; the other policies have none")
	f.IntVar(&racks, "racks", 0, "racks (with --servers-per-rack: the cluster is racks × servers-per-rack servers; 0: --servers)")
	f.Float64Var(&spine, "spine-gbps", cluster.A800SpineGBps, "each rack's uplink into the spine, GB/s (oversubscription = servers-per-rack × 100 GB/s / this)")
	f.BoolVar(&cfg.Oracle, "oracle", false, "show the policies the whole measured tables (default: the fitted models plus the measured speed of configurations some job has run in, as a control plane learns them)")
	f.BoolVar(&both, "both", false, "run twice, honest and --oracle, and report both")
	f.BoolVar(&cfg.NoShifts, "no-shifts", false, "ignore the policies' time-shifts (same placements, jobs start at once)")
	f.StringVar(&serverLabels, "server-labels", "", "labels of the servers, LABEL:FIRST-LAST (0-based server indices, LABEL a name or name=value), comma-separated, e.g. ib-hdr:0-3,gpu=a800-80g:0; a trace's labels column requires them")
	addClusterFlags(cmd, &cfg)
	cmd.AddCommand(newSimGenCmd(stdout), newSimBenchCmd(stdout))
	return cmd
}

// applyRacks sizes the cluster from --racks and --servers-per-rack.
func applyRacks(cfg *sim.Config, racks int) error {
	if racks < 0 {
		return fmt.Errorf("sim: --racks %d: must be ≥ 0", racks)
	}
	if racks == 0 {
		return nil
	}
	if cfg.ServersPerRack <= 0 {
		cfg.ServersPerRack = 8
	}
	cfg.Servers = racks * cfg.ServersPerRack
	return nil
}

func addClusterFlags(cmd *cobra.Command, cfg *sim.Config) {
	f := cmd.Flags()
	f.Float64Var(&cfg.RestartCost, "restart-cost", 260, "seconds every start and every change of plan or placement costs (the paper measured 78; negative: none)")
	f.IntVar(&cfg.Servers, "servers", 8, "servers in the cluster")
	f.IntVar(&cfg.GPUsPerServer, "gpus-per-server", 8, "GPUs per server")
	f.IntVar(&cfg.CPUsPerServer, "cpus-per-server", 96, "CPU cores per server")
	f.IntVar(&cfg.ServersPerRack, "servers-per-rack", 0, "servers per rack (0: one rack)")
	f.IntVar(&cfg.QuotaGPUs, "quota", 0, "GPU quota of the guaranteed jobs' tenant (0: the whole cluster)")
	f.Float64Var(&cfg.RoundInterval, "round-interval", 0, "run at most one scheduling round per this many seconds (0: on every arrival and completion)")
	f.BoolVar(&cfg.HideMeasured, "hide-measured", false, "do not show the policies the measured tables (they see only the fitted models; the simulator still replays the tables)")
}

// simModels fits the trace's model types from dir, or falls back to the
// unfitted models when no data directory exists; archFile adds model
// types that are not built in.
func simModels(ctx context.Context, dir, archFile string, jobs []dataset.WorkloadJob, gpusPerServer int, stderr io.Writer) (*sim.Models, error) {
	env := perf.A800
	if gpusPerServer > 0 {
		env.GPUsPerServer = gpusPerServer
	}
	var cat perf.Catalog
	var extra []perf.Arch
	if archFile != "" {
		full, err := loadCatalog(archFile)
		if err != nil {
			return nil, err
		}
		cat = perf.Catalog{}
		for name, a := range full {
			if _, builtin := perf.Builtin(name); !builtin {
				cat[name] = a
				extra = append(extra, a)
			}
		}
	}
	if dir == "" {
		dir = defaultDataDir()
	}
	if dir == "" {
		fmt.Fprintln(stderr, "sim: no --data directory: using unfitted default models and no measured tables")
		return sim.DefaultModels(env, extra...), nil
	}
	apps := make([]string, 0, len(jobs))
	for _, j := range jobs {
		apps = append(apps, j.Application)
	}
	return sim.LoadModelsWith(ctx, dir, env, apps, cat)
}

// simPolicies are the policies of --policy list with restartCost, replan's
// in order and with hold (sched.SetOrder, sched.SetHold; "": its own).
func simPolicies(list, order, hold string, restartCost float64) ([]sched.Policy, error) {
	var ps []sched.Policy
	ordered := false
	for _, name := range strings.Split(list, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		p, err := sched.NewWithRestartCost(name, restartCost)
		if err != nil {
			return nil, err
		}
		if name == "replan" {
			if err := sched.SetOrder(p, order); err != nil {
				return nil, fmt.Errorf("sim: --order: %w", err)
			}
			if err := sched.SetHold(p, hold); err != nil {
				return nil, fmt.Errorf("sim: --hold: %w", err)
			}
			ordered = true
		}
		ps = append(ps, p)
	}
	if len(ps) == 0 {
		return nil, fmt.Errorf("sim: --policy: no policy named (want %s)", strings.Join(sched.Names(), ", "))
	}
	if order != "" && !ordered {
		return nil, fmt.Errorf("sim: --order %s: only replan takes an order, and --policy %s has no replan", order, list)
	}
	if hold != "" && !ordered {
		return nil, fmt.Errorf("sim: --hold %s: only replan has an uplink hold, and --policy %s has no replan", hold, list)
	}
	return ps, nil
}

func newSimGenCmd(stdout io.Writer) *cobra.Command {
	var g sim.GenConfig
	cmd := &cobra.Command{
		Use:   "gen --jobs N --servers S --seed X > trace.csv",
		Short: "Generate a synthetic trace: Poisson arrivals, Philly-like GPU demands",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			jobs, err := sim.Generate(g)
			if err != nil {
				return fmt.Errorf("sim gen: %w", err)
			}
			return dataset.WriteWorkload(stdout, jobs)
		},
	}
	f := cmd.Flags()
	f.IntVar(&g.Jobs, "jobs", 1000, "number of jobs")
	f.IntVar(&g.Servers, "servers", 8, "servers in the cluster the trace is sized for")
	f.IntVar(&g.GPUsPerServer, "gpus-per-server", 8, "GPUs per server")
	f.Uint64Var(&g.Seed, "seed", 1, "random seed (same seed, same trace)")
	f.Float64Var(&g.Load, "load", 0.9, "offered load (requested GPU-seconds per second / cluster GPUs)")
	f.Float64Var(&g.MedianMinutes, "median-minutes", 30, "median job duration at its request, minutes")
	f.Float64Var(&g.SLAShare, "sla-share", 0, "share of guaranteed jobs")
	f.BoolVar(&g.Batch, "batch", false, "submit every job at time 0 (batch arrivals) instead of Poisson arrivals")
	return cmd
}

func newSimBenchCmd(stdout io.Writer) *cobra.Command {
	var b sim.BenchConfig
	cmd := &cobra.Command{
		Use:   "bench [--data DIR]",
		Short: "Print the scheduling targets: Table 4 on the Morphling traces and the speed figures",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if b.DataDir == "" {
				b.DataDir = defaultDataDir()
			}
			control.TuneGC() // as `replan sim`: the scale rows allocate snapshots every round
			limitSimMemory()
			return sim.Bench(cmd.Context(), stdout, b)
		},
	}
	f := cmd.Flags()
	f.StringVar(&b.DataDir, "data", "", "data directory (default $REPLAN_DATA or ../shared/data/morphling)")
	f.IntVar(&b.ScaleJobs, "scale-jobs", 80000, "jobs of the largest generated scale trace (a quarter and a half of it run too)")
	f.IntVar(&b.ScaleServers, "scale-servers", 1024, "servers of the scale trace and the one-round benchmark")
	f.Float64Var(&b.ScaleRoundInterval, "scale-round-interval", 60, "round interval of the scale run in seconds (0: a round on every event)")
	f.BoolVar(&b.SkipScale, "skip-scale", false, "skip the scale traces")
	f.BoolVar(&b.OversubOnly, "oversub-only", false, "print only the spine-oversubscription sweeps (1:1, 2:1, 4:1, 16:1)")
	f.StringVar(&b.OversubWorkload, "oversub-workload", "all", "spine-oversubscription sweeps: philly (racks of 8 servers), comm (communication-heavy data-parallel jobs on racks of 3 servers, plans pinned and elastic), cassini (pure data-parallel jobs larger than a rack, 25-45 % communication), both (philly and comm) or all")
	f.IntVar(&b.OversubSeeds, "oversub-seeds", 6, "seeds (traces) of the cassini sweep, and of the comm sweep in --json")
	f.BoolVar(&b.JSON, "json", false, "with --oversub-only: print every cell (seed) of the cassini and comm sweeps as a JSON array of objects (sweep, oversub, arrivals, seed, replan_vs_morphling, shift_exposed_cut_pct; comm also dally_auto_vs_manual)")
	f.BoolVar(&b.SkipNetwork, "skip-network", false, "skip the multi-rack experiments")
	f.IntVar(&b.NetworkJobs, "network-jobs", 400, "jobs of each generated multi-rack trace")
	return cmd
}
