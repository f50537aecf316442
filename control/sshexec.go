package control

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/replan/replan/agent"
	"github.com/replan/replan/cluster"
	"github.com/replan/replan/fleet"
	"github.com/replan/replan/launch"
	"github.com/replan/replan/ssh"
)

// SSHOptions tune an SSHExecutor. Zero values get the defaults noted.
type SSHOptions struct {
	// Logger receives what the executor does; nil discards.
	Logger *slog.Logger
	// Concurrency bounds how many servers are worked on at once (default
	// fleet.DefaultConcurrency).
	Concurrency int
	// StopGrace is how long a job asked to checkpoint (SIGTERM) has before
	// the agent sends SIGKILL (default 120 s).
	StopGrace time.Duration
	// KillGrace is the SIGTERM→SIGKILL grace of a stop without checkpoint
	// (default 5 s).
	KillGrace time.Duration
	// WaitTimeout bounds each wait of a reconfiguration: the checkpoint
	// marker reaching the last iteration, and the relaunched job reporting
	// an iteration beyond it (default 10 min).
	WaitTimeout time.Duration
	// Poll paces those waits (default 500 ms).
	Poll time.Duration
	// CallTimeout bounds one server's share of an Observe (default 15 s).
	CallTimeout time.Duration
	// NoCPUBinding starts processes without binding them to their cores:
	// for clusters whose inventory core counts are nominal (test hosts,
	// demos), where the core ids the scheduler hands out do not exist.
	NoCPUBinding bool
	// RunAs maps a tenant to the Unix user its processes run as on the
	// servers (the inventory's tenants[].run_as; the agent must run as
	// root). A tenant not in it runs as the agent's user.
	RunAs map[string]string
	// Lease is the agents' lease (fence.go): an agent that hears nothing
	// leased for this long stops its processes, and a job cut off from
	// the daemon starts elsewhere only once that has certainly happened
	// (default DefaultLease; negative: no leases, no fencing).
	Lease time.Duration
	// LeaseGrace is the SIGTERM→SIGKILL grace of a stop at a lease's end
	// (default 0: SIGKILL at once, so a fenced process writes no
	// checkpoint).
	LeaseGrace time.Duration
	// Deploy, when set, is how the daemon starts the agent again on a
	// server whose SSH answers but whose agent does not (a reboot):
	// fleet.Deploy with these options, as `replan deploy` would
	// (sshexec_redeploy.go; nil: no redeploys).
	Deploy *fleet.DeployOptions
}

// SSHExecutor is the real Executor: it renders launches with launch/,
// writes the generated files to every server over SSH, and starts, watches
// and stops one supervised process per server through each server's agent
// (reached over the same SSH connection, see fleet). Process ids are
// "<job>-a<attempt>-r<rank>", so after a daemon restart Adopt finds a job's
// processes again by their prefix. The executor keeps no state the
// daemon's store and the agents do not also hold.
type SSHExecutor struct {
	fl      *fleet.Fleet
	servers map[string]cluster.Server
	order   []string
	opt     SSHOptions
	log     *slog.Logger

	mu        sync.Mutex
	jobs      map[string]*sshJob
	launching map[string]bool // process ids being started, not yet tracked
	// polled, when set (tests), runs in Observe between the agents'
	// answers and the jobs it observes.
	polled func()
	// silent holds the servers whose last poll timed out: they are asked
	// beside the loop (probeSilent), not in Observe. probe, when set
	// (tests), runs in such a probe before it asks.
	silent  map[string]*silentServer
	probe   func(name string)
	clients map[string]*agent.Client
	fence   fence // epoch, leases, unconfirmed stops (fence.go)
}

// sshJob is a job the executor runs: its current launch and what it has
// seen of rank 0.
type sshJob struct {
	l        Launch // l.Attempt is the attempt that runs
	port     int    // master port
	procs    []sshProc
	step     int       // highest global step rank 0 reported
	sps      float64   // latest samples/s of rank 0
	since    time.Time // time of the last sample read
	ckpt     int       // last checkpoint marker read
	base     int       // the checkpoint this launch resumed from (the marker at its start)
	stopping bool      // a Stop or Reconfigure is under way: Observe leaves it alone
}

// sshProc is one server's process of a job.
type sshProc struct {
	rank   int
	server string
	id     string
}

// NewSSHExecutor returns an executor over fl for the inventory's servers.
// Launch.Servers name servers of this list.
func NewSSHExecutor(fl *fleet.Fleet, servers []cluster.Server, opt SSHOptions) (*SSHExecutor, error) {
	if fl == nil {
		return nil, errors.New("ssh executor: no fleet")
	}
	if opt.Logger == nil {
		opt.Logger = slog.New(slog.DiscardHandler)
	}
	if opt.Concurrency <= 0 {
		opt.Concurrency = fleet.DefaultConcurrency
	}
	if opt.StopGrace <= 0 {
		opt.StopGrace = 120 * time.Second
	}
	if opt.KillGrace <= 0 {
		opt.KillGrace = 5 * time.Second
	}
	if opt.WaitTimeout <= 0 {
		opt.WaitTimeout = 10 * time.Minute
	}
	if opt.Poll <= 0 {
		opt.Poll = 500 * time.Millisecond
	}
	if opt.CallTimeout <= 0 {
		opt.CallTimeout = 15 * time.Second
	}
	if opt.Lease == 0 {
		opt.Lease = DefaultLease
	}
	opt.LeaseGrace = max(opt.LeaseGrace, 0)
	e := &SSHExecutor{fl: fl, servers: map[string]cluster.Server{}, opt: opt, log: opt.Logger,
		jobs: map[string]*sshJob{}, launching: map[string]bool{}, clients: map[string]*agent.Client{}}
	e.fence.started = time.Now()
	for _, s := range servers {
		if _, dup := e.servers[s.Name]; dup {
			return nil, fmt.Errorf("ssh executor: server %s twice", s.Name)
		}
		e.servers[s.Name] = s
		e.order = append(e.order, s.Name)
	}
	return e, nil
}

