package cli

import (
	"math"
	"runtime/debug"
	"testing"
)

// replan sim runs under SimMemoryLimit unless GOMEMLIMIT is set, and
// then leaves the runtime's limit as the variable made it.
func TestSimMemoryLimit(t *testing.T) {
	old := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(old) })

	t.Setenv("GOMEMLIMIT", "")
	debug.SetMemoryLimit(math.MaxInt64)
	if got := limitSimMemory(); got != SimMemoryLimit {
		t.Errorf("limitSimMemory() = %d, want %d", got, SimMemoryLimit)
	}
	if got := debug.SetMemoryLimit(-1); got != SimMemoryLimit {
		t.Errorf("runtime memory limit %d after limitSimMemory, want %d", got, SimMemoryLimit)
	}

	t.Setenv("GOMEMLIMIT", "1GiB")
	debug.SetMemoryLimit(1 << 30) // what the runtime read from the variable at start
	if got := limitSimMemory(); got != 1<<30 {
		t.Errorf("with GOMEMLIMIT=1GiB limitSimMemory() = %d, want the variable's 1 GiB", got)
	}
}
