package sched

import (
	"fmt"
	"math"
	"slices"
	"strconv"

	"github.com/replan/replan/perf"
)

// NetOptions turn a policy network-aware: Dally's delay scheduling over
// placement tiers (a server timer and a rack timer per waiting job, tuned
// from history), Dally's Nw_sens priority, replan's predicted-loss
// shortcut, and CASSINI's time-shifts for jobs that share links. The zero
// value of a field means its default (DefaultNetOptions).
type NetOptions struct {
	// ServerTimer and RackTimer are the delay timers in seconds: fixed
	// (Dally-manual) or used until the auto-tuner has history (default
	// 12 h each, Dally's values).
	ServerTimer float64
	RackTimer   float64
	// AutoTune derives each timer from TimerHistory: mean + 2 sample
	// standard deviations of the waits of jobs with the same GPU demand
	// that accepted an offer at that tier within Window.
	AutoTune bool
	// Window is the auto-tuner's history window in seconds (0: sized to
	// the cluster, HistoryWindow).
	Window float64
	// LossAccept is replan's own step: a job whose predicted throughput
	// loss at a wider tier is below this fraction accepts that tier at
	// once (default 0.05; negative: never, pure Dally).
	LossAccept float64
	// Shifts computes CASSINI time-shifts for jobs sharing inter-server
	// links (Decision.Shift).
	Shifts bool
	// UplinkHold is replan's uplink hold (Morphling-based policies only):
	// a waiting job whose offer spans racks is passed over for the round
	// when, at its best time-shift against the cross-rack jobs already on
	// one of its racks' spine uplinks, that link's overload would add more
	// than this share to its iteration time (uplinkInflation). The GPUs go
	// to the jobs after it; what nobody takes is then offered to the held
	// jobs without the test (free GPUs only), so a hold never leaves GPUs
	// idle. Default 0.25; negative: never hold.
	UplinkHold float64
	// UplinkHoldRuns bounds the hold: a job is held only while it has
	// waited (Job.Starved) less than k times its predicted run on the
	// offer (remaining iterations at the offer's throughput alone), k the
	// number of other jobs waiting at the round's start, at least 2 and
	// at most UplinkHoldRuns (a hold is a reorder among the waiting: with
	// few behind the held job it is mostly its delay). No job is held for
	// ever, and one whose length is unknown (ItersTotal 0) never is.
	// Default 16 (2026-11-26: 8-16 did best on the contended sweep,
	// unbounded was worse at 16:1; 2026-11-27: 16 with k on the CASSINI
	// sweep, docs/network.md).
	UplinkHoldRuns float64
	// UplinkHoldFit is the uplink hold's threshold on an uplink whose
	// load with the job (Σ CommLoad of the circles there) is at most its
	// capacity: there the overlap is the circles' incompatibility, not a
	// lack of bandwidth, and a job that interleaves with them may come
	// (CASSINI's premise), so a smaller slowdown already holds the job.
	// Default 0.05 (2026-11-27, the CASSINI sweep: 0.02-0.05 did best,
	// 0.1 half as well); negative: UplinkHold everywhere.
	UplinkHoldFit float64
	// UplinkHoldSwap prices the uplink hold against the shortest-first
	// order (ShortestFirst on), on an uplink whose load fits it
	// (UplinkHoldFit's): a hold hands the held job's turn to a job behind
	// it, which in that order is predicted to run longer; swapping two
	// jobs of runs p ≤ q adds q − p to the sum of their completion times,
	// while the sharing the hold avoids slows the held job and the job on
	// the uplink by about x·p each (x the held job's slowdown). So the job
	// is held only when a job waiting behind it runs at most
	// (1 + UplinkHoldSwap·x)·p. Default 2 (the two jobs the sharing
	// slows); negative: off, the hold as before (issue 29, 2026-11-27,
	// seventh session: docs/network.md "The hold priced against the
	// order").
	UplinkHoldSwap float64
	// UplinkPlace is replan's uplink-aware placement (uplinkplace.go): a
	// waiting job placed across racks on free GPUs goes, among the
	// placements the model prices as good as the fewest-racks one, to the
	// one whose spine uplinks its communication arcs interleave with best
	// (CASSINI's compatibility score against the cross-rack jobs already
	// there), then the one that leaves those uplinks least loaded. Off:
	// only the compatibility tie-break among exactly equivalent servers
	// (preferCompatible). On in DefaultNetOptions.
	UplinkPlace bool
	// ShortestFirst is replan's order among the jobs Morphling's slope
	// order ties (slopes equal to 1e-6, then Nw_sens): earliest
	// submission plus predicted remaining run time first (finishKey). Of
	// jobs submitted together the shortest starts first, which is what
	// lowers average JCT when a queue waits (issue 29: batch arrivals);
	// a job's key does not move while it waits, so once the clock passes
	// it nobody submitted later overtakes it. Off: Morphling's order
	// (Nw_sens, then submission). On in DefaultNetOptions.
	ShortestFirst bool
	// PreemptMinRun is Dally's network-sensitive preemption (dally,
	// dally-manual; replan preempts by Morphling's rule and ignores it): a
	// running job is preempted for a waiting one only after it ran this
	// many seconds since its last start (default 3600; negative: never
	// preempt). See FIFO.preemptNwSens.
	PreemptMinRun float64
	// PreemptGap is how much higher than the waiting job's the victim's
	// Nw_sens must be (default 0.1).
	PreemptGap float64
}

