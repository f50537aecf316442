package cli

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/replan/replan/cluster"
	"github.com/replan/replan/control"
	"github.com/replan/replan/dataset"
	"github.com/replan/replan/fleet"
	"github.com/replan/replan/jobspec"
	"github.com/replan/replan/perf"
	"github.com/replan/replan/sched"
	"github.com/replan/replan/ssh"
)

// defaultSocket is where the daemon listens and the CLI connects:
// $REPLAN_SOCKET, else ~/.replan/replan.sock.
func defaultSocket() string {
	if s := os.Getenv("REPLAN_SOCKET"); s != "" {
		return s
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".replan", "replan.sock")
}

// daemonOptions are the flags of `replan daemon` (and of `replan demo`,
// which runs the same control plane in-process).
type daemonOptions struct {
	inventory, db, socket, policy, executor, data, listen, tokenFile string
	order                                                            string // replan's order among slope ties (sched.SetOrder; "": the policy's own)
	hold                                                             string // replan's uplink hold (sched.SetHold; "": the policy's own)
	remoteDir                                                        string // agent directory on every server (ssh executor)
	tick, restartCost, idemRetention, lease                          time.Duration
	auth                                                             authOptions // daemon_auth.go
	hangFactor                                                       float64
	hangFloor                                                        time.Duration
	gpuReadFailures                                                  int
	// redeploy of agents gone from servers that answer SSH (control/redeploy.go)
	agentBinary, agentFakeGPUs string
	redeployTries              int
	redeployBackoff            time.Duration
	slowFraction               float64
	slowObservations           int
	// profiling on arrival (control.ProfileOptions); profileSet: --profile
	// was given (the sim executor profiles only then)
	profile    control.ProfileOptions
	profileSet bool
	ha         haOptions // daemon_ha.go
}

func serversFromInventory(inv *cluster.Inventory) ([]control.ServerInfo, []control.TenantInfo) {
	var servers []control.ServerInfo
	for _, s := range inv.Servers {
		servers = append(servers, control.ServerInfo{Name: s.Name, Address: s.Address, Rack: s.Rack, GPUs: s.GPUs, CPUs: s.CPUCores, MemGB: float64(s.HostMemoryGB), Labels: s.Labels})
	}
	var tenants []control.TenantInfo
	for _, t := range inv.Tenants {
		tenants = append(tenants, control.TenantInfo{Name: t.Name, QuotaGPUs: t.GPUQuota,
			TimeLimitDefault: jobspec.Duration(t.TimeLimitDefault), TimeLimitMax: jobspec.Duration(t.TimeLimitMax)})
	}
	return servers, tenants
}

