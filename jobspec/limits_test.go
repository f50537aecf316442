package jobspec

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

const limitsBase = `version: 1
name: dep
tenant: t
class: best-effort
model: gpt2
framework: deepspeed
workdir: /w
entrypoint: train.py
global_batch: 16
iterations: 10
checkpoint_dir: /c
request: {gpus: 1}
`

func TestParseTimeLimitAndAfter(t *testing.T) {
	s, err := Parse("j.yaml", []byte(limitsBase+`time_limit: 1d12h
after:
  - {job: j-000012, when: ok}
  - job: j-000013
  - {job: j-000014, when: failed}
  - {job: j-000015, when: any}
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if time.Duration(s.TimeLimit) != 36*time.Hour {
		t.Errorf("time limit %v", s.TimeLimit)
	}
	want := []Dep{{"j-000012", WhenOK}, {"j-000013", WhenOK}, {"j-000014", WhenFailed}, {"j-000015", WhenAny}}
	if len(s.After) != len(want) {
		t.Fatalf("after %+v", s.After)
	}
	for i := range want {
		if s.After[i] != want[i] {
			t.Errorf("after[%d] = %+v, want %+v", i, s.After[i], want[i])
		}
	}
	if s.Line("after[1].job") != 16 || s.Line("time_limit") != 13 {
		t.Errorf("lines: after[1].job %d, time_limit %d", s.Line("after[1].job"), s.Line("time_limit"))
	}
	// Stored as JSON and read back (the daemon's recovery): the same.
	raw, _ := json.Marshal(s)
	if !strings.Contains(string(raw), `"time_limit":"1d12h"`) || !strings.Contains(string(raw), `{"job":"j-000014","when":"failed"}`) {
		t.Errorf("JSON %s", raw)
	}
	var back Spec
	if err := json.Unmarshal(raw, &back); err != nil || back.TimeLimit != s.TimeLimit || len(back.After) != 4 || back.After[2] != want[2] {
		t.Errorf("read back %+v %+v: %v", back.TimeLimit, back.After, err)
	}
	// Absent: no limit, no dependencies, and nothing in the JSON.
	s, err = Parse("j.yaml", []byte(limitsBase), nil)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ = json.Marshal(s)
	if s.TimeLimit != 0 || s.After != nil || strings.Contains(string(raw), "time_limit") || strings.Contains(string(raw), "after") {
		t.Errorf("absent: %v %v %s", s.TimeLimit, s.After, raw)
	}
}

func TestParseTimeLimitAndAfterProblems(t *testing.T) {
	for _, c := range []struct{ yaml, want string }{
		{"time_limit: 12\n", `j.yaml:13: time_limit: want a duration like 12h, 90m, 1h30m or 2d, got "12"`},
		{"time_limit: 12:00:00\n", `j.yaml:13: time_limit: want a duration like 12h, 90m, 1h30m or 2d (Slurm's 12:00:00 is written 12h here)`},
		{"time_limit: 0m\n", `j.yaml:13: time_limit: a time limit must be at least 1s, got "0m"`},
		{"time_limit: 30m2h\n", `j.yaml:13: time_limit: want a duration like 12h, 90m, 1h30m or 2d, got "30m2h": write the units largest first, each once`},
		{"time_limit: [1h]\n", `j.yaml:13: time_limit:`},
		{"after: j-000012\n", `j.yaml:13: after:`},
		{"after:\n  - {job: j-000012, when: done}\n", `j.yaml:14: after[0].when: want ok, any or failed, got "done"`},
		{"after:\n  - {when: ok}\n", `j.yaml:14: after[0].job: missing required field`},
		{"after:\n  - {job: j-000012}\n  - {job: j-000012, when: any}\n", `j.yaml:15: after[1].job: job j-000012 is already listed (after[0])`},
		{"after:\n  - {job: \"j 12\"}\n", `j.yaml:14: after[0].job: want a job ID like j-000012, got "j 12"`},
		{"after:\n  - {job: j-1, until: ok}\n", `j.yaml:14: after[0].until:`},
	} {
		_, err := Parse("j.yaml", []byte(limitsBase+c.yaml), nil)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: got %v, want %q", c.yaml, err, c.want)
		}
	}
}