// DefaultNetOptions returns Dally's manual timers (12 h / 12 h), the
// auto-tuner on, a 5 % loss threshold, time-shifts on, a 25 % uplink
// hold of at most 16 runs (5 % where the uplink's load fits it, there
// priced against the order: UplinkHoldSwap 2), the uplink-aware placement
// and the shortest-first order among slope ties.
func DefaultNetOptions() NetOptions {
	return NetOptions{ServerTimer: 12 * 3600, RackTimer: 12 * 3600, AutoTune: true, LossAccept: 0.05, Shifts: true, UplinkHold: 0.25, UplinkHoldRuns: 16, UplinkHoldFit: 0.05, UplinkHoldSwap: 2, UplinkPlace: true, ShortestFirst: true}
}

func (o NetOptions) withDefaults() NetOptions {
	if o.ServerTimer <= 0 {
		o.ServerTimer = 12 * 3600
	}
	if o.RackTimer <= 0 {
		o.RackTimer = 12 * 3600
	}
	if o.LossAccept == 0 {
		o.LossAccept = 0.05
	}
	if o.UplinkHold == 0 {
		o.UplinkHold = 0.25
	}
	if o.UplinkHoldRuns <= 0 {
		o.UplinkHoldRuns = 16
	}
	if o.UplinkHoldFit == 0 {
		o.UplinkHoldFit = 0.05
	}
	if o.UplinkHoldSwap == 0 {
		o.UplinkHoldSwap = 2
	}
	if o.PreemptMinRun == 0 {
		o.PreemptMinRun = 3600
	}
	if o.PreemptGap <= 0 {
		o.PreemptGap = 0.1
	}
	return o
}

// HistoryWindow is the default auto-tuner window for a cluster of gpus
// GPUs: 24 h on 64 GPUs, shorter on larger clusters (more jobs are placed
// per hour, Dally §4.3.3), between 1 h and 7 days.
func HistoryWindow(gpus int) float64 {
	w := 24 * 3600 * 64 / float64(max(gpus, 1))
	return math.Min(math.Max(w, 3600), 7*24*3600)
}

// TimerObs is one observation of the auto-tuner: a job demanding GPUs
// accepted an offer at Tier at time At after starving Wait seconds.
type TimerObs struct {
	Tier perf.Tier `json:"tier"`
	GPUs int       `json:"gpus"`
	At   float64   `json:"at"`
	Wait float64   `json:"wait_s"`
}

// TimerHistory is the auto-tuner's memory. It lives outside the pure
// scheduler: the caller passes it in Snapshot.History and appends each
// round's Decisions.Observed (Add), pruning with Prune.
type TimerHistory struct {
	Obs []TimerObs `json:"obs"`
}

// Add appends observations.
func (h *TimerHistory) Add(obs ...TimerObs) { h.Obs = append(h.Obs, obs...) }

