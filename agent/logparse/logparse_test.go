package logparse

import (
	"math"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func TestParseLine(t *testing.T) {
	tests := []struct {
		name string
		line string
		ok   bool
		want Sample
	}{
		{
			name: "deepspeed throughput with rank prefix",
			line: "[Rank 0] epoch=0/micro_step=10/global_step=10, RunningAvgSamplesPerSec=12.34, CurrSamplesPerSec=13.0, MemAllocated=1.5GB, MaxMemAllocated=3.2GB",
			ok:   true,
			want: Sample{Time: t0, Step: 10, SamplesPerSec: 13, AvgSamplesPerSec: 12.34, Format: FormatDeepSpeedThroughput},
		},
		{
			name: "deepspeed throughput with logger prefix",
			line: "[2026-01-02 03:04:05,123] [INFO] [timer.py:260:stop] epoch=1/micro_step=400/global_step=200, RunningAvgSamplesPerSec=98.7, CurrSamplesPerSec=101.25, MemAllocated=8.3GB, MaxMemAllocated=22.1GB",
			ok:   true,
			want: Sample{Time: t0, Step: 200, SamplesPerSec: 101.25, AvgSamplesPerSec: 98.7, Format: FormatDeepSpeedThroughput},
		},
		{
			name: "deepspeed throughput without step",
			line: "RunningAvgSamplesPerSec=5, CurrSamplesPerSec=6e1",
			ok:   true,
			want: Sample{Time: t0, SamplesPerSec: 60, AvgSamplesPerSec: 5, Format: FormatDeepSpeedThroughput},
		},
		{
			name: "deepspeed pipeline",
			line: "steps: 100 loss: 2.3456 iter time (s): 0.512 samples/sec: 31.25",
			ok:   true,
			want: Sample{Time: t0, Step: 100, SamplesPerSec: 31.25, IterTimeSec: 0.512, Format: FormatDeepSpeedPipeline},
		},
		{
			name: "megatron",
			line: " iteration      100/    1000 | consumed samples:         3200 | elapsed time per iteration (ms): 512.3 | learning rate: 1.500E-04 | global batch size:    32 | lm loss: 6.543210E+00 | loss scale: 65536.0 | number of skipped iterations:   0 | number of nan iterations:   0 |",
			ok:   true,
			want: Sample{Time: t0, Step: 100, SamplesPerSec: 32 / 0.5123, IterTimeSec: 0.5123, Format: FormatMegatron},
		},
		{name: "empty", line: ""},
		{name: "unrelated", line: "loading checkpoint from /ckpt/global_step100"},
		{name: "deepspeed nan", line: "CurrSamplesPerSec=nan, RunningAvgSamplesPerSec=1"},
		{name: "deepspeed zero", line: "CurrSamplesPerSec=0.0"},
		{name: "deepspeed missing number", line: "CurrSamplesPerSec=, MemAllocated=1GB"},
		{name: "pipeline negative", line: "steps: 3 loss: 1 iter time (s): 0.5 samples/sec: -2"},
		{name: "megatron no batch size", line: " iteration 1/ 10 | elapsed time per iteration (ms): 100.0 |"},
		{name: "megatron zero time", line: " iteration 1/ 10 | elapsed time per iteration (ms): 0 | global batch size: 8 |"},
		{name: "megatron huge step", line: " iteration 99999999999999999999999/ 1 | elapsed time per iteration (ms): 10 | global batch size: 8 |", ok: true,
			want: Sample{Time: t0, SamplesPerSec: 800, IterTimeSec: 0.01, Format: FormatMegatron}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := ParseLine(tt.line, t0)
			if ok != tt.ok {
				t.Fatalf("ParseLine ok = %v, want %v (sample %+v)", ok, tt.ok, got)
			}
			if !ok {
				return
			}
			if got.Step != tt.want.Step || got.Format != tt.want.Format || !got.Time.Equal(tt.want.Time) ||
				!near(got.SamplesPerSec, tt.want.SamplesPerSec) || !near(got.AvgSamplesPerSec, tt.want.AvgSamplesPerSec) ||
				!near(got.IterTimeSec, tt.want.IterTimeSec) {
				t.Errorf("ParseLine = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

func FuzzParseLine(f *testing.F) {
	for _, s := range []string{
		"[Rank 0] epoch=0/micro_step=10/global_step=10, RunningAvgSamplesPerSec=12.34, CurrSamplesPerSec=13.0, MemAllocated=1.5GB, MaxMemAllocated=3.2GB",
		"steps: 100 loss: 2.3456 iter time (s): 0.512 samples/sec: 31.25",
		" iteration      100/    1000 | consumed samples:         3200 | elapsed time per iteration (ms): 512.3 | learning rate: 1.500E-04 | global batch size:    32 | lm loss: 6.5E+00 |",
		"CurrSamplesPerSec=1e308 RunningAvgSamplesPerSec=-1e309",
		"elapsed time per iteration (ms): 1e-320 | global batch size: 9223372036854775807",
		"steps: samples/sec: inf",
		"",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		s, ok := ParseLine(line, t0)
		if !ok {
			return
		}
		if !(s.SamplesPerSec > 0) || math.IsInf(s.SamplesPerSec, 0) {
			t.Errorf("bad samples/sec %v from %q", s.SamplesPerSec, line)
		}
		if s.IterTimeSec < 0 || math.IsNaN(s.IterTimeSec) || math.IsInf(s.IterTimeSec, 0) {
			t.Errorf("bad iteration time %v from %q", s.IterTimeSec, line)
		}
		if s.Step < 0 || s.Format == "" {
			t.Errorf("bad step/format %+v from %q", s, line)
		}
	})
}
