package agent

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ErrNoNVML reports that NVML is not available: the binary was built without
// the "nvml" tag, the library is missing, or nvml.Init failed (no GPU or no
// driver). The agent keeps working for CPU-only jobs when it sees it.
var ErrNoNVML = errors.New("no NVML")

// GPU is one GPU's state at one sample.
type GPU struct {
	Index            int          `json:"index"`
	UUID             string       `json:"uuid"`
	Name             string       `json:"name"`
	MemoryUsedBytes  uint64       `json:"memory_used_bytes"`
	MemoryTotalBytes uint64       `json:"memory_total_bytes"`
	UtilizationPct   uint32       `json:"utilization_pct"`
	TemperatureC     uint32       `json:"temperature_c"`
	PowerW           float64      `json:"power_w"`
	Processes        []GPUProcess `json:"processes"`
	// NVLinks holds the state of each NVLink of this GPU (empty when the GPU
	// has none or NVML does not report them).
	NVLinks []NVLink `json:"nvlinks"`
	// Peers describes how this GPU reaches every other GPU of the server.
	Peers []PeerLink `json:"peers"`
	// RetiredPagesPending: memory pages were retired for ECC errors and
	// wait for a GPU reset to take effect (pre-A100 GPUs).
	RetiredPagesPending bool `json:"retired_pages_pending,omitempty"`
	// RowRemapPending: a row remapping waits for a GPU reset; RowRemapFailed:
	// a row could not be remapped (A100 and later; the GPU needs replacing).
	RowRemapPending bool `json:"row_remap_pending,omitempty"`
	RowRemapFailed  bool `json:"row_remap_failed,omitempty"`
	// ReadError is the first read of this GPU that failed in this sample
	// (e.g. "memory: GPU is lost"), "" when every supported read
	// succeeded. The daemon cordons a GPU whose reads fail several
	// samples in a row.
	ReadError string `json:"read_error,omitempty"`
	// Clocks and limits that make a GPU slow without failing it (the
	// daemon's fail-slow checks read them; 0 / empty when NVML does not
	// report them). ClockEventReasons is NVML's bit mask of why the clocks
	// are held down (nvmlClocksEventReasons), ClockEvents its names
	// (ClockEventNames).
	ClockEventReasons uint64   `json:"clock_event_reasons"`
	ClockEvents       []string `json:"clock_events,omitempty"`
	// SMClockMHz is the SM clock now, SMClockMaxMHz its maximum.
	SMClockMHz    uint32 `json:"sm_clock_mhz,omitempty"`
	SMClockMaxMHz uint32 `json:"sm_clock_max_mhz,omitempty"`
	// PowerLimitW is the enforced power limit, PowerDefaultLimitW the
	// board's default one.
	PowerLimitW        float64 `json:"power_limit_w,omitempty"`
	PowerDefaultLimitW float64 `json:"power_default_limit_w,omitempty"`
	// The PCIe link now and at most (generation, lanes).
	PCIeGen      int `json:"pcie_gen,omitempty"`
	PCIeGenMax   int `json:"pcie_gen_max,omitempty"`
	PCIeWidth    int `json:"pcie_width,omitempty"`
	PCIeWidthMax int `json:"pcie_width_max,omitempty"`
}

// Clock event reasons (NVML's nvmlClocksEventReason bits, formerly
// "throttle reasons").
const (
	ClockEventGPUIdle          uint64 = 0x1
	ClockEventAppClocksSetting uint64 = 0x2
	ClockEventSWPowerCap       uint64 = 0x4
	ClockEventHWSlowdown       uint64 = 0x8
	ClockEventSyncBoost        uint64 = 0x10
	ClockEventSWThermal        uint64 = 0x20
	ClockEventHWThermal        uint64 = 0x40
	ClockEventHWPowerBrake     uint64 = 0x80
	ClockEventDisplayClock     uint64 = 0x100
)

