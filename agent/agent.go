package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"
)

// Config configures an Agent. Zero values get defaults where noted.
type Config struct {
	// SocketPath is the unix socket the API listens on (mode 0600).
	SocketPath string
	// StateDir holds process records and logs (see Supervisor).
	StateDir string
	// FakeGPUs selects the fake backend ("8xA800"); empty tries NVML and
	// runs without GPUs ("no NVML") when it is unavailable.
	FakeGPUs string
	// SampleInterval paces GPU sampling (default 1s).
	SampleInterval time.Duration
	// Version is reported by /v1/status.
	Version string
	Log     *slog.Logger
	Clock   Clock
	// Backend, when set, is used instead of FakeGPUs/NVML (tests).
	Backend GPUBackend
	// Supervisor tunes process supervision; its StateDir, Log and Clock are
	// filled from this Config.
	Supervisor SupervisorConfig
}

// DefaultPaths returns the default socket path and state dir under $HOME.
func DefaultPaths() (socket, stateDir string) {
	home, err := os.UserHomeDir()
	if err != nil || home == "" {
		home = os.TempDir()
	}
	return filepath.Join(home, ".replan", "agent.sock"), filepath.Join(home, ".replan", "agent")
}

// Status is what GET /v1/status reports.
type Status struct {
	Version   string    `json:"version"`
	Hostname  string    `json:"hostname"`
	StartedAt time.Time `json:"started_at"`
	UptimeSec float64   `json:"uptime_s"`
	// NVML says whether NVML is in use and, if not, why ("no NVML: ...").
	NVML       NVMLStatus `json:"nvml"`
	GPUBackend string     `json:"gpu_backend"`
	GPUCount   int        `json:"gpu_count"`
	// ProcessesRunning counts supervised processes still running.
	ProcessesRunning int `json:"processes_running"`
	// BootID is the kernel's boot id (/proc/sys/kernel/random/boot_id):
	// the daemon tells a rebooted server by its change.
	BootID string `json:"boot_id,omitempty"`
}

// NVMLStatus reports NVML availability.
type NVMLStatus struct {
	Available bool   `json:"available"`
	Reason    string `json:"reason,omitempty"`
}

// Agent ties the GPU sampler, the supervisor and the API together.
type Agent struct {
	cfg     Config
	log     *slog.Logger
	clock   Clock
	backend GPUBackend
	nvml    NVMLStatus
	sampler *Sampler
	sup     *Supervisor
	lease   *lease
	host    string
	started time.Time
}

// New opens the GPU backend and the supervisor (re-adopting processes from
// cfg.StateDir). It does not listen; see Serve and Run.
func New(ctx context.Context, cfg Config) (*Agent, error) {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Clock == nil {
		cfg.Clock = SystemClock{}
	}
	if cfg.Version == "" {
		cfg.Version = "dev"
	}
	a := &Agent{cfg: cfg, log: cfg.Log, clock: cfg.Clock, started: cfg.Clock.Now()}
	a.host, _ = os.Hostname()
	switch {
	case cfg.Backend != nil:
		a.backend = cfg.Backend
		a.nvml = NVMLStatus{Reason: "no NVML: using backend " + cfg.Backend.Name()}
	case cfg.FakeGPUs != "":
		f, err := NewFakeBackend(cfg.FakeGPUs)
		if err != nil {
			return nil, fmt.Errorf("agent: --fake-gpus: %w", err)
		}
		if cfg.StateDir != "" {
			f.SetFaultFile(filepath.Join(cfg.StateDir, FaultFileName)) // fake_faults.go
		}
		a.backend = f
		a.nvml = NVMLStatus{Reason: "no NVML: fake GPUs " + cfg.FakeGPUs}
	default:
		b, err := NewNVMLBackend(ctx, cfg.Log)
		if err != nil {
			if !errors.Is(err, ErrNoNVML) {
				err = fmt.Errorf("%w: %v", ErrNoNVML, err)
			}
			a.nvml = NVMLStatus{Reason: err.Error()}
			a.log.Info("running without GPUs", "reason", err)
		} else {
			a.backend = b
			a.nvml = NVMLStatus{Available: true}
		}
	}
	if cfg.SampleInterval <= 0 {
		cfg.SampleInterval = DefaultSampleInterval
	}
	a.sampler = NewSampler(a.backend, cfg.SampleInterval, cfg.Clock, cfg.Log)
	sc := cfg.Supervisor
	sc.StateDir, sc.Log, sc.Clock = cfg.StateDir, cfg.Log, cfg.Clock
	sc.LeaseFile = filepath.Join(cfg.StateDir, leaseFile)
	sup, err := OpenSupervisor(ctx, sc)
	if err != nil {
		if a.backend != nil {
			a.backend.Close()
		}
		return nil, fmt.Errorf("agent: %w", err)
	}
	a.sup = sup
	if a.lease, err = openLease(cfg.StateDir); err != nil {
		a.Close()
		return nil, fmt.Errorf("agent: %w", err)
	}
	return a, nil
}

