package control

// GPU telemetry: what the agents (or the simulated executor) report of
// each GPU, kept by the daemon per server and shown in GET /v1/nodes.

import (
	"hash/fnv"

	"math"
	"time"

	"github.com/replan/replan/agent"
)

// GPUStat is one GPU as last observed: utilisation, memory, temperature,
// power and error counts.
type GPUStat struct {
	Index      int     `json:"index"`
	UtilPct    float64 `json:"util_pct"`
	MemUsedGB  float64 `json:"mem_used_gb"`
	MemTotalGB float64 `json:"mem_total_gb"`
	TempC      float64 `json:"temp_c"`
	PowerW     float64 `json:"power_w"`
	ECCErrors  int     `json:"ecc_errors"`
	XidErrors  int     `json:"xid_errors"`
	// The agent's memory health and failed reads (agent.GPU), and
	// whether the daemon cordoned the GPU and why (health.go).
	RetiredPagesPending bool   `json:"retired_pages_pending,omitempty"`
	RowRemapPending     bool   `json:"row_remap_pending,omitempty"`
	RowRemapFailed      bool   `json:"row_remap_failed,omitempty"`
	ReadError           string `json:"read_error,omitempty"`
	Cordoned            bool   `json:"cordoned,omitempty"`
	CordonWhy           string `json:"cordon_why,omitempty"`
	// Processes are the compute processes on the GPU with the memory
	// each uses, as the agent reads them from NVML (absent when none or
	// not reported).
	Processes []GPUProcess `json:"processes,omitempty"`
	// What may make the GPU slow (agent.GPU; absent when not reported):
	// why its clocks are held down, its SM clock and maximum, its power
	// limit and default, its PCIe link now and at most, and how many of
	// its NVLinks are down (failslow.go).
	ClockEvents        []string `json:"clock_events,omitempty"`
	SMClockMHz         uint32   `json:"sm_clock_mhz,omitempty"`
	SMClockMaxMHz      uint32   `json:"sm_clock_max_mhz,omitempty"`
	PowerLimitW        float64  `json:"power_limit_w,omitempty"`
	PowerDefaultLimitW float64  `json:"power_default_limit_w,omitempty"`
	PCIeGen            int      `json:"pcie_gen,omitempty"`
	PCIeGenMax         int      `json:"pcie_gen_max,omitempty"`
	PCIeWidth          int      `json:"pcie_width,omitempty"`
	PCIeWidthMax       int      `json:"pcie_width_max,omitempty"`
	NVLinksDown        int      `json:"nvlinks_down,omitempty"`
	// critical are the recent Xid and double-bit ECC events that may
	// cordon the GPU (health.go); not shown.
	critical []agent.HealthEvent
}

// GPUProcess is a process on a GPU: its PID (on the server) and the GPU
// memory it uses.
type GPUProcess struct {
	PID       uint32  `json:"pid"`
	MemUsedGB float64 `json:"mem_used_gb"`
}

// IdleUtilPct is the utilisation below which a GPU that a job holds is
// flagged as allocated but idle.
const IdleUtilPct = 5

// keepTelemetry stores a server's GPU figures from one observation; the
// caller holds d.mu.
func (d *Daemon) keepTelemetry(i int, n NodeObservation) {
	if d.telemetry == nil {
		d.telemetry = map[int][]GPUStat{}
	}
	if !n.Reachable {
		delete(d.telemetry, i)
		return
	}
	if len(n.GPUs) > 0 {
		d.telemetry[i] = append([]GPUStat(nil), n.GPUs...)
	}
}

// nodeTelemetry fills a node view's GPU figures and the GPUs held
// but idle; the caller holds d.mu.
func (d *Daemon) nodeTelemetry(i int, v *NodeView) {
	v.AsOf = d.now() // v.State is set by nodesLocked (up, down, drained, suspect)
	v.GPUStats = append([]GPUStat{}, d.telemetry[i]...)
	for k := range v.GPUStats {
		v.GPUStats[k].critical = nil
		if h := d.gpuHealth[i][v.GPUStats[k].Index]; h != nil && h.rec.Cordoned {
			v.GPUStats[k].Cordoned, v.GPUStats[k].CordonWhy = true, h.rec.Why
		}
	}
	v.CordonedGPUs = d.cordonsOf(i)
	v.FreeGPUs = max(v.FreeGPUs-d.cordonedFree(i), 0) // health.go
	for _, g := range v.GPUStats {
		if g.Index >= 0 && g.Index < len(v.GPUOwners) && v.GPUOwners[g.Index] != "" && g.UtilPct < IdleUtilPct {
			v.IdleHeld = append(v.IdleHeld, g.Index)
		}
	}
}