// Prune drops observations older than now-window.
func (h *TimerHistory) Prune(now, window float64) {
	// The simulator prunes every round. Nothing moves before the first
	// observation dropped, and when the dropped ones are a prefix
	// (observations arrive in time order) the rest stays where it is.
	dropped := func(o TimerObs) bool { return !(o.At >= now-window) }
	k := slices.IndexFunc(h.Obs, dropped)
	if k < 0 {
		return
	}
	if k == 0 {
		p := slices.IndexFunc(h.Obs, func(o TimerObs) bool { return !dropped(o) })
		if p < 0 {
			h.Obs = h.Obs[:0]
			return
		}
		if !slices.ContainsFunc(h.Obs[p:], dropped) {
			h.Obs = h.Obs[p:]
			return
		}
	}
	for _, o := range h.Obs[k:] {
		if o.At >= now-window {
			h.Obs[k] = o
			k++
		}
	}
	h.Obs = h.Obs[:k]
}

// Timer is Dally's Algorithm 2 for one tier and GPU demand: mean + 2
// sample standard deviations of the waits observed within [now-window,
// now]; def when there are none.
func (h TimerHistory) Timer(tier perf.Tier, gpus int, now, window, def float64) float64 {
	t, _ := h.TimerFrom(tier, gpus, now, window, def)
	return t
}

// TimerFrom is Timer and the number of observations it was derived from
// (0: def), so a change of timer can say why.
func (h TimerHistory) TimerFrom(tier perf.Tier, gpus int, now, window, def float64) (float64, int) {
	var w waitSums
	for _, o := range h.Obs {
		if o.Tier != tier || o.GPUs != gpus || o.At < now-window || o.At > now {
			continue
		}
		w.add(o.Wait)
	}
	return w.timer(def)
}

// waitSums accumulates the waits of one tier and GPU demand, in
// observation order.
type waitSums struct{ n, sum, sq float64 }

func (w *waitSums) add(wait float64) {
	w.n++
	w.sum += wait
	w.sq += wait * wait
}

// timer is TimerFrom's answer from the sums.
func (w waitSums) timer(def float64) (float64, int) {
	n, sum, sq := w.n, w.sum, w.sq
	if n == 0 {
		return def, 0
	}
	mean := sum / n
	sd := 0.0
	if n > 1 {
		sd = math.Sqrt(math.Max(sq-n*mean*mean, 0) / (n - 1))
	}
	return mean + 2*sd, int(n)
}

// timersFrom is TimerFrom of the server and rack tiers for every demand
// in gpus (ascending, distinct) from one scan of the history: the
// demand's sums accumulate in observation order, as TimerFrom's own
// scan does, so each answer is TimerFrom's to the bit
// (TestTimersFromMatchesTimerFrom). out[n] holds gpus[n]'s server and
// rack timers and their observation counts.
func (h TimerHistory) timersFrom(gpus []int, now, window, defServer, defRack float64) []tunedTimers {
	out := make([]tunedTimers, len(gpus))
	if len(gpus) == 0 {
		return out
	}
	slot := make([]int, gpus[len(gpus)-1]+1)
	for i := range slot {
		slot[i] = -1
	}
	for n, g := range gpus {
		if g >= 0 {
			slot[g] = n
		}
	}
	sums := make([][2]waitSums, len(gpus))
	for _, o := range h.Obs {
		if o.GPUs < 0 || o.GPUs >= len(slot) || slot[o.GPUs] < 0 || o.At < now-window || o.At > now {
			continue
		}
		switch o.Tier {
		case perf.TierServer:
			sums[slot[o.GPUs]][0].add(o.Wait)
		case perf.TierRack:
			sums[slot[o.GPUs]][1].add(o.Wait)
		}
	}
	for n := range gpus {
		out[n].server, out[n].serverN = sums[n][0].timer(defServer)
		out[n].rack, out[n].rackN = sums[n][1].timer(defRack)
	}
	return out
}

// timerScanPerDemand makes newNetRound scan the history twice per
// waiting demand (TimerFrom), as before timersFrom: for the tests that
// compare the two.
var timerScanPerDemand bool

// tunedTimers are one demand's auto-tuned timers and the observations
// each was derived from.
type tunedTimers struct {
	server, rack   float64
	serverN, rackN int
}

