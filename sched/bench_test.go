package sched_test

import (
	"testing"

	"github.com/replan/replan/sched"
	"github.com/replan/replan/sim"
)

// BenchmarkMorphlingRound is one round at 1,024 servers (8,192 GPUs) with
// 5,000 waiting jobs and running jobs holding 75% of the GPUs, caches warm
// (target: <= 100 ms).
func BenchmarkMorphlingRound(b *testing.B) {
	s := sim.LargeSnapshot(1024, 5000, 0.75, 7)
	p := sched.NewMorphling(sched.DefaultOptions())
	p.Schedule(s)
	b.ResetTimer()
	for b.Loop() {
		p.Schedule(s)
	}
}

// BenchmarkStaticRound is the same round under the FIFO baseline.
func BenchmarkStaticRound(b *testing.B) {
	s := sim.LargeSnapshot(1024, 5000, 0.75, 7)
	p := sched.NewStatic()
	p.Schedule(s)
	b.ResetTimer()
	for b.Loop() {
		p.Schedule(s)
	}
}