// simGPUs is what the simulated executor reports of a server's GPUs:
// free GPUs idle and cool; a job's GPUs busy while it computes and less so
// while it communicates (its iterations alternate the two, a third of the
// time communicating, phase by its start), nearly idle while it restarts.
func simGPUs(server string, gpus int, owners map[int]*simJob, now time.Time) []GPUStat {
	out := make([]GPUStat, gpus)
	h := fnv.New32a()
	h.Write([]byte(server))
	seed := float64(h.Sum32()%7) / 7 // a little spread between servers
	for i := range out {
		g := GPUStat{Index: i, MemTotalGB: 80, MemUsedGB: 0.5, TempC: 33 + 3*seed, PowerW: 62 + 5*seed}
		if j := owners[i]; j != nil {
			switch {
			case now.Before(j.ready):
				g.UtilPct, g.MemUsedGB, g.TempC, g.PowerW = 2, 6, 40+2*seed, 95
			default:
				it := math.Max(j.iterTime, 1e-3)
				phase := math.Mod(now.Sub(j.ready).Seconds()+float64(i)*it/97, it) / it
				util, power := 97.0, 380.0
				if phase > 2.0/3 { // communication
					util, power = 38, 210
				}
				g.UtilPct, g.PowerW = util-3*seed, power+15*seed
				g.MemUsedGB = 52 + 20*seed
				if j.memGB > 0 {
					g.MemUsedGB = j.memGB // the job's own peak (simexec_mem.go)
				}
				g.TempC = 55 + 20*util/100 + 3*seed
			}
		}
		out[i] = g
	}
	return out
}

// gpuStats converts an agent's GPU snapshot: each GPU's figures and its
// ECC and Xid events among the recent health events.
func gpuStats(snap agent.GPUSnapshot) []GPUStat {
	out := make([]GPUStat, 0, len(snap.GPUs))
	at := map[int]int{}
	for _, g := range snap.GPUs {
		at[g.Index] = len(out)
		out = append(out, GPUStat{Index: g.Index, UtilPct: float64(g.UtilizationPct), MemUsedGB: float64(g.MemoryUsedBytes) / (1 << 30),
			MemTotalGB: float64(g.MemoryTotalBytes) / (1 << 30), TempC: float64(g.TemperatureC), PowerW: g.PowerW,
			RetiredPagesPending: g.RetiredPagesPending, RowRemapPending: g.RowRemapPending, RowRemapFailed: g.RowRemapFailed, ReadError: g.ReadError,
			ClockEvents: g.ClockEvents, SMClockMHz: g.SMClockMHz, SMClockMaxMHz: g.SMClockMaxMHz, PowerLimitW: g.PowerLimitW, PowerDefaultLimitW: g.PowerDefaultLimitW,
			PCIeGen: g.PCIeGen, PCIeGenMax: g.PCIeGenMax, PCIeWidth: g.PCIeWidth, PCIeWidthMax: g.PCIeWidthMax})
		for _, l := range g.NVLinks {
			if !l.Active {
				out[len(out)-1].NVLinksDown++
			}
		}
		for _, p := range g.Processes {
			out[len(out)-1].Processes = append(out[len(out)-1].Processes, GPUProcess{PID: p.PID, MemUsedGB: float64(p.UsedMemoryBytes) / (1 << 30)})
		}
	}
	for _, h := range snap.Health {
		k, ok := at[h.GPUIndex]
		if !ok {
			continue
		}
		if h.Kind == agent.HealthXid {
			out[k].XidErrors++
		} else {
			out[k].ECCErrors++
		}
		if _, _, bad := criticalEvent(h); bad {
			out[k].critical = append(out[k].critical, h)
		}
	}
	return out
}