var _ Executor = (*SSHExecutor)(nil)

// ProcessID is the agent process id of one rank of one launch of a job.
func ProcessID(jobID string, attempt, rank int) string {
	return fmt.Sprintf("%s-a%d-r%d", jobID, attempt, rank)
}

// parseProcessID splits an id made by ProcessID for jobID.
func parseProcessID(jobID, id string) (attempt, rank int, ok bool) {
	rest, found := strings.CutPrefix(id, jobID+"-a")
	if !found {
		return 0, 0, false
	}
	a, r, found := strings.Cut(rest, "-r")
	if !found {
		return 0, 0, false
	}
	attempt, err1 := strconv.Atoi(a)
	rank, err2 := strconv.Atoi(r)
	return attempt, rank, err1 == nil && err2 == nil
}

func (e *SSHExecutor) server(name string) (cluster.Server, error) {
	s, ok := e.servers[name]
	if !ok {
		return cluster.Server{}, fmt.Errorf("server %s is not in the inventory", name)
	}
	return s, nil
}

// client returns the agent client of a server, resolving its layout once.
func (e *SSHExecutor) client(ctx context.Context, name string) (*agent.Client, error) {
	e.mu.Lock()
	c := e.clients[name]
	e.mu.Unlock()
	if c != nil {
		return c, nil
	}
	s, err := e.server(name)
	if err != nil {
		return nil, err
	}
	c, err = e.fl.AgentClient(ctx, s)
	if err != nil {
		return nil, err
	}
	c.SetHeaders(e.headers(name)) // epoch and lease (fence.go)
	e.mu.Lock()
	e.clients[name] = c
	e.mu.Unlock()
	return c, nil
}

func (e *SSHExecutor) host(name string) (ssh.Host, error) {
	s, err := e.server(name)
	if err != nil {
		return ssh.Host{}, err
	}
	return ssh.HostFromServer(s), nil
}

// each runs fn for 0..n-1, at most Concurrency at once, and returns the
// errors by index.
func (e *SSHExecutor) each(ctx context.Context, n int, fn func(ctx context.Context, i int) error) []error {
	errs := make([]error, n)
	sem := make(chan struct{}, e.opt.Concurrency)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				errs[i] = ctx.Err()
				return
			}
			defer func() { <-sem }()
			errs[i] = fn(ctx, i)
		}()
	}
	wg.Wait()
	return errs
}

// usedPorts lists the master ports of the jobs other than except, per
// master server.
func (e *SSHExecutor) usedPorts(except string) map[string][]int {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := map[string][]int{}
	for id, j := range e.jobs {
		if id == except || len(j.l.Servers) == 0 || j.port == 0 {
			continue
		}
		m := j.l.Servers[0].Name
		out[m] = append(out[m], j.port)
	}
	return out
}

// Start implements Executor: render, write the files, start one process
// per server; if any server fails, what started is stopped again.
func (e *SSHExecutor) Start(ctx context.Context, l Launch) error {
	if l.Spec == nil {
		return fmt.Errorf("start %s: no job spec", l.JobID)
	}
	e.mu.Lock()
	old := e.jobs[l.JobID]
	e.mu.Unlock()
	if old != nil {
		// Never run two launches of one job: stop the one we know of.
		e.log.Warn("start: job already runs; stopping its previous launch", "job", l.JobID, "attempt", old.l.Attempt)
		if err := e.stopAll(ctx, old, 0); err != nil {
			e.unconfirmed(l.JobID, old.procs)
		}
		e.forget(l.JobID, old)
	}
	in := launch.Input{Job: l.Spec, Plan: l.Plan, Servers: l.Servers, UsedPorts: e.usedPorts(l.JobID), Attempt: l.Attempt, Resume: l.Resume, SaveInterval: l.SaveInterval}
	if l.Resume && l.CheckpointPlan.DP > 0 && launch.NeedsUniversal(launch.Input{Job: l.Spec, Plan: l.CheckpointPlan}, in) {
		// Requeued and started with another plan: convert the checkpoint
		// as a reconfiguration would.
		_, tag, err := e.readMarker(ctx, l)
		if err != nil {
			return fmt.Errorf("start %s: convert: %w", l.JobID, err)
		}
		if err := e.convert(ctx, l, launch.ConvertStep(l.Spec, l.CheckpointPlan, l.Plan, nil), tag); err != nil {
			return fmt.Errorf("start %s: %w", l.JobID, err)
		}
		in.Universal = true
	}
	r, err := launch.Render(in)
	if err != nil {
		return fmt.Errorf("start %s: %w", l.JobID, err)
	}
	return e.launch(ctx, l, r)
}

