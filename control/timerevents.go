package control

// Timer events: a waiting job's delay timer never moves later without an
// event that says why. Dally's auto-tuner derives each timer from the
// recent starts of jobs of the same demand at that tier, so a timer can
// grow between rounds (a long wait joined the history, a short one left
// the window); the queue would then show more time left than a moment
// before. timerEvents compares each waiting job's expiries with the last
// ones it saw and emits one "timer" event per change that moves one
// later, naming the tier, the old and new timer and expiry, and where the
// new value came from.

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/replan/replan/perf"
	"github.com/replan/replan/sched"
)

// timerMark is what the daemon last told about a waiting job's timers:
// since when it has starved (the timers count from there) and each
// tier's timer in seconds.
type timerMark struct {
	since        float64 // Unix seconds
	gpus         int
	server, rack float64
}

// TimerChange is the data of a "timer" event.
type TimerChange struct {
	Tier      string    `json:"tier"` // "server" or "rack"
	GPUs      int       `json:"gpus"`
	OldS      float64   `json:"old_timer_s"`
	NewS      float64   `json:"new_timer_s"`
	OldExpiry time.Time `json:"old_expiry"`
	NewExpiry time.Time `json:"new_expiry"`
	// Starts is how many recent starts the new timer was derived from
	// (0: the configured value).
	Starts int `json:"starts"`
}

// noteTimers stores a "timer" event for each waiting job whose server or
// rack timer now expires later than the daemon last said, then remembers
// the round's timers (jobs no longer waiting are forgotten). When the
// store fails, the timers are not remembered, so the next round emits the
// events again. now is the round's clock (Unix seconds); the caller holds
// d.mu.
func (d *Daemon) noteTimers(ctx context.Context, now float64, timers []sched.JobTimers) error {
	evs, marks := d.timerEvents(now, timers)
	if len(evs) == 0 {
		d.timerMarks = marks
		return nil
	}
	return d.write(ctx, nil, Batch{Events: evs}, func() { d.timerMarks = marks })
}

// timerEvents returns the events for the waiting jobs whose server or
// rack timer expires later than in d.timerMarks, and the marks of this
// round's timers.
func (d *Daemon) timerEvents(now float64, timers []sched.JobTimers) ([]Event, map[string]timerMark) {
	var evs []Event
	marks := make(map[string]timerMark, len(timers))
	for _, t := range timers {
		m := timerMark{since: now - t.Starved, gpus: t.GPUs, server: t.ServerTimer, rack: t.RackTimer}
		old, ok := d.timerMarks[t.Job]
		marks[t.Job] = m
		// A job that ran in between starts starving afresh: its timers
		// restart with it, and its start and preemption say so.
		if !ok || abs(old.since-m.since) > 1 {
			continue
		}
		for _, c := range []struct {
			tier     perf.Tier
			old, new float64
			starts   int
		}{{perf.TierServer, old.server, m.server, t.ServerFrom}, {perf.TierRack, old.rack, m.rack, t.RackFrom}} {
			oldExp, newExp := m.since+c.old, m.since+c.new
			// Only a move later that shows: the new expiry is still ahead
			// and at least a second after the old one.
			if c.new <= 0 || newExp <= now || newExp < oldExp+1 {
				continue
			}
			ch := TimerChange{Tier: c.tier.String(), GPUs: m.gpus, OldS: c.old, NewS: c.new,
				OldExpiry: unixTime(oldExp), NewExpiry: unixTime(newExp), Starts: c.starts}
			evs = append(evs, d.ev("timer", t.Job, "", timerWhy(ch, old), ch))
		}
	}
	return evs, marks
}

// timerWhy is a timer event's message: "rack timer retuned 12m → 18m
// from 14 recent starts of 8-GPU jobs at that tier; expires 10:48:00
// instead of 10:42:00 (UTC)".
func timerWhy(c TimerChange, old timerMark) string {
	var b strings.Builder
	b.WriteString(c.Tier + " timer ")
	switch {
	case c.OldS <= 0:
		fmt.Fprintf(&b, "applies again (%s): a usable %s can now hold its %d GPUs", timerDur(c.NewS), c.Tier, c.GPUs)
	case c.Starts == 0:
		fmt.Fprintf(&b, "back to its configured %s from %s: no recent starts of %d-GPU jobs at that tier", timerDur(c.NewS), timerDur(c.OldS), c.GPUs)
	default:
		starts := "starts"
		if c.Starts == 1 {
			starts = "start"
		}
		fmt.Fprintf(&b, "retuned %s → %s from %d recent %s of %d-GPU jobs at that tier", timerDur(c.OldS), timerDur(c.NewS), c.Starts, starts, c.GPUs)
	}
	if old.gpus != c.GPUs && old.gpus > 0 {
		fmt.Fprintf(&b, " (its demand changed from %d to %d GPUs)", old.gpus, c.GPUs)
	}
	fmt.Fprintf(&b, "; expires %s instead of %s (UTC)", c.NewExpiry.Format("15:04:05"), c.OldExpiry.Format("15:04:05"))
	return b.String()
}

// timerDur is a timer in words: "18m", "1h30m", "45s", "2h".
func timerDur(s float64) string {
	v := (time.Duration(s * float64(time.Second))).Round(time.Second).String()
	if strings.HasSuffix(v, "m0s") {
		v = strings.TrimSuffix(v, "0s")
	}
	if strings.HasSuffix(v, "h0m") {
		v = strings.TrimSuffix(v, "0m")
	}
	return v
}

func unixTime(s float64) time.Time { return time.Unix(0, int64(s*1e9)).UTC() }

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}
