package cli

import (
	"fmt"

	"github.com/replan/replan/control"
)

// memoryWords is a running job's GPU memory for `replan job ID`: the
// peak measured on its busiest GPU, the estimate for its plan and the
// activation factor of its type when one was fitted from measured peaks.
func memoryWords(m control.JobMemory) string {
	s := "not measured yet"
	if m.PeakGPUGB > 0 {
		s = fmt.Sprintf("peak %.1f GiB", m.PeakGPUGB)
	}
	s += fmt.Sprintf(" on the busiest GPU, estimated %.1f GiB", m.EstimateGPUGB)
	if m.ActScale > 0 {
		s += fmt.Sprintf(" (activation factor %.2f, fitted from measured peaks)", m.ActScale)
	}
	return s
}
