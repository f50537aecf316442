//go:build nvml && cgo

package agent

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// NVMLAvailable reports whether this binary was built with the NVML backend.
const NVMLAvailable = true

// nvmlBackend reads GPUs through NVML. Topology is static and read once.
type nvmlBackend struct {
	log     *slog.Logger
	lib     nvml.Interface
	name    string
	mu      sync.Mutex
	devs    []nvml.Device
	uuids   []string
	names   []string
	peers   [][]PeerLink
	links   [][]NVLink    // per GPU: the links NVML reports, with their static peer
	events  nvml.EventSet // nil when events are not supported
	closeMu sync.Once
}

// NewNVMLBackend initialises NVML and opens every GPU. Any failure of
// nvml.Init (library missing, no driver, no GPU) is reported as ErrNoNVML.
func NewNVMLBackend(ctx context.Context, log *slog.Logger) (GPUBackend, error) {
	return newNVMLBackend(ctx, log, nvml.New())
}

// newNVMLBackend opens the GPUs through lib (the real library, or a mock in
// tests).
func newNVMLBackend(ctx context.Context, log *slog.Logger, lib nvml.Interface) (GPUBackend, error) {
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return nil, fmt.Errorf("%w: nvml init: %s", ErrNoNVML, ret.Error())
	}
	b := &nvmlBackend{log: log, lib: lib, name: "nvml"}
	if v, ret := lib.SystemGetDriverVersion(); ret == nvml.SUCCESS {
		b.name = "nvml driver " + v
	}
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		lib.Shutdown()
		return nil, fmt.Errorf("%w: nvml device count: %s", ErrNoNVML, ret.Error())
	}
	busIDs := make([]string, n)
	for i := 0; i < n; i++ {
		d, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			lib.Shutdown()
			return nil, fmt.Errorf("nvml device %d: %s", i, ret.Error())
		}
		b.devs = append(b.devs, d)
		uuid, _ := d.GetUUID()
		name, _ := d.GetName()
		b.uuids = append(b.uuids, uuid)
		b.names = append(b.names, name)
		if pci, ret := d.GetPciInfo(); ret == nvml.SUCCESS {
			busIDs[i] = cString(pci.BusId[:])
		}
	}
	b.peers, b.links = b.readTopology(busIDs)
	b.openEvents()
	return b, nil
}

func cString(b []uint8) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

// readTopology reads, once, how GPUs reach each other and where each NVLink
// goes (a peer GPU, or -1 for an NVSwitch or an unknown end).
func (b *nvmlBackend) readTopology(busIDs []string) ([][]PeerLink, [][]NVLink) {
	byBus := map[string]int{}
	for i, id := range busIDs {
		if id != "" {
			byBus[id] = i
		}
	}
	peers := make([][]PeerLink, len(b.devs))
	links := make([][]NVLink, len(b.devs))
	for i, d := range b.devs {
		direct := map[int]int{} // peer index -> active NVLinks straight to it
		for l := 0; l < nvml.NVLINK_MAX_LINKS; l++ {
			st, ret := d.GetNvLinkState(l)
			if ret != nvml.SUCCESS {
				continue
			}
			link := NVLink{Link: l, Active: st == nvml.FEATURE_ENABLED, Peer: -1}
			if pci, ret := d.GetNvLinkRemotePciInfo(l); ret == nvml.SUCCESS {
				if j, ok := byBus[cString(pci.BusId[:])]; ok && j != i {
					link.Peer = j
					if link.Active {
						direct[j]++
					}
				}
			}
			links[i] = append(links[i], link)
		}
		for j, o := range b.devs {
			if j == i {
				continue
			}
			p := PeerLink{Peer: j, Level: LevelUnknownTop, NVLinks: direct[j]}
			if st, ret := d.GetP2PStatus(o, nvml.P2P_CAPS_INDEX_READ); ret == nvml.SUCCESS {
				p.P2P = st == nvml.P2P_STATUS_OK
			}
			if st, ret := d.GetP2PStatus(o, nvml.P2P_CAPS_INDEX_NVLINK); ret == nvml.SUCCESS && st == nvml.P2P_STATUS_OK {
				p.Level = LevelNVLink
			} else if lvl, ret := d.GetTopologyCommonAncestor(o); ret == nvml.SUCCESS {
				p.Level = topoLevel(lvl)
			}
			peers[i] = append(peers[i], p)
		}
	}
	return peers, links
}

