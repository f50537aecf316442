package control

// Profiling on arrival: a job whose model type has never been fitted gets
// a few short test runs (perf.ProfileConfigs chooses them) on free GPUs
// before its first real start; the measured iteration times are stored and
// fitted, and the job is then scheduled with the fitted model.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/replan/replan/jobspec"
	"github.com/replan/replan/launch"
	"github.com/replan/replan/perf"
	"github.com/replan/replan/sched"
)

// ProfileOptions bound the profiling phase of a model type that has no
// fitted model (daemon flags; a job spec's profile block overrides them).
type ProfileOptions struct {
	// Enabled profiles a job's model type on arrival when it has no
	// fitted model with enough samples.
	Enabled bool
	// MaxConfigs is the most configurations a phase runs (default and
	// at most perf.MaxProfileConfigs).
	MaxConfigs int
	// Iterations ends a run once it measured this many iterations
	// (default 20).
	Iterations int
	// RunTimeout ends a run after this long from its launch, measured or
	// not (default 3 minutes).
	RunTimeout time.Duration
	// PhaseTimeout ends the whole phase after this long: configurations
	// not run by then are left out (default 10 minutes).
	PhaseTimeout time.Duration
}

// withDefaults fills the zero fields.
func (o ProfileOptions) withDefaults() ProfileOptions {
	if o.MaxConfigs <= 0 || o.MaxConfigs > perf.MaxProfileConfigs {
		o.MaxConfigs = perf.MaxProfileConfigs
	}
	if o.Iterations <= 0 {
		o.Iterations = 20
	}
	if o.RunTimeout <= 0 {
		o.RunTimeout = 3 * time.Minute
	}
	if o.PhaseTimeout <= 0 {
		o.PhaseTimeout = 10 * time.Minute
	}
	return o
}

// profileOpts are the daemon's options with the spec's profile block over
// them.
func (d *Daemon) profileOpts(s *jobspec.Spec) ProfileOptions {
	o := d.cfg.Profile
	if p := s.Profile; p != nil {
		if p.Enabled != nil {
			o.Enabled = *p.Enabled
		}
		if p.MaxConfigs > 0 {
			o.MaxConfigs = p.MaxConfigs
		}
		if p.Iterations > 0 {
			o.Iterations = p.Iterations
		}
		if p.RunSeconds > 0 {
			o.RunTimeout = time.Duration(p.RunSeconds * float64(time.Second))
		}
		if p.PhaseSeconds > 0 {
			o.PhaseTimeout = time.Duration(p.PhaseSeconds * float64(time.Second))
		}
	}
	return o.withDefaults()
}

// ProfileSample is one run of a profiling phase as the store keeps it: the
// configuration, where it ran, its measured iteration time, or why it gave
// none (Fits false: it failed or ran out of memory, "does not fit").
type ProfileSample struct {
	Type       string         `json:"type"`
	JobID      string         `json:"job_id,omitempty"`
	Config     string         `json:"config"`
	Plan       perf.Plan      `json:"plan"`
	Placement  perf.Placement `json:"placement"`
	Servers    []string       `json:"servers"`
	CPUsPerGPU float64        `json:"cpus_per_gpu"`
	IterS      float64        `json:"iter_s,omitempty"`
	Fits       bool           `json:"fits"`
	Err        string         `json:"err,omitempty"`
	At         time.Time      `json:"at"`

	// PeakGPUGB is the most memory its busiest GPU used once it measured
	// iterations (GiB; absent: not measured, mempeak.go).
	PeakGPUGB float64 `json:"peak_gpu_gb,omitempty"`
}

// profilePhase is the profiling of one model type.
type profilePhase struct {
	id      string // names its runs: <id>-profile-<k>
	typ     ModelType
	job     string // the job waiting for it ("" on demand)
	spec    *jobspec.Spec
	opts    ProfileOptions
	configs []perf.ProfileConfig
	next    int // the configuration to run next
	began   time.Time
	run     *profileRun
	samples []ProfileSample
}

