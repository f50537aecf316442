package control

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/replan/replan/internal/etcdtest"
	"github.com/replan/replan/perf"
)

// CopyToEtcd copies a SQLite store a daemon filled (submits, starts,
// reconfigurations, preemptions, drains, cancels, finishes; owners,
// idempotency keys, GPU health, profile samples, models, timer waits)
// into etcd: every record reads back the same from the etcd store, and
// IDs and versions go on from where SQLite stopped.
func TestCopySQLiteToEtcd(t *testing.T) {
	ctx := context.Background()
	d, fs, st, c, ex := newFaultDaemon(t, sqliteKit())
	faultScenario(t, d, c, ex, func(string) {})
	if fs.failed != 0 {
		t.Fatalf("%d writes failed", fs.failed)
	}
	src := st.(*SQLite)
	// What the scenario does not write.
	cctx := withIdempotencyKey(withCaller(ctx, Identity{User: "alice"}), "alice/k1", "spec", t0)
	id, _ := src.NextJobID(ctx)
	if _, err := src.Commit(cctx, Batch{
		Jobs:           []JobWrite{{Rec: JobRecord{ID: id, Name: "x", Tenant: "research", Class: "guaranteed", Spec: json.RawMessage(`{"a":"<&>"}`), State: StateQueued, SubmittedAt: t0}, Create: true}},
		Events:         []Event{{Kind: "submit", JobID: id, Msg: "x", Data: json.RawMessage(`{"k":[1,2]}`), At: t0}},
		GPUHealth:      []GPUHealthRecord{{Server: "a", GPU: 2, Cordoned: true, Cause: "xid-79", Why: "bus", At: t0, Seen: t0}},
		ProfileSamples: []ProfileSample{{Type: "gpt2/8/deepspeed", Config: "dp8", Plan: perf.Plan{DP: 8, TP: 1, PP: 1, MicroBatch: 2, GA: 1}, Fits: true, IterS: 0.25, At: t0}},
		Models:         []ModelWrite{{Type: "gpt2/8/deepspeed", Data: json.RawMessage(`{"m":1}`), At: t0}},
		TimerWaits:     []TimerWait{{Tier: "rack", GPUs: 8, Wait: time.Minute, At: t0}},
		Drains:         []NodeDrain{{Name: "b", Reason: "fans", By: "bob", Mode: "after-jobs", At: t0}},
		SlowServers:    []SlowServerRecord{{Server: "a", Why: "GPU 2: thermal", At: t0}},
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := src.NextEpoch(ctx); err != nil {
		t.Fatal(err)
	}

	eps := etcdtest.Start(t)
	dst := openEtcdTest(t, eps, "/copy/")
	n, err := CopyToEtcd(ctx, src, dst)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("copied %+v", n)
	if n.Jobs < 6 || n.Events < 20 || n.Decisions < 5 || n.Owners != 1 || n.IdempotencyKey != 1 || n.GPUHealth != 1 || n.SlowServers != 1 {
		t.Errorf("counts %+v", n)
	}
	same := func(what string, a, b any, errA, errB error) {
		t.Helper()
		if errA != nil || errB != nil {
			t.Fatalf("%s: %v / %v", what, errA, errB)
		}
		if !reflect.DeepEqual(a, b) {
			t.Errorf("%s differ:\nsqlite %+v\netcd   %+v", what, a, b)
		}
	}
	ja, ea := src.ListJobs(ctx, JobFilter{})
	jb, eb := dst.ListJobs(ctx, JobFilter{})
	same("jobs", ja, jb, ea, eb)
	if len(ja) != n.Jobs {
		t.Errorf("%d jobs, copied %d", len(ja), n.Jobs)
	}
	for _, j := range ja {
		ha, ea := src.History(ctx, j.ID)
		hb, eb := dst.History(ctx, j.ID)
		same("history of "+j.ID, ha, hb, ea, eb)
		da, ea := src.Decisions(ctx, j.ID, 100000)
		db, eb := dst.Decisions(ctx, j.ID, 100000)
		same("decisions of "+j.ID, da, db, ea, eb)
	}
	{
		a, ea := src.Decisions(ctx, "", 100000)
		b, eb := dst.Decisions(ctx, "", 100000)
		same("decisions", a, b, ea, eb)
	}
	{
		a, ea := src.Events(ctx, 0, 100000)
		b, eb := dst.Events(ctx, 0, 100000)
		same("events", a, b, ea, eb)
		a, ea = src.Events(ctx, 7, 5)
		b, eb = dst.Events(ctx, 7, 5)
		same("a page of events", a, b, ea, eb)
	}
	{
		a, ea := src.Nodes(ctx)
		b, eb := dst.Nodes(ctx)
		same("nodes", a, b, ea, eb)
	}
	{
		a, ea := src.NodeDrains(ctx)
		b, eb := dst.NodeDrains(ctx)
		same("drains", a, b, ea, eb)
	}
	{
		a, ea := src.GPUHealth(ctx)
		b, eb := dst.GPUHealth(ctx)
		same("GPU health", a, b, ea, eb)
	}
	{
		a, ea := src.SlowServers(ctx)
		b, eb := dst.SlowServers(ctx)
		same("slow servers", a, b, ea, eb)
	}
	{
		a, ea := src.Models(ctx)
		b, eb := dst.Models(ctx)
		same("models", a, b, ea, eb)
	}
	{
		a, ea := src.TimerWaits(ctx, time.Time{})
		b, eb := dst.TimerWaits(ctx, time.Time{})
		same("timer waits", a, b, ea, eb)
	}
	{
		a, ea := src.ProfileSamples(ctx, "")
		b, eb := dst.ProfileSamples(ctx, "")
		same("profile samples", a, b, ea, eb)
	}
	{
		a, ea := src.JobOwners(ctx)
		b, eb := dst.JobOwners(ctx)
		same("owners", a, b, ea, eb)
	}
	{
		a, ea := src.AllTransitions(ctx)
		b, eb := dst.AllTransitions(ctx)
		same("transitions", a, b, ea, eb)
		la, ea := src.LaunchDecisions(ctx)
		lb, eb := dst.LaunchDecisions(ctx)
		same("launch decisions", la, lb, ea, eb)
	}
	{
		ja, ha, ea := src.JobByIdempotencyKey(ctx, "alice/k1", t0)
		jb, hb, eb := dst.JobByIdempotencyKey(ctx, "alice/k1", t0)
		same("idempotency key", [2]string{ja, ha}, [2]string{jb, hb}, ea, eb)
	}
	// IDs and versions go on.
	{
		a, ea := src.NextJobID(ctx)
		b, eb := dst.NextJobID(ctx)
		same("next job ID", a, b, ea, eb)
		ea2, ea := src.NextEpoch(ctx)
		eb2, eb := dst.NextEpoch(ctx)
		same("next epoch", ea2, eb2, ea, eb)
		ia, ea := src.AddEvent(ctx, Event{Kind: "k", At: t0})
		ib, eb := dst.AddEvent(ctx, Event{Kind: "k", At: t0})
		same("next event ID", ia, ib, ea, eb)
		da, ea := src.AddDecision(ctx, DecisionRecord{JobID: id, Kind: "wait", At: t0})
		db, eb := dst.AddDecision(ctx, DecisionRecord{JobID: id, Kind: "wait", At: t0})
		same("next decision ID", da, db, ea, eb)
	}
	for _, j := range ja {
		if j.State.Final() {
			continue
		}
		j.State = StateHeld
		va, ea := src.UpdateJob(ctx, j, "hold", t0)
		vb, eb := dst.UpdateJob(ctx, j, "hold", t0)
		same("version after an update of "+j.ID, va, vb, ea, eb)
		ha, ea := src.History(ctx, j.ID)
		hb, eb := dst.History(ctx, j.ID)
		same("history after an update of "+j.ID, ha, hb, ea, eb)
	}
}
