package agent

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// procStat is what the agent reads from /proc/PID/stat.
type procStat struct {
	State byte
	// StartTicks is the start time in clock ticks since boot (field 22); with
	// the boot ID it identifies a process across PID reuse.
	StartTicks uint64
}

// readProcStat reads /proc/PID/stat. The command name (field 2) may hold
// spaces and parentheses, so fields are counted after the last ')'.
func readProcStat(pid int) (procStat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, fmt.Errorf("/proc/%d/stat: no ')'", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 || len(f[0]) != 1 {
		return procStat{}, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	start, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return procStat{}, fmt.Errorf("/proc/%d/stat: start time: %w", pid, err)
	}
	return procStat{State: f[0][0], StartTicks: start}, nil
}

// sameProcessAlive reports whether PID is alive (not a zombie) and is the
// process that started at startTicks.
func sameProcessAlive(pid int, startTicks uint64) bool {
	if pid <= 0 {
		return false
	}
	st, err := readProcStat(pid)
	if err != nil {
		return false
	}
	return st.StartTicks == startTicks && st.State != 'Z' && st.State != 'X'
}

// bootID returns the kernel's boot ID, so records from before a reboot are
// never matched against new PIDs.
func bootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
