package control

// Faults of the simulated cluster: a server's GPUs read through an agent
// GPU backend (the fake one, whose Xid and ECC events, memory faults and
// throttled clocks a test injects; a job runs at its slowest GPU's clock),
// a job that hangs, a job whose process dies.

import (
	"context"
	"log/slog"
	"slices"
	"time"

	"github.com/replan/replan/agent"
)

// simClock is an agent.Clock on the simulated cluster's clock.
type simClock func() time.Time

func (c simClock) Now() time.Time { return c() }

// SetGPUBackend makes server's GPU health come from b, sampled at every
// Observe through the agent's sampler (the figures stay simulated): its
// Xid and ECC events, pending retired pages and row remappings, failed
// reads and the processes on each GPU reach the daemon as an agent's
// would.
func (e *SimExecutor) SetGPUBackend(server string, b agent.GPUBackend) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.samplers == nil {
		e.samplers = map[string]*agent.Sampler{}
	}
	e.samplers[server] = agent.NewSampler(b, time.Second, simClock(e.Clock), slog.New(slog.DiscardHandler))
}

// Hang freezes a running job: it keeps its devices and logs no new
// iteration (an NCCL hang, a deadlock) until it is stopped.
func (e *SimExecutor) Hang(id string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	j := e.running[id]
	if j == nil {
		return false
	}
	j.frozen = e.progress(j)
	j.hung = true
	return true
}

// Kill ends a running job's processes with an exit code, reported at the
// next Observe.
func (e *SimExecutor) Kill(id string, code int) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	j := e.running[id]
	if j == nil {
		return false
	}
	j.frozen, j.hung = e.progress(j), true
	j.exit = &code
	return true
}

// gpuHealthOf overlays the health server's GPU backend reports on its
// simulated figures; the caller holds e.mu.
func (e *SimExecutor) gpuHealthOf(ctx context.Context, server string, gpus []GPUStat) []GPUStat {
	s := e.samplers[server]
	if s == nil {
		return gpus
	}
	s.SampleOnce(ctx)
	for _, h := range gpuStats(s.Snapshot()) {
		if h.Index < 0 || h.Index >= len(gpus) {
			continue
		}
		g := &gpus[h.Index]
		g.ECCErrors, g.XidErrors, g.critical = h.ECCErrors, h.XidErrors, h.critical
		g.RetiredPagesPending, g.RowRemapPending, g.RowRemapFailed, g.ReadError = h.RetiredPagesPending, h.RowRemapPending, h.RowRemapFailed, h.ReadError
		g.Processes = h.Processes // the processes on it, as NVML lists them
		g.ClockEvents, g.SMClockMHz, g.SMClockMaxMHz = h.ClockEvents, h.SMClockMHz, h.SMClockMaxMHz
		g.PowerLimitW, g.PowerDefaultLimitW = h.PowerLimitW, h.PowerDefaultLimitW
		g.PCIeGen, g.PCIeGenMax, g.PCIeWidth, g.PCIeWidthMax, g.NVLinksDown = h.PCIeGen, h.PCIeGenMax, h.PCIeWidth, h.PCIeWidthMax, h.NVLinksDown
		if slices.Contains(h.ClockEvents, "sw_thermal") || slices.Contains(h.ClockEvents, "hw_thermal") {
			g.TempC = max(g.TempC, h.TempC) // it throttles because it is hot
		}
	}
	return gpus
}

// globalPace is Pace, 1 when unset; the caller holds e.mu.
func (e *SimExecutor) globalPace() float64 {
	if e.Pace > 0 {
		return e.Pace
	}
	return 1
}

// setPace makes j run at pace × its full speed from now on (what it did
// so far kept); the caller holds e.mu.
func (e *SimExecutor) setPace(j *simJob, pace float64) {
	if pace == j.pace || pace <= 0 {
		return
	}
	if now := e.Clock(); now.After(j.ready) && !j.hung {
		j.base, j.ready = e.progress(j), now
	}
	j.pace, j.iterTime = pace, j.nominal/pace
}

// throttle slows each running job to the slowest of its GPUs' SM clocks
// against their maximum, as its servers' GPU backends report them (a
// data-parallel job waits for its slowest rank); the caller holds e.mu.
func (e *SimExecutor) throttle(gpus map[string][]GPUStat) {
	for _, j := range e.running {
		pace := 1.0
		for _, s := range j.l.Servers {
			for _, g := range s.GPUs {
				if g < 0 || g >= len(gpus[s.Name]) {
					continue
				}
				if st := gpus[s.Name][g]; st.SMClockMaxMHz > 0 && st.SMClockMHz > 0 {
					pace = min(pace, float64(st.SMClockMHz)/float64(st.SMClockMaxMHz))
				}
			}
		}
		e.setPace(j, pace*e.globalPace())
	}
}
