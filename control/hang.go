package control

// Hung jobs: a running job that logged no new iteration for max(k × its
// predicted iteration time, a floor) is restarted from its last
// checkpoint (an NCCL hang, a deadlock, a stuck filesystem would hold its
// GPUs until someone noticed). k and the floor are the daemon's
// (Config.HangFactor, HangFloor) unless the job's spec says (hang:). The
// restart counts against the job's restart budget unless one of its
// servers is at fault (suspect, missing heartbeats, or holding a cordoned
// GPU of the job). Only a job replan has seen log an iteration (in any
// launch) can be found hung: a log replan cannot read shows no
// iterations, and silence there says nothing.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
)

// Defaults of Config.HangFactor and HangFloor.
const (
	DefaultHangFactor = 20
	DefaultHangFloor  = 10 * time.Minute
)

// hangTailLines is how many of a hung job's last log lines its event shows.
const hangTailLines = 10

// hangBound is how long js may log no new iteration; the caller holds d.mu.
func (d *Daemon) hangBound(js *jobState) (bound time.Duration, factor float64, floor, iter time.Duration) {
	factor, floor = d.cfg.HangFactor, d.cfg.HangFloor
	if h := js.spec.Hang; h != nil {
		if h.Factor > 0 {
			factor = h.Factor
		}
		if h.FloorS > 0 {
			floor = time.Duration(h.FloorS * float64(time.Second))
		}
	}
	if js.predSPS > 0 && js.spec.GlobalBatch > 0 {
		iter = time.Duration(float64(js.spec.GlobalBatch) / js.predSPS * float64(time.Second))
	}
	return max(time.Duration(factor*float64(iter)), floor), factor, floor, iter
}

// silentSince is when js last showed life: its last new iteration or its
// launch, whichever is later (zero while its launch is not taken yet).
func (js *jobState) silentSince() time.Time {
	if js.launching {
		return time.Time{}
	}
	t := js.progressAt
	if js.launched.After(t) {
		t = js.launched
	}
	return t
}

// readsIterations reports whether replan has seen js log an iteration,
// in this launch or an earlier one (its progress, stored or not).
func (js *jobState) readsIterations() bool {
	return js.loggedIters || js.iters > 0 || js.rec.Iterations > 0 || js.rec.Checkpoint > 0
}

// hung is a job found silent past its bound.
type hung struct {
	js      *jobState
	id      string
	attempt int
	since   time.Time
	silent  time.Duration
	why     string // the bound, in words
}

// hangChecks restarts the running jobs silent past their bound, each from
// its last checkpoint, with an event that says how long it was silent and
// shows its last log lines. It takes d.mu; the caller must not hold it.
func (d *Daemon) hangChecks(ctx context.Context) error {
	d.mu.Lock()
	now := d.now()
	var found []hung
	for id, js := range d.jobs {
		if js.rec.State != StateRunning || js.stopping || d.unsettled(id) || !js.readsIterations() {
			continue
		}
		since := js.silentSince()
		if since.IsZero() {
			if !js.launching {
				js.progressAt = now // adopted after a restart: silent from now
			}
			continue
		}
		bound, factor, floor, iter := d.hangBound(js)
		if silent := now.Sub(since); silent >= bound {
			found = append(found, hung{js: js, id: id, attempt: js.rec.Attempt, since: since, silent: silent,
				why: fmt.Sprintf("bound %s = max(%g × predicted iteration %s, floor %s)", bound.Round(time.Second), factor, iter.Round(time.Millisecond), floor)})
		}
	}
	d.mu.Unlock()
	var errs []error
	for _, h := range found {
		tail := d.logTail(ctx, h.id, hangTailLines)
		if err := d.restartHung(ctx, h, tail); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// restartHung stores a hung job's requeue with a hang event, then stops
// it (no checkpoint: a hung job writes none) and frees its devices.
func (d *Daemon) restartHung(ctx context.Context, h hung, tail []string) error {
	d.mu.Lock()
	js := h.js
	if d.jobs[h.id] != js || js.rec.State != StateRunning || js.stopping || js.rec.Attempt != h.attempt || !js.silentSince().Equal(h.since) {
		d.mu.Unlock()
		return nil // it moved, stopped or logged meanwhile
	}
	fault := d.serverAtFault(js)
	ck := max(js.rec.Checkpoint, js.ckpt)
	silent := h.silent.Round(time.Second)
	why := fmt.Sprintf("hung: no new iteration for %s (%s); restarting from checkpoint %d", silent, h.why, ck)
	if fault != "" {
		why = fmt.Sprintf("hung: no new iteration for %s (%s), %s; restarting from checkpoint %d", silent, h.why, fault, ck)
	}
	up, e, final := d.requeueChange(js, why, fault == "")
	msg := fmt.Sprintf("%s logged no new iteration for %s (%s); restarting from checkpoint %d", js.spec.Name, silent, h.why, ck)
	if fault != "" {
		msg += " (not counted: " + fault + ")"
	}
	if len(tail) > 0 {
		msg += "; last log lines: " + strings.Join(tail, " ⏎ ") // one line in `replan events`; data.last_lines has them apart
	}
	if tail == nil {
		tail = []string{}
	}
	hev := d.ev("hang", h.id, "", msg, hangData{SilentS: h.silent.Seconds(), Checkpoint: ck, Counted: fault == "", LastLines: tail})
	err := d.write(ctx, []jobUpdate{up}, Batch{Events: []Event{hev, e}}, func() { d.afterRequeue(js, final, true) })
	d.mu.Unlock()
	if err != nil {
		return fmt.Errorf("restart hung %s: %w", h.id, err)
	}
	err = d.later(h.id, "hang", func() error {
		defer d.publishNow()
		return d.stopAndRelease(context.WithoutCancel(ctx), js, h.id, false)
	})
	return err
}

// hangData is a hang event's data.
type hangData struct {
	SilentS    float64  `json:"silent_s"`
	Checkpoint int      `json:"checkpoint"`
	Counted    bool     `json:"counted"` // against the job's restart budget
	LastLines  []string `json:"last_lines"`
}

// serverAtFault says which server of js is to blame for its silence ("" when
// none): a suspect one, one missing heartbeats, or a cordoned GPU the job
// holds. The caller holds d.mu.
func (d *Daemon) serverAtFault(js *jobState) string {
	for _, s := range js.servers {
		i, ok := d.srvIdx[s.Name]
		if !ok {
			continue
		}
		n := d.nodes[i]
		switch {
		case n.suspect:
			return s.Name + " is suspect"
		case n.missed > 0:
			return fmt.Sprintf("%s missed %d heartbeats", s.Name, n.missed)
		}
		for _, g := range s.GPUs {
			if d.cordoned(i, g) {
				return fmt.Sprintf("%s GPU %d is cordoned", s.Name, g)
			}
		}
	}
	return ""
}

// logTail is the last n lines of a job's log through the executor, nil
// when it keeps none or they cannot be read within 10 s. It takes no lock.
func (d *Daemon) logTail(ctx context.Context, id string, n int) []string {
	lr, ok := d.cfg.Exec.(LogReader)
	if !ok {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	rc, err := lr.Logs(ctx, id, n, false)
	if err != nil {
		d.log.Info("log tail of a hung job", "job", id, "err", err)
		return nil
	}
	defer rc.Close()
	var lines []string
	sc := bufio.NewScanner(io.LimitReader(rc, 1<<20))
	sc.Buffer(make([]byte, 64<<10), 64<<10)
	for sc.Scan() {
		line := sc.Text()
		if len(line) > 500 {
			line = line[:500] + "…"
		}
		lines = append(lines, line)
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return lines
}
