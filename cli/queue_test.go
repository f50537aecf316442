package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/replan/replan/control"
)

// TestQueueStartTable: `queue --start` lists the soonest estimated start
// first, like squeue --start, and a job without an estimate last with the
// reason there is none.
func TestQueueStartTable(t *testing.T) {
	asOf := time.Date(2026, 1, 5, 9, 0, 0, 0, time.UTC)
	at := func(s float64) (*float64, *time.Time) {
		t := asOf.Add(time.Duration(s * float64(time.Second)))
		return &s, &t
	}
	q := []control.QueueEntry{
		{Job: control.JobRecord{ID: "j-1", Name: "late", State: control.StateQueued}, GPUs: 8, Reason: "cluster full", AsOf: asOf},
		{Job: control.JobRecord{ID: "j-2", Name: "held", State: control.StateHeld}, GPUs: 4, Reason: "held by the operator", ETAReason: "held by the operator: no start until released", AsOf: asOf},
		{Job: control.JobRecord{ID: "j-3", Name: "soon", State: control.StateQueued}, GPUs: 2, Reason: "needs 2 GPUs", AsOf: asOf},
	}
	q[0].ETAS, q[0].ETAAt = at(3600)
	q[2].ETAS, q[2].ETAAt = at(120)
	sortByETA(q)
	var b bytes.Buffer
	if err := writeStartTable(&b, q); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 4 || !strings.Contains(lines[0], "START_TIME") || !strings.Contains(lines[1], "j-3") || !strings.Contains(lines[2], "j-1") || !strings.Contains(lines[3], "j-2") {
		t.Fatalf("order or header wrong:\n%s", b.String())
	}
	if !strings.Contains(lines[1], "2m0s") || !strings.Contains(lines[3], "N/A") || !strings.Contains(lines[3], "no start until released") {
		t.Errorf("cells wrong:\n%s", b.String())
	}
	if got := etaShort(q[0]); !strings.HasPrefix(got, "in 2m0s (") {
		t.Errorf("etaShort = %q", got)
	}
}