// launch writes r's files and starts its processes; on success the job is
// tracked with launch l.
func (e *SSHExecutor) launch(ctx context.Context, l Launch, r launch.Rendered) error {
	// Never two live attempts: an earlier one cut off must be stopped
	// for certain first (fence.go).
	if err := e.awaitFence(ctx, l.JobID); err != nil {
		return fmt.Errorf("start %s attempt %d: %w", l.JobID, l.Attempt, err)
	}
	j := &sshJob{l: l, port: r.MasterPort, step: l.From, ckpt: l.From, base: l.From}
	if l.Resume {
		// What the launch resumes from: the marker now (no earlier
		// attempt runs any more to move it).
		if n, _, err := e.readMarker(ctx, l); err == nil {
			j.base = max(j.base, n)
		}
	}
	for rank, sl := range r.Servers {
		j.procs = append(j.procs, sshProc{rank: rank, server: sl.Server, id: ProcessID(l.JobID, l.Attempt, rank)})
	}
	e.mu.Lock()
	for _, p := range j.procs {
		e.launching[p.id] = true
	}
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		for _, p := range j.procs {
			delete(e.launching, p.id)
		}
		e.mu.Unlock()
	}()
	started := make([]bool, len(r.Servers))
	errs := e.each(ctx, len(r.Servers), func(ctx context.Context, i int) error {
		sl := r.Servers[i]
		if err := e.writeFiles(ctx, l, sl); err != nil {
			return err
		}
		c, err := e.client(ctx, sl.Server)
		if err != nil {
			return fmt.Errorf("agent on %s: %w", sl.Server, err)
		}
		spec := agent.ProcessSpec{ID: j.procs[i].id, Argv: sl.Argv, Env: sl.Env, Dir: sl.Dir, CPUs: sl.CPUs, RunAs: e.opt.RunAs[l.Spec.Tenant]}
		if e.opt.NoCPUBinding {
			spec.CPUs = nil
		}
		_, err = c.Start(ctx, spec)
		if errors.Is(err, agent.ErrConflict) {
			// A record of this id is left from an earlier try: replace it
			// when it has exited, keep it when it runs.
			p, perr := c.Process(ctx, spec.ID)
			switch {
			case perr == nil && p.State == agent.StateRunning:
				e.log.Warn("start: process already running, keeping it", "server", sl.Server, "id", spec.ID)
				err = nil
			case perr == nil:
				if err = c.Delete(ctx, spec.ID); err == nil {
					_, err = c.Start(ctx, spec)
				}
			}
		}
		if err != nil {
			return fmt.Errorf("start rank %d on %s: %w", i, sl.Server, err)
		}
		started[i] = true
		return nil
	})
	if err := errors.Join(errs...); err != nil {
		// Stop what started, on a context of its own: ctx may be what failed.
		sctx, cancel := e.boundStop(context.WithoutCancel(ctx))
		defer cancel()
		undo := &sshJob{l: l}
		for i, ok := range started {
			if ok {
				undo.procs = append(undo.procs, j.procs[i])
			}
		}
		e.stopAll(sctx, undo, e.opt.KillGrace)
		return fmt.Errorf("start %s attempt %d: %w", l.JobID, l.Attempt, err)
	}
	e.mu.Lock()
	e.jobs[l.JobID] = j
	e.mu.Unlock()
	e.renewLeases() // fence.go
	e.log.Info("started", "job", l.JobID, "attempt", l.Attempt, "servers", len(r.Servers), "master_port", r.MasterPort, "resume", l.Resume)
	return nil
}

// forget drops a job from tracking if it is still j.
func (e *SSHExecutor) forget(id string, j *sshJob) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.jobs[id] == j {
		delete(e.jobs, id)
	}
}

// stopAll stops every process of j (SIGTERM, SIGKILL after grace) and
// returns the errors of the servers where that failed.
func (e *SSHExecutor) stopAll(ctx context.Context, j *sshJob, grace time.Duration) error {
	errs := e.each(ctx, len(j.procs), func(ctx context.Context, i int) error {
		p := j.procs[i]
		c, err := e.client(ctx, p.server)
		if err != nil {
			return fmt.Errorf("stop %s on %s: %w", p.id, p.server, err)
		}
		info, err := c.Stop(ctx, p.id, grace)
		if errors.Is(err, agent.ErrNotFound) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("stop %s on %s: %w", p.id, p.server, err)
		}
		if info.State != agent.StateExited {
			return fmt.Errorf("stop %s on %s: still %s", p.id, p.server, info.State)
		}
		return nil
	})
	return errors.Join(errs...)
}

// ParseCheckpointMarker reads the content of a checkpoint marker: a plain
// iteration number (Megatron, replan's fake trainers) or a DeepSpeed tag
// that ends in one (global_step120). Empty content is iteration 0.
func ParseCheckpointMarker(content string) (int, error) {
	s := strings.TrimSpace(content)
	if s == "" {
		return 0, nil
	}
	if n, err := strconv.Atoi(s); err == nil {
		return n, nil
	}
	i := len(s)
	for i > 0 && s[i-1] >= '0' && s[i-1] <= '9' {
		i--
	}
	if i == len(s) {
		return 0, fmt.Errorf("checkpoint marker %q names no iteration", s)
	}
	return strconv.Atoi(s[i:])
}

// MaxMarkerBytes bounds a checkpoint marker (issue 12).
const MaxMarkerBytes = 4096