func newDaemonCmd(stdout, stderr io.Writer) *cobra.Command {
	o := daemonOptions{}
	cmd := &cobra.Command{
		Use:   "daemon",
		Short: "Run the control plane: store, scheduling loop, executor and API",
		Long: `Runs replan's control plane. State lives in a SQLite database (--db); every change is
written there before it is acted on, so the daemon can be killed at any moment and restarted.
The API listens on a unix socket (mode 0600) and, with --listen, on TCP with a bearer token.
--executor sim runs jobs on a simulated cluster (measured A800 iteration times from --data);
--executor ssh launches DeepSpeed/Megatron on the inventory's servers through the agents that
replan deploy installed (same --remote-dir), over SSH with the inventory's options and known_hosts.
See docs/control.md.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.profileSet = cmd.Flags().Changed("profile")
			control.TuneGC() // a long-lived daemon trades heap for fewer collections
			return runDaemon(cmd.Context(), o, stderr)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.inventory, "inventory", "inventory.yaml", "inventory file (servers, racks, tenants)")
	f.StringVar(&o.db, "db", "", "SQLite database (default ~/.replan/replan.db)")
	f.StringVar(&o.socket, "socket", defaultSocket(), "API unix socket")
	f.StringVar(&o.policy, "policy", "replan", "scheduling policy: "+strings.Join(sched.Names(), ", "))
	f.StringVar(&o.order, "order", "", "replan's order among jobs whose slopes tie: shortest (earliest submission + predicted remaining run first, replan's default) or submission (Morphling's); other policies keep their own")
	f.StringVar(&o.hold, "hold", "", "replan's uplink hold: priced (replan's default: a job is held off an uplink it would not interleave on only when a job about as long can take its turn), unpriced (held for any job behind it: less sharing, longer average JCT) or off; other policies have none")
	f.StringVar(&o.executor, "executor", "sim", "sim (simulated cluster) or ssh (the agents on the inventory's servers)")
	f.StringVar(&o.remoteDir, "remote-dir", "", "agent directory on every server, as given to replan deploy; {server} is replaced by the server's name (ssh executor; default: the inventory's ssh.remote_dir, else "+fleet.DefaultRemoteDir+")")
	f.StringVar(&o.data, "data", "", "Morphling data directory for fitted models and measured iteration times (default $REPLAN_DATA or ../shared/data/morphling when present)")
	f.StringVar(&o.listen, "listen", "", "also serve the API on this TCP address, TLS only (needs --tokens or --token-file)")
	f.StringVar(&o.tokenFile, "token-file", "", "file holding one bearer token of the TCP listener, which acts as the daemon's own user")
	f.DurationVar(&o.tick, "tick", 5*time.Second, "observe and schedule at least this often")
	f.DurationVar(&o.restartCost, "restart-cost", 260*time.Second, "simulated checkpoint-restart cost (sim executor)")
	f.DurationVar(&o.idemRetention, "idempotency-retention", control.DefaultIdempotencyRetention, "how long a submission's Idempotency-Key is kept (a retry within it gets the job the key created)")
	f.DurationVar(&o.lease, "lease", control.DefaultLease, "agents' lease (ssh executor): an agent that hears nothing from the daemon for this long kills its jobs; a job cut off restarts elsewhere 2 leases + 3 s after its server's last answer; negative: no leases, no fencing")
	f.Float64Var(&o.hangFactor, "hang-factor", control.DefaultHangFactor, "restart a job that logged no new iteration for this many times its predicted iteration time (or --hang-floor, whichever is longer; a spec's hang: overrides both)")
	f.DurationVar(&o.hangFloor, "hang-floor", control.DefaultHangFloor, "the shortest silence after which a job counts as hung")
	f.IntVar(&o.gpuReadFailures, "gpu-read-failures", control.DefaultGPUReadFailures, "cordon a GPU whose reads failed this many observations in a row")
	f.StringVar(&o.agentBinary, "agent-binary", "", "agent binary the daemon deploys to a server whose SSH answers but whose agent does not (a reboot; ssh executor; default: replan-agent beside replan, else replan itself, as replan deploy)")
	f.StringVar(&o.agentFakeGPUs, "agent-fake-gpus", "", `such a redeployed agent's --fake-gpus, as given to replan deploy (tests, demos)`)
	f.IntVar(&o.redeployTries, "redeploy-tries", control.DefaultRedeployTries, "failed redeploys of a server's agent after which the server is marked down with the reason (0: never redeploy)")
	f.DurationVar(&o.redeployBackoff, "redeploy-backoff", control.DefaultRedeployBackoff, "wait after a failed redeploy, doubled after each further one (at most 32x); also how often a server whose SSH does not answer is asked again")
	f.Float64Var(&o.slowFraction, "slow-fraction", control.DefaultSlowFraction, "look for a slow server when a job runs below this fraction of its predicted throughput for --slow-observations observations in a row (a spec's slow: overrides both)")
	f.IntVar(&o.slowObservations, "slow-observations", control.DefaultSlowObservations, "how many observations in a row a job must run below --slow-fraction of its prediction")
	f.BoolVar(&o.profile.Enabled, "profile", true, "profile a job's model type on arrival when it has no fitted model (a few bounded test runs on free GPUs, docs/perf.md); the sim executor profiles only when this is given")
	f.IntVar(&o.profile.MaxConfigs, "profile-configs", perf.MaxProfileConfigs, "most configurations a profiling phase runs (at most 7)")
	f.IntVar(&o.profile.Iterations, "profile-iterations", 20, "a profile run ends once it measured this many iterations")
	f.DurationVar(&o.profile.RunTimeout, "profile-run-timeout", 3*time.Minute, "a profile run ends after this long, measured or not")
	f.DurationVar(&o.profile.PhaseTimeout, "profile-phase-timeout", 10*time.Minute, "a profiling phase ends after this long")
	addAuthFlags(f, &o.auth) // daemon_auth.go
	addHAFlags(f, &o.ha)     // daemon_ha.go
	return cmd
}

func runDaemon(ctx context.Context, o daemonOptions, stderr io.Writer) error {
	log := slog.New(slog.NewTextHandler(stderr, nil))
	if o.idemRetention <= 0 {
		return fmt.Errorf("daemon: --idempotency-retention %v: want a positive duration", o.idemRetention)
	}
	if o.slowFraction <= 0 || o.slowFraction >= 1 || o.slowObservations <= 0 {
		return fmt.Errorf("daemon: --slow-fraction %g must be between 0 and 1, --slow-observations %d positive", o.slowFraction, o.slowObservations)
	}
	if o.hangFactor <= 0 || o.hangFloor <= 0 || o.gpuReadFailures <= 0 {
		return fmt.Errorf("daemon: --hang-factor %g, --hang-floor %v, --gpu-read-failures %d: each must be positive", o.hangFactor, o.hangFloor, o.gpuReadFailures)
	}
	if o.redeployTries < 0 || o.redeployBackoff <= 0 {
		return fmt.Errorf("daemon: --redeploy-tries %d, --redeploy-backoff %v: want tries >= 0 and a positive backoff", o.redeployTries, o.redeployBackoff)
	}
	redeploy := control.RedeployOptions{Tries: o.redeployTries, Backoff: o.redeployBackoff}
	if o.redeployTries == 0 {
		redeploy.Tries = -1 // never
	}
	if o.db == "" {
		home, _ := os.UserHomeDir()
		o.db = filepath.Join(home, ".replan", "replan.db")
	}
	if o.ha.on() {
		return runHADaemon(ctx, o, log, stderr) // daemon_ha.go: one of several daemons, one leader
	}
	if o.ha.store != "sqlite" {
		return fmt.Errorf("daemon: --store %q: want sqlite or etcd", o.ha.store)
	}
	// One daemon per database: the lock comes before anything is read,
	// and is held until the process ends.
	lock, err := control.LockDB(o.db)
	if err != nil {
		return fmt.Errorf("daemon: %w", err)
	}
	defer lock.Release()
	if err := control.RefuseNonSocket(o.socket); err != nil {
		return fmt.Errorf("daemon: %w", err)
	}
	inv, err := cluster.Load(o.inventory)
	if err != nil {
		return err
	}
	if o.data == "" {
		o.data = defaultDataDir()
	}
	policy, err := o.newPolicy()
	if err != nil {
		return err
	}
	st, err := control.OpenSQLite(ctx, o.db)
	if err != nil {
		return err
	}
	defer st.Close()
	servers, tenants := serversFromInventory(inv)
	models := dataset.ModelSource(ctx, o.data, perf.A800)
	exec, closeExec, err := newExecutor(ctx, o, inv, servers, models, log)
	if err != nil {
		return err
	}
	defer closeExec()
	spine := spineOf(inv)
	// The socket is taken before the daemon recovers its state, so a
	// daemon that cannot serve changes nothing.
	l, err := control.ListenUnix(o.socket)
	if err != nil {
		return err
	}
	defer l.Close()
	if err := checkProfileFlags(&o); err != nil {
		return err
	}
	d, err := control.New(ctx, control.Config{Store: st, Exec: exec, Policy: policy, Servers: servers, Tenants: tenants, Model: models, Logger: log, SpineGBps: spine, IdempotencyRetention: o.idemRetention,
		HangFactor: o.hangFactor, HangFloor: o.hangFloor, GPUReadFailures: o.gpuReadFailures, Profile: o.profile, Redeploy: redeploy,
		SlowFraction: o.slowFraction, SlowObservations: o.slowObservations, Background: true})
	if err != nil {
		return err
	}
	// executor calls under way end with ctx, before the store closes
	defer d.WaitBackground()
	d.EnableETA(func() sched.Policy { p, _ := o.newPolicy(); return p }, o.restartCost, o.tick) // start estimates (control/eta.go)
	api := &control.API{D: d, Version: version, Self: selfAddr(o)}
	errc := make(chan error, 8)
	if err := setupAuth(ctx, o, inv, api, log, stderr, errc); err != nil { // daemon_auth.go: users, TLS and metrics listeners
		l.Close()
		return err
	}
	go func() { errc <- control.Serve(ctx, l, api.Handler()) }()
	log.Info("replan daemon", "socket", o.socket, "db", o.db, "policy", o.policy, "executor", o.executor, "servers", len(servers))
	go func() { errc <- d.Run(ctx, o.tick) }()
	// The lock and the store are files, not paths: a deleted or replaced
	// database directory stops the daemon (control/lock.go).
	go func() { errc <- control.WatchDB(ctx, o.tick, lock, st) }()
	select {
	case <-ctx.Done():
		return nil
	case err := <-errc:
		return err
	}
}

func netListen(addr string) (net.Listener, error) { return net.Listen("tcp", addr) }

// checkProfileFlags checks the profiling flags (and turns profiling off
// for the sim executor unless --profile was given).
func checkProfileFlags(o *daemonOptions) error {
	if o.profile.MaxConfigs < 1 || o.profile.MaxConfigs > perf.MaxProfileConfigs {
		return fmt.Errorf("daemon: --profile-configs %d: want 1..%d", o.profile.MaxConfigs, perf.MaxProfileConfigs)
	}
	if o.profile.Iterations < 1 || o.profile.RunTimeout <= 0 || o.profile.PhaseTimeout <= 0 {
		return fmt.Errorf("daemon: --profile-iterations, --profile-run-timeout and --profile-phase-timeout must be positive")
	}
	if o.executor == "sim" && !o.profileSet {
		o.profile.Enabled = false // simulated model types come from the data
	}
	return nil
}

// spineOf is the inventory's smallest rack spine bandwidth (0: none set).
func spineOf(inv *cluster.Inventory) float64 {
	spine := 0.0
	for _, r := range inv.Racks {
		if spine == 0 || (r.SpineGBps > 0 && r.SpineGBps < spine) {
			spine = r.SpineGBps
		}
	}
	return spine
}

// newExecutor builds --executor's executor; the function it returns
// releases what it holds (the SSH pool).
func newExecutor(ctx context.Context, o daemonOptions, inv *cluster.Inventory, servers []control.ServerInfo, models func(perf.Arch) perf.Model, log *slog.Logger) (control.Executor, func(), error) {
	switch o.executor {
	case "sim":
		var measured *dataset.Measured
		if o.data != "" {
			measured, _ = dataset.LoadMeasured(ctx, o.data)
		}
		names := make([]string, len(servers))
		for i, s := range servers {
			names[i] = s.Name
		}
		return control.NewSimExecutor(time.Now, names, measured, models, o.restartCost), func() {}, nil
	case "ssh":
		pool, err := ssh.NewPool(ssh.FromInventory(inv, log))
		if err != nil {
			return nil, nil, err
		}
		fl := fleet.New(pool, fleet.Options{RemoteDir: cmp.Or(o.remoteDir, inv.SSH.RemoteDir), Logger: log})
		var deploy *fleet.DeployOptions
		if o.redeployTries > 0 {
			bin := o.agentBinary
			if bin == "" {
				var why string
				if bin, why, err = fleet.DefaultAgentBinary(); err != nil {
					pool.Close()
					return nil, nil, fmt.Errorf("daemon: agent binary for redeploys: %w", err)
				}
				log.Info("agent binary for redeploys", "path", bin, "why", why)
			}
			if _, err := os.Stat(bin); err != nil {
				pool.Close()
				return nil, nil, fmt.Errorf("daemon: --agent-binary: %w", err)
			}
			deploy = &fleet.DeployOptions{AgentBinary: bin, FakeGPUs: o.agentFakeGPUs}
		}
		exec, err := control.NewSSHExecutor(fl, inv.Servers, control.SSHOptions{Logger: log, RunAs: runAsOf(inv), Lease: o.lease, Deploy: deploy})
		if err != nil {
			pool.Close()
			return nil, nil, err
		}
		return exec, func() { pool.Close() }, nil
	}
	return nil, nil, fmt.Errorf("daemon: --executor %q: want sim or ssh", o.executor)
}

// selfAddr is a single daemon's address in `replan status`: its
// --advertise, else its TCP listener, else its socket.
func selfAddr(o daemonOptions) string {
	switch {
	case o.ha.advertise != "":
		return o.ha.advertise
	case o.listen != "":
		return "https://" + o.listen
	}
	return "unix://" + o.socket
}

// newPolicy is the daemon's policy: --policy with --restart-cost, in
// --order, with --hold.
func (o daemonOptions) newPolicy() (sched.Policy, error) {
	p, err := sched.NewWithRestartCost(o.policy, o.restartCost.Seconds())
	if err != nil {
		return nil, err
	}
	if err := sched.SetOrder(p, o.order); err != nil {
		return nil, fmt.Errorf("--order: %w", err)
	}
	if err := sched.SetHold(p, o.hold); err != nil {
		return nil, fmt.Errorf("--hold: %w", err)
	}
	return p, nil
}