// profileRun is a phase's run in flight.
type profileRun struct {
	id      string
	k       int // its configuration's index
	servers []launch.Server
	started time.Time
	iters   int
	sps     float64   // the latest measurement
	seen    []float64 // one measurement per observation that saw a new iteration
	exited  bool
	code    int
	err     string
	peakGB  float64 // its GPUs' most used memory once measuring (mempeak.go)
}

// ProfileStatus is a profiling phase as the API shows it.
type ProfileStatus struct {
	Type    string          `json:"type"`
	JobID   string          `json:"job_id,omitempty"`
	Run     int             `json:"run"` // 1-based index of the current (or last) configuration
	Configs int             `json:"configs"`
	Current string          `json:"current,omitempty"`
	Began   time.Time       `json:"began"`
	Samples []ProfileSample `json:"samples"`
}

// profiling reports whether model type t is being profiled (its jobs wait
// out of the rounds). The caller holds d.mu.
func (d *Daemon) profiling(t ModelType) bool {
	_, ok := d.profiles[t]
	return ok
}

// needsProfile reports whether js's model type should be profiled before
// its first start: profiling is on for it, the type has fewer than
// perf.MinSamples samples, was never profiled, and its model is the
// unfitted default (a type fitted from the shared data is not profiled).
// The caller holds d.mu.
func (d *Daemon) needsProfile(js *jobState) bool {
	if js.stopping || (js.rec.State != StateQueued && js.rec.State != StatePreempted) || !js.rec.StartedAt.IsZero() {
		return false
	}
	if !d.profileOpts(js.spec).Enabled {
		return false
	}
	o := d.model(js.spec)
	return len(o.Samples) < perf.MinSamples && o.ProfiledAt.IsZero() && o.FittedAt.IsZero() && o.Model.Params == perf.DefaultParams
}

// Profile starts a profiling phase of spec's model type now, whatever its
// model (`replan profile SPEC`). It returns the model type; an error when
// the type is being profiled already.
func (d *Daemon) Profile(ctx context.Context, spec *jobspec.Spec) (ModelType, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	t := modelTypeOf(spec)
	if d.profiling(t) {
		return t, fmt.Errorf("profile: model type %s is being profiled already", t)
	}
	opts := d.profileOpts(spec)
	opts.Enabled = true
	d.profileSeq++
	if err := d.beginProfile(ctx, fmt.Sprintf("p-%06d", d.profileSeq), "", spec, opts); err != nil {
		return t, err
	}
	d.Kick()
	return t, nil
}

// Profiles lists the phases in progress.
func (d *Daemon) Profiles() []ProfileStatus {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []ProfileStatus
	for _, p := range d.profiles {
		st := ProfileStatus{Type: p.typ.String(), JobID: p.job, Configs: len(p.configs), Began: p.began, Samples: slices.Clone(p.samples), Run: p.next}
		if p.run != nil {
			st.Run, st.Current = p.run.k+1, p.configs[p.run.k].Label
		}
		out = append(out, st)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Type < out[b].Type })
	return out
}

// freeGPUs is the free GPUs of every usable server (0 for the others).
// The caller holds d.mu.
func (d *Daemon) freeGPUs() []int {
	free := make([]int, len(d.owner))
	for i := range d.owner {
		if !d.usable(i) {
			continue
		}
		for _, o := range d.owner[i].gpu {
			if o == "" {
				free[i]++
			}
		}
	}
	return free
}

