// Package timelimit reads and writes the durations of job time limits
// (the job spec's time_limit, the inventory's tenants[].time_limit_default
// and time_limit_max): "12h", "90m", "1h30m", "2d", "1d12h". Parsing is
// strict: a unit on every number, whole seconds, at least a second and at
// most MaxLimit.
package timelimit

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// MaxLimit is the longest time limit accepted (a year).
const MaxLimit = 365 * 24 * time.Hour

// Parse reads a time limit: one or more of a whole number followed by d
// (days), h, m or s, largest unit first, each unit at most once ("2d",
// "12h", "1h30m", "90m", "45s"). The error says what was expected; the
// caller adds file, line and field.
func Parse(s string) (time.Duration, error) {
	bad := func(why string) error {
		hint := ""
		if strings.Contains(s, ":") {
			hint = " (Slurm's 12:00:00 is written 12h here)"
		}
		return fmt.Errorf("want a duration like 12h, 90m, 1h30m or 2d%s, got %q%s", hint, s, why)
	}
	if s == "" {
		return 0, bad("")
	}
	units := []struct {
		c byte
		d time.Duration
	}{{'d', 24 * time.Hour}, {'h', time.Hour}, {'m', time.Minute}, {'s', time.Second}}
	var total time.Duration
	next := 0 // index of the smallest unit allowed next
	rest := s
	for rest != "" {
		i := 0
		for i < len(rest) && rest[i] >= '0' && rest[i] <= '9' {
			i++
		}
		if i == 0 || i == len(rest) {
			return 0, bad("")
		}
		n, err := strconv.ParseInt(rest[:i], 10, 64)
		if err != nil || n > int64(MaxLimit/time.Second) {
			return 0, fmt.Errorf("%q is longer than the longest time limit, %s", s, Format(MaxLimit))
		}
		k := next
		for k < len(units) && units[k].c != rest[i] {
			k++
		}
		if k == len(units) {
			if strings.IndexByte("dhms", rest[i]) >= 0 {
				return 0, bad(": write the units largest first, each once")
			}
			return 0, bad("")
		}
		total += time.Duration(n) * units[k].d
		if total > MaxLimit {
			return 0, fmt.Errorf("%q is longer than the longest time limit, %s", s, Format(MaxLimit))
		}
		next = k + 1
		rest = rest[i+1:]
	}
	if total <= 0 {
		return 0, fmt.Errorf("a time limit must be at least 1s, got %q", s)
	}
	return total, nil
}

// Format writes d as Parse reads it, rounded down to the second, without
// zero units: "12h", "1h30m", "2d", "36h" is "1d12h"; "0s" for zero.
func Format(d time.Duration) string {
	d = d.Truncate(time.Second)
	if d <= 0 {
		return "0s"
	}
	var b strings.Builder
	for _, u := range []struct {
		c string
		d time.Duration
	}{{"d", 24 * time.Hour}, {"h", time.Hour}, {"m", time.Minute}, {"s", time.Second}} {
		if n := d / u.d; n > 0 {
			fmt.Fprintf(&b, "%d%s", n, u.c)
			d -= n * u.d
		}
	}
	return b.String()
}

// Ran writes a time run, to the minute, as hours and minutes: "12h0m",
// "0h45m", "30h5m" (seconds are dropped); under a minute, in seconds:
// "40s" (a limit may be that short).
func Ran(d time.Duration) string {
	d = max(d, 0)
	if d < time.Minute {
		return fmt.Sprintf("%ds", int64(d/time.Second))
	}
	return fmt.Sprintf("%dh%dm", int64(d/time.Hour), int64(d%time.Hour/time.Minute))
}