// Supervisor returns the agent's supervisor.
func (a *Agent) Supervisor() *Supervisor { return a.sup }

// Sampler returns the agent's GPU sampler.
func (a *Agent) Sampler() *Sampler { return a.sampler }

// Status reports the agent's status.
func (a *Agent) Status() Status {
	snap := a.sampler.Snapshot()
	running := 0
	for _, p := range a.sup.List() {
		if p.State == StateRunning {
			running++
		}
	}
	now := a.clock.Now()
	return Status{Version: a.cfg.Version, Hostname: a.host, StartedAt: a.started,
		UptimeSec: now.Sub(a.started).Seconds(), NVML: a.nvml, GPUBackend: snap.Backend,
		GPUCount: len(snap.GPUs), ProcessesRunning: running, BootID: bootID()}
}

// FirstSampleWait bounds how long Serve waits for the first GPU sample
// before it answers.
var FirstSampleWait = 10 * time.Second

// Serve samples GPUs and serves the API on ln until ctx is done, then shuts
// the server down (ending log follows) and closes the agent. Supervised
// processes keep running.
func (a *Agent) Serve(ctx context.Context, ln net.Listener) error {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The first sample comes before the first answer (for up to
	// FirstSampleWait: a hung GPU read must not keep the agent silent): a
	// status read right after start (replan deploy's) saw 0 GPUs when it
	// won the race with the sampler's first pass.
	sampled, first := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(sampled)
		a.sampler.SampleOnce(sctx)
		close(first)
		a.sampler.Run(sctx)
	}()
	leaseDone := make(chan struct{})
	go func() {
		defer close(leaseDone)
		a.watchLease(sctx)
	}()
	select {
	case <-first:
	case <-time.After(FirstSampleWait):
		a.log.Warn("serving before the first GPU sample", "waited", FirstSampleWait)
	case <-ctx.Done():
	}
	srv := &http.Server{
		Handler:           a.Handler(),
		BaseContext:       func(net.Listener) context.Context { return sctx },
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(a.log.Handler(), slog.LevelWarn),
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	cancel()
	shctx, shcancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer shcancel()
	_ = srv.Shutdown(shctx)
	<-sampled
	<-leaseDone
	if cerr := a.Close(); err == nil {
		err = cerr
	}
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// Close stops watching processes (they keep running) and closes the GPU
// backend.
func (a *Agent) Close() error {
	err := a.sup.Close()
	if a.backend != nil {
		if berr := a.backend.Close(); err == nil {
			err = berr
		}
	}
	return err
}

// ListenUnix listens on path with mode 0600, creating its directory (0700),
// and accepts connections only from the agent's own user and root.
// A stale socket left by a dead agent is replaced; a live one is an error,
// and so is a path that exists and is not a socket (never deleted).
func ListenUnix(ctx context.Context, path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("listen %s: %w", path, err)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != os.ModeSocket {
			return nil, fmt.Errorf("listen %s: it exists and is not a socket (%s); refusing to replace it", path, fi.Mode().Type())
		}
		var d net.Dialer
		if c, err := d.DialContext(ctx, "unix", path); err == nil {
			c.Close()
			return nil, fmt.Errorf("listen %s: another agent is already serving there", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("listen %s: remove stale socket: %w", path, err)
		}
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "unix", path)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("listen %s: %w", path, err)
	}
	return filterPeers(ln), nil // peercred_linux.go: the agent's user and root only
}

// Run is the whole agent: New, ListenUnix on cfg.SocketPath, Serve until
// ctx is done.
func Run(ctx context.Context, cfg Config) error {
	a, err := New(ctx, cfg)
	if err != nil {
		return err
	}
	ln, err := ListenUnix(ctx, cfg.SocketPath)
	if err != nil {
		a.Close()
		return err
	}
	a.log.Info("agent listening", "socket", cfg.SocketPath, "state_dir", cfg.StateDir, "nvml", a.nvml.Available, "reason", a.nvml.Reason)
	return a.Serve(ctx, ln)
}

// DefaultSampleInterval is the GPU sampling interval when none is given.
const DefaultSampleInterval = time.Second