// beginProfile starts a phase: it chooses the configurations on the free
// GPUs (on every usable server's GPUs when none is free: the runs then wait
// for free ones within the phase's bound) and tells it. The caller holds
// d.mu.
func (d *Daemon) beginProfile(ctx context.Context, id, job string, spec *jobspec.Spec, opts ProfileOptions) error {
	t := modelTypeOf(spec)
	m := d.model(spec).Model
	free := d.freeGPUs()
	cs := perf.ProfileConfigs(m, free, opts.MaxConfigs)
	if len(cs) == 0 {
		all := make([]int, len(d.cfg.Servers))
		for i, s := range d.cfg.Servers {
			if d.usable(i) {
				all[i] = s.GPUs
			}
		}
		cs = perf.ProfileConfigs(m, all, opts.MaxConfigs)
	}
	p := &profilePhase{id: id, typ: t, job: job, spec: spec, opts: opts, configs: cs, began: d.now()}
	labels := make([]string, len(cs))
	for i, c := range cs {
		labels[i] = c.Label
	}
	msg := fmt.Sprintf("profiling model type %s: %d configurations (%s), each ≤ %d iterations or %s, the phase ≤ %s", t, len(cs), strings.Join(labels, ", "), opts.Iterations, opts.RunTimeout, opts.PhaseTimeout)
	if len(cs) == 0 {
		msg = fmt.Sprintf("profiling model type %s: no configuration fits the cluster; its model stays unfitted", t)
	}
	var ups []jobUpdate
	if js := d.jobs[job]; js != nil {
		rec := js.rec
		rec.Reason = fmt.Sprintf("profiling 0/%d: waiting for free GPUs", len(cs))
		ups = append(ups, jobUpdate{js, rec, "profile"})
	}
	if err := d.write(ctx, ups, Batch{Events: []Event{d.ev("profile", job, "", msg, cs)}}, func() {
		if d.profiles == nil {
			d.profiles = map[ModelType]*profilePhase{}
		}
		d.profiles[t] = p
		delete(d.waits, job)
	}); err != nil {
		return fmt.Errorf("profile %s: %w", t, err)
	}
	return nil
}

// observeProfiles takes the executor's news of profile runs (they are no
// jobs). The caller holds d.mu.
func (d *Daemon) observeProfiles(obs []JobObservation) {
	if len(d.profiles) == 0 {
		return
	}
	runs := map[string]*profileRun{}
	for _, p := range d.profiles {
		if p.run != nil {
			runs[p.run.id] = p.run
		}
	}
	for _, o := range obs {
		r := runs[o.JobID]
		if r == nil {
			continue
		}
		if o.SamplesPerSec > 0 {
			r.sps = o.SamplesPerSec
			if o.Iterations > r.iters {
				r.seen = append(r.seen, o.SamplesPerSec)
			}
		}
		r.iters = max(r.iters, o.Iterations)
		if o.Exited {
			r.exited, r.code, r.err = true, o.ExitCode, o.Err
		}
	}
}

// profileStep moves every profiling phase on: it begins phases for jobs
// that need one, ends runs that measured enough (or failed, or ran out of
// time) and stores their samples, launches the next configuration on free
// GPUs, and fits a phase that is done. It takes d.mu itself and lets it go
// for the executor's calls.
func (d *Daemon) profileStep(ctx context.Context) error {
	var errs []error
	d.mu.Lock()
	var waiting []*jobState
	for _, js := range d.jobs {
		if !d.profiling(modelTypeOf(js.spec)) && d.needsProfile(js) {
			waiting = append(waiting, js)
		}
	}
	sort.Slice(waiting, func(a, b int) bool { return waiting[a].rec.ID < waiting[b].rec.ID })
	for _, js := range waiting {
		if d.profiling(modelTypeOf(js.spec)) {
			continue // a job before it of the same type began it
		}
		if err := d.beginProfile(ctx, js.rec.ID, js.rec.ID, js.spec, d.profileOpts(js.spec)); err != nil {
			errs = append(errs, err)
		}
	}
	types := make([]ModelType, 0, len(d.profiles))
	for t := range d.profiles {
		types = append(types, t)
	}
	d.mu.Unlock()
	sort.Slice(types, func(a, b int) bool { return types[a].String() < types[b].String() })
	for _, t := range types {
		if err := d.stepPhase(ctx, t); err != nil {
			errs = append(errs, err)
		}
	}
	if len(types) > 0 {
		d.mu.Lock()
		d.publish()
		d.mu.Unlock()
	}
	return errors.Join(errs...)
}

