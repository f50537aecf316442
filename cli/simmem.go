package cli

import (
	"os"
	"runtime/debug"
)

// SimMemoryLimit is the soft heap limit `replan sim` and `replan sim
// bench` run under, beside the daemon's GC target (control.TuneGC): at
// GOGC 400 the collector lets the heap grow to five times what is live,
// which took an 80,000-job replay to 1 GB of resident memory; near the
// limit it collects more often instead (docs/scheduling.md).
const SimMemoryLimit = 512 << 20

// limitSimMemory sets the runtime's soft memory limit to SimMemoryLimit
// unless GOMEMLIMIT says otherwise (GOMEMLIMIT=off lifts it); it returns
// the limit in force.
func limitSimMemory() int64 {
	if os.Getenv("GOMEMLIMIT") != "" {
		return debug.SetMemoryLimit(-1)
	}
	debug.SetMemoryLimit(SimMemoryLimit)
	return SimMemoryLimit
}
