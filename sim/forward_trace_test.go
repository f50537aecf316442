package sim

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/replan/replan/dataset"
	"github.com/replan/replan/perf"
	"github.com/replan/replan/sched"
)

// etaStrategy turns the state at a submission into the forward
// simulation's expected arrivals.
type etaStrategy struct {
	name     string
	arrivals func(now float64, seen, later []sched.Job) []sched.Job
}

// TestForwardETAOnTrace measures start estimates offline, like the demo's
// eta_err (|first ETA − start| / wait over the jobs that waited a minute
// or more) but deterministic: the base trace runs in the simulator (the
// measured tables price what runs, the policy sees the fitted models); at
// every submission a forward simulation from that state, pricing with the
// fitted models and each running job's actual rate, estimates the new
// job's start, with three guesses at the jobs still to come: none (what
// the daemon does), the last hour's submissions again an hour later (what
// it did before) and the trace's actual later submissions (an oracle: any
// error left is the forward simulation's own). Opt-in
// (REPLAN_ETA_TRACE=1, REPLAN_ETA_TRACE_FILE=workload-mt.csv for the
// other trace): it takes half a minute.
func TestForwardETAOnTrace(t *testing.T) {
	if os.Getenv("REPLAN_ETA_TRACE") == "" {
		t.Skip("REPLAN_ETA_TRACE=1 runs it")
	}
	dir := os.Getenv("REPLAN_DATA")
	if dir == "" {
		dir = filepath.Join("..", "..", "shared", "data", "morphling")
	}
	ctx := context.Background()
	trace, err := dataset.LoadWorkload(ctx, filepath.Join(dir, "workloads", traceName()))
	if err != nil {
		t.Skip(err)
	}
	var apps []string
	for _, w := range trace {
		apps = append(apps, w.Application)
	}
	models, err := LoadModels(ctx, dir, perf.A800, apps)
	if err != nil {
		t.Fatal(err)
	}
	fitted := &Models{Env: models.Env, Fitted: models.Fitted, Measured: dataset.NewMeasured()}
	strategies := []etaStrategy{
		{"none", func(float64, []sched.Job, []sched.Job) []sched.Job { return nil }},
		{"last hour again", func(now float64, seen, _ []sched.Job) []sched.Job {
			var out []sched.Job
			for _, j := range seen {
				if j.Submit >= now-3600 {
					j.ID = "expected:" + j.ID
					j.Submit += 3600
					out = append(out, j)
				}
			}
			return out
		}},
		{"oracle", func(_ float64, _, later []sched.Job) []sched.Job { return later }},
	}
	p, _ := sched.NewWithRestartCost("replan", 260)
	cfg := Config{Servers: 8, ServersPerRack: 4, RoundInterval: 30, QuotaGPUs: 64, HideMeasured: true}.withDefaults()
	s := &simulator{cfg: cfg, p: p, models: models, r: &rates{m: models, cache: map[rateKey]rateVal{}}}
	if err := s.init(trace); err != nil {
		t.Fatal(err)
	}
	first := map[string]map[string]float64{} // strategy → job → ETA
	starts := map[string]float64{}
	var seen []sched.Job
	s.cfg.OnEvent = func(e Event) {
		switch e.Kind {
		case "start":
			if _, ok := starts[e.Job]; !ok {
				starts[e.Job] = e.Time
			}
		case "submit":
			snap, extra, later := stateAt(s, s.now)
			// The new job is in the snapshot; those submitted at the
			// same instant after it are still to come.
			for _, sj := range snap.Jobs {
				if sj.ID == e.Job {
					sj.Alloc, sj.Plan = nil, perf.Plan{}
					seen = append(seen, sj)
				}
			}
			for _, st := range strategies {
				fp, _ := sched.NewWithRestartCost("replan", 260)
				c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				res, err := Forward(c, snap, fp, fitted, extra, ForwardConfig{RestartCost: 260, RoundEvery: 30, Arrivals: st.arrivals(s.now, seen, later)})
				cancel()
				if err != nil {
					t.Fatal(err)
				}
				if first[st.name] == nil {
					first[st.name] = map[string]float64{}
				}
				if at, ok := res.Start[e.Job]; ok {
					first[st.name][e.Job] = at
				}
			}
		}
	}
	if err := s.loop(ctx); err != nil {
		t.Fatal(err)
	}
	for _, st := range strategies {
		var errs []float64
		for _, j := range s.jobs {
			start, ok := starts[j.w.Name]
			wait := start - j.w.Submit
			if !ok || wait < 60 {
				continue
			}
			at, ok := first[st.name][j.w.Name]
			if !ok {
				continue
			}
			errs = append(errs, math.Abs(at-start)/wait)
		}
		sort.Float64s(errs)
		q := func(p float64) float64 { return errs[min(len(errs)-1, int(math.Ceil(p*float64(len(errs))))-1)] }
		t.Logf("%-16s eta_err p50 %.3f p90 %.3f over %d jobs", st.name, q(0.5), q(0.9), len(errs))
	}
}

func traceName() string {
	if n := os.Getenv("REPLAN_ETA_TRACE_FILE"); n != "" {
		return n
	}
	return "workload-base.csv"
}