// stepPhase moves one phase on (see profileStep).
func (d *Daemon) stepPhase(ctx context.Context, t ModelType) error {
	d.mu.Lock()
	p := d.profiles[t]
	if p == nil {
		d.mu.Unlock()
		return nil
	}
	now := d.now()
	overdue := now.Sub(p.began) >= p.opts.PhaseTimeout
	// A run in flight: done when it measured enough, exited, ran out of
	// its time, or the phase did.
	if r := p.run; r != nil {
		measured := r.sps > 0 && r.iters >= p.opts.Iterations
		timedOut := now.Sub(r.started) >= p.opts.RunTimeout
		if !measured && !r.exited && !timedOut && !overdue {
			d.mu.Unlock()
			return nil
		}
		d.mu.Unlock()
		if !r.exited || measured {
			if _, err := d.cfg.Exec.Stop(context.WithoutCancel(ctx), r.id, false); err != nil {
				d.log.Warn("profile: stop", "run", r.id, "err", err)
			}
		}
		d.mu.Lock()
		c := p.configs[r.k]
		s := ProfileSample{Type: t.String(), JobID: p.job, Config: c.Label, Plan: c.Plan, Placement: c.Placement, CPUsPerGPU: serversCPUsPerGPU(r.servers), At: d.now()}
		for _, sv := range r.servers {
			s.Servers = append(s.Servers, sv.Name)
		}
		var msg string
		switch {
		case r.sps > 0 && (measured || !r.exited || r.code == 0):
			sps := r.throughput()
			s.Fits, s.IterS, s.PeakGPUGB = true, float64(t.GlobalBatch)/sps, r.peakGB
			msg = fmt.Sprintf("profile %d/%d of %s: %s (%s) on %s: %.3f s per iteration (%.2f samples/s, the median of %d measurements)", r.k+1, len(p.configs), t, c.Label, c.Plan.Spec(), strings.Join(s.Servers, ","), s.IterS, sps, max(len(r.seen)-1, 1))
		case r.exited:
			s.Err = fmt.Sprintf("exited with code %d%s", r.code, suffix(r.err))
			msg = fmt.Sprintf("profile %d/%d of %s: %s (%s): does not fit: %s", r.k+1, len(p.configs), t, c.Label, c.Plan.Spec(), s.Err)
		case timedOut:
			s.Err = fmt.Sprintf("no iteration measured within %s", p.opts.RunTimeout)
			msg = fmt.Sprintf("profile %d/%d of %s: %s (%s): does not fit: %s", r.k+1, len(p.configs), t, c.Label, c.Plan.Spec(), s.Err)
		default:
			s.Err = fmt.Sprintf("no iteration measured after %s: the phase's %s ran out", now.Sub(r.started).Round(time.Second), p.opts.PhaseTimeout)
			msg = fmt.Sprintf("profile %d/%d of %s: %s (%s): does not fit: %s", r.k+1, len(p.configs), t, c.Label, c.Plan.Spec(), s.Err)
		}
		err := d.write(ctx, nil, Batch{ProfileSamples: []ProfileSample{s}, Events: []Event{d.ev("profile", p.job, "", msg, s)}}, func() {
			p.samples = append(p.samples, s)
			p.run = nil
			d.release(r.id)
		})
		if err != nil {
			d.mu.Unlock()
			return fmt.Errorf("profile %s: %w", t, err)
		}
	}
	if p.next >= len(p.configs) || now.Sub(p.began) >= p.opts.PhaseTimeout {
		err := d.endProfile(ctx, p)
		d.mu.Unlock()
		return err
	}
	// Launch the next configuration on free GPUs, if there are.
	k := p.next
	c := p.configs[k]
	servers, ok := d.profileDevices(c.Placement, p.spec, p.id+"-profile-"+fmt.Sprint(k+1))
	if !ok {
		d.mu.Unlock()
		return nil
	}
	run := &profileRun{id: p.id + "-profile-" + fmt.Sprint(k+1), k: k, servers: servers, started: d.now()}
	var ups []jobUpdate
	if js := d.jobs[p.job]; js != nil && !js.stopping && js.rec.State != StateRunning {
		rec := js.rec
		rec.Reason = fmt.Sprintf("profiling %d/%d: %s", k+1, len(p.configs), c.Label)
		ups = append(ups, jobUpdate{js, rec, "profile"})
	}
	names := make([]string, len(servers))
	for i, s := range servers {
		names[i] = s.Name
	}
	msg := fmt.Sprintf("profiling %d/%d of %s: %s (%s) on %s", k+1, len(p.configs), t, c.Label, c.Plan.Spec(), strings.Join(names, ","))
	if err := d.write(ctx, ups, Batch{Events: []Event{d.ev("profile", p.job, "", msg, nil)}}, func() {
		d.take(run.id, servers)
		p.run, p.next = run, k+1
	}); err != nil {
		d.mu.Unlock()
		return fmt.Errorf("profile %s: %w", t, err)
	}
	spec := *p.spec
	spec.Iterations = p.opts.Iterations * 1000 // stopped by the daemon, not by its end
	// The trainer can tell a profile run (skip its logging, its
	// experiment tracking): REPLAN_PROFILE_RUN is the run's id.
	spec.Env = maps.Clone(spec.Env)
	if spec.Env == nil {
		spec.Env = map[string]string{}
	}
	spec.Env["REPLAN_PROFILE_RUN"] = run.id
	if spec.CheckpointDir != "" {
		// The runs never touch the job's checkpoints.
		spec.CheckpointDir = strings.TrimRight(spec.CheckpointDir, "/") + "/replan-profile/" + run.id
	}
	l := Launch{JobID: run.id, Spec: &spec, Plan: c.Plan, Servers: servers, SaveInterval: spec.Iterations + 1}
	d.mu.Unlock()
	if err := d.cfg.Exec.Start(ctx, l); err != nil {
		// A launch that fails is a sample too: does not fit.
		d.mu.Lock()
		run.exited, run.code, run.err = true, -1, err.Error()
		d.mu.Unlock()
		return d.stepPhase(ctx, t)
	}
	return nil
}

