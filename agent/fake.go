package agent

import (
	"context"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"sync"
	"time"
)

// fakeModels maps a GPU model to its memory in GB.
var fakeModels = map[string]uint64{
	"A800": 80, "A100": 80, "H800": 80, "H100": 80, "H200": 141, "H20": 96,
	"A100-40GB": 40, "V100": 32, "L40S": 48, "A10": 24, "RTX4090": 24,
}

// fakeClocks maps a GPU model to its maximum SM clock (MHz), default
// power limit (W) and PCIe generation; others get 1410 MHz, 400 W, gen 4.
var fakeClocks = map[string]struct {
	smMHz  uint32
	powerW float64
	gen    int
}{
	"A800": {1410, 400, 4}, "A100": {1410, 400, 4}, "A100-40GB": {1410, 400, 4},
	"H800": {1980, 700, 5}, "H100": {1980, 700, 5}, "H200": {1980, 700, 5}, "H20": {1980, 500, 5},
	"V100": {1530, 300, 3}, "L40S": {2520, 350, 4}, "A10": {1695, 150, 4}, "RTX4090": {2520, 450, 4},
}

// fakeNVLinks is the number of NVLinks per GPU the fake backend reports
// (A800 has 8, A100 12; one number keeps it simple).
const fakeNVLinks = 8

// FakeBackend is a pure-Go GPUBackend for tests and the demo. Its GPUs are
// deterministic (UUIDs derive from the spec and index), all connected by
// NVLink (full mesh), and their utilisation, memory and processes can be set;
// Xid and ECC events can be injected.
type FakeBackend struct {
	spec string
	mu   sync.Mutex
	gpus []GPU
	evs  []HealthEvent
	// faultFile, when set, is read for faults at every HealthEvents
	// (fake_faults.go).
	faultFile string
}

// ParseFakeSpec parses "NxMODEL" (e.g. "8xA800", "4xH100", "2xA100-40GB")
// into a count and model. Unknown models get 80 GB.
func ParseFakeSpec(spec string) (n int, model string, memGB uint64, err error) {
	countStr, model, ok := strings.Cut(strings.TrimSpace(spec), "x")
	if !ok || model == "" {
		return 0, "", 0, fmt.Errorf("fake GPU spec %q: want NxMODEL, e.g. 8xA800", spec)
	}
	n, err = strconv.Atoi(countStr)
	if err != nil || n < 1 || n > 64 {
		return 0, "", 0, fmt.Errorf("fake GPU spec %q: count %q must be 1..64", spec, countStr)
	}
	memGB, known := fakeModels[model]
	if !known {
		memGB = 80
	}
	return n, model, memGB, nil
}

// NewFakeBackend builds a fake backend from a spec such as "8xA800".
func NewFakeBackend(spec string) (*FakeBackend, error) {
	n, model, memGB, err := ParseFakeSpec(spec)
	if err != nil {
		return nil, err
	}
	f := &FakeBackend{spec: spec, gpus: make([]GPU, n)}
	for i := range f.gpus {
		g := GPU{
			Index:            i,
			UUID:             fakeUUID(spec, i),
			Name:             "NVIDIA " + model,
			MemoryTotalBytes: memGB << 30,
			Processes:        []GPUProcess{},
		}
		ck, ok := fakeClocks[model]
		if !ok {
			ck.smMHz, ck.powerW, ck.gen = 1410, 400, 4
		}
		g.SMClockMHz, g.SMClockMaxMHz = ck.smMHz, ck.smMHz
		g.PowerLimitW, g.PowerDefaultLimitW = ck.powerW, ck.powerW
		g.PCIeGen, g.PCIeGenMax, g.PCIeWidth, g.PCIeWidthMax = ck.gen, ck.gen, 16, 16
		for l := 0; l < fakeNVLinks; l++ {
			g.NVLinks = append(g.NVLinks, NVLink{Link: l, Active: true, Peer: -1})
		}
		for p := 0; p < n; p++ {
			if p != i {
				g.Peers = append(g.Peers, PeerLink{Peer: p, Level: LevelNVLink, NVLinks: fakeNVLinks, P2P: true})
			}
		}
		f.gpus[i] = g
	}
	return f, nil
}

func fakeUUID(spec string, i int) string {
	h := fnv.New128a()
	fmt.Fprintf(h, "%s/%d", spec, i)
	b := h.Sum(nil)
	return fmt.Sprintf("GPU-%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// Name reports "fake SPEC".
func (f *FakeBackend) Name() string { return "fake " + f.spec }

// GPUs returns a deep copy of the fake GPUs with temperature and power
// derived from utilisation.
func (f *FakeBackend) GPUs(ctx context.Context) ([]GPU, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]GPU, len(f.gpus))
	for i, g := range f.gpus {
		g.TemperatureC = 32 + g.UtilizationPct*45/100
		if g.ClockEventReasons&(ClockEventSWThermal|ClockEventHWThermal) != 0 {
			g.TemperatureC = max(g.TemperatureC, 88) // it throttles because it is hot
		}
		g.PowerW = 60 + float64(g.UtilizationPct)*3.4
		g.Processes = append([]GPUProcess{}, g.Processes...)
		g.ClockEvents = ClockEventNames(g.ClockEventReasons)
		g.NVLinks = append([]NVLink(nil), g.NVLinks...)
		g.Peers = append([]PeerLink(nil), g.Peers...)
		out[i] = g
	}
	return out, nil
}