// readMarker reads the job's checkpoint marker on its master server: the
// iteration and the raw tag. A missing marker is iteration 0.
func (e *SSHExecutor) readMarker(ctx context.Context, l Launch) (int, string, error) {
	if len(l.Servers) == 0 {
		return 0, "", errors.New("no servers")
	}
	marker := launch.CheckpointMarker(l.Spec)
	// A marker is a tag of a few bytes; the job writes it, so it is read
	// bounded (one byte more than allowed, to tell that it is too long),
	// and as the job's user (sshexec_runas.go).
	out, err := e.readJobFile(ctx, l, l.Servers[0].Name, marker, MaxMarkerBytes+1)
	if err != nil {
		return 0, "", fmt.Errorf("read %s on %s: %w", marker, l.Servers[0].Name, err)
	}
	if len(out) > MaxMarkerBytes {
		return 0, string(out[:MaxMarkerBytes]), fmt.Errorf("%s on %s: longer than %d bytes: not a checkpoint marker", marker, l.Servers[0].Name, MaxMarkerBytes)
	}
	tag := strings.TrimSpace(string(out))
	n, err := ParseCheckpointMarker(tag)
	if err != nil {
		return 0, tag, fmt.Errorf("%s on %s: %w", marker, l.Servers[0].Name, err)
	}
	return n, tag, nil
}

// srvState is one server's answer in an Observe.
type srvState struct {
	procs map[string]agent.ProcessInfo
	err   error
	gpus  []GPUStat // the agent's GPU figures (telemetry.go); nil when it has none
	boot  string    // the server's boot id, as its agent reports it
}

// Observe implements Executor: every server's heartbeat (its agent answers
// or not) and, for every job, rank 0's progress, throughput and exit, and
// the checkpoint marker on its master server.
func (e *SSHExecutor) Observe(ctx context.Context) (Observation, error) {
	// The jobs the agents' answers can speak for: those launched before
	// they were asked. A launch that ends while they answer (the daemon
	// runs launches beside its loop: background.go) has processes the
	// answers do not list; observed against them, its rank 0 read as
	// "unknown to the agent", an exit, and the job failed its restart
	// budget away on every launch. Such a job's servers are asked again
	// (TestObserveReasksForJobsLaunchedMeanwhile).
	e.mu.Lock()
	before := make(map[*sshJob]bool, len(e.jobs))
	for _, j := range e.jobs {
		before[j] = true
	}
	e.mu.Unlock()
	states := make([]srvState, len(e.order))
	e.each(ctx, len(e.order), func(ctx context.Context, i int) error {
		if err := e.stillSilent(e.order[i]); err != nil {
			states[i].err = err
			e.heartbeat(e.order[i], false)
			return nil
		}
		ctx, cancel := context.WithTimeout(ctx, e.opt.CallTimeout)
		defer cancel()
		c, err := e.client(ctx, e.order[i])
		if err == nil {
			var st agent.Status
			st, err = c.Status(ctx)
			states[i].boot = st.BootID
		}
		var list []agent.ProcessInfo
		if err == nil {
			list, err = c.Processes(ctx)
		}
		states[i].err = err
		e.polledServer(e.order[i], err, ctx.Err() == context.DeadlineExceeded)
		e.heartbeat(e.order[i], err == nil) // no lease renewed while it fails (fence.go)
		if err == nil {
			states[i].procs = map[string]agent.ProcessInfo{}
			for _, p := range list {
				states[i].procs[p.Spec.ID] = p
			}
			// GPU figures last: a slow or failing answer costs nothing
			// but the figures (telemetry.go)
			if snap, gerr := c.GPUs(ctx); gerr == nil {
				states[i].gpus = gpuStats(snap)
			}
		}
		return nil
	})
	var o Observation
	byName := map[string]*srvState{}
	for i, name := range e.order {
		n := NodeObservation{Name: name, Reachable: states[i].err == nil, GPUs: states[i].gpus, BootID: states[i].boot}
		if states[i].err != nil {
			n.Err = states[i].err.Error()
		}
		o.Nodes = append(o.Nodes, n)
		byName[name] = &states[i]
	}

	if e.polled != nil {
		e.polled()
	}
	e.mu.Lock()
	var jobs []*sshJob
	known := map[string]bool{}
	for _, j := range e.jobs {
		if !j.stopping {
			jobs = append(jobs, j)
		}
		for _, p := range j.procs {
			known[p.id] = true
		}
	}
	for id := range e.launching {
		known[id] = true
	}
	e.mu.Unlock()
	e.reapOrphans(ctx, byName, known)
	sort.Slice(jobs, func(a, b int) bool { return jobs[a].l.JobID < jobs[b].l.JobID })
	again := e.reask(ctx, jobs, before, byName)
	obs := make([]*JobObservation, len(jobs))
	e.each(ctx, len(jobs), func(ctx context.Context, i int) error {
		ctx, cancel := context.WithTimeout(ctx, e.opt.CallTimeout)
		defer cancel()
		answers := byName
		if !before[jobs[i]] {
			answers = again
		}
		obs[i] = e.observeJob(ctx, jobs[i], func(server, id string) (agent.ProcessInfo, bool, bool) {
			st := answers[server]
			if st == nil || st.err != nil {
				return agent.ProcessInfo{}, false, false
			}
			p, ok := st.procs[id]
			return p, ok, true
		})
		return nil
	})
	for i, jo := range obs {
		if jo == nil {
			continue
		}
		j := jobs[i]
		e.mu.Lock()
		busy := j.stopping || e.jobs[j.l.JobID] != j
		if jo.Exited && !busy {
			j.stopping = true
		}
		e.mu.Unlock()
		if busy {
			continue // a Stop or Reconfigure took it over meanwhile
		}
		if jo.Exited {
			// The job is over on this launch: end whatever rank is left
			// and forget it; the daemon finishes or requeues it.
			sctx, cancel := e.boundStop(ctx)
			if err := e.stopAll(sctx, j, e.opt.KillGrace); err != nil {
				e.log.Warn("observe: stop the rest of an exited job", "job", j.l.JobID, "err", err)
			}
			cancel()
			e.forget(j.l.JobID, j)
		}
		o.Jobs = append(o.Jobs, *jo)
	}
	return o, nil
}

