package jobspec

// The time limit (time_limit) and the dependencies (after) of a job spec.

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/replan/replan/internal/timelimit"
	"github.com/replan/replan/internal/yamlcheck"
)

// Duration is a time limit; in JSON it is written as in the spec ("12h",
// "1h30m"), and read back the same way.
type Duration time.Duration

// String writes d as a spec writes it ("12h", "1d12h").
func (d Duration) String() string { return timelimit.Format(time.Duration(d)) }

// MarshalJSON writes d as a string ("12h").
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// UnmarshalJSON reads a string written by MarshalJSON (or a number of
// nanoseconds).
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		var n int64
		if err2 := json.Unmarshal(b, &n); err2 != nil {
			return fmt.Errorf("time limit: %w", err)
		}
		*d = Duration(n)
		return nil
	}
	v, err := timelimit.Parse(s)
	if err != nil {
		return fmt.Errorf("time limit: %w", err)
	}
	*d = Duration(v)
	return nil
}

// When is the end a dependency waits for.
type When string

// Dependency conditions: the job it names finished (ok), ended in any
// final state (any), or failed or was cancelled (failed).
const (
	WhenOK     When = "ok"
	WhenAny    When = "any"
	WhenFailed When = "failed"
)

// Dep is one entry of the spec's after: the job waits until job Job has
// ended as When says.
type Dep struct {
	Job  string `json:"job"`
	When When   `json:"when"`
}

// String is "j-000012 to finish ok".
func (d Dep) String() string {
	switch d.When {
	case WhenAny:
		return d.Job + " to end"
	case WhenFailed:
		return d.Job + " to fail"
	}
	return d.Job + " to finish ok"
}

// parseTimeLimit reads the spec's time_limit.
func parseTimeLimit(w *yamlcheck.Walker, v *yaml.Node, f string) Duration {
	if s, ok := w.Str(v, f); ok {
		d, err := timelimit.Parse(s)
		if err != nil {
			w.Errf(v, f, "%v", err)
			return 0
		}
		return Duration(d)
	}
	return 0
}

// parseAfter reads the spec's after: a list of {job: ID, when: ok|any|failed}
// (when defaults to ok), each job once; line records each entry's line.
func parseAfter(w *yamlcheck.Walker, v *yaml.Node, f string, line func(string, *yaml.Node)) []Dep {
	deps := []Dep{}
	w.List(v, f, func(i int, p string, item *yaml.Node) {
		line(p, item)
		d := Dep{When: WhenOK}
		got := w.Mapping(item, p, map[string]func(string, *yaml.Node){
			"job": func(f string, v *yaml.Node) {
				line(f, v)
				if id, ok := w.Str(v, f); ok {
					noControl(w, v, f, id)
					if strings.ContainsAny(id, " \t") {
						w.Errf(v, f, "want a job ID like j-000012, got %q", id)
					}
					d.Job = id
				}
			},
			"when": func(f string, v *yaml.Node) {
				line(f, v)
				if s, ok := w.Str(v, f); ok {
					switch When(s) {
					case WhenOK, WhenAny, WhenFailed:
						d.When = When(s)
					default:
						w.Errf(v, f, "want ok, any or failed, got %q", s)
					}
				}
			},
		})
		if item.Kind == yaml.MappingNode && got["job"] == nil {
			w.Errf(item, p+".job", "missing required field")
			return
		}
		if d.Job == "" {
			return
		}
		if k := slices.IndexFunc(deps, func(o Dep) bool { return o.Job == d.Job }); k >= 0 {
			w.Errf(got["job"], p+".job", "job %s is already listed (after[%d]): list each job once", d.Job, k)
			return
		}
		deps = append(deps, d)
	})
	return deps
}