func topoLevel(l nvml.GpuTopologyLevel) string {
	switch l {
	case nvml.TOPOLOGY_INTERNAL, nvml.TOPOLOGY_SINGLE:
		return LevelPIX
	case nvml.TOPOLOGY_MULTIPLE:
		return LevelPXB
	case nvml.TOPOLOGY_HOSTBRIDGE:
		return LevelPHB
	case nvml.TOPOLOGY_NODE:
		return LevelNode
	case nvml.TOPOLOGY_SYSTEM:
		return LevelSys
	}
	return LevelUnknownTop
}

func (b *nvmlBackend) openEvents() {
	set, ret := b.lib.EventSetCreate()
	if ret != nvml.SUCCESS {
		b.log.Warn("nvml event set unavailable; no Xid/ECC events", "err", ret.Error())
		return
	}
	want := uint64(nvml.EventTypeXidCriticalError | nvml.EventTypeDoubleBitEccError | nvml.EventTypeSingleBitEccError)
	registered := 0
	for i, d := range b.devs {
		sup, ret := d.GetSupportedEventTypes()
		if ret != nvml.SUCCESS {
			continue
		}
		if ret := d.RegisterEvents(want&sup, set); ret != nvml.SUCCESS {
			b.log.Warn("nvml register events", "gpu", i, "err", ret.Error())
			continue
		}
		registered++
	}
	if registered == 0 {
		set.Free()
		return
	}
	b.events = set
}

// Name reports "nvml driver VERSION".
func (b *nvmlBackend) Name() string { return b.name }

// GPUs reads every GPU's live state. Fields NVML does not support stay zero.
func (b *nvmlBackend) GPUs(ctx context.Context) ([]GPU, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]GPU, len(b.devs))
	for i, d := range b.devs {
		g := GPU{Index: i, UUID: b.uuids[i], Name: b.names[i], Processes: []GPUProcess{},
			Peers: append([]PeerLink(nil), b.peers[i]...)}
		// The v2 call separates the driver's reserved memory from what
		// processes use (nvidia-smi's "used"); v1's used includes it:
		// 615 MiB on an idle H200 (driver 580), read as a job's memory.
		// Drivers without v2 answer v1.
		if m, ret := d.GetMemoryInfo_v2(); ret == nvml.SUCCESS {
			g.MemoryUsedBytes, g.MemoryTotalBytes = m.Used, m.Total
		} else if m, ret := d.GetMemoryInfo(); ret == nvml.SUCCESS {
			g.MemoryUsedBytes, g.MemoryTotalBytes = m.Used, m.Total
		} else {
			noteReadError(&g, "memory", ret)
		}
		if u, ret := d.GetUtilizationRates(); ret == nvml.SUCCESS {
			g.UtilizationPct = u.Gpu
		} else {
			noteReadError(&g, "utilization", ret)
		}
		if st, ret := d.GetRetiredPagesPendingStatus(); ret == nvml.SUCCESS {
			g.RetiredPagesPending = st == nvml.FEATURE_ENABLED
		}
		if _, _, pending, failed, ret := d.GetRemappedRows(); ret == nvml.SUCCESS {
			g.RowRemapPending, g.RowRemapFailed = pending, failed
		}
		if t, ret := d.GetTemperature(nvml.TEMPERATURE_GPU); ret == nvml.SUCCESS {
			g.TemperatureC = t
		}
		if mw, ret := d.GetPowerUsage(); ret == nvml.SUCCESS {
			g.PowerW = float64(mw) / 1000
		}
		if ps, ret := d.GetComputeRunningProcesses(); ret == nvml.SUCCESS {
			for _, p := range ps {
				g.Processes = append(g.Processes, GPUProcess{PID: p.Pid, UsedMemoryBytes: p.UsedGpuMemory})
			}
		}
		b.readSlowSignals(d, &g)
		// Link ends are static; only whether each link is up is re-read.
		for _, l := range b.links[i] {
			if st, ret := d.GetNvLinkState(l.Link); ret == nvml.SUCCESS {
				l.Active = st == nvml.FEATURE_ENABLED
			}
			g.NVLinks = append(g.NVLinks, l)
		}
		out[i] = g
	}
	return out, nil
}

