package control

// Fail-slow: a running job whose measured throughput stays below a
// fraction of its model's prediction (SlowFraction, default 70 %) for
// SlowObservations observations in a row (default 3) is examined. Its
// samples meanwhile are kept from the model: a throttled server must not
// teach the model that the job type is slow.
//
// The cause is looked for in this order (judgeSlow, pure):
//  1. the signals the agents report of the job's GPUs: clocks held down
//     (NVML's clock event reasons, the SM clock against its maximum), a
//     power limit below the default, a PCIe link trained below its best,
//     NVLinks down;
//  2. lacking a signal, the other running jobs of its model type with
//     its plan and placement shape (the model's error may depend on
//     them): when some ran at prediction on other servers (atPrediction), the job's server is to
//     blame (a job on one server), or the one of its servers where other
//     jobs ran slow too and none at prediction (the servers' history of
//     jobs; a job on several servers);
//  3. when no job of its type ran at prediction (all as slow, or none
//     to compare with) and no signal explains it, the model is wrong:
//     the kept samples refit it and no server is blamed.
//
// A server found slow becomes suspect (no new starts; suspect.go) with
// why, e.g. "a800-03 GPU 5: SM clock 1.1 of 1.98 GHz, thermal at 88 °C;
// j-12 ran at 61 % of its predicted 40 samples/s", stored in slow_servers
// too: a launch health check passes on a slow server and does not clear
// it, only `replan undrain` does. The job is checkpointed, stopped and
// requeued (not counted against its restart budget) and resumes
// elsewhere.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
)

// Defaults of Config.SlowFraction and SlowObservations.
const (
	DefaultSlowFraction     = 0.7
	DefaultSlowObservations = 3
)

// atPrediction is the fraction of its prediction a job must reach to
// count as running at prediction (a peer that shows the model right),
// as the median of its last peerWindow observations: within 15 % (one
// iteration's time varies with the load beside it).
const atPrediction = 0.85

// peerWindow is how many of a job's latest observations its speed as a
// peer is the median of.
const peerWindow = 5

// slowHistoryAge is how long a job's speed on a server is remembered.
const slowHistoryAge = time.Hour

// maxHeldSamples bounds the samples kept from the model per job.
const maxHeldSamples = 32

// SlowServerRecord is a server made suspect for slowness (table
// slow_servers): a passing launch health check does not clear it.
type SlowServerRecord struct {
	Server  string    `json:"server"`
	Why     string    `json:"why"`
	At      time.Time `json:"at"`
	Cleared bool      `json:"-"` // a Batch entry that deletes the row
}

// slowState is what the daemon follows of a running job's speed.
type slowState struct {
	attempt int       // the launch it belongs to
	streak  int       // observations in a row below the fraction
	since   time.Time // the first of them
	held    []float64 // samples/s kept from the model meanwhile
	ratios  []float64 // the streak's measured/predicted ratios
	told    bool      // an unexplained slowdown was told for this streak
	// recent are its last peerWindow ratios, slow or not.
	recent []float64
}

// median of v (0 when empty).
func medianOf(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	c := slices.Clone(v)
	slices.Sort(c)
	if n := len(c); n%2 == 0 {
		return (c[n/2-1] + c[n/2]) / 2
	}
	return c[len(c)/2]
}

// slowMark is a job's latest speed on a server.
type slowMark struct {
	job   string
	ratio float64 // measured / predicted
	at    time.Time
}

// failSlow is the daemon's fail-slow state; guarded by d.mu.
type failSlow struct {
	jobs    map[string]*slowState
	hist    map[string]map[string]slowMark // server → job → its latest speed there
	servers map[string]SlowServerRecord    // servers suspect for slowness
}

// slowBounds is js's fraction and observation count (its spec's slow:,
// else the daemon's); the caller holds d.mu.
func (d *Daemon) slowBounds(js *jobState) (float64, int) {
	frac, n := d.cfg.SlowFraction, d.cfg.SlowObservations
	if s := js.spec.Slow; s != nil {
		if s.Fraction > 0 {
			frac = s.Fraction
		}
		if s.Observations > 0 {
			n = s.Observations
		}
	}
	return frac, n
}

// noteSpeed follows a measured throughput of js against its prediction;
// fresh says the observation brought new iterations (only those count:
// a job observed twice between two iteration lines shows the same one
// twice). It reports whether the sample is kept from the model (js runs
// slow); otherwise the caller feeds it to refit. The caller holds d.mu.
func (d *Daemon) noteSpeed(js *jobState, sps float64, fresh bool) bool {
	if js.predSPS <= 0 || sps <= 0 || len(js.servers) == 0 {
		return false
	}
	fs := &d.fs
	if fs.jobs == nil {
		fs.jobs, fs.hist = map[string]*slowState{}, map[string]map[string]slowMark{}
	}
	id, now := js.rec.ID, d.now()
	ratio := sps / js.predSPS
	for _, s := range js.servers {
		m := fs.hist[s.Name]
		if m == nil {
			m = map[string]slowMark{}
			fs.hist[s.Name] = m
		}
		for j, mk := range m {
			if now.Sub(mk.at) > slowHistoryAge {
				delete(m, j)
			}
		}
		m[id] = slowMark{job: id, ratio: ratio, at: now}
	}
	st := fs.jobs[id]
	if st == nil || st.attempt != js.rec.Attempt {
		st = &slowState{attempt: js.rec.Attempt}
		fs.jobs[id] = st
	}
	frac, _ := d.slowBounds(js)
	if !fresh {
		return st.streak > 0 && ratio < frac // the same iteration again
	}
	st.recent = append(st.recent, ratio)
	if len(st.recent) > peerWindow {
		st.recent = st.recent[1:]
	}
	if ratio >= frac {
		// Back at speed: a passing slowdown is neither the model's fault
		// nor a server's; its samples are dropped.
		st.streak, st.since, st.held, st.ratios, st.told = 0, time.Time{}, nil, nil, false
		return false
	}
	if st.streak == 0 {
		st.since = now
	}
	st.streak++
	if len(st.held) < maxHeldSamples {
		st.held = append(st.held, sps)
		st.ratios = append(st.ratios, ratio)
	}
	return true
}

// forgetSpeed drops what is followed of job id's speed (it stopped); the
// caller holds d.mu.
func (d *Daemon) forgetSpeed(id string) {
	delete(d.fs.jobs, id)
}

// slowGPU is one GPU of a slow job with what its agent last reported.
type slowGPU struct {
	Index int
	Stat  *GPUStat // nil when not reported
}

// slowServer is one server of a slow job.
type slowServer struct {
	Name string
	GPUs []slowGPU
	// Others are the other jobs' latest speeds there (its history).
	Others []slowMark
}

// slowPeer is another running job of the slow job's model type.
type slowPeer struct {
	Job     string
	Ratio   float64
	Servers []string
}

// slowCase is what judgeSlow decides on.
type slowCase struct {
	Job      string
	Ratio    float64 // measured / predicted
	PredSPS  float64
	MeasSPS  float64
	Fraction float64
	Servers  []slowServer
	Peers    []slowPeer
}

// slowBlame is a server found slow, with why.
type slowBlame struct {
	Server string
	Why    string
}

// slowVerdict is judgeSlow's answer: servers to blame, or a refit of the
// model, or neither (the cause is not found: Why says what is known).
type slowVerdict struct {
	Blame []slowBlame
	Refit bool
	Why   string
}

