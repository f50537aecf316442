package timelimit

import (
	"strings"
	"testing"
	"time"
)

func TestParseAndFormat(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"12h": 12 * time.Hour, "90m": 90 * time.Minute, "1h30m": 90 * time.Minute, "2d": 48 * time.Hour,
		"1d12h": 36 * time.Hour, "45s": 45 * time.Second, "1h0m5s": time.Hour + 5*time.Second, "365d": MaxLimit,
	} {
		got, err := Parse(in)
		if err != nil || got != want {
			t.Errorf("Parse(%q) = %v, %v; want %v", in, got, err, want)
			continue
		}
		back, err := Parse(Format(got))
		if err != nil || back != got {
			t.Errorf("Format(%v) = %q does not read back: %v %v", got, Format(got), back, err)
		}
	}
	if Format(36*time.Hour) != "1d12h" || Format(90*time.Minute) != "1h30m" || Format(0) != "0s" {
		t.Errorf("Format: %q %q %q", Format(36*time.Hour), Format(90*time.Minute), Format(0))
	}
	for in, want := range map[string]string{
		"":                      "want a duration",
		"12":                    "want a duration",
		"h":                     "want a duration",
		"12:00:00":              "Slurm's 12:00:00",
		"30m1h":                 "largest first",
		"1h1h":                  "largest first",
		"1.5h":                  "want a duration",
		"-1h":                   "want a duration",
		"0h":                    "at least 1s",
		"1w":                    "want a duration",
		"366d":                  "longer than",
		"99999999999999999999h": "longer than",
	} {
		if _, err := Parse(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%q): %v, want an error with %q", in, err, want)
		}
	}
	if Ran(12*time.Hour+30*time.Second) != "12h0m" || Ran(45*time.Minute) != "0h45m" {
		t.Errorf("Ran: %q %q", Ran(12*time.Hour+30*time.Second), Ran(45*time.Minute))
	}
}

// A limit may be as short as 1s: a job stopped at "40s" read "after
// running 0h0m", as if it had not run. Under a minute is said in seconds.
func TestRanUnderAMinute(t *testing.T) {
	for d, want := range map[time.Duration]string{
		40 * time.Second:                      "40s",
		40*time.Second + 900*time.Millisecond: "40s",
		0:                                     "0s",
		-time.Second:                          "0s",
		time.Minute:                           "0h1m",
		12*time.Hour + 30*time.Second:         "12h0m",
	} {
		if got := Ran(d); got != want {
			t.Errorf("Ran(%s) = %q, want %q", d, got, want)
		}
	}
}