// reask lists again the processes of the servers of the jobs launched
// after Observe first asked (not in before), among those that answered
// then: what Observe reads of such a job. A server that does not answer
// now is missing (the job is observed next time).
func (e *SSHExecutor) reask(ctx context.Context, jobs []*sshJob, before map[*sshJob]bool, first map[string]*srvState) map[string]*srvState {
	var names []string
	for _, j := range jobs {
		if before[j] {
			continue
		}
		for _, p := range j.procs {
			if st := first[p.server]; st != nil && st.err == nil && !slices.Contains(names, p.server) {
				names = append(names, p.server)
			}
		}
	}
	states := make([]srvState, len(names))
	e.each(ctx, len(names), func(ctx context.Context, i int) error {
		ctx, cancel := context.WithTimeout(ctx, e.opt.CallTimeout)
		defer cancel()
		c, err := e.client(ctx, names[i])
		var list []agent.ProcessInfo
		if err == nil {
			list, err = c.Processes(ctx)
		}
		states[i].err = err
		if err == nil {
			states[i].procs = map[string]agent.ProcessInfo{}
			for _, p := range list {
				states[i].procs[p.Spec.ID] = p
			}
		}
		return nil
	})
	out := make(map[string]*srvState, len(names))
	for i, n := range names {
		out[n] = &states[i]
	}
	return out
}

// observeJob reads one job's news; nil when its master server did not
// answer (the daemon counts missed heartbeats per server).
func (e *SSHExecutor) observeJob(ctx context.Context, j *sshJob, proc func(server, id string) (p agent.ProcessInfo, found, reachable bool)) *JobObservation {
	r0 := j.procs[0]
	p0, found, reachable := proc(r0.server, r0.id)
	if !reachable {
		return nil
	}
	jo := &JobObservation{JobID: j.l.JobID}
	if found {
		e.mu.Lock()
		since := j.since
		e.mu.Unlock()
		if c, err := e.client(ctx, r0.server); err == nil {
			if samples, err := c.Samples(ctx, r0.id, since); err == nil && len(samples) > 0 {
				e.mu.Lock()
				for _, s := range samples {
					j.step = max(j.step, int(s.Step))
				}
				last := samples[len(samples)-1]
				j.since, j.sps = last.Time, last.SamplesPerSec
				e.mu.Unlock()
			} else if err != nil {
				e.log.Debug("observe: samples", "job", j.l.JobID, "err", err)
			}
		}
	}
	if n, _, err := e.readMarker(ctx, j.l); err == nil {
		e.mu.Lock()
		// The job's progress comes from its live attempt only: a marker
		// beyond what that attempt resumed from or reported is not its
		// own (another attempt's, such as an orphan's) and is ignored.
		if live := max(j.step, j.base, j.l.From); n > live {
			e.log.Debug("observe: checkpoint marker ahead of the live attempt; ignored", "job", j.l.JobID, "attempt", j.l.Attempt, "marker", n, "live", live)
		} else {
			j.ckpt = max(j.ckpt, n)
		}
		e.mu.Unlock()
	} else {
		e.log.Debug("observe: checkpoint marker", "job", j.l.JobID, "err", err)
	}
	e.mu.Lock()
	// What was checkpointed was done, even when the log did not say so
	// (a launch that resumed at the end exits without a step line).
	jo.Iterations, jo.Checkpoint, jo.SamplesPerSec = max(j.step, j.ckpt), j.ckpt, j.sps
	e.mu.Unlock()
	switch {
	case !found:
		jo.Exited, jo.ExitCode, jo.Err = true, -1, fmt.Sprintf("rank 0 (%s) is unknown to the agent on %s", r0.id, r0.server)
	case p0.State == agent.StateExited:
		jo.Exited, jo.ExitCode = true, exitCode(p0)
		if jo.ExitCode != 0 {
			jo.Err = fmt.Sprintf("rank 0 on %s: %s", r0.server, p0.ExitReason) + e.logTail(ctx, r0.server, r0.id)
		} else if p0.StopRequested {
			// Stopped through the agent behind the daemon's back: not a
			// finish; the job resumes from its checkpoint.
			jo.ExitCode, jo.Err = -1, fmt.Sprintf("rank 0 on %s was stopped outside the daemon", r0.server)
		}
	default:
		// Rank 0 runs; another rank that failed brings the job down.
		for _, p := range j.procs[1:] {
			pi, ok, reach := proc(p.server, p.id)
			if reach && ok && pi.State == agent.StateExited && exitCode(pi) != 0 {
				jo.Exited, jo.ExitCode = true, exitCode(pi)
				jo.Err = fmt.Sprintf("rank %d on %s: %s", p.rank, p.server, pi.ExitReason) + e.logTail(ctx, p.server, p.id)
				break
			}
		}
	}
	return jo
}

// boundStop bounds a stop without checkpoint: a server that does not
// answer must not hold the daemon's loop for longer than a grace and a
// call. (The agent finishes a stop it received on its own.)
func (e *SSHExecutor) boundStop(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, e.opt.KillGrace+e.opt.CallTimeout)
}

