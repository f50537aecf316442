package sim_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/replan/replan/sim"
)

// TestReportJSONContract pins the field names `replan sim --json` promises.
func TestReportJSONContract(t *testing.T) {
	jobs := smallTrace(t, 0.4)
	r := run(t, jobs, "morphling", sim.Config{Servers: 2})
	data, err := json.Marshal(sim.Report{Policies: []*sim.Result{r}})
	if err != nil {
		t.Fatal(err)
	}
	var got map[string][]map[string]any
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	p := got["policies"][0]
	fields := []string{"avg_jct_s", "p50_jct_s", "p99_jct_s", "makespan_s", "queue_s", "restarts", "sla_violation_s"}
	for _, f := range append([]string{"policy", "classes"}, fields...) {
		if _, ok := p[f]; !ok {
			t.Errorf("policy object lacks %q", f)
		}
	}
	classes, _ := p["classes"].(map[string]any)
	for _, c := range []string{"guaranteed", "best-effort"} {
		m, ok := classes[c].(map[string]any)
		if !ok {
			t.Fatalf("classes lacks %q", c)
		}
		for _, f := range fields {
			if _, ok := m[f]; !ok {
				t.Errorf("classes.%s lacks %q", c, f)
			}
		}
	}
	var buf bytes.Buffer
	if err := sim.WriteTable(&buf, []*sim.Result{r}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"avg JCT (h)", "morphling", "guar.", "BE", "(1.00×)"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, buf.String())
		}
	}
}