// HealthEvents drains the injected events (with those of the fault file,
// fake_faults.go).
func (f *FakeBackend) HealthEvents(ctx context.Context, now time.Time) ([]HealthEvent, error) {
	ferr := f.readFaultFile()
	f.mu.Lock()
	defer f.mu.Unlock()
	evs := f.evs
	f.evs = nil
	for i := range evs {
		if evs[i].Time.IsZero() {
			evs[i].Time = now
		}
	}
	return evs, ferr
}

// Close does nothing.
func (f *FakeBackend) Close() error { return nil }

func (f *FakeBackend) gpu(i int) (*GPU, error) {
	if i < 0 || i >= len(f.gpus) {
		return nil, fmt.Errorf("fake GPU %d: out of range 0..%d", i, len(f.gpus)-1)
	}
	return &f.gpus[i], nil
}

// SetUtilization sets GPU i's utilisation in percent (clamped to 100).
func (f *FakeBackend) SetUtilization(i int, pct uint32) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	g, err := f.gpu(i)
	if err != nil {
		return err
	}
	g.UtilizationPct = min(pct, 100)
	return nil
}

// SetMemoryUsed sets GPU i's used memory (clamped to its total).
func (f *FakeBackend) SetMemoryUsed(i int, bytes uint64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	g, err := f.gpu(i)
	if err != nil {
		return err
	}
	g.MemoryUsedBytes = min(bytes, g.MemoryTotalBytes)
	return nil
}

// SetProcesses sets the processes on GPU i; used memory becomes their sum.
func (f *FakeBackend) SetProcesses(i int, procs []GPUProcess) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	g, err := f.gpu(i)
	if err != nil {
		return err
	}
	g.Processes = append([]GPUProcess{}, procs...)
	var used uint64
	for _, p := range procs {
		used += p.UsedMemoryBytes
	}
	g.MemoryUsedBytes = min(used, g.MemoryTotalBytes)
	return nil
}

// SetNVLink sets the state of one NVLink of GPU i.
func (f *FakeBackend) SetNVLink(i, link int, active bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	g, err := f.gpu(i)
	if err != nil {
		return err
	}
	if link < 0 || link >= len(g.NVLinks) {
		return fmt.Errorf("fake GPU %d: NVLink %d out of range", i, link)
	}
	g.NVLinks[link].Active = active
	return nil
}

// SetMemoryFaults sets GPU i's pending page retirement and row
// remapping state (pending: waits for a reset; failed: a row could not
// be remapped).
func (f *FakeBackend) SetMemoryFaults(i int, retiredPending, remapPending, remapFailed bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	g, err := f.gpu(i)
	if err != nil {
		return err
	}
	g.RetiredPagesPending, g.RowRemapPending, g.RowRemapFailed = retiredPending, remapPending, remapFailed
	return nil
}

// SetReadError makes every read of GPU i fail with msg ("" clears it),
// as NVML reads of a GPU that fell off the bus do.
func (f *FakeBackend) SetReadError(i int, msg string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	g, err := f.gpu(i)
	if err != nil {
		return err
	}
	g.ReadError = msg
	return nil
}

// InjectXid queues an Xid event on GPU i.
func (f *FakeBackend) InjectXid(i int, xid uint64) error {
	return f.inject(i, HealthXid, xid)
}

// InjectECC queues an ECC event on GPU i (double-bit when dbe).
func (f *FakeBackend) InjectECC(i int, dbe bool) error {
	kind := HealthECCSBE
	if dbe {
		kind = HealthECCDBE
	}
	return f.inject(i, kind, 0)
}

func (f *FakeBackend) inject(i int, kind string, xid uint64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	g, err := f.gpu(i)
	if err != nil {
		return err
	}
	f.evs = append(f.evs, HealthEvent{GPUIndex: i, GPUUUID: g.UUID, Kind: kind, Xid: xid})
	return nil
}

// SetThrottle holds GPU i's SM clock at mhz (0: its maximum) for the
// clock event reasons given (an NVML mask such as ClockEventSWThermal;
// 0 clears them), as a GPU that overheats or hits its power cap does.
func (f *FakeBackend) SetThrottle(i int, mhz uint32, reasons uint64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	g, err := f.gpu(i)
	if err != nil {
		return err
	}
	if mhz == 0 || mhz > g.SMClockMaxMHz {
		mhz = g.SMClockMaxMHz
	}
	g.SMClockMHz, g.ClockEventReasons = mhz, reasons
	return nil
}

// SetPowerLimit sets GPU i's enforced power limit in watts (0: its
// default).
func (f *FakeBackend) SetPowerLimit(i int, w float64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	g, err := f.gpu(i)
	if err != nil {
		return err
	}
	if w <= 0 {
		w = g.PowerDefaultLimitW
	}
	g.PowerLimitW = w
	return nil
}

// SetPCIe sets GPU i's current PCIe link generation and width (0: its
// maximum), as a link that trained down reports.
func (f *FakeBackend) SetPCIe(i, gen, width int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	g, err := f.gpu(i)
	if err != nil {
		return err
	}
	if gen <= 0 || gen > g.PCIeGenMax {
		gen = g.PCIeGenMax
	}
	if width <= 0 || width > g.PCIeWidthMax {
		width = g.PCIeWidthMax
	}
	g.PCIeGen, g.PCIeWidth = gen, width
	return nil
}
