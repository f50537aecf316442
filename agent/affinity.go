package agent

import (
	"fmt"
	"os/exec"
	"runtime"

	"golang.org/x/sys/unix"
)

// startPinned starts cmd with its CPU affinity set to cpus (every CPU the
// agent may use when cpus is empty). The fork happens on a locked OS thread
// whose affinity is set first, so the child inherits the mask from its first
// instruction; that thread is never unlocked and so dies with its goroutine.
func startPinned(cmd *exec.Cmd, cpus []int) error {
	if len(cpus) == 0 {
		return cmd.Start()
	}
	var set unix.CPUSet
	set.Zero()
	for _, c := range cpus {
		set.Set(c)
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// No UnlockOSThread: the thread's mask is changed, let it exit.
		if err := unix.SchedSetaffinity(0, &set); err != nil {
			errc <- fmt.Errorf("set CPU affinity to %v: %w", cpus, err)
			return
		}
		errc <- cmd.Start()
	}()
	return <-errc
}

// allowedCPUs returns the CPUs the agent itself may run on.
func allowedCPUs() (map[int]bool, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, err
	}
	out := map[int]bool{}
	for c := 0; c < len(set)*64; c++ {
		if set.IsSet(c) {
			out[c] = true
		}
	}
	return out, nil
}