// reapOrphans stops running processes that carry a job process id (see
// ProcessID) the executor does not track: what is left of a launch on a
// server that was cut off and came back after its job moved on. Adopt runs
// before the first Observe, so after a restart every live launch is
// tracked by then.
func (e *SSHExecutor) reapOrphans(ctx context.Context, servers map[string]*srvState, known map[string]bool) {
	for _, name := range e.order {
		st := servers[name]
		if st == nil || st.err != nil {
			continue
		}
		for id, p := range st.procs {
			if p.State != agent.StateRunning || known[id] || !isJobProcessID(id) {
				continue
			}
			e.log.Warn("stopping an orphaned process of an earlier launch", "server", name, "id", id)
			c, err := e.client(ctx, name)
			if err != nil {
				continue
			}
			// SIGKILL at once: an orphan must not write a checkpoint over
			// the live attempt's.
			sctx, cancel := e.boundStop(ctx)
			if _, err := c.Stop(sctx, id, 0); err != nil {
				e.log.Warn("stop orphan", "server", name, "id", id, "err", err)
			}
			cancel()
		}
	}
}

// isJobProcessID reports whether id has ProcessID's shape.
func isJobProcessID(id string) bool {
	i := strings.LastIndex(id, "-a")
	if i <= 0 {
		return false
	}
	_, _, ok := parseProcessID(id[:i], id)
	return ok
}

func exitCode(p agent.ProcessInfo) int {
	if p.ExitCode == nil {
		return -1
	}
	return *p.ExitCode
}

// Stop implements Executor. With checkpoint it carries out launch's
// sequence (SIGTERM with StopGrace, wait for the marker, confirm every
// process exited) and returns the checkpoint's iteration; without, it
// stops the job now.
func (e *SSHExecutor) Stop(ctx context.Context, id string, checkpoint bool) (int, error) {
	e.mu.Lock()
	j := e.jobs[id]
	if j != nil {
		j.stopping = true
	}
	e.mu.Unlock()
	if j == nil {
		return 0, nil
	}
	defer e.forget(id, j)
	if !checkpoint {
		sctx, cancel := e.boundStop(ctx)
		defer cancel()
		if err := e.stopAll(sctx, j, e.opt.KillGrace); err != nil {
			e.unconfirmed(id, j.procs) // no new start before it is certainly stopped (fence.go)
			return 0, fmt.Errorf("stop %s: %w", id, err)
		}
		e.log.Info("stopped", "job", id)
		return 0, nil
	}
	e.mu.Lock()
	want := j.step
	e.mu.Unlock()
	ckpt, err := e.checkpointStop(ctx, j, want)
	if err != nil {
		e.unconfirmed(id, j.procs)
		return ckpt, fmt.Errorf("stop %s: %w", id, err)
	}
	e.log.Info("stopped with a checkpoint", "job", id, "checkpoint", ckpt)
	return ckpt, nil
}

// checkpointStop asks every rank of j to checkpoint and exit (SIGTERM),
// waits until the marker reaches want (or every rank exited and the marker
// settled), and confirms every process exited. It returns the marker's
// iteration.
func (e *SSHExecutor) checkpointStop(ctx context.Context, j *sshJob, want int) (int, error) {
	stopped := e.signalStop(ctx, j)
	ckpt, werr := e.waitMarker(ctx, j.l, want, stopped)
	serr := <-stopped.errc
	if serr != nil {
		return ckpt, fmt.Errorf("confirm exit: %w", serr)
	}
	// Every rank has exited: the marker now holds what they saved.
	if n, _, err := e.readMarker(ctx, j.l); err == nil && n > ckpt {
		ckpt = n
	}
	return ckpt, werr
}

// stopping is a stop under way: done closes when every rank's stop
// returned, errc then holds their joined error.
type stopping struct {
	done chan struct{}
	errc chan error
}

// signalStop starts stopping every rank of j with StopGrace.
func (e *SSHExecutor) signalStop(ctx context.Context, j *sshJob) stopping {
	s := stopping{done: make(chan struct{}), errc: make(chan error, 1)}
	go func() {
		err := e.stopAll(ctx, j, e.opt.StopGrace)
		close(s.done)
		s.errc <- err
	}()
	return s
}

// waitMarker polls the checkpoint marker until it reaches want. When the
// processes have all exited it gives the marker a few more polls (a shared
// filesystem may lag), then returns what it says with an error if that is
// below want.
func (e *SSHExecutor) waitMarker(ctx context.Context, l Launch, want int, st stopping) (int, error) {
	deadline := time.Now().Add(e.opt.WaitTimeout)
	extra := 0
	marker := launch.CheckpointMarker(l.Spec)
	last := 0
	for {
		n, _, err := e.readMarker(ctx, l)
		if err == nil {
			last = n
			if n >= want {
				return n, nil
			}
		}
		select {
		case <-st.done:
			extra++
			if extra > 5 {
				return last, fmt.Errorf("every rank exited but %s says %d, below iteration %d", marker, last, want)
			}
		default:
		}
		if time.Now().After(deadline) {
			return last, fmt.Errorf("%s still says %d after %s, waiting for iteration %d", marker, last, e.opt.WaitTimeout, want)
		}
		select {
		case <-ctx.Done():
			return last, ctx.Err()
		case <-time.After(e.opt.Poll):
		}
	}
}

