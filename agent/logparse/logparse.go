// Package logparse turns training-log lines into throughput samples.
//
// It understands three formats:
//
//   - DeepSpeed's ThroughputTimer:
//     "[Rank 0] epoch=0/micro_step=10/global_step=10, RunningAvgSamplesPerSec=12.34, CurrSamplesPerSec=13.0, MemAllocated=..., MaxMemAllocated=..."
//   - DeepSpeed's PipelineEngine:
//     "steps: 100 loss: 2.3456 iter time (s): 0.512 samples/sec: 31.25"
//   - Megatron-LM's training log:
//     " iteration      100/    1000 | consumed samples: 3200 | elapsed time per iteration (ms): 512.3 | ... | global batch size:    32 | ..."
//
// ParseLine never panics: a line it does not recognise, or one whose numbers
// are missing, non-finite or non-positive, yields ok == false.
package logparse

import (
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Format names the log format a sample came from.
type Format string

// The formats ParseLine recognises.
const (
	FormatDeepSpeedThroughput Format = "deepspeed-throughput"
	FormatDeepSpeedPipeline   Format = "deepspeed-pipeline"
	FormatMegatron            Format = "megatron"
)

// Sample is one throughput observation parsed from a log line.
type Sample struct {
	Time time.Time `json:"time"`
	// Step is the global step or iteration; 0 when the line does not say.
	Step int64 `json:"step,omitempty"`
	// SamplesPerSec is the instantaneous throughput the line reports (or,
	// for Megatron, global batch size divided by iteration time).
	SamplesPerSec float64 `json:"samples_per_sec"`
	// AvgSamplesPerSec is DeepSpeed's running average, when present.
	AvgSamplesPerSec float64 `json:"avg_samples_per_sec,omitempty"`
	// IterTimeSec is the time of one iteration in seconds, when known.
	IterTimeSec float64 `json:"iter_time_s,omitempty"`
	Format      Format  `json:"format"`
}

// maxLine bounds the work done on one line; longer lines are not parsed.
const maxLine = 64 << 10

const num = `([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|nan|inf|NaN|Inf)`

var (
	reDSCurr    = regexp.MustCompile(`CurrSamplesPerSec=` + num)
	reDSAvg     = regexp.MustCompile(`RunningAvgSamplesPerSec=` + num)
	reDSStep    = regexp.MustCompile(`global_step=(\d+)`)
	rePipeSteps = regexp.MustCompile(`steps:\s*(\d+)`)
	rePipeIter  = regexp.MustCompile(`iter time \(s\):\s*` + num)
	rePipeSPS   = regexp.MustCompile(`samples/sec:\s*` + num)
	reMegIter   = regexp.MustCompile(`iteration\s+(\d+)\s*/\s*\d+\s*\|`)
	reMegTime   = regexp.MustCompile(`elapsed time per iteration \(ms\):\s*` + num)
	reMegGBS    = regexp.MustCompile(`global batch size:\s*(\d+)`)
)

// ParseLine parses one log line read at time now. It reports ok == false for
// lines that carry no throughput sample.
func ParseLine(line string, now time.Time) (Sample, bool) {
	if len(line) > maxLine {
		return Sample{}, false
	}
	switch {
	case strings.Contains(line, "CurrSamplesPerSec="):
		return parseDeepSpeedThroughput(line, now)
	case strings.Contains(line, "samples/sec:") && strings.Contains(line, "steps:"):
		return parsePipeline(line, now)
	case strings.Contains(line, "elapsed time per iteration (ms):"):
		return parseMegatron(line, now)
	}
	return Sample{}, false
}

func parseDeepSpeedThroughput(line string, now time.Time) (Sample, bool) {
	sps, ok := floatOf(reDSCurr, line)
	if !ok || !(sps > 0) {
		return Sample{}, false
	}
	s := Sample{Time: now, SamplesPerSec: sps, Format: FormatDeepSpeedThroughput}
	if avg, ok := floatOf(reDSAvg, line); ok && avg > 0 {
		s.AvgSamplesPerSec = avg
	}
	s.Step, _ = intOf(reDSStep, line)
	return s, true
}

func parsePipeline(line string, now time.Time) (Sample, bool) {
	sps, ok := floatOf(rePipeSPS, line)
	if !ok || !(sps > 0) {
		return Sample{}, false
	}
	s := Sample{Time: now, SamplesPerSec: sps, Format: FormatDeepSpeedPipeline}
	s.Step, _ = intOf(rePipeSteps, line)
	if it, ok := floatOf(rePipeIter, line); ok && it > 0 {
		s.IterTimeSec = it
	}
	return s, true
}

func parseMegatron(line string, now time.Time) (Sample, bool) {
	ms, ok := floatOf(reMegTime, line)
	if !ok || !(ms > 0) {
		return Sample{}, false
	}
	gbs, ok := intOf(reMegGBS, line)
	if !ok || gbs <= 0 {
		return Sample{}, false
	}
	iter := ms / 1000
	sps := float64(gbs) / iter
	if math.IsInf(sps, 0) || math.IsNaN(sps) {
		return Sample{}, false
	}
	s := Sample{Time: now, SamplesPerSec: sps, IterTimeSec: iter, Format: FormatMegatron}
	s.Step, _ = intOf(reMegIter, line)
	return s, true
}

func floatOf(re *regexp.Regexp, line string) (float64, bool) {
	m := re.FindStringSubmatch(line)
	if m == nil {
		return 0, false
	}
	f, err := strconv.ParseFloat(m[1], 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, false
	}
	return f, true
}

func intOf(re *regexp.Regexp, line string) (int64, bool) {
	m := re.FindStringSubmatch(line)
	if m == nil {
		return 0, false
	}
	n, err := strconv.ParseInt(m[1], 10, 64)
	if err != nil {
		return 0, false
	}
	return n, true
}