// readSlowSignals reads what makes a GPU slow without failing it: why
// its clocks are held down, its SM clock against the maximum, its power
// limit against the default, and its PCIe link against the best it can
// train to. A field NVML does not support stays zero.
func (b *nvmlBackend) readSlowSignals(d nvml.Device, g *GPU) {
	if r, ret := d.GetCurrentClocksEventReasons(); ret == nvml.SUCCESS {
		g.ClockEventReasons = r
	} else if r, ret := d.GetCurrentClocksThrottleReasons(); ret == nvml.SUCCESS {
		g.ClockEventReasons = r // drivers before 535 know only the old name
	}
	g.ClockEvents = ClockEventNames(g.ClockEventReasons)
	if c, ret := d.GetClockInfo(nvml.CLOCK_SM); ret == nvml.SUCCESS {
		g.SMClockMHz = c
	}
	if c, ret := d.GetMaxClockInfo(nvml.CLOCK_SM); ret == nvml.SUCCESS {
		g.SMClockMaxMHz = c
	}
	if mw, ret := d.GetEnforcedPowerLimit(); ret == nvml.SUCCESS {
		g.PowerLimitW = float64(mw) / 1000
	} else if mw, ret := d.GetPowerManagementLimit(); ret == nvml.SUCCESS {
		g.PowerLimitW = float64(mw) / 1000
	}
	if mw, ret := d.GetPowerManagementDefaultLimit(); ret == nvml.SUCCESS {
		g.PowerDefaultLimitW = float64(mw) / 1000
	}
	if v, ret := d.GetCurrPcieLinkGeneration(); ret == nvml.SUCCESS {
		g.PCIeGen = v
	}
	if v, ret := d.GetGpuMaxPcieLinkGeneration(); ret == nvml.SUCCESS {
		g.PCIeGenMax = v // what the GPU can do (the slot may cap the other)
	} else if v, ret := d.GetMaxPcieLinkGeneration(); ret == nvml.SUCCESS {
		g.PCIeGenMax = v
	}
	if v, ret := d.GetCurrPcieLinkWidth(); ret == nvml.SUCCESS {
		g.PCIeWidth = v
	}
	if v, ret := d.GetMaxPcieLinkWidth(); ret == nvml.SUCCESS {
		g.PCIeWidthMax = v
	}
}

// noteReadError keeps the first failed read of a GPU in this sample; a
// field the GPU does not support is no failure.
func noteReadError(g *GPU, what string, ret nvml.Return) {
	if ret == nvml.ERROR_NOT_SUPPORTED || g.ReadError != "" {
		return
	}
	g.ReadError = what + ": " + ret.Error()
}

// HealthEvents drains the NVML event set without blocking.
func (b *nvmlBackend) HealthEvents(ctx context.Context, now time.Time) ([]HealthEvent, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.events == nil {
		return nil, nil
	}
	var out []HealthEvent
	for len(out) < 1024 {
		ev, ret := b.events.Wait(0)
		if ret == nvml.ERROR_TIMEOUT {
			break
		}
		if ret != nvml.SUCCESS {
			return out, fmt.Errorf("nvml event wait: %s", ret.Error())
		}
		h := HealthEvent{Time: now, GPUIndex: -1}
		if ev.Device != nil {
			if idx, ret := ev.Device.GetIndex(); ret == nvml.SUCCESS {
				h.GPUIndex = idx
				if idx >= 0 && idx < len(b.uuids) {
					h.GPUUUID = b.uuids[idx]
				}
			}
		}
		switch ev.EventType {
		case nvml.EventTypeXidCriticalError:
			h.Kind, h.Xid = HealthXid, ev.EventData
		case nvml.EventTypeDoubleBitEccError:
			h.Kind = HealthECCDBE
		case nvml.EventTypeSingleBitEccError:
			h.Kind = HealthECCSBE
		default:
			h.Kind = fmt.Sprintf("nvml_event_%d", ev.EventType)
		}
		out = append(out, h)
	}
	return out, nil
}

// Close frees the event set and shuts NVML down.
func (b *nvmlBackend) Close() error {
	var err error
	b.closeMu.Do(func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		if b.events != nil {
			b.events.Free()
		}
		if ret := b.lib.Shutdown(); ret != nvml.SUCCESS {
			err = fmt.Errorf("nvml shutdown: %s", ret.Error())
		}
	})
	return err
}