// Reconfigure implements Executor with launch.Reconfigure's steps:
// checkpoint, wait for the marker to reach last, stop and confirm, convert
// on the master server when the plan needs it, relaunch from the
// checkpoint, verify that rank 0 reports an iteration beyond last.
func (e *SSHExecutor) Reconfigure(ctx context.Context, from, to Launch, last int) error {
	e.mu.Lock()
	j := e.jobs[from.JobID]
	if j != nil {
		j.stopping = true
	}
	e.mu.Unlock()
	old := from
	old.Attempt = max(from.Attempt-1, 0)
	if j != nil {
		old = j.l
	}
	attempt := max(to.Attempt, old.Attempt+1)
	next := launch.Input{Job: to.Spec, Plan: to.Plan, Servers: to.Servers, UsedPorts: e.usedPorts(to.JobID), Attempt: attempt, Resume: true, SaveInterval: to.SaveInterval}
	steps, err := launch.Reconfigure(launch.Input{Job: old.Spec, Plan: old.Plan, Servers: old.Servers, Attempt: old.Attempt}, next, last)
	if err != nil {
		if j != nil {
			e.mu.Lock()
			j.stopping = false
			e.mu.Unlock()
		}
		return err
	}
	to.Attempt, to.Resume = attempt, true
	var st stopping
	var tag string
	for _, s := range steps {
		e.log.Info("reconfigure", "job", to.JobID, "step", s.Kind, "detail", s.Detail)
		switch s.Kind {
		case launch.StepCheckpoint:
			if j == nil {
				e.log.Warn("reconfigure: the job runs nowhere the executor knows; relaunching from its checkpoint", "job", from.JobID)
				continue
			}
			st = e.signalStop(ctx, j)
		case launch.StepWaitCheckpoint:
			if j == nil {
				continue
			}
			if _, err := e.waitMarker(ctx, old, s.Iteration, st); err != nil {
				<-st.done
				if serr := <-st.errc; serr != nil {
					e.unconfirmed(from.JobID, j.procs)
				}
				e.forget(from.JobID, j)
				return fmt.Errorf("reconfigure %s: wait-checkpoint: %w", from.JobID, err)
			}
		case launch.StepStop:
			if j == nil {
				continue
			}
			err := <-st.errc
			e.forget(from.JobID, j)
			if err != nil {
				e.unconfirmed(from.JobID, j.procs)
				return fmt.Errorf("reconfigure %s: stop: %w", from.JobID, err)
			}
		case launch.StepConvert:
			if tag == "" {
				_, t, err := e.readMarker(ctx, old)
				if err != nil {
					return fmt.Errorf("reconfigure %s: convert: %w", from.JobID, err)
				}
				tag = t
			}
			if err := e.convert(ctx, old, s, tag); err != nil {
				return fmt.Errorf("reconfigure %s: %w", from.JobID, err)
			}
		case launch.StepLaunch:
			to.From = max(to.From, last)
			if err := e.launch(ctx, to, *s.Launch); err != nil {
				return fmt.Errorf("reconfigure %s: launch: %w", to.JobID, err)
			}
		case launch.StepVerify:
			if err := e.verify(ctx, to.JobID, s.Iteration); err != nil {
				e.mu.Lock()
				nj := e.jobs[to.JobID]
				e.mu.Unlock()
				if nj != nil {
					sctx, cancel := e.boundStop(context.WithoutCancel(ctx))
					if serr := e.stopAll(sctx, nj, e.opt.KillGrace); serr != nil {
						// Not confirmed stopped (a silent server): no new
						// start before its lease has certainly run out.
						e.unconfirmed(to.JobID, nj.procs)
					}
					cancel()
					e.forget(to.JobID, nj)
				}
				return fmt.Errorf("reconfigure %s: verify: %w", to.JobID, err)
			}
		default:
			return fmt.Errorf("reconfigure %s: unknown step %s", to.JobID, s.Kind)
		}
	}
	return nil
}

// ErrServerUnreachable marks a launch that failed because one of its
// servers stopped answering: the server's fault, not charged to the job's
// restart budget (suspect.go).
var ErrServerUnreachable = errors.New("a server of the job does not answer")

// verify waits until the job's rank 0 reports an iteration beyond last.
func (e *SSHExecutor) verify(ctx context.Context, id string, last int) error {
	e.mu.Lock()
	j := e.jobs[id]
	e.mu.Unlock()
	if j == nil {
		return errors.New("the job is not running")
	}
	r0 := j.procs[0]
	c, err := e.client(ctx, r0.server)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(e.opt.WaitTimeout)
	seen := 0
	// unanswered is when rank 0's agent last stopped answering. Past its
	// lease (and the lease's grace) the agent has stopped the ranks there,
	// so waiting on would only hold the daemon's loop (observation,
	// heartbeats, every other job) for up to WaitTimeout: TestOutage's
	// sshd-stopped case once waited 78 s here.
	var unanswered time.Time
	for {
		cctx, cancel := context.WithTimeout(ctx, e.opt.CallTimeout)
		samples, err := c.Samples(cctx, r0.id, time.Time{})
		cancel()
		switch {
		case err == nil:
			unanswered = time.Time{}
		case unanswered.IsZero():
			unanswered = time.Now()
		}
		if err == nil {
			for _, s := range samples {
				seen = max(seen, int(s.Step))
			}
			if seen > last {
				e.mu.Lock()
				j.step = max(j.step, seen)
				e.mu.Unlock()
				return nil
			}
		}
		cctx, cancel = context.WithTimeout(ctx, e.opt.CallTimeout)
		p, perr := c.Process(cctx, r0.id)
		cancel()
		if perr == nil && p.State == agent.StateExited {
			// A job that reached its end meanwhile (its checkpoint says
			// so) finished: nothing to verify; Observe reports it.
			if n, _, merr := e.readMarker(ctx, j.l); merr == nil && exitCode(p) == 0 && !p.StopRequested && n >= j.l.Spec.Iterations {
				e.mu.Lock()
				j.ckpt = max(j.ckpt, n)
				e.mu.Unlock()
				e.log.Info("reconfigure: the job finished while it moved", "job", id, "checkpoint", n)
				return nil
			}
			tail, _ := c.Logs(ctx, r0.id, failReadLines)
			// Its log lines end the error: they are the job's logs
			// (redact.go), hidden from those who may not read them.
			return fmt.Errorf("rank 0 exited (%s) before reporting an iteration beyond %d (last seen %d)%s", p.ExitReason, last, seen, quoteLines(string(tail), failTailLines))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no iteration beyond %d after %s (last seen %d)", last, e.opt.WaitTimeout, seen)
		}
		if bound := e.opt.Lease + e.opt.LeaseGrace; e.opt.Lease > 0 && !unanswered.IsZero() && time.Since(unanswered) > bound {
			return fmt.Errorf("%w: rank 0's server %s has not answered for %s, past its agent's lease of %s: its ranks there are stopped (last iteration seen %d)",
				ErrServerUnreachable, r0.server, time.Since(unanswered).Round(time.Second), e.opt.Lease, seen)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(e.opt.Poll):
		}
	}
}