// gpuSlowCause says what makes a GPU slow ("" when its figures show
// nothing): its SM clock held below 85 % of its maximum for a reason
// (or a hardware slowdown whatever the clock), a power limit below 90 %
// of the default, a PCIe link below its best width or generation, NVLinks
// down.
func gpuSlowCause(g GPUStat) string {
	var parts []string
	var why []string
	for _, e := range g.ClockEvents {
		switch e {
		case "sw_thermal", "hw_thermal":
			if !slices.Contains(why, "thermal") {
				why = append(why, "thermal")
			}
		case "sw_power_cap":
			why = append(why, "power cap")
		case "hw_slowdown":
			why = append(why, "hardware slowdown")
		case "hw_power_brake":
			why = append(why, "power brake")
		case "applications_clocks":
			why = append(why, "applications clocks set")
		}
	}
	hw := slices.Contains(g.ClockEvents, "hw_slowdown") || slices.Contains(g.ClockEvents, "hw_thermal") || slices.Contains(g.ClockEvents, "hw_power_brake")
	low := g.SMClockMaxMHz > 0 && g.SMClockMHz > 0 && float64(g.SMClockMHz) < 0.85*float64(g.SMClockMaxMHz)
	if (low && len(why) > 0) || hw {
		s := strings.Join(why, ", ")
		if slices.Contains(why, "thermal") && g.TempC > 0 {
			s = strings.Replace(s, "thermal", fmt.Sprintf("thermal at %.0f °C", g.TempC), 1)
		}
		if g.SMClockMaxMHz > 0 && g.SMClockMHz > 0 {
			s = fmt.Sprintf("SM clock %s of %s GHz, %s", ghz(g.SMClockMHz), ghz(g.SMClockMaxMHz), s)
		}
		parts = append(parts, s)
	}
	if g.PowerDefaultLimitW > 0 && g.PowerLimitW > 0 && g.PowerLimitW < 0.9*g.PowerDefaultLimitW {
		parts = append(parts, fmt.Sprintf("power limit %.0f of %.0f W", g.PowerLimitW, g.PowerDefaultLimitW))
	}
	if g.PCIeWidthMax > 0 && g.PCIeWidth > 0 && g.PCIeWidth < g.PCIeWidthMax {
		parts = append(parts, fmt.Sprintf("PCIe x%d of x%d", g.PCIeWidth, g.PCIeWidthMax))
	}
	if g.PCIeGenMax > 0 && g.PCIeGen > 0 && g.PCIeGen < g.PCIeGenMax {
		parts = append(parts, fmt.Sprintf("PCIe gen %d of %d", g.PCIeGen, g.PCIeGenMax))
	}
	if g.NVLinksDown > 0 {
		parts = append(parts, fmt.Sprintf("%d NVLinks down", g.NVLinksDown))
	}
	return strings.Join(parts, "; ")
}

// ghz formats a clock in MHz as GHz with up to three digits.
func ghz(mhz uint32) string {
	return fmt.Sprintf("%.3g", float64(mhz)/1000)
}

// pct is a ratio in whole percent.
func pct(r float64) string { return fmt.Sprintf("%.0f %%", 100*r) }

// judgeSlow finds what to blame for a slow job (see the file's comment).
func judgeSlow(c slowCase) slowVerdict {
	ran := fmt.Sprintf("%s ran at %s of its predicted %.3g samples/s", c.Job, pct(c.Ratio), c.PredSPS)
	mine := map[string]bool{}
	for _, s := range c.Servers {
		mine[s.Name] = true
	}
	// 1. The GPUs' own signals.
	var v slowVerdict
	for _, s := range c.Servers {
		var causes []string
		for _, g := range s.GPUs {
			if g.Stat == nil {
				continue
			}
			if why := gpuSlowCause(*g.Stat); why != "" {
				causes = append(causes, fmt.Sprintf("GPU %d: %s", g.Index, why))
			}
		}
		if len(causes) > 0 {
			v.Blame = append(v.Blame, slowBlame{Server: s.Name, Why: fmt.Sprintf("%s %s; %s", s.Name, strings.Join(causes, "; "), ran)})
		}
	}
	if len(v.Blame) > 0 {
		return v
	}
	// 2. Jobs of its type at prediction elsewhere.
	var ok []string
	for _, p := range c.Peers {
		apart := true
		for _, s := range p.Servers {
			apart = apart && !mine[s]
		}
		if apart && p.Ratio >= atPrediction {
			ok = append(ok, fmt.Sprintf("%s at %s", p.Job, pct(p.Ratio)))
		}
	}
	sort.Strings(ok)
	if len(ok) == 0 {
		// 3. Nothing to compare with, or all as slow: the model is wrong.
		what := "no other job of its type runs"
		if len(c.Peers) > 0 {
			what = "no other job of its type ran at prediction"
		}
		return slowVerdict{Refit: true, Why: fmt.Sprintf("%s; no GPU signal explains it and %s: the model is refitted, no server is blamed", ran, what)}
	}
	peers := fmt.Sprintf("%d jobs of its type ran at prediction elsewhere (%s)", len(ok), strings.Join(ok, ", "))
	if len(ok) == 1 {
		peers = fmt.Sprintf("1 job of its type ran at prediction elsewhere (%s)", ok[0])
	}
	if len(c.Servers) == 1 {
		s := c.Servers[0].Name
		return slowVerdict{Blame: []slowBlame{{Server: s, Why: fmt.Sprintf("%s: %s while %s; no GPU signal explains it", s, ran, peers)}}}
	}
	// Several servers: the one where other jobs ran slow too, and none at
	// prediction.
	for _, s := range c.Servers {
		var slow []string
		fast := false
		for _, o := range s.Others {
			switch {
			case o.ratio < c.Fraction:
				slow = append(slow, fmt.Sprintf("%s at %s", o.job, pct(o.ratio)))
			case o.ratio >= atPrediction:
				fast = true
			}
		}
		if len(slow) > 0 && !fast {
			sort.Strings(slow)
			v.Blame = append(v.Blame, slowBlame{Server: s.Name, Why: fmt.Sprintf("%s: %s while %s; other jobs ran slow there too (%s)", s.Name, ran, peers, strings.Join(slow, ", "))})
		}
	}
	if len(v.Blame) > 0 {
		return v
	}
	names := make([]string, 0, len(c.Servers))
	for _, s := range c.Servers {
		names = append(names, s.Name)
	}
	return slowVerdict{Why: fmt.Sprintf("%s while %s; which of %s is slow is not known (no GPU signal, no history)", ran, peers, strings.Join(names, ", "))}
}