// JobTimers is a waiting job's delay-timer state, for the queue view: the
// timers, how long it has starved, the widest tier it accepts now and why,
// and its network sensitivity.
type JobTimers struct {
	Job   string `json:"job"`
	Index int    `json:"index"`
	// GPUs is the demand the timers are kept for.
	GPUs        int     `json:"gpus"`
	ServerTimer float64 `json:"server_timer_s"`
	RackTimer   float64 `json:"rack_timer_s"`
	// Starved is the seconds since the job last held resources (since
	// submission if it never did).
	Starved    float64   `json:"starved_s"`
	AcceptTier perf.Tier `json:"accept_tier"`
	Why        string    `json:"why"`
	// NwSens is Dally's (iterations done / iterations expected) / (time
	// running / ideal running time): 1 for a job that never lost anything
	// to the network (or never ran); offers go to the lowest first.
	NwSens float64 `json:"nw_sens"`
	// Loss is the predicted throughput lost at the rack and cross-rack
	// tiers against the best tier (fractions).
	LossRack  float64 `json:"loss_rack"`
	LossCross float64 `json:"loss_cross"`
	// ServerFrom and RackFrom are how many recent starts of jobs of this
	// demand at that tier the auto-tuner derived each timer from (0: the
	// configured value); the daemon names them when a timer moves later.
	ServerFrom int `json:"-"`
	RackFrom   int `json:"-"`
}

// Starved is the seconds job j has gone without resources at now.
func (j *Job) Starved(now float64) float64 {
	since := math.Max(j.Submit, j.LastRun)
	return math.Max(now-since, 0)
}

// NwSens is Dally's network sensitivity of j: the share of the ideal
// speed it achieved while running, in [0, 1]. With IdealSeconds (the
// caller's record of how long its iterations would have taken at the best
// tier on the GPUs it actually held) it is IdealSeconds / RunSeconds;
// otherwise ItersDone × idealIter / RunSeconds, idealIter the seconds per
// iteration at the best tier of its demand (an estimate: a job that ran
// on more GPUs than its demand would exceed 1, so it is capped). 1 when
// unknown (never ran).
func (j *Job) NwSens(idealIter float64) float64 {
	if j.RunSeconds <= 0 {
		return 1
	}
	v := 1.0
	switch {
	case j.IdealSeconds > 0:
		v = j.IdealSeconds / j.RunSeconds
	case j.ItersDone > 0 && idealIter > 0:
		v = j.ItersDone * idealIter / j.RunSeconds
	}
	return math.Min(math.Max(v, 0), 1)
}

// tierOf is the widest tier an allocation spans.
func tierOf(servers []Server, a []Alloc) perf.Tier {
	n := 0
	for _, x := range a {
		if x.GPUs > 0 {
			n++
		}
	}
	switch {
	case n <= 1:
		return perf.TierServer
	case crossRack(servers, a):
		return perf.TierCrossRack
	}
	return perf.TierRack
}

// netJob is what a round knows of one waiting job's network preferences.
type netJob struct {
	gpus           int
	server, rack   float64 // timers
	serverN, rackN int     // observations behind them (TimerFrom)
	starved        float64
	accept         perf.Tier
	why            string
	nw             float64
	lossR, lossX   float64
	idealIter      float64
	expires        float64 // when accept widens next (0: never)
	fitsS, fitsR   bool
}

// netRound evaluates every waiting job's timers.
type netRound struct {
	o      NetOptions
	window float64
	jobs   []netJob
	rackGP int // GPUs of the largest rack
	// lossOf, when set, is the predicted throughput loss of job i on an
	// offer against its best tier (replan's LossAccept step).
	lossOf func(i int, a []Alloc) float64
}

