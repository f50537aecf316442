package sim

import (
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// CPUTime is the process's user plus system CPU time so far: benchmarks
// report it next to wall time, which other load on the machine inflates.
func CPUTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// PeakRSS is the process's peak resident set size in bytes since the
// last ResetPeakRSS that worked (Linux's VmHWM), else since it started
// (getrusage, which Linux reports in KiB).
func PeakRSS() int64 {
	if b, err := os.ReadFile("/proc/self/status"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
				if kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64); err == nil {
					return kb * 1024
				}
			}
		}
	}
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Maxrss * 1024
}

// ResetPeakRSS returns the heap to the system and restarts PeakRSS's
// count from the memory in use now, so each run of a benchmark reports
// its own peak. It reports false where the kernel does not allow it
// (PeakRSS then keeps the process's peak).
func ResetPeakRSS() bool {
	debug.FreeOSMemory()
	return os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) == nil
}