// slowCaseOf builds js's case from what the daemon knows; the caller
// holds d.mu.
func (d *Daemon) slowCaseOf(js *jobState, st *slowState) slowCase {
	frac, _ := d.slowBounds(js)
	c := slowCase{Job: js.rec.ID, PredSPS: js.predSPS, MeasSPS: js.measSPS, Fraction: frac}
	c.Ratio = medianOf(st.ratios)
	for _, s := range js.servers {
		ss := slowServer{Name: s.Name}
		i, known := d.srvIdx[s.Name]
		for _, g := range s.GPUs {
			sg := slowGPU{Index: g}
			if known {
				for k := range d.telemetry[i] {
					if d.telemetry[i][k].Index == g {
						st := d.telemetry[i][k]
						sg.Stat = &st
					}
				}
			}
			ss.GPUs = append(ss.GPUs, sg)
		}
		for j, mk := range d.fs.hist[s.Name] {
			if j != js.rec.ID {
				ss.Others = append(ss.Others, mk)
			}
		}
		sort.Slice(ss.Others, func(a, b int) bool { return ss.Others[a].job < ss.Others[b].job })
		c.Servers = append(c.Servers, ss)
	}
	typ := modelTypeOf(js.spec)
	shape := placementShape(js)
	for id, o := range d.jobs {
		if id == js.rec.ID || o.rec.State != StateRunning || len(o.servers) == 0 || o.predSPS <= 0 || o.measSPS <= 0 || modelTypeOf(o.spec) != typ ||
			o.plan != js.plan || !slices.Equal(placementShape(o), shape) {
			continue // a peer runs what the model predicted for the same plan and placement
		}
		p := slowPeer{Job: id, Ratio: o.measSPS / o.predSPS}
		if ps := d.fs.jobs[id]; ps != nil && ps.attempt == o.rec.Attempt && len(ps.recent) > 0 {
			p.Ratio = medianOf(ps.recent)
		}
		for _, s := range o.servers {
			p.Servers = append(p.Servers, s.Name)
		}
		c.Peers = append(c.Peers, p)
	}
	sort.Slice(c.Peers, func(a, b int) bool { return c.Peers[a].Job < c.Peers[b].Job })
	return c
}

// placementShape is the GPUs js holds per server, most first.
func placementShape(js *jobState) []int {
	out := make([]int, 0, len(js.servers))
	for _, s := range js.servers {
		out = append(out, len(s.GPUs))
	}
	slices.SortFunc(out, func(a, b int) int { return b - a })
	return out
}

// slowFound is a job found slow, with the verdict on it.
type slowFound struct {
	js      *jobState
	attempt int
	v       slowVerdict
	ratio   float64 // the median of its slow streak
	held    []float64
}

