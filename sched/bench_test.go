package sched_test

import (
	"context"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"testing"
	"time"

	"github.com/replan/replan/perf"

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

// BenchmarkReplayCircleMemo replays a generated Philly-like trace
// (REPLAN_REPLAY_JOBS jobs, default 20,000, seed 1, load 1.5) on 1,024
// servers in racks of 32 at a 60 s round interval under replan, with the
// rack-circle memo off (the path before it) and on, back to back in the
// same process (alternating which goes first), and reports each run's
// CPU seconds and their ratio. The two runs must agree on every metric.
// It runs only with REPLAN_REPLAY_BENCH=1 (a pair takes half a minute:
// `make bench` runs it on its own line, not at -benchtime 20x).
func BenchmarkReplayCircleMemo(b *testing.B) {
	if os.Getenv("REPLAN_REPLAY_BENCH") != "1" {
		b.Skip("skipped: set REPLAN_REPLAY_BENCH=1 (make bench does)")
	}
	n := 20000
	if v, err := strconv.Atoi(os.Getenv("REPLAN_REPLAY_JOBS")); err == nil && v > 0 {
		n = v
	}
	jobs, err := sim.Generate(sim.GenConfig{Jobs: n, Servers: 1024, Seed: 1, Load: 1.5})
	if err != nil {
		b.Fatal(err)
	}
	models := sim.DefaultModels(perf.A800)
	cfg := sim.Config{Servers: 1024, ServersPerRack: 32, RoundInterval: 60}
	var cpu [2]time.Duration
	modes := []string{"off", "on"}
	for n := 0; b.Loop(); n++ {
		var res [2]*sim.Result
		for k := range modes {
			k = (k + n) % 2 // alternate which runs first
			p := sched.NewReplan(sched.DefaultOptions(), sched.DefaultNetOptions())
			if err := sched.SetCircleMemo(p, modes[k]); err != nil {
				b.Fatal(err)
			}
			runtime.GC()
			c0 := sim.CPUTime()
			// labelled for profiles: go tool pprof -tagfocus memo=on
			pprof.Do(context.Background(), pprof.Labels("memo", modes[k]), func(ctx context.Context) {
				res[k], err = sim.Run(ctx, jobs, models, p, cfg)
			})
			if err != nil {
				b.Fatal(err)
			}
			cpu[k] += sim.CPUTime() - c0
			b.Logf("memo %s: %.2f CPU-s, %+v", modes[k], (sim.CPUTime() - c0).Seconds(), sched.CircleStatsOf(p))
		}
		if a, c := res[0], res[1]; a.AvgJCT != c.AvgJCT || a.Makespan != c.Makespan || a.Rounds != c.Rounds {
			b.Fatalf("memo off: avg JCT %v, makespan %v, %d rounds; on: %v, %v, %d", a.AvgJCT, a.Makespan, a.Rounds, c.AvgJCT, c.Makespan, c.Rounds)
		}
	}
	off, on := cpu[0].Seconds()/float64(b.N), cpu[1].Seconds()/float64(b.N)
	b.ReportMetric(off, "off-cpu-s/op")
	b.ReportMetric(on, "on-cpu-s/op")
	b.ReportMetric(off/on, "speedup")
}
