package sched

import "fmt"

// SetCircleMemo sets the rack-circle memo (circlememo.go) of a Morphling
// or FIFO policy: "on" (the default), "off" (every ask walks the rack, as
// before the memo) or "verify" (the memo's answers, each checked against
// the walk's: a difference panics). For the tests and benchmarks that
// compare the paths.
func SetCircleMemo(p Policy, mode string) error {
	var m circleMode
	switch mode {
	case "on":
		m = circleMemoOn
	case "off":
		m = circleMemoOff
	case "verify":
		m = circleMemoVerify
	default:
		return fmt.Errorf("circle memo mode %q: want on, off or verify", mode)
	}
	switch q := p.(type) {
	case *Morphling:
		q.circleMode = m
	case *FIFO:
		q.circleMode = m
	default:
		return fmt.Errorf("policy %s has no rack-circle memo", p.Name())
	}
	return nil
}

// CircleStats counts what a rack-circle memo did (circlememo.go).
type CircleStats = circleStats

// CircleStatsOf is what the rack-circle memo of a Morphling or FIFO
// policy did over its rounds so far.
func CircleStatsOf(p Policy) CircleStats {
	switch q := p.(type) {
	case *Morphling:
		return q.circles
	case *FIFO:
		return q.circles
	}
	return CircleStats{}
}

// SetTimerScanPerDemand makes the auto-tuned timers come from two history
// scans per waiting demand (the path before timersFrom) when on.
func SetTimerScanPerDemand(on bool) { timerScanPerDemand = on }

// SetRingReuse turns jointShift's reuse of the rings its search built
// (shiftjoint.go) on or off (off: the path before it).
func SetRingReuse(on bool) { ringReuseOff = !on }

// JointSlowdowns is how many slowdowns jointShift priced on the rings it
// searched so far (the uplink hold of a job on several shared uplinks).
func JointSlowdowns() int64 { return jointSlowdowns.Load() }