// slowChecks judges the running jobs slow for their observation count and
// acts: blamed servers become suspect and the job moves (checkpoint,
// stop, requeue), or the model is refitted with the job's kept samples,
// or an unexplained slowdown is told once. It takes d.mu; the caller must
// not hold it.
func (d *Daemon) slowChecks(ctx context.Context) error {
	d.mu.Lock()
	var found []slowFound
	ids := make([]string, 0, len(d.fs.jobs))
	for id := range d.fs.jobs {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		st := d.fs.jobs[id]
		js := d.jobs[id]
		if js == nil || js.rec.State != StateRunning || js.rec.Attempt != st.attempt || len(js.servers) == 0 {
			delete(d.fs.jobs, id)
			continue
		}
		_, n := d.slowBounds(js)
		if js.stopping || d.unsettled(id) || st.streak < n || st.told || js.predSPS <= 0 {
			continue
		}
		c := d.slowCaseOf(js, st)
		found = append(found, slowFound{js: js, attempt: st.attempt, v: judgeSlow(c), ratio: c.Ratio, held: slices.Clone(st.held)})
	}
	var errs []error
	var moved []*jobState
	for _, f := range found {
		js, id := f.js, f.js.rec.ID
		st := d.fs.jobs[id]
		switch {
		case len(f.v.Blame) > 0:
			if err := d.blameSlow(ctx, js, f.v.Blame, f.ratio); err != nil {
				errs = append(errs, err)
				continue
			}
			moved = append(moved, js)
		case f.v.Refit:
			// The samples kept from the model go to it now, each as
			// Observe would have given it.
			ev := d.ev("slow", id, "", f.v.Why, slowData{Ratio: f.ratio, PredictedSPS: js.predSPS, MeasuredSPS: js.measSPS, Refit: true, Servers: []string{}})
			if err := d.write(ctx, nil, Batch{Events: []Event{ev}}, nil); err != nil {
				errs = append(errs, fmt.Errorf("slow %s: %w", id, err))
				continue
			}
			*st = slowState{attempt: st.attempt}
			for _, sps := range f.held {
				if err := d.refit(ctx, js, sps); err != nil {
					errs = append(errs, err)
				}
			}
		default:
			ev := d.ev("slow", id, "", f.v.Why, slowData{Ratio: f.ratio, PredictedSPS: js.predSPS, MeasuredSPS: js.measSPS, Servers: []string{}})
			if err := d.write(ctx, nil, Batch{Events: []Event{ev}}, func() { st.told = true }); err != nil {
				errs = append(errs, fmt.Errorf("slow %s: %w", id, err))
			}
		}
	}
	d.mu.Unlock()
	for _, js := range moved {
		id := js.rec.ID
		if err := d.later(id, "slow", func() error { return d.stopAndRelease(context.WithoutCancel(ctx), js, id, true) }); err != nil {
			errs = append(errs, err)
		}
	}
	if len(found) > 0 {
		d.publishNow()
	}
	return errors.Join(errs...)
}

// slowData is a slow event's data.
type slowData struct {
	Ratio        float64  `json:"ratio"` // measured / predicted
	PredictedSPS float64  `json:"predicted_sps"`
	MeasuredSPS  float64  `json:"measured_sps"`
	Refit        bool     `json:"refit"`   // the model was refitted, no server blamed
	Servers      []string `json:"servers"` // made suspect
}