// profileDevices picks free devices for placement pl on distinct usable
// servers (the most free first), with the cores per GPU the spec asks for
// (else the server's share). The caller holds d.mu.
func (d *Daemon) profileDevices(pl perf.Placement, spec *jobspec.Spec, self string) ([]launch.Server, bool) {
	free := d.freeGPUs()
	idx := make([]int, len(free))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return free[idx[a]] > free[idx[b]] })
	used := map[int]bool{}
	var allocs []sched.Alloc
	for _, g := range pl {
		found := false
		for _, i := range idx {
			if used[i] || free[i] < g {
				continue
			}
			info := d.cfg.Servers[i]
			per := info.CPUs / max(info.GPUs, 1)
			if spec.Request.CPUs > 0 && spec.Request.GPUs > 0 {
				per = min(per, max(spec.Request.CPUs/spec.Request.GPUs, 1))
			}
			cpus := 0
			for _, o := range d.owner[i].cpu {
				if o == "" {
					cpus++
				}
			}
			allocs = append(allocs, sched.Alloc{Server: i, GPUs: g, CPUs: min(cpus, g*per)})
			used[i], found = true, true
			break
		}
		if !found {
			return nil, false
		}
	}
	servers, err := d.devicesIn(map[int]*serverDevices{}, allocs, self)
	if err != nil {
		return nil, false
	}
	return servers, true
}

// serversCPUsPerGPU is the cores per GPU of servers.
func serversCPUsPerGPU(servers []launch.Server) float64 {
	g, c := 0, 0
	for _, s := range servers {
		g += len(s.GPUs)
		c += len(s.CPUs)
	}
	if g == 0 {
		return 0
	}
	return float64(c) / float64(g)
}

