package sim

import (
	"math"
	"sort"

	"github.com/replan/replan/sched"
)

func (s *simulator) result() *Result {
	r := &Result{Policy: s.p.Name(), Rounds: s.rounds, Classes: map[string]ClassMetrics{}}
	var meas, run float64
	byClass := map[string][]*job{}
	for _, j := range s.jobs {
		c := j.class.String()
		byClass[c] = append(byClass[c], j)
		r.GPUSeconds += j.gpuSec
		meas += j.measSec
		run += j.runSec
		r.Jobs = append(r.Jobs, JobResult{Name: j.w.Name, Class: c, Submit: j.w.Submit, FirstStart: j.first, Finish: j.finish,
			Restarts: j.restarts, Preemptions: j.preempts, SLAViolation: j.sla, GPUSeconds: j.gpuSec, Finished: j.st == finished})
	}
	r.ClassMetrics = classMetrics(s.jobs)
	for _, c := range []sched.Class{sched.Guaranteed, sched.BestEffort} {
		r.Classes[c.String()] = classMetrics(byClass[c.String()])
	}
	if run > 0 {
		r.MeasuredShare = meas / run
	}
	for _, j := range s.jobs {
		r.CommExposed += j.commExp
		r.CommShared += j.commShared
		r.CommSharedUnshifted += j.commShared0
		r.ShiftDelay += j.shiftSec
		if j.shareSec > 0 {
			r.LinkSharing++
			r.LinkInflation += j.inflSum / j.shareSec
		}
	}
	if r.LinkSharing > 0 {
		r.LinkInflation /= float64(r.LinkSharing)
	}
	if r.Makespan > 0 {
		r.GPUUtil = r.GPUSeconds / (float64(s.cfg.Servers*s.cfg.GPUsPerServer) * r.Makespan)
	}
	return r
}

func classMetrics(jobs []*job) ClassMetrics {
	var m ClassMetrics
	var jcts []float64
	for _, j := range jobs {
		m.Jobs++
		m.Restarts += j.restarts
		m.SLAViolation += j.sla
		if j.st != finished {
			continue
		}
		m.Finished++
		jct := j.finish - j.w.Submit
		jcts = append(jcts, jct)
		m.AvgJCT += jct
		m.Queue += j.first - j.w.Submit
		m.Makespan = math.Max(m.Makespan, j.finish)
	}
	if m.Finished > 0 {
		m.AvgJCT /= float64(m.Finished)
		m.Queue /= float64(m.Finished)
		sort.Float64s(jcts)
		m.P50JCT = percentile(jcts, 0.50)
		m.P99JCT = percentile(jcts, 0.99)
	}
	return m
}

// percentile is the nearest-rank percentile of sorted values.
func percentile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	k := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(k, 0), len(sorted)-1)]
}
