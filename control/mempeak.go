package control

// Measured GPU memory calibrates a model type's memory estimate: each job
// launch and each profile run keeps the most memory its GPUs used (the
// telemetry the daemon keeps per server, refreshed at every observation),
// the samples they give carry it (perf.Sample.PeakGPUGB), and the type's
// activation factor (perf.Arch.ActScale, perf.FitActScale) is refitted
// from them when a profiling phase ends and when the type's model is
// stored or refitted online. The factor is stored with the model, so the
// scheduler, admission and `replan plan` of the type price memory with it
// after a restart too.

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/replan/replan/jobspec"
	"github.com/replan/replan/launch"
	"github.com/replan/replan/perf"
)

// memPeak is the peak GPU memory of a job's current launch.
type memPeak struct {
	since time.Time // the launch it was measured on (jobState.changed)
	gb    float64   // GiB on its busiest GPU
}

// ActScaleEventStep is how far a refitted activation factor must move to
// be told in an event (smaller moves are stored quietly).
const ActScaleEventStep = 0.05

// gpuPeakGB is the most memory any GPU of servers uses now, as last
// observed (GiB; 0 when none was reported). The caller holds d.mu.
func (d *Daemon) gpuPeakGB(servers []launch.Server) float64 {
	peak := 0.0
	for _, s := range servers {
		i, ok := d.srvIdx[s.Name]
		if !ok {
			continue
		}
		for _, g := range d.telemetry[i] {
			if g.ReadError == "" && slices.Contains(s.GPUs, g.Index) {
				peak = max(peak, g.MemUsedGB)
			}
		}
	}
	return peak
}

// notePeaks raises the peaks of the jobs and profile runs whose
// observation measured iterations (before the first one a run has not
// reached its peak: its activations are allocated by the first forward and
// backward, and the allocator keeps them), from the telemetry just kept.
// The caller holds d.mu.
func (d *Daemon) notePeaks(obs []JobObservation) {
	runs := map[string]*profileRun{}
	for _, p := range d.profiles {
		if p.run != nil {
			runs[p.run.id] = p.run
		}
	}
	for _, o := range obs {
		if o.SamplesPerSec <= 0 || o.Exited {
			continue
		}
		if r := runs[o.JobID]; r != nil {
			r.peakGB = max(r.peakGB, d.gpuPeakGB(r.servers))
			continue
		}
		js := d.jobs[o.JobID]
		if js == nil || js.stopping || js.rec.State != StateRunning || len(js.servers) == 0 {
			continue
		}
		if js.peak.since != js.changed {
			js.peak = memPeak{since: js.changed}
		}
		js.peak.gb = max(js.peak.gb, d.gpuPeakGB(js.servers))
	}
}

// jobPeakGB is the measured peak of js's current launch (0: not yet).
// The caller holds d.mu.
func (js *jobState) jobPeakGB() float64 {
	if js.peak.since != js.changed {
		return 0
	}
	return js.peak.gb
}

// refitActScale refits o's activation factor from its samples' peaks and
// reports the factor, how many samples gave it, and an event text when it
// moved by ActScaleEventStep or more ("" otherwise). A type with no usable
// peak keeps its factor. o is the copy about to be stored.
func refitActScale(t ModelType, o *perf.Online) (scale float64, used int, moved string) {
	old := o.Model.Arch.ActScale
	scale, used = perf.FitActScale(o.Model.Arch, o.Samples)
	if used == 0 {
		return old, 0, ""
	}
	o.Model.Arch.ActScale = scale
	prev := old
	if prev <= 0 {
		prev = 1
	}
	if math.Abs(scale-prev) >= ActScaleEventStep || (old <= 0 && scale != 1) {
		moved = fmt.Sprintf("model %s: activation factor %.2f from the measured peak memory of %d samples (was %.2f): its memory estimate keeps %.0f%% of the activations perf counts", t, scale, used, prev, 100*scale)
	}
	return scale, used, moved
}

// typeActScale is the measured activation factor of s's model type (0:
// none), without creating the type's model. The caller holds d.mu.
func (d *Daemon) typeActScale(s *jobspec.Spec) float64 {
	if o, ok := d.models[modelTypeOf(s)]; ok {
		return o.Model.Arch.ActScale
	}
	return 0
}

// JobMemory is a running job's GPU memory as `replan job ID` shows it.
type JobMemory struct {
	// PeakGPUGB is the most memory its busiest GPU used in this launch,
	// measured (GiB; absent before its first measured iteration).
	PeakGPUGB float64 `json:"peak_gpu_gb,omitempty"`
	// EstimateGPUGB is perf's estimate for its plan's busiest GPU, with
	// its type's activation factor.
	EstimateGPUGB float64 `json:"estimate_gpu_gb"`
	// ActScale is its type's activation factor, fitted from measured
	// peaks (absent: not fitted, the estimate counts every activation).
	ActScale float64 `json:"act_scale,omitempty"`
}

// jobMemory is js's JobMemory when it runs. The caller holds d.mu.
func (d *Daemon) jobMemory(js *jobState) (JobMemory, bool) {
	if js.rec.State != StateRunning || len(js.servers) == 0 || js.plan.DP < 1 {
		return JobMemory{}, false
	}
	arch := js.spec.Arch
	arch.ActScale = d.typeActScale(js.spec)
	pl := make(perf.Placement, 0, len(js.servers))
	for _, s := range js.servers {
		pl = append(pl, len(s.GPUs))
	}
	slices.SortFunc(pl, func(a, b int) int { return b - a })
	m := perf.EstimateMemory(arch, js.plan, pl)
	return JobMemory{PeakGPUGB: js.jobPeakGB(), EstimateGPUGB: m.GPU / perf.GiB, ActScale: arch.ActScale}, true
}

// viewMemory adds js's memory to the view being built. The caller holds
// d.mu.
func (d *Daemon) viewMemory(v *readView, id string, js *jobState) {
	m, ok := d.jobMemory(js)
	if !ok {
		return
	}
	if v.memory == nil {
		v.memory = map[string]JobMemory{}
	}
	v.memory[id] = m
}

// JobMemory reports a running job's measured and estimated GPU memory
// (false when it does not run).
func (d *Daemon) JobMemory(id string) (JobMemory, bool) {
	m, ok := d.view().memory[id]
	return m, ok
}
