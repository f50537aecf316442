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

func benchReplan(b *testing.B, servers, waiting int) {
	s := sim.LargeSnapshot(servers, waiting, 0.75, 7)
	p := sched.NewReplan(sched.DefaultOptions(), sched.DefaultNetOptions())
	p.Schedule(s)
	b.ResetTimer()
	c0 := sim.CPUTime()
	for b.Loop() {
		p.Schedule(s)
	}
	// CPU time is what a busy shared machine does not distort.
	b.ReportMetric(float64((sim.CPUTime()-c0).Microseconds())/1e3/float64(b.N), "cpu-ms/op")
}

// BenchmarkReplanRound8k is one replan round (the default policy) at
// 1,024 servers in racks of 32 (8,192 GPUs) with 5,000 waiting jobs,
// caches warm (target: <= 30 ms; `replan sim bench` prints the table).
func BenchmarkReplanRound8k(b *testing.B) { benchReplan(b, 1024, 5000) }

// BenchmarkReplanRound32k is the same at 4,096 servers (32,768 GPUs) with
// 20,000 waiting jobs (target: <= 150 ms).
func BenchmarkReplanRound32k(b *testing.B) { benchReplan(b, 4096, 20000) }

// BenchmarkReplanRound8kLabels is BenchmarkReplanRound8k with half the
// servers labelled ib-hdr and every tenth job requiring it (node
// features: each constrained placement hides the other servers).
func BenchmarkReplanRound8kLabels(b *testing.B) {
	s := sim.LargeSnapshot(1024, 5000, 0.75, 7)
	for i := range s.Servers {
		if i%2 == 0 {
			s.Servers[i].Labels = map[string]string{"ib-hdr": ""}
		}
	}
	for i := range s.Jobs {
		if j := &s.Jobs[i]; !j.Running() && i%10 == 0 {
			j.Labels = []string{"ib-hdr"}
		}
	}
	p := sched.NewReplan(sched.DefaultOptions(), sched.DefaultNetOptions())
	p.Schedule(s)
	b.ResetTimer()
	c0 := sim.CPUTime()
	for b.Loop() {
		p.Schedule(s)
	}
	b.ReportMetric(float64((sim.CPUTime()-c0).Microseconds())/1e3/float64(b.N), "cpu-ms/op")
}
