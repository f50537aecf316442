package agent

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestFakeFaultFile: faults written to the fault file reach the next
// HealthEvents once, and the file is gone; a bad line is an error naming
// the file and line, and injects nothing.
func TestFakeFaultFile(t *testing.T) {
	ctx := context.Background()
	f, err := NewFakeBackend("2xA800")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), FaultFileName)
	f.SetFaultFile(path)
	now := time.Date(2026, 11, 27, 5, 0, 0, 0, time.UTC)
	if evs, err := f.HealthEvents(ctx, now); err != nil || len(evs) != 0 {
		t.Fatalf("no file: %v, %v", evs, err)
	}
	if err := os.WriteFile(path, []byte("# a fault\nxid 1 79\n\necc-dbe 0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	evs, err := f.HealthEvents(ctx, now)
	if err != nil || len(evs) != 2 || evs[0].Kind != HealthXid || evs[0].GPUIndex != 1 || evs[0].Xid != 79 || !evs[0].Time.Equal(now) ||
		evs[1].Kind != HealthECCDBE || evs[1].GPUIndex != 0 {
		t.Fatalf("events %+v, %v", evs, err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("the fault file is still there: %v", err)
	}
	if evs, err := f.HealthEvents(ctx, now); err != nil || len(evs) != 0 {
		t.Fatalf("read twice: %v, %v", evs, err)
	}
	for _, tc := range []struct{ body, want string }{
		{"xid 1 79\nxid 2 79\n", ":2: \"xid 2 79\": GPU: want 0..1"},
		{"xid 1\n", ":1: \"xid 1\": want 3 fields"},
		{"ecc 1\n", "want xid, ecc-dbe or ecc-sbe"},
		{"xid 0 x\n", "Xid code: want a number"},
	} {
		if err := os.WriteFile(path, []byte(tc.body), 0o600); err != nil {
			t.Fatal(err)
		}
		evs, err := f.HealthEvents(ctx, now)
		if err == nil || !strings.Contains(err.Error(), path+tc.want) && !strings.Contains(err.Error(), tc.want) || len(evs) != 0 {
			t.Errorf("%q: %v, %v", tc.body, evs, err)
		}
	}
}
