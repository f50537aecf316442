//go:build nvml && cgo

package agent

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
)

func busID(s string) [32]uint8 {
	var b [32]uint8
	copy(b[:], s)
	return b
}

// mockNVML is a 2-GPU server: links 0-3 of each GPU go to the other GPU,
// link 2 of GPU 1 is down, and GPU 0 has one queued Xid 79. GPU 0's
// utilisation cannot be read (GPU is lost) and it has retired pages
// pending; GPU 1 failed a row remapping; neither supports the other.
func mockNVML(t *testing.T) *mock.Interface {
	buses := []string{"00000000:07:00.0", "00000000:0F:00.0"}
	var devs []*mock.Device
	xidSent := false
	evset := &mock.EventSet{FreeFunc: func() nvml.Return { return nvml.SUCCESS }}
	for i := 0; i < 2; i++ {
		i := i
		other := 1 - i
		d := &mock.Device{
			GetUUIDFunc:    func() (string, nvml.Return) { return []string{"GPU-aaaa", "GPU-bbbb"}[i], nvml.SUCCESS },
			GetNameFunc:    func() (string, nvml.Return) { return "NVIDIA A800-SXM4-80GB", nvml.SUCCESS },
			GetIndexFunc:   func() (int, nvml.Return) { return i, nvml.SUCCESS },
			GetPciInfoFunc: func() (nvml.PciInfo, nvml.Return) { return nvml.PciInfo{BusId: busID(buses[i])}, nvml.SUCCESS },
			// v1's used includes the driver's reserved memory (615 MiB
			// on an idle H200); GPU 1 answers v2 too, which separates it,
			// GPU 0 is an older driver's, v1 only.
			GetMemoryInfoFunc: func() (nvml.Memory, nvml.Return) {
				used := uint64(i+1)<<30 + 615<<20
				return nvml.Memory{Total: 80 << 30, Used: used, Free: 80<<30 - used}, nvml.SUCCESS
			},
			GetMemoryInfo_v2Func: func() (nvml.Memory_v2, nvml.Return) {
				if i == 0 {
					return nvml.Memory_v2{}, nvml.ERROR_FUNCTION_NOT_FOUND
				}
				return nvml.Memory_v2{Total: 80 << 30, Reserved: 615 << 20, Used: uint64(i+1) << 30, Free: 80<<30 - uint64(i+1)<<30 - 615<<20}, nvml.SUCCESS
			},
			GetUtilizationRatesFunc: func() (nvml.Utilization, nvml.Return) {
				if i == 0 {
					return nvml.Utilization{}, nvml.ERROR_GPU_IS_LOST
				}
				return nvml.Utilization{Gpu: uint32(40 + i)}, nvml.SUCCESS
			},
			GetRetiredPagesPendingStatusFunc: func() (nvml.EnableState, nvml.Return) {
				if i == 1 {
					return 0, nvml.ERROR_NOT_SUPPORTED
				}
				return nvml.FEATURE_ENABLED, nvml.SUCCESS
			},
			GetRemappedRowsFunc: func() (int, int, bool, bool, nvml.Return) {
				if i == 0 {
					return 0, 0, false, false, nvml.ERROR_NOT_SUPPORTED
				}
				return 0, 1, false, true, nvml.SUCCESS
			},
			GetTemperatureFunc: func(nvml.TemperatureSensors) (uint32, nvml.Return) { return 55, nvml.SUCCESS },
			GetPowerUsageFunc:  func() (uint32, nvml.Return) { return 251500, nvml.SUCCESS },
			GetComputeRunningProcessesFunc: func() ([]nvml.ProcessInfo, nvml.Return) {
				return []nvml.ProcessInfo{{Pid: uint32(1000 + i), UsedGpuMemory: 1 << 30}}, nvml.SUCCESS
			},
			GetNvLinkStateFunc: func(l int) (nvml.EnableState, nvml.Return) {
				if l >= 4 {
					return 0, nvml.ERROR_INVALID_ARGUMENT
				}
				if i == 1 && l == 2 {
					return nvml.FEATURE_DISABLED, nvml.SUCCESS
				}
				return nvml.FEATURE_ENABLED, nvml.SUCCESS
			},
			GetNvLinkRemotePciInfoFunc: func(l int) (nvml.PciInfo, nvml.Return) {
				return nvml.PciInfo{BusId: busID(buses[other])}, nvml.SUCCESS
			},
			GetP2PStatusFunc: func(nvml.Device, nvml.GpuP2PCapsIndex) (nvml.GpuP2PStatus, nvml.Return) {
				return nvml.P2P_STATUS_OK, nvml.SUCCESS
			},
			GetTopologyCommonAncestorFunc: func(nvml.Device) (nvml.GpuTopologyLevel, nvml.Return) {
				return nvml.TOPOLOGY_SYSTEM, nvml.SUCCESS
			},
			GetSupportedEventTypesFunc: func() (uint64, nvml.Return) {
				return nvml.EventTypeXidCriticalError | nvml.EventTypeDoubleBitEccError, nvml.SUCCESS
			},
			RegisterEventsFunc: func(uint64, nvml.EventSet) nvml.Return { return nvml.SUCCESS },
		}
		slowSignals(d, i)
		devs = append(devs, d)
	}
	evset.WaitFunc = func(uint32) (nvml.EventData, nvml.Return) {
		if xidSent {
			return nvml.EventData{}, nvml.ERROR_TIMEOUT
		}
		xidSent = true
		return nvml.EventData{Device: devs[0], EventType: nvml.EventTypeXidCriticalError, EventData: 79}, nvml.SUCCESS
	}
	return &mock.Interface{
		InitFunc:                   func() nvml.Return { return nvml.SUCCESS },
		ShutdownFunc:               func() nvml.Return { return nvml.SUCCESS },
		SystemGetDriverVersionFunc: func() (string, nvml.Return) { return "550.54.15", nvml.SUCCESS },
		DeviceGetCountFunc:         func() (int, nvml.Return) { return len(devs), nvml.SUCCESS },
		DeviceGetHandleByIndexFunc: func(i int) (nvml.Device, nvml.Return) { return devs[i], nvml.SUCCESS },
		EventSetCreateFunc:         func() (nvml.EventSet, nvml.Return) { return evset, nvml.SUCCESS },
	}
}