// blameSlow makes the blamed servers suspect (stored in nodes and
// slow_servers) and requeues js from its checkpoint, not counted, in one
// transaction with a "suspect" event per server and a "slow" event; the
// caller holds d.mu and then stops js with a checkpoint.
func (d *Daemon) blameSlow(ctx context.Context, js *jobState, blame []slowBlame, ratio float64) error {
	id, now := js.rec.ID, d.now()
	var b Batch
	var names, whys []string
	var idx []int
	for _, bl := range blame {
		i, ok := d.srvIdx[bl.Server]
		if !ok {
			continue
		}
		n := d.nodes[i]
		names, whys, idx = append(names, bl.Server), append(whys, bl.Why), append(idx, i)
		b.Nodes = append(b.Nodes, NodeRecord{Name: bl.Server, Reachable: n.reachable, Drained: n.drained, Missed: n.missed, Suspect: true, SuspectWhy: bl.Why, UpdatedAt: now})
		b.SlowServers = append(b.SlowServers, SlowServerRecord{Server: bl.Server, Why: bl.Why, At: now})
		b.Events = append(b.Events, d.ev("suspect", "", bl.Server, bl.Server+" is suspect, no new starts there: "+bl.Why, slowData{Ratio: ratio, PredictedSPS: js.predSPS, MeasuredSPS: js.measSPS, Servers: []string{bl.Server}}))
	}
	msg := fmt.Sprintf("%s runs slow: %s; moving it from %s (checkpoint, stop, requeue)", js.spec.Name, strings.Join(whys, "; "), strings.Join(names, ", "))
	b.Events = append(b.Events, d.ev("slow", id, "", msg, slowData{Ratio: ratio, PredictedSPS: js.predSPS, MeasuredSPS: js.measSPS, Servers: names}))
	up, e, final := d.requeueChange(js, fmt.Sprintf("slow on %s; back to the queue from the checkpoint it writes at its stop", strings.Join(names, ", ")), false)
	b.Events = append(b.Events, e)
	err := d.write(ctx, []jobUpdate{up}, b, func() {
		for k, i := range idx {
			d.nodes[i].suspect, d.nodes[i].suspectWhy = true, b.Nodes[k].SuspectWhy
			if d.fs.servers == nil {
				d.fs.servers = map[string]SlowServerRecord{}
			}
			d.fs.servers[names[k]] = b.SlowServers[k]
		}
		d.forgetSpeed(id)
		d.afterRequeue(js, final, true)
	})
	if err != nil {
		return fmt.Errorf("move slow %s: %w", id, err)
	}
	return nil
}

// slowSuspect reports whether server name is suspect for slowness (a
// launch health check does not clear it); the caller holds d.mu.
func (d *Daemon) slowSuspect(name string) bool {
	_, ok := d.fs.servers[name]
	return ok
}

// clearSlow forgets that server name is suspect for slowness (undrain);
// the batch entry deletes its row. The caller holds d.mu.
func (d *Daemon) clearSlow(b *Batch, name string) {
	if d.slowSuspect(name) {
		b.SlowServers = append(b.SlowServers, SlowServerRecord{Server: name, Cleared: true})
	}
}

// recoverSlow loads the servers suspect for slowness; the caller is New.
func (d *Daemon) recoverSlow(ctx context.Context) error {
	recs, err := d.cfg.Store.SlowServers(ctx)
	if err != nil {
		return fmt.Errorf("recover slow servers: %w", err)
	}
	for _, r := range recs {
		if i, ok := d.srvIdx[r.Server]; ok && d.nodes[i].suspect {
			if d.fs.servers == nil {
				d.fs.servers = map[string]SlowServerRecord{}
			}
			d.fs.servers[r.Server] = r
		}
	}
	return nil
}

// putSlowServers stores (or deletes) servers suspect for slowness in a
// batch's transaction.
func putSlowServers(ctx context.Context, tx execer, recs []SlowServerRecord) error {
	for _, r := range recs {
		var err error
		if r.Cleared {
			_, err = tx.ExecContext(ctx, `DELETE FROM slow_servers WHERE server = ?`, r.Server)
		} else {
			_, err = tx.ExecContext(ctx, `INSERT INTO slow_servers(server, why, at) VALUES (?,?,?)
			ON CONFLICT(server) DO UPDATE SET why=excluded.why, at=excluded.at`, r.Server, r.Why, ns(r.At))
		}
		if err != nil {
			return fmt.Errorf("commit: slow server %s: %w", r.Server, err)
		}
	}
	return nil
}

// SlowServers implements Store.
func (s *SQLite) SlowServers(ctx context.Context) ([]SlowServerRecord, error) {
	rows, err := s.rd.QueryContext(ctx, `SELECT server, why, at FROM slow_servers ORDER BY server`)
	if err != nil {
		return nil, fmt.Errorf("slow servers: %w", err)
	}
	defer rows.Close()
	var out []SlowServerRecord
	for rows.Next() {
		var r SlowServerRecord
		var at sql.NullInt64
		if err := rows.Scan(&r.Server, &r.Why, &at); err != nil {
			return nil, fmt.Errorf("slow servers: %w", err)
		}
		r.At = fromNS(at.Int64)
		out = append(out, r)
	}
	return out, rows.Err()
}