// newNetRound computes timers, starvation, loss and accept tier of the
// waiting jobs of s. demand gives each job's GPU demand (the count the
// policy would start it with); loss its predicted losses at the rack and
// cross-rack tiers; ideal its seconds per iteration at the best tier.
func newNetRound(o NetOptions, s *Snapshot, demand func(i int) int, loss func(i, g int) (float64, float64, float64)) *netRound {
	nr := &netRound{o: o, jobs: make([]netJob, len(s.Jobs))}
	perRack := map[string]int{}
	maxPer, total := 0, 0
	for _, sv := range s.Servers {
		perRack[sv.Rack] += sv.GPUs
		maxPer = max(maxPer, sv.GPUs)
		total += sv.GPUs
	}
	for _, g := range perRack {
		nr.rackGP = max(nr.rackGP, g)
	}
	nr.window = o.Window
	if nr.window <= 0 {
		nr.window = HistoryWindow(total)
	}
	// The timers depend only on the demand: one scan of the history
	// gives every waiting demand's (timersFrom), not two per demand or
	// per waiting job.
	var waiting []int
	for i := range s.Jobs {
		j := &s.Jobs[i]
		nj := &nr.jobs[i]
		g := demand(i)
		nj.gpus = g
		nj.lossR, nj.lossX, nj.idealIter = loss(i, g)
		nj.nw = j.NwSens(nj.idealIter)
		if j.Running() {
			continue
		}
		waiting = append(waiting, i)
	}
	var timers []tunedTimers
	var gs []int
	if o.AutoTune && len(waiting) > 0 && !timerScanPerDemand {
		for _, i := range waiting {
			gs = append(gs, nr.jobs[i].gpus)
		}
		slices.Sort(gs)
		gs = slices.Compact(gs)
		if gs[0] < 0 {
			// a negative demand has no slot: its own scans
			timers = nil
		} else {
			timers = s.History.timersFrom(gs, s.Now, nr.window, o.ServerTimer, o.RackTimer)
		}
	}
	for _, i := range waiting {
		j := &s.Jobs[i]
		nj := &nr.jobs[i]
		g := nj.gpus
		nj.starved = j.Starved(s.Now)
		nj.fitsS, nj.fitsR = g <= maxPer, g <= nr.rackGP
		nj.server, nj.rack = o.ServerTimer, o.RackTimer
		if o.AutoTune {
			var t tunedTimers
			if timers != nil {
				n, _ := slices.BinarySearch(gs, g)
				t = timers[n]
			} else {
				t.server, t.serverN = s.History.TimerFrom(perf.TierServer, g, s.Now, nr.window, o.ServerTimer)
				t.rack, t.rackN = s.History.TimerFrom(perf.TierRack, g, s.Now, nr.window, o.RackTimer)
			}
			nj.server, nj.serverN, nj.rack, nj.rackN = t.server, t.serverN, t.rack, t.rackN
		}
		if !nj.fitsS {
			nj.server, nj.serverN = 0, 0
		}
		if !nj.fitsR {
			nj.server, nj.rack, nj.serverN, nj.rackN = 0, 0, 0, 0
		}
		nj.accept, nj.why, nj.expires = nr.decide(nj, s.Now)
	}
	return nr
}

// decide is Dally's Algorithm 1 as a tier limit, with replan's loss step.
func (nr *netRound) decide(nj *netJob, now float64) (perf.Tier, string, float64) {
	// strconv, not fmt: this runs for every waiting job every round (the
	// same text as "%.1f h", "%d" and "%.0f%%").
	h := func(s float64) string { return strconv.FormatFloat(s/3600, 'f', 1, 64) + " h" }
	pct := func(x float64) string { return strconv.FormatFloat(100*x, 'f', 0, 64) + "%" }
	lim := nr.o.LossAccept
	switch {
	case !nj.fitsR:
		return perf.TierCrossRack, "needs " + strconv.Itoa(nj.gpus) + " GPUs, more than a rack: any offer", 0
	case nj.starved >= nj.rack && (nj.starved >= nj.server || !nj.fitsS):
		return perf.TierCrossRack, "starved " + h(nj.starved) + ": timers expired, any offer", 0
	}
	if nj.starved >= nj.server || !nj.fitsS {
		if nj.starved >= nj.rack {
			return perf.TierCrossRack, "starved " + h(nj.starved) + ": rack timer expired, any offer", 0
		}
		why := "server timer expired (" + h(nj.starved) + " of " + h(nj.server) + "); waits for one rack until " + h(nj.rack)
		if !nj.fitsS {
			why = "needs " + strconv.Itoa(nj.gpus) + " GPUs, more than a server; waits for one rack until " + h(nj.rack)
		}
		if lim > 0 {
			why += ", or any offer losing < " + pct(lim) + " (across racks: " + pct(nj.lossX) + ")"
		}
		return perf.TierRack, why, now + nj.rack - nj.starved
	}
	why := "waits for one server until " + h(nj.server) + " (starved " + h(nj.starved) + ")"
	if lim > 0 {
		why += ", or any offer losing < " + pct(lim) + " (in one rack: " + pct(nj.lossR) + ", across racks: " + pct(nj.lossX) + ")"
	}
	return perf.TierServer, why, now + nj.server - nj.starved
}

