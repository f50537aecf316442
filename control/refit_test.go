package control

import (
	"context"
	"testing"
	"time"

	"github.com/replan/replan/jobspec"
	"github.com/replan/replan/perf"
)

// TestRefitEventsOnePerModelChange: a job whose measured speed the model
// keeps missing by more than 10% does not produce a refit event on every
// observation; only when the fitted model changes.
func TestRefitEventsOnePerModelChange(t *testing.T) {
	st, _ := openTest(t)
	c := &clock{t: time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)}
	slow := func(a perf.Arch) perf.Model {
		m := perf.DefaultModel(a, perf.A800)
		m.Forward.Alpha *= 3
		m.Forward.Beta *= 3
		return m
	}
	ex := NewSimExecutor(c.now, []string{"a", "b"}, nil, slow, 0)
	d, _ := newDaemonWith(t, st, ex, "static", c)
	ctx := context.Background()
	for i, g := range []int{8, 4, 2, 1} {
		d.Submit(ctx, spec(t, "j"+string(rune('0'+i)), g, jobspec.BestEffort))
	}
	d.Round(ctx)
	for range 40 {
		c.advance(5 * time.Second)
		if err := d.Observe(ctx); err != nil {
			t.Fatal(err)
		}
	}
	evs, err := st.Events(ctx, 0, 10000)
	if err != nil {
		t.Fatal(err)
	}
	refits := 0
	for _, e := range evs {
		if e.Kind == "refit" {
			refits++
		}
	}
	if refits > 4 {
		t.Errorf("%d refit events in 40 observations of 4 jobs: one per observation, not per change of the model", refits)
	}
	t.Logf("%d refit events", refits)
}
