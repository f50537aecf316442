package control

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/replan/replan/internal/waitfor"
	"github.com/replan/replan/jobspec"
)

// Issue 28: a running job's iterations and checkpoint in `jobs`, `job` and
// `queue` came from the stored record, written every 4 × ProgressEvery, so
// they lagged up to 40 s behind what the daemon had observed (docs/cli.md
// promises one publish, at most 1 s). Now every read shows what was last
// observed, while the store still writes progress at its own pace.
func TestReadsShowProgressAsObserved(t *testing.T) {
	ctx := context.Background()
	st, _ := openTest(t)
	ex := &recorder{}
	d, c := newDaemon(t, st, ex, "static")
	j, err := d.Submit(ctx, spec(t, "steady", 8, jobspec.BestEffort))
	if err != nil {
		t.Fatal(err)
	}
	d.Round(ctx)
	if r, _ := st.GetJob(ctx, j.ID); r.State != StateRunning {
		t.Fatalf("not started: %+v", r)
	}
	observe := func(iters, ckpt int) {
		c.advance(time.Second)
		ex.mu.Lock()
		ex.next = Observation{Jobs: []JobObservation{{JobID: j.ID, Iterations: iters, Checkpoint: ckpt}}}
		ex.mu.Unlock()
		d.Observe(ctx)
	}
	observe(5, 0) // the first progress is stored at once
	observe(37, 0)
	if r, _ := st.GetJob(ctx, j.ID); r.Iterations == 37 {
		t.Fatalf("the store has the progress already (ProgressEvery %s): the test shows nothing", d.cfg.ProgressEvery)
	}
	h := (&API{D: d, Version: "test"}).Handler()
	get := func(path string, v any) {
		t.Helper()
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, path, nil))
		if w.Code != 200 {
			t.Fatalf("GET %s: %d %s", path, w.Code, w.Body)
		}
		if err := json.Unmarshal(w.Body.Bytes(), v); err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
	}
	waitfor.T(t, ctx, "reads show 37 iterations", waitfor.Options{Stall: 20 * time.Second}, func() error {
		var list []JobRecord
		get("/v1/jobs?state=running", &list)
		var all []JobRecord
		get("/v1/jobs", &all)
		var det JobDetail
		get("/v1/jobs/"+j.ID, &det)
		var run []RunningJob
		get("/v1/running", &run)
		if len(list) != 1 || len(all) != 1 || len(run) != 1 {
			return fmt.Errorf("%d running jobs listed, %d jobs, %d running", len(list), len(all), len(run))
		}
		if list[0].Iterations != 37 || all[0].Iterations != 37 || det.Job.Iterations != 37 || run[0].Job.Iterations != 37 {
			return fmt.Errorf("iterations: jobs?state=running %d, jobs %d, job %d, running %d", list[0].Iterations, all[0].Iterations, det.Job.Iterations, run[0].Job.Iterations)
		}
		return nil
	})
}