var clockEventNames = []struct {
	bit  uint64
	name string
}{
	{ClockEventGPUIdle, "idle"},
	{ClockEventAppClocksSetting, "applications_clocks"},
	{ClockEventSWPowerCap, "sw_power_cap"},
	{ClockEventHWSlowdown, "hw_slowdown"},
	{ClockEventSyncBoost, "sync_boost"},
	{ClockEventSWThermal, "sw_thermal"},
	{ClockEventHWThermal, "hw_thermal"},
	{ClockEventHWPowerBrake, "hw_power_brake"},
	{ClockEventDisplayClock, "display_clock"},
}

// ClockEventNames names the bits of a clock event reason mask, lowest
// first ("hw_thermal", "sw_power_cap", ...; an unknown bit as
// "0x200").
func ClockEventNames(mask uint64) []string {
	var out []string
	for _, e := range clockEventNames {
		if mask&e.bit != 0 {
			out = append(out, e.name)
			mask &^= e.bit
		}
	}
	for b := uint64(1); mask != 0 && b != 0; b <<= 1 {
		if mask&b != 0 {
			out = append(out, fmt.Sprintf("%#x", b))
			mask &^= b
		}
	}
	return out
}

// GPUProcess is a process holding memory on a GPU.
type GPUProcess struct {
	PID             uint32 `json:"pid"`
	UsedMemoryBytes uint64 `json:"used_memory_bytes"`
}

// NVLink is the state of one NVLink of a GPU.
type NVLink struct {
	Link   int  `json:"link"`
	Active bool `json:"active"`
	// Peer is the index of the GPU at the other end, -1 when unknown or when
	// the link goes to an NVSwitch.
	Peer int `json:"peer"`
}

// Topology levels between two GPUs, nearest first. They follow
// `nvidia-smi topo -m`.
const (
	LevelNVLink     = "NVLINK" // connected by NVLink (directly or via NVSwitch)
	LevelPIX        = "PIX"    // same PCIe switch
	LevelPXB        = "PXB"    // several PCIe switches
	LevelPHB        = "PHB"    // same PCIe host bridge
	LevelNode       = "NODE"   // same NUMA node
	LevelSys        = "SYS"    // across NUMA nodes (SMP interconnect)
	LevelUnknownTop = "UNKNOWN"
)

// PeerLink is how a GPU reaches one peer GPU.
type PeerLink struct {
	Peer int `json:"peer"`
	// Level is one of the Level* constants.
	Level string `json:"level"`
	// NVLinks counts the active NVLinks between the two (0 for PCIe peers).
	NVLinks int `json:"nvlinks"`
	// P2P reports whether peer-to-peer access is possible.
	P2P bool `json:"p2p"`
}

// Health event kinds.
const (
	HealthXid    = "xid"
	HealthECCSBE = "ecc_single_bit"
	HealthECCDBE = "ecc_double_bit"
)

// HealthEvent is one Xid or ECC event reported by a GPU.
type HealthEvent struct {
	Time     time.Time `json:"time"`
	GPUIndex int       `json:"gpu_index"`
	GPUUUID  string    `json:"gpu_uuid"`
	Kind     string    `json:"kind"`
	// Xid is the Xid code for Kind == "xid".
	Xid uint64 `json:"xid,omitempty"`
}

// GPUBackend reads GPU state. Implementations: the NVML backend (build tag
// "nvml") and FakeBackend.
type GPUBackend interface {
	// Name describes the backend, e.g. "nvml 550.54.15" or "fake 8xA800".
	Name() string
	// GPUs returns every GPU's current state, ordered by index.
	GPUs(ctx context.Context) ([]GPU, error)
	// HealthEvents returns the events that arrived since the last call
	// without blocking; now stamps events the backend cannot time itself.
	HealthEvents(ctx context.Context, now time.Time) ([]HealthEvent, error)
	// Close releases the backend.
	Close() error
}

// Clock tells the time. Tests inject a fake one; the agent uses SystemClock.
type Clock interface {
	Now() time.Time
}

// SystemClock is the real clock.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }
