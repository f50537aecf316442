package agent

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"
)

func TestFakeBackend(t *testing.T) {
	ctx := context.Background()
	f, err := NewFakeBackend("8xA800")
	if err != nil {
		t.Fatal(err)
	}
	gpus, err := f.GPUs(ctx)
	if err != nil || len(gpus) != 8 {
		t.Fatalf("GPUs = %d, %v", len(gpus), err)
	}
	seen := map[string]bool{}
	for i, g := range gpus {
		if g.Index != i || g.Name != "NVIDIA A800" || g.MemoryTotalBytes != 80<<30 || g.MemoryUsedBytes != 0 {
			t.Errorf("gpu %d: %+v", i, g)
		}
		if !strings.HasPrefix(g.UUID, "GPU-") || seen[g.UUID] {
			t.Errorf("gpu %d: bad or repeated UUID %q", i, g.UUID)
		}
		seen[g.UUID] = true
		if len(g.Peers) != 7 || len(g.NVLinks) != fakeNVLinks {
			t.Errorf("gpu %d: %d peers, %d links", i, len(g.Peers), len(g.NVLinks))
		}
		for _, p := range g.Peers {
			if p.Level != LevelNVLink || !p.P2P || p.Peer == i {
				t.Errorf("gpu %d peer %+v: want NVLink full mesh", i, p)
			}
		}
		if g.TemperatureC == 0 || g.PowerW <= 0 {
			t.Errorf("gpu %d: implausible idle temp/power %d/%v", i, g.TemperatureC, g.PowerW)
		}
	}
	// Deterministic UUIDs.
	f2, _ := NewFakeBackend("8xA800")
	g2, _ := f2.GPUs(ctx)
	if g2[3].UUID != gpus[3].UUID {
		t.Errorf("UUIDs not deterministic: %s vs %s", g2[3].UUID, gpus[3].UUID)
	}

	if err := f.SetUtilization(2, 95); err != nil {
		t.Fatal(err)
	}
	if err := f.SetProcesses(2, []GPUProcess{{PID: 42, UsedMemoryBytes: 30 << 30}}); err != nil {
		t.Fatal(err)
	}
	if err := f.SetNVLink(2, 1, false); err != nil {
		t.Fatal(err)
	}
	if err := f.SetUtilization(9, 1); err == nil {
		t.Error("SetUtilization(9) on 8 GPUs: want error")
	}
	gpus, _ = f.GPUs(ctx)
	g := gpus[2]
	if g.UtilizationPct != 95 || g.MemoryUsedBytes != 30<<30 || len(g.Processes) != 1 || g.Processes[0].PID != 42 || g.NVLinks[1].Active {
		t.Errorf("after setters: %+v", g)
	}
	if g.TemperatureC <= gpus[0].TemperatureC || g.PowerW <= gpus[0].PowerW {
		t.Errorf("busy GPU not hotter/hungrier than idle one: %+v vs %+v", g, gpus[0])
	}

	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f.InjectXid(5, 79)
	f.InjectECC(1, true)
	evs, _ := f.HealthEvents(ctx, now)
	if len(evs) != 2 || evs[0].Kind != HealthXid || evs[0].Xid != 79 || evs[0].GPUIndex != 5 || !evs[0].Time.Equal(now) || evs[1].Kind != HealthECCDBE {
		t.Errorf("events = %+v", evs)
	}
	if evs, _ := f.HealthEvents(ctx, now); len(evs) != 0 {
		t.Errorf("events not drained: %+v", evs)
	}
}

func TestParseFakeSpec(t *testing.T) {
	for _, tc := range []struct {
		spec  string
		n     int
		model string
		mem   uint64
		bad   bool
	}{
		{spec: "8xA800", n: 8, model: "A800", mem: 80},
		{spec: "4xH200", n: 4, model: "H200", mem: 141},
		{spec: "2xA100-40GB", n: 2, model: "A100-40GB", mem: 40},
		{spec: "1xMystery", n: 1, model: "Mystery", mem: 80},
		{spec: "", bad: true},
		{spec: "8", bad: true},
		{spec: "0xA800", bad: true},
		{spec: "axA800", bad: true},
		{spec: "8x", bad: true},
	} {
		n, model, mem, err := ParseFakeSpec(tc.spec)
		if tc.bad != (err != nil) || (!tc.bad && (n != tc.n || model != tc.model || mem != tc.mem)) {
			t.Errorf("ParseFakeSpec(%q) = %d, %q, %d, %v", tc.spec, n, model, mem, err)
		}
	}
}

func TestNVMLUnavailableIsErrNoNVML(t *testing.T) {
	b, err := NewNVMLBackend(context.Background(), slog.New(slog.DiscardHandler))
	if err == nil {
		b.Close()
		if !NVMLAvailable {
			t.Fatal("NVML backend opened in a build without the nvml tag")
		}
		t.Skip("NVML works on this machine")
	}
	if !errors.Is(err, ErrNoNVML) || b != nil {
		t.Fatalf("NewNVMLBackend = %v, %v; want ErrNoNVML", b, err)
	}
	t.Logf("nvml tag %v: %v", NVMLAvailable, err)
}

type fixedClock struct{ t time.Time }

func (c fixedClock) Now() time.Time { return c.t }

func TestSamplerKeepsLatestAndHealth(t *testing.T) {
	ctx := context.Background()
	f, _ := NewFakeBackend("2xH100")
	now := time.Date(2026, 5, 5, 5, 5, 5, 0, time.UTC)
	s := NewSampler(f, time.Second, fixedClock{now}, slog.New(slog.DiscardHandler))
	if snap := s.Snapshot(); len(snap.GPUs) != 0 || !snap.SampledAt.IsZero() || snap.Backend != "fake 2xH100" {
		t.Errorf("before sampling: %+v", snap)
	}
	f.SetUtilization(1, 50)
	for i := 0; i < maxHealthEvents+10; i++ {
		f.InjectXid(0, uint64(i))
	}
	s.SampleOnce(ctx)
	snap := s.Snapshot()
	if len(snap.GPUs) != 2 || snap.GPUs[1].UtilizationPct != 50 || !snap.SampledAt.Equal(now) {
		t.Errorf("snapshot: %+v", snap)
	}
	if len(snap.Health) != maxHealthEvents || snap.Health[0].Xid != 10 {
		t.Errorf("health kept %d events, first xid %d", len(snap.Health), snap.Health[0].Xid)
	}
	snap.GPUs[0].Name = "mutated"
	if s.Snapshot().GPUs[0].Name == "mutated" {
		t.Error("Snapshot shares memory with the sampler")
	}
	none := NewSampler(nil, 0, fixedClock{now}, slog.New(slog.DiscardHandler))
	none.Run(ctx) // returns at once without a backend
	if none.Snapshot().Backend != "none" {
		t.Error("nil backend should report none")
	}
}

// TestFakeBackendThrottle: a fake GPU reports its model's maximum SM
// clock, power limit and PCIe link; SetThrottle holds its clock down
// with a reason (a thermal one makes it hot), SetPowerLimit caps it and
// SetPCIe trains its link down; the other GPUs are untouched.
func TestFakeBackendThrottle(t *testing.T) {
	f, err := NewFakeBackend("2xH100")
	if err != nil {
		t.Fatal(err)
	}
	if err := f.SetThrottle(1, 990, ClockEventSWThermal); err != nil {
		t.Fatal(err)
	}
	f.SetPowerLimit(1, 450)
	f.SetPCIe(1, 3, 8)
	if err := f.SetThrottle(2, 990, ClockEventSWThermal); err == nil {
		t.Error("SetThrottle(2) on 2 GPUs: want an error")
	}
	gpus, _ := f.GPUs(context.Background())
	g0, g1 := gpus[0], gpus[1]
	if g0.SMClockMHz != 1980 || g0.SMClockMaxMHz != 1980 || g0.ClockEventReasons != 0 || len(g0.ClockEvents) != 0 || g0.PowerLimitW != 700 || g0.PCIeGen != 5 || g0.PCIeWidth != 16 {
		t.Errorf("gpu 0 = %+v", g0)
	}
	if g1.SMClockMHz != 990 || g1.ClockEventReasons != ClockEventSWThermal || len(g1.ClockEvents) != 1 || g1.ClockEvents[0] != "sw_thermal" || g1.TemperatureC < 85 ||
		g1.PowerLimitW != 450 || g1.PowerDefaultLimitW != 700 || g1.PCIeGen != 3 || g1.PCIeGenMax != 5 || g1.PCIeWidth != 8 || g1.PCIeWidthMax != 16 {
		t.Errorf("gpu 1 = %+v", g1)
	}
	f.SetThrottle(1, 0, 0)
	gpus, _ = f.GPUs(context.Background())
	if gpus[1].SMClockMHz != 1980 || len(gpus[1].ClockEvents) != 0 {
		t.Errorf("gpu 1 after clearing = %+v", gpus[1])
	}
	if got := ClockEventNames(ClockEventHWThermal | 0x400); len(got) != 2 || got[0] != "hw_thermal" || got[1] != "0x400" {
		t.Errorf("ClockEventNames = %v", got)
	}
}
