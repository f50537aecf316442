package control

import (
	"github.com/prometheus/client_golang/prometheus"
)

// collector exposes the daemon's state to Prometheus at scrape time.
type collector struct{ d *Daemon }

var (
	descJobs       = prometheus.NewDesc("replan_jobs", "Jobs known to the daemon by state (final states are not counted).", []string{"state"}, nil)
	descGPUs       = prometheus.NewDesc("replan_gpus", "GPUs of the cluster by use.", []string{"use"}, nil)
	descUtil       = prometheus.NewDesc("replan_gpu_allocation_ratio", "Share of the cluster's GPUs allocated to jobs.", nil, nil)
	descQueueWait  = prometheus.NewDesc("replan_queue_wait_seconds_max", "Longest time a waiting job has waited.", nil, nil)
	descRound      = prometheus.NewDesc("replan_schedule_round_seconds", "Duration of the last scheduling round (policy only).", nil, nil)
	descNodes      = prometheus.NewDesc("replan_nodes", "Servers by condition.", []string{"condition"}, nil)
	descDropped    = prometheus.NewDesc("replan_round_decisions_dropped_total", "Scheduling decisions dropped at apply because the job, its devices or the servers changed since the round's snapshot.", nil, nil)
	descStoreErrs  = prometheus.NewDesc("replan_store_write_errors_total", "Store writes that failed (nothing changed; the operation was refused or is retried).", nil, nil)
	descThroughput = prometheus.NewDesc("replan_job_throughput_ratio", "Measured over predicted throughput of a running job's model type, last refit sample.", []string{"model"}, nil)
)

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descJobs, descGPUs, descUtil, descQueueWait, descRound, descNodes, descDropped, descStoreErrs, descThroughput} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	d := c.d
	v := d.view()
	states := map[JobState]int{StateQueued: 0, StateHeld: 0, StateRunning: len(v.throughput), StatePreempted: 0, StateUnschedulable: 0}
	for _, q := range v.queue {
		states[q.Job.State]++
	}
	round := v.round
	for s, n := range states {
		ch <- prometheus.MustNewConstMetric(descJobs, prometheus.GaugeValue, float64(n), string(s))
	}
	used, total, cordoned := 0, 0, 0
	up, down, drained, suspect := 0, 0, 0, 0
	for _, n := range d.Nodes() {
		total += n.GPUs
		idle := 0 // cordoned GPUs no job holds (health.go): not free, not allocated
		for _, c := range n.CordonedGPUs {
			if c.GPU >= 0 && c.GPU < len(n.GPUOwners) && n.GPUOwners[c.GPU] == "" {
				idle++
			}
		}
		cordoned += idle
		used += n.GPUs - n.FreeGPUs - idle
		switch {
		case n.Drained:
			drained++
		case n.Reachable && n.Suspect:
			suspect++
		case n.Reachable:
			up++
		default:
			down++
		}
	}
	ch <- prometheus.MustNewConstMetric(descGPUs, prometheus.GaugeValue, float64(used), "allocated")
	ch <- prometheus.MustNewConstMetric(descGPUs, prometheus.GaugeValue, float64(total-used-cordoned), "free")
	ch <- prometheus.MustNewConstMetric(descGPUs, prometheus.GaugeValue, float64(cordoned), "cordoned")
	if total > 0 {
		ch <- prometheus.MustNewConstMetric(descUtil, prometheus.GaugeValue, float64(used)/float64(total))
	}
	maxWait := 0.0
	for _, q := range d.Queue() {
		maxWait = max(maxWait, q.WaitingS)
	}
	ch <- prometheus.MustNewConstMetric(descQueueWait, prometheus.GaugeValue, maxWait)
	ch <- prometheus.MustNewConstMetric(descRound, prometheus.GaugeValue, round.Duration.Seconds())
	ch <- prometheus.MustNewConstMetric(descNodes, prometheus.GaugeValue, float64(up), "up")
	ch <- prometheus.MustNewConstMetric(descNodes, prometheus.GaugeValue, float64(down), "unreachable")
	ch <- prometheus.MustNewConstMetric(descNodes, prometheus.GaugeValue, float64(drained), "drained")
	ch <- prometheus.MustNewConstMetric(descNodes, prometheus.GaugeValue, float64(suspect), "suspect")
	ch <- prometheus.MustNewConstMetric(descDropped, prometheus.CounterValue, float64(d.dropped.Load()))
	ch <- prometheus.MustNewConstMetric(descStoreErrs, prometheus.CounterValue, float64(d.storeErrors.Load()))
	if !d.mu.TryLock() {
		return // a round or an executor call holds the models; skip this scrape's model gauges
	}
	for key, o := range d.models {
		if n := len(o.Samples); n > 0 {
			s := o.Samples[n-1]
			if b, err := o.Model.Predict(s.Plan, s.Resources); err == nil && s.IterS > 0 {
				ch <- prometheus.MustNewConstMetric(descThroughput, prometheus.GaugeValue, b.Iter/s.IterS, key.String())
			}
		}
	}
	d.mu.Unlock()
}
