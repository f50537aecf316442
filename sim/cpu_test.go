package sim

import (
	"testing"
)

// A benchmark row reports its own run's peak memory: after ResetPeakRSS
// the peak is the memory in use now, not an earlier run's.
func TestResetPeakRSS(t *testing.T) {
	if !ResetPeakRSS() {
		t.Skip("this kernel does not let a process reset its peak RSS (/proc/self/clear_refs): the bench reports the process's peak and says so")
	}
	base := PeakRSS()
	big := make([]byte, 256<<20)
	for i := range big {
		big[i] = byte(i)
	}
	withBig := PeakRSS()
	if withBig < base+200<<20 {
		t.Fatalf("peak %d MiB after touching 256 MiB, %d MiB before", withBig>>20, base>>20)
	}
	big = nil
	_ = big
	if !ResetPeakRSS() {
		t.Fatal("reset worked once, then not")
	}
	if after := PeakRSS(); after > withBig-200<<20 {
		t.Fatalf("peak %d MiB after the reset, %d MiB with the 256 MiB slice: the reset did not take", after>>20, withBig>>20)
	}
}