func TestNVMLBackendOnMock(t *testing.T) {
	ctx := context.Background()
	b, err := newNVMLBackend(ctx, slog.New(slog.DiscardHandler), mockNVML(t))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if b.Name() != "nvml driver 550.54.15" {
		t.Errorf("Name = %q", b.Name())
	}
	gpus, err := b.GPUs(ctx)
	if err != nil || len(gpus) != 2 {
		t.Fatalf("GPUs = %v, %v", gpus, err)
	}
	g := gpus[1]
	if g.UUID != "GPU-bbbb" || g.MemoryUsedBytes != 2<<30 || g.MemoryTotalBytes != 80<<30 || g.UtilizationPct != 41 ||
		g.TemperatureC != 55 || g.PowerW != 251.5 || len(g.Processes) != 1 || g.Processes[0].PID != 1001 {
		t.Errorf("gpu 1 = %+v", g)
	}
	if g.ReadError != "" || g.RetiredPagesPending || g.RowRemapPending || !g.RowRemapFailed {
		t.Errorf("gpu 1 health = read error %q, retired pending %v, remap pending %v, remap failed %v", g.ReadError, g.RetiredPagesPending, g.RowRemapPending, g.RowRemapFailed)
	}
	if g0 := gpus[0]; g0.MemoryUsedBytes != 1<<30+615<<20 || g0.MemoryTotalBytes != 80<<30 {
		t.Errorf("gpu 0 (no v2 memory call) memory used %d of %d, want v1's %d of %d", g0.MemoryUsedBytes, g0.MemoryTotalBytes, 1<<30+615<<20, 80<<30)
	}
	if g0 := gpus[0]; g0.ReadError != "utilization: "+nvml.ERROR_GPU_IS_LOST.Error() || !g0.RetiredPagesPending || g0.RowRemapFailed {
		t.Errorf("gpu 0 health = read error %q, retired pending %v, remap failed %v", g0.ReadError, g0.RetiredPagesPending, g0.RowRemapFailed)
	}
	if len(g.NVLinks) != 4 || g.NVLinks[2].Active || !g.NVLinks[0].Active || g.NVLinks[0].Peer != 0 {
		t.Errorf("gpu 1 links = %+v", g.NVLinks)
	}
	if len(g.Peers) != 1 || g.Peers[0] != (PeerLink{Peer: 0, Level: LevelNVLink, NVLinks: 3, P2P: true}) {
		t.Errorf("gpu 1 peers = %+v", g.Peers)
	}
	now := time.Unix(1, 0)
	evs, err := b.HealthEvents(ctx, now)
	if err != nil || len(evs) != 1 || evs[0] != (HealthEvent{Time: now, GPUIndex: 0, GPUUUID: "GPU-aaaa", Kind: HealthXid, Xid: 79}) {
		t.Errorf("events = %+v, %v", evs, err)
	}
}

func TestNVMLInitFailureIsErrNoNVML(t *testing.T) {
	lib := &mock.Interface{InitFunc: func() nvml.Return { return nvml.ERROR_DRIVER_NOT_LOADED }}
	_, err := newNVMLBackend(context.Background(), slog.New(slog.DiscardHandler), lib)
	if !errors.Is(err, ErrNoNVML) {
		t.Fatalf("err = %v, want ErrNoNVML", err)
	}
}