// endProfile fits the type's model on the phase's measured samples (with
// the samples it had), stores it, and lets the waiting job into the rounds.
// The caller holds d.mu.
func (d *Daemon) endProfile(ctx context.Context, p *profilePhase) error {
	t := p.typ
	o := d.model(p.spec)
	c := *o
	c.Samples = slices.Clone(o.Samples)
	var added []perf.Sample
	bad := 0
	for _, s := range p.samples {
		if !s.Fits {
			bad++
			continue
		}
		added = append(added, perf.Sample{Plan: s.Plan, Resources: perf.Resources{Placement: s.Placement, CPUsPerGPU: s.CPUsPerGPU}, IterS: s.IterS, PeakGPUGB: s.PeakGPUGB})
	}
	c.Samples = append(c.Samples, added...)
	at := d.now()
	c.ProfiledAt = at
	took := at.Sub(p.began).Round(time.Second)
	msg := fmt.Sprintf("profiled %s in %s: %d configurations measured, %d did not fit; nothing to fit, its model stays unfitted", t, took, len(added), bad)
	if len(added) > 0 {
		// A type never fitted has a forward profile nobody measured
		// (perf.DefaultForward, from FLOPs): the runs estimate it too,
		// and the fit with the forward that explains them better wins.
		cands := []perf.Model{c.Model}
		if o.FittedAt.IsZero() && o.Model.Params == perf.DefaultParams {
			if f, err := perf.EstimateForward(c.Model.Arch, c.Samples); err == nil {
				m := c.Model
				m.Forward = f
				cands = append(cands, m)
			}
		}
		bestErr := math.Inf(1)
		var ferr error
		for _, m := range cands {
			k, st, err := perf.Fit(m, c.Samples, perf.FitOptions{BoundOverlap: true})
			if err != nil {
				ferr = err
				continue
			}
			m.Params = k
			if e := ModelErrPct(m, c.Samples); e < bestErr {
				bestErr = e
				c.Model, c.Stats, c.FittedAt = m, st, at
			}
		}
		if c.FittedAt.IsZero() {
			msg = fmt.Sprintf("profiled %s in %s: %d configurations measured, %d did not fit; the fit failed (%v), its model stays unfitted", t, took, len(added), bad, ferr)
		} else {
			msg = fmt.Sprintf("profiled %s in %s: %d configurations measured, %d did not fit; fitted, %.1f%% mean error on its samples", t, took, len(added), bad, bestErr)
		}
	}
	if scale, used, _ := refitActScale(t, &c); used > 0 { // mempeak.go
		msg += fmt.Sprintf("; activation factor %.2f from the peak memory of %d samples", scale, used)
	}
	raw, err := json.Marshal(&c)
	if err != nil {
		return fmt.Errorf("profile %s: %w", t, err)
	}
	var ups []jobUpdate
	if js := d.jobs[p.job]; js != nil && !js.stopping && js.rec.State != StateRunning {
		rec := js.rec
		rec.Reason = ""
		ups = append(ups, jobUpdate{js, rec, "profiled"})
	}
	return d.write(ctx, ups, Batch{Models: []ModelWrite{{Type: t.String(), Data: raw, At: at}}, Events: []Event{d.ev("profiled", p.job, "", msg, nil)}}, func() {
		*o = c
		d.modelSaved[t] = at
		d.dropSnapModels(t)
		delete(d.profiles, t)
		delete(d.waits, p.job)
	})
}

// ModelErrPct is the mean relative error, in percent, of m's predicted
// iteration times on samples (those it cannot price are left out; 0 when
// none can be priced).
func ModelErrPct(m perf.Model, samples []perf.Sample) float64 {
	sum, n := 0.0, 0
	for _, s := range samples {
		b, err := m.Predict(s.Plan, s.Resources)
		if err != nil || b.Iter <= 0 || s.IterS <= 0 {
			continue
		}
		sum += math.Abs(b.Iter-s.IterS) / s.IterS
		n++
	}
	if n == 0 {
		return 0
	}
	return 100 * sum / float64(n)
}

// profileHolds reports whether js stays out of the rounds for a profiling
// phase of its model type (in progress, or about to begin). The caller
// holds d.mu.
func (d *Daemon) profileHolds(js *jobState) bool {
	if js.rec.State == StateRunning {
		return false
	}
	return d.profiling(modelTypeOf(js.spec)) || d.needsProfile(js)
}

// throughput is the run's measured samples per second: the median of its
// measurements after the first (the warm-up iteration), else the latest.
// One measurement alone is noisy: on a loaded machine one iteration of a
// DP 2 run came out 1.7× faster than its neighbours.
func (r *profileRun) throughput() float64 {
	if len(r.seen) < 3 {
		return r.sps
	}
	v := slices.Clone(r.seen[1:])
	slices.Sort(v)
	if n := len(v); n%2 == 1 {
		return v[n/2]
	} else {
		return (v[n/2-1] + v[n/2]) / 2
	}
}
