package control

// Faults of the simulated cluster: a server's GPUs read through an agent
// GPU backend (the fake one, whose Xid and ECC events and memory faults a
// test injects), a job that hangs, a job whose process dies.

import (
	"context"
	"log/slog"
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
	}
	return gpus
}