// slowSignals gives mock GPU i its clocks, power limits and PCIe link:
// GPU 0 is held at 990 of 1980 MHz by thermal slowdown and its power
// cap, capped at 500 of 700 W and trained down to PCIe gen 4 ×8 of gen 5
// ×16, on a current driver; GPU 1 runs at full clock on an old driver
// that knows only the throttle-reason call, the management limit and the
// slot's maximum generation.
func slowSignals(d *mock.Device, i int) {
	if i == 0 {
		d.GetCurrentClocksEventReasonsFunc = func() (uint64, nvml.Return) {
			return nvml.ClocksEventReasonSwThermalSlowdown | nvml.ClocksEventReasonSwPowerCap, nvml.SUCCESS
		}
		d.GetClockInfoFunc = func(c nvml.ClockType) (uint32, nvml.Return) {
			if c != nvml.CLOCK_SM {
				return 0, nvml.ERROR_INVALID_ARGUMENT
			}
			return 990, nvml.SUCCESS
		}
		d.GetEnforcedPowerLimitFunc = func() (uint32, nvml.Return) { return 500000, nvml.SUCCESS }
		d.GetGpuMaxPcieLinkGenerationFunc = func() (int, nvml.Return) { return 5, nvml.SUCCESS }
		d.GetCurrPcieLinkGenerationFunc = func() (int, nvml.Return) { return 4, nvml.SUCCESS }
		d.GetCurrPcieLinkWidthFunc = func() (int, nvml.Return) { return 8, nvml.SUCCESS }
	} else {
		d.GetCurrentClocksEventReasonsFunc = func() (uint64, nvml.Return) { return 0, nvml.ERROR_FUNCTION_NOT_FOUND }
		d.GetCurrentClocksThrottleReasonsFunc = func() (uint64, nvml.Return) { return nvml.ClocksThrottleReasonGpuIdle, nvml.SUCCESS }
		d.GetClockInfoFunc = func(nvml.ClockType) (uint32, nvml.Return) { return 1980, nvml.SUCCESS }
		d.GetEnforcedPowerLimitFunc = func() (uint32, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED }
		d.GetPowerManagementLimitFunc = func() (uint32, nvml.Return) { return 700000, nvml.SUCCESS }
		d.GetGpuMaxPcieLinkGenerationFunc = func() (int, nvml.Return) { return 0, nvml.ERROR_FUNCTION_NOT_FOUND }
		d.GetMaxPcieLinkGenerationFunc = func() (int, nvml.Return) { return 4, nvml.SUCCESS }
		d.GetCurrPcieLinkGenerationFunc = func() (int, nvml.Return) { return 4, nvml.SUCCESS }
		d.GetCurrPcieLinkWidthFunc = func() (int, nvml.Return) { return 16, nvml.SUCCESS }
	}
	d.GetMaxClockInfoFunc = func(nvml.ClockType) (uint32, nvml.Return) { return 1980, nvml.SUCCESS }
	d.GetPowerManagementDefaultLimitFunc = func() (uint32, nvml.Return) { return 700000, nvml.SUCCESS }
	d.GetMaxPcieLinkWidthFunc = func() (int, nvml.Return) { return 16, nvml.SUCCESS }
}

// TestNVMLSlowSignalsOnMock: the clock event reasons (or, on an old
// driver, the throttle reasons), SM clock and its maximum, power limit
// and default, and PCIe link now and at most are read per GPU.
func TestNVMLSlowSignalsOnMock(t *testing.T) {
	ctx := context.Background()
	b, err := newNVMLBackend(ctx, slog.New(slog.DiscardHandler), mockNVML(t))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	gpus, err := b.GPUs(ctx)
	if err != nil || len(gpus) != 2 {
		t.Fatalf("GPUs = %v, %v", gpus, err)
	}
	g := gpus[0]
	if g.ClockEventReasons != ClockEventSWThermal|ClockEventSWPowerCap || !slices.Equal(g.ClockEvents, []string{"sw_power_cap", "sw_thermal"}) {
		t.Errorf("gpu 0 clock events %#x %v", g.ClockEventReasons, g.ClockEvents)
	}
	if g.SMClockMHz != 990 || g.SMClockMaxMHz != 1980 || g.PowerLimitW != 500 || g.PowerDefaultLimitW != 700 ||
		g.PCIeGen != 4 || g.PCIeGenMax != 5 || g.PCIeWidth != 8 || g.PCIeWidthMax != 16 {
		t.Errorf("gpu 0 slow signals = %+v", g)
	}
	g = gpus[1]
	if g.ClockEventReasons != ClockEventGPUIdle || !slices.Equal(g.ClockEvents, []string{"idle"}) || g.SMClockMHz != 1980 ||
		g.PowerLimitW != 700 || g.PCIeGenMax != 4 || g.PCIeWidth != 16 {
		t.Errorf("gpu 1 slow signals (old driver) = %+v", g)
	}
}
