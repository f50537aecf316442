package control

// Checkpoint intervals: how often a job checkpoints, chosen at each launch
// from the measured checkpoint cost of its model type and the failure
// rate the daemon observes (perf.SaveInterval, Young/Daly), unless the
// job's args set their own.

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/replan/replan/launch"
	"github.com/replan/replan/perf"
)

// CheckpointInfo is how often a running job checkpoints and why
// (`replan job ID`).
type CheckpointInfo struct {
	// IntervalIters is the interval in iterations; IntervalS the same
	// in seconds at the predicted iteration time (0 when unknown).
	IntervalIters int     `json:"interval_iterations"`
	IntervalS     float64 `json:"interval_s,omitempty"`
	// Source is "args" (the job's own flag, which replan never
	// overrides) or "replan" (Young/Daly from CostS and MTBFS).
	Source string `json:"source"`
	// CostS is a checkpoint's cost in seconds: measured (CostMeasured,
	// the last checkpointing stops of the model type) or estimated from
	// the model's size (perf.CheckpointCostEstimate).
	CostS        float64 `json:"cost_s,omitempty"`
	CostMeasured bool    `json:"cost_measured"`
	// MTBFS is the job's mean time between failures in seconds, from the
	// failures observed (perf.MTBF).
	MTBFS float64 `json:"mtbf_s,omitempty"`
}

// failureStats is what the daemon has observed of failures since it
// started: server-down transitions and jobs that exited non-zero after
// running, over the server-seconds it watched reachable servers.
type failureStats struct {
	failures  int
	exposureS float64
	last      time.Time
}

// noteFailures counts the failures in an observation, before it is
// applied, and the server time since the last one. The caller holds d.mu.
func (d *Daemon) noteFailures(obs Observation) {
	now := d.now()
	if !d.fails.last.IsZero() && now.After(d.fails.last) {
		up := 0
		for _, n := range d.nodes {
			if n.reachable {
				up++
			}
		}
		d.fails.exposureS += now.Sub(d.fails.last).Seconds() * float64(up)
	}
	d.fails.last = now
	for _, n := range obs.Nodes {
		if i, ok := d.srvIdx[n.Name]; ok && !n.Reachable && d.nodes[i].missed+1 == d.cfg.HeartbeatMisses {
			d.fails.failures++
		}
	}
	for _, o := range obs.Jobs {
		if js := d.jobs[o.JobID]; js != nil && js.rec.State == StateRunning && !js.stopping && o.Exited && o.ExitCode != 0 && o.Iterations > 0 {
			d.fails.failures++
		}
	}
}

// checkpointCost is the cost of a checkpoint of the job's model type:
// measured, or estimated from its size. The caller holds d.mu.
func (d *Daemon) checkpointCost(js *jobState) (float64, bool) {
	if c := d.model(js.spec).CheckpointS; c > 0 {
		return c, true
	}
	return perf.CheckpointCostEstimate(js.spec.Arch.Params), false
}

// chooseCheckpoint is how often js checkpoints when launched on servers
// servers at sps samples per second (predicted): the job's own interval
// when its args give one, else Young/Daly's. The caller holds d.mu.
func (d *Daemon) chooseCheckpoint(js *jobState, servers int, sps float64) CheckpointInfo {
	iterS := 0.0
	if sps > 0 && js.spec.GlobalBatch > 0 {
		iterS = float64(js.spec.GlobalBatch) / sps
	}
	if n, own := launch.UserSaveInterval(js.spec.Args); own {
		return CheckpointInfo{IntervalIters: n, IntervalS: float64(n) * iterS, Source: "args"}
	}
	cost, measured := d.checkpointCost(js)
	mtbf := perf.MTBF(d.fails.failures, d.fails.exposureS, servers)
	n, s := perf.SaveInterval(cost, mtbf, iterS, js.spec.Iterations)
	return CheckpointInfo{IntervalIters: n, IntervalS: s, Source: "replan", CostS: cost, CostMeasured: measured, MTBFS: mtbf}
}

// noteCheckpointCost records how long a stop with a checkpoint of js took
// (its checkpoint's cost, and the processes' exit) in its model type,
// halfway towards the last measurement, and stores the model. The caller
// holds d.mu.
func (d *Daemon) noteCheckpointCost(ctx context.Context, js *jobState, took time.Duration) error {
	if took <= 0 {
		return nil
	}
	typ := modelTypeOf(js.spec)
	o := d.model(js.spec)
	c := *o
	if c.CheckpointS > 0 {
		c.CheckpointS = (c.CheckpointS + took.Seconds()) / 2
	} else {
		c.CheckpointS = took.Seconds()
	}
	raw, err := json.Marshal(&c)
	if err != nil {
		return fmt.Errorf("store model %s: %w", typ, err)
	}
	at := d.now()
	return d.write(ctx, nil, Batch{Models: []ModelWrite{{Type: typ.String(), Data: raw, At: at}}}, func() {
		o.CheckpointS = c.CheckpointS
		d.modelSaved[typ] = at
	})
}

// JobCheckpointing reports how often a running job checkpoints (false
// when it does not run).
func (d *Daemon) JobCheckpointing(id string) (CheckpointInfo, bool) {
	c, ok := d.view().checkpointing[id]
	return c, ok
}
