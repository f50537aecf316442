package cli

import (
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	"github.com/replan/replan/cluster"
	"github.com/replan/replan/jobspec"
	"github.com/replan/replan/launch"
	"github.com/replan/replan/perf"
)

func newLaunchCmd(stdout, stderr io.Writer) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "launch",
		Short: "Render the commands and files a job's plan runs with",
	}
	var (
		jobFile, planSpec, serverList, inventory string
		gpusPerServer                            int
		asJSON                                   bool
	)
	render := &cobra.Command{
		Use:   "render --job job.yaml --plan SPEC --servers a,b [--json]",
		Short: "Print every server's launcher command, environment and files without running anything",
		Long: `Renders the DeepSpeed (deepspeed --no_ssh per server, ds_config.json, hostfile) or Megatron
(torchrun per server) launch of a job spec with a plan, e.g.
  replan launch render --job job.yaml --plan "dp=2,tp=4,pp=1,mb=2,ga=4,zero=1" --servers a,b
The plan's GPUs are spread evenly over the servers (GPU indices from 0). Server addresses
come from --inventory when it lists the servers, else the names are used as addresses.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if jobFile == "" || planSpec == "" || serverList == "" {
				return fmt.Errorf("launch render: --job, --plan and --servers are required")
			}
			spec, err := jobspec.Load(jobFile, nil)
			if err != nil {
				return err
			}
			plan, err := perf.ParsePlanSpec(planSpec)
			if err != nil {
				return fmt.Errorf("launch render: --plan: %w", err)
			}
			names := strings.Split(serverList, ",")
			var inv *cluster.Inventory
			if inventory != "" {
				if inv, err = cluster.Load(inventory); err != nil {
					return err
				}
			}
			if plan.GPUs()%len(names) != 0 {
				return fmt.Errorf("launch render: the plan's %d GPUs do not spread evenly over %d servers", plan.GPUs(), len(names))
			}
			per := plan.GPUs() / len(names)
			if gpusPerServer > 0 && per > gpusPerServer {
				return fmt.Errorf("launch render: %d GPUs per server, servers have %d", per, gpusPerServer)
			}
			cpusPerGPU := max(spec.Request.CPUs/max(spec.Request.GPUs, 1), 1)
			var servers []launch.Server
			for _, n := range names {
				s := launch.Server{Name: n, Address: n}
				if inv != nil {
					srv, ok := inv.Server(n)
					if !ok {
						return fmt.Errorf("launch render: server %q is not in %s", n, inventory)
					}
					s.Address = srv.Address
				}
				for g := 0; g < per; g++ {
					s.GPUs = append(s.GPUs, g)
					for c := 0; c < cpusPerGPU; c++ {
						s.CPUs = append(s.CPUs, g*cpusPerGPU+c)
					}
				}
				servers = append(servers, s)
			}
			r, err := launch.Render(launch.Input{Job: spec, Plan: plan, Servers: servers})
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(stdout, r)
			}
			fmt.Fprintf(stdout, "# %s: %s on %d servers, master %s:%d\n", spec.Name, plan, len(servers), r.MasterAddr, r.MasterPort)
			for _, s := range r.Servers {
				fmt.Fprintf(stdout, "\n## %s (cwd %s, cpus %d)\n", s.Server, s.Dir, len(s.CPUs))
				for _, kv := range launch.SortedEnv(s.Env) {
					fmt.Fprintf(stdout, "export %s\n", kv)
				}
				fmt.Fprintln(stdout, shellJoin(s.Argv))
				paths := make([]string, 0, len(s.Files))
				for p := range s.Files {
					paths = append(paths, p)
				}
				sort.Strings(paths)
				for _, p := range paths {
					fmt.Fprintf(stdout, "--- %s\n%s", p, s.Files[p])
				}
			}
			return nil
		},
	}
	f := render.Flags()
	f.StringVar(&jobFile, "job", "", "job spec file")
	f.StringVar(&planSpec, "plan", "", `plan, e.g. "dp=2,tp=4,pp=1,mb=2,ga=4,zero=1[,offload][,ckpt]"`)
	f.StringVar(&serverList, "servers", "", "comma-separated servers in rank order")
	f.StringVar(&inventory, "inventory", "", "inventory to take server addresses from")
	f.IntVar(&gpusPerServer, "gpus-per-server", 8, "GPUs a server has")
	f.BoolVar(&asJSON, "json", false, `print {"servers":[{"server","argv","env","files"}]}`)
	cmd.AddCommand(render)
	return cmd
}

// shellJoin quotes argv for display as one shell line.
func shellJoin(argv []string) string {
	out := make([]string, len(argv))
	for i, a := range argv {
		if a != "" && strings.IndexFunc(a, func(r rune) bool {
			return !(r == '-' || r == '_' || r == '.' || r == '/' || r == ':' || r == ',' || r == '=' || r == '@' || (r >= '0' && r <= '9') || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z'))
		}) < 0 {
			out[i] = a
		} else {
			out[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
	}
	return strings.Join(out, " ")
}