// allows reports whether waiting job i accepts allocation a; when not, the
// reason in words. Within its timers' tier it accepts; beyond, replan's
// step accepts an offer whose predicted throughput (lossOf) is within
// LossAccept of the job's best tier.
func (nr *netRound) allows(servers []Server, i int, a []Alloc) (bool, perf.Tier, string) {
	t := tierOf(servers, a)
	nj := &nr.jobs[i]
	if t <= nj.accept {
		return true, t, ""
	}
	if lim := nr.o.LossAccept; lim > 0 && nr.lossOf != nil {
		if l := nr.lossOf(i, a); l < lim {
			return true, t, ""
		}
	}
	return false, t, fmt.Sprintf("delay scheduling: refuses a %s offer (%s)", t, nj.why)
}

// finish fills Decisions.Timers, Observed and WakeAt for the jobs that
// waited at the start of the round.
func (nr *netRound) finish(s *Snapshot, d *Decisions) {
	started := map[int][]Alloc{}
	for _, a := range d.Actions {
		if a.Kind == Start {
			started[a.Index] = a.Alloc
		}
	}
	if d.Timers == nil {
		d.Timers = make([]JobTimers, 0, len(d.Waiting))
	}
	for i := range s.Jobs {
		j := &s.Jobs[i]
		if j.Running() {
			continue
		}
		nj := &nr.jobs[i]
		if a, ok := started[i]; ok {
			d.Observed = append(d.Observed, TimerObs{Tier: tierOf(s.Servers, a), GPUs: nj.gpus, At: s.Now, Wait: nj.starved})
			continue
		}
		d.Timers = append(d.Timers, JobTimers{Job: j.ID, Index: i, GPUs: nj.gpus, ServerTimer: nj.server, RackTimer: nj.rack,
			Starved: nj.starved, AcceptTier: nj.accept, Why: nj.why, NwSens: nj.nw, LossRack: nj.lossR, LossCross: nj.lossX,
			ServerFrom: nj.serverN, RackFrom: nj.rackN})
		if nj.expires > s.Now && (d.WakeAt == 0 || nj.expires < d.WakeAt) {
			d.WakeAt = nj.expires
		}
	}
}

// tierLoss prices a job of model m at g GPUs on the three tiers with the
// best plan of the cache: the losses at the rack and cross-rack tiers
// against the best tier, and the best seconds per iteration.
func tierLoss(c *cache, m *perf.Model, fam family, g, perServer, cpg int) (float64, float64, float64) {
	if m == nil || g <= 0 {
		return 0, 0, 0
	}
	k := tierKey{m, fam, g, perServer, cpg}
	c.mu.Lock()
	v, ok := c.tiers[k]
	c.mu.Unlock()
	if !ok {
		a, b, d := tierLossOf(c, m, fam, g, perServer, cpg)
		v = [3]float64{a, b, d}
		c.mu.Lock()
		c.tiers[k] = v
		c.mu.Unlock()
	}
	return v[0], v[1], v[2]
}

// tierKey memoises tierLoss: it depends only on these.
type tierKey struct {
	m                 *perf.Model
	fam               family
	g, perServer, cpg int
}

func tierLossOf(c *cache, m *perf.Model, fam family, g, perServer, cpg int) (float64, float64, float64) {
	packed := perf.PackedPlacement(g, perServer)
	best := c.best(m, fam, packed, false, cpg)
	if !best.ok || best.thr <= 0 {
		return 0, 0, 0
	}
	spread := packed
	if len(packed) == 1 && g > 1 {
		spread = perf.Placement{g - g/2, g / 2}
	}
	r := c.best(m, fam, spread, false, cpg)
	x := c.best(m, fam, spread, true, cpg)
	loss := func(v planVal) float64 {
		if !v.ok {
			return 1
		}
		return math.Max(0, 1-v.thr/best.thr)
	}
	lr := loss(r)
	if len(packed) > 1 {
		lr = 0
	}
	return lr, loss(x), float64(m.Arch.GlobalBatch) / best.thr
}