// Adopt implements Executor: it looks for the job's processes on the
// servers of l by their id prefix. The newest attempt found is adopted
// when one of its ranks still runs, or when its rank 0 finished on its own
// with exit code 0 (the next Observe reports the finish). Processes of
// older attempts are stopped. It reports false when nothing of the job
// runs.
func (e *SSHExecutor) Adopt(ctx context.Context, l Launch) (bool, error) {
	if l.Spec == nil || len(l.Servers) == 0 {
		return false, nil
	}
	type found struct {
		info   agent.ProcessInfo
		server string
	}
	lists := make([][]found, len(l.Servers))
	errs := e.each(ctx, len(l.Servers), func(ctx context.Context, i int) error {
		ctx, cancel := context.WithTimeout(ctx, e.opt.CallTimeout)
		defer cancel()
		c, err := e.client(ctx, l.Servers[i].Name)
		if err != nil {
			return err
		}
		ps, err := c.Processes(ctx)
		if err != nil {
			return err
		}
		for _, p := range ps {
			if _, _, ok := parseProcessID(l.JobID, p.Spec.ID); ok {
				lists[i] = append(lists[i], found{p, l.Servers[i].Name})
			}
		}
		return nil
	})
	var unreached []sshProc
	for i, err := range errs {
		if err != nil {
			// An unreachable server: its jobs are the heartbeat's business.
			e.log.Warn("adopt: server did not answer", "job", l.JobID, "server", l.Servers[i].Name, "err", err)
			unreached = append(unreached, sshProc{rank: i, server: l.Servers[i].Name, id: ProcessID(l.JobID, l.Attempt, i)})
		}
	}
	newest := -1
	byAttempt := map[int][]found{}
	for _, fs := range lists {
		for _, f := range fs {
			a, _, _ := parseProcessID(l.JobID, f.info.Spec.ID)
			byAttempt[a] = append(byAttempt[a], f)
			running := f.info.State == agent.StateRunning
			finished := f.info.State == agent.StateExited && !f.info.StopRequested && exitCode(f.info) == 0
			if (running || finished) && a > newest {
				newest = a
			}
		}
	}
	// Older launches still running are leftovers of an interrupted
	// reconfiguration: stop them; while a newer one runs, at once with
	// SIGKILL (a checkpoint of theirs would pass for the live attempt's).
	grace := time.Duration(0)
	if newest < 0 {
		grace = e.opt.StopGrace
	}
	for a, fs := range byAttempt {
		if a == newest {
			continue
		}
		old := &sshJob{l: l}
		for _, f := range fs {
			if f.info.State == agent.StateRunning {
				_, r, _ := parseProcessID(l.JobID, f.info.Spec.ID)
				old.procs = append(old.procs, sshProc{rank: r, server: f.server, id: f.info.Spec.ID})
			}
		}
		if len(old.procs) > 0 {
			e.log.Warn("adopt: stopping processes of an older launch", "job", l.JobID, "attempt", a)
			if err := e.stopAll(ctx, old, grace); err != nil {
				e.log.Warn("adopt: stop older launch", "job", l.JobID, "err", err)
			}
		}
	}
	if newest < 0 {
		// What ran on a server that did not answer may still run: the
		// job starts again only once that is certainly stopped.
		e.unconfirmed(l.JobID, unreached)
		return false, nil
	}
	j := &sshJob{l: l, step: l.From, ckpt: l.From}
	j.l.Attempt = newest
	for rank, s := range l.Servers {
		j.procs = append(j.procs, sshProc{rank: rank, server: s.Name, id: ProcessID(l.JobID, newest, rank)})
	}
	rank0 := false
	for _, f := range byAttempt[newest] {
		if f.info.Spec.ID == j.procs[0].id {
			rank0 = true
			if p, err := strconv.Atoi(f.info.Spec.Env["MASTER_PORT"]); err == nil {
				j.port = p
			}
		}
	}
	if !rank0 {
		// Rank 0 is gone (its server lost the record): the launch is
		// broken; end what is left and let the daemon requeue the job.
		e.log.Warn("adopt: rank 0 missing; stopping the rest", "job", l.JobID, "attempt", newest)
		if err := e.stopAll(ctx, j, e.opt.KillGrace); err != nil {
			e.unconfirmed(l.JobID, j.procs)
		}
		e.unconfirmed(l.JobID, unreached)
		return false, nil
	}
	e.mu.Lock()
	e.jobs[l.JobID] = j
	e.mu.Unlock()
	e.renewLeases() // fence.go
	e.log.Info("adopted", "job", l.JobID, "attempt", newest, "master_port", j.port)
	return true, nil
}
