package control

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/replan/replan/internal/waitfor"
	"github.com/replan/replan/perf"
	"github.com/replan/replan/sched"
)

// The encoded queue is byte for byte what json.Encoder writes for the
// same entries, whatever their fields hold (timers, estimates or none,
// strings that need escaping, floats in exponent form).
func TestEncodedQueueEqualsEncodingJSON(t *testing.T) {
	at := time.Date(2026, 11, 25, 14, 0, 0, 123456789, time.UTC)
	later := at.Add(90*time.Second + 7*time.Nanosecond)
	tiny, huge, zero, plain := 1e-7, 1e21, 0.0, 12.5
	spec := json.RawMessage(`{"name": "a",  "request": {"gpus": 4}}`) // not compact: encoding/json compacts it
	recs := []JobRecord{
		{ID: "j-000001", Name: "a", Tenant: "research", Class: "best-effort", Spec: spec, State: StateQueued, SubmittedAt: at, Version: 1},
		{ID: "j-000002", Name: "b<&>", Tenant: "t", Class: "guaranteed", Spec: json.RawMessage(`{}`), State: StatePreempted, Reason: "launch failed: \u2028 \"x\" \xff",
			Plan: json.RawMessage(`{"dp":2}`), Placement: json.RawMessage(`[{"name":"a"}]`), SubmittedAt: at.Add(-time.Hour), StartedAt: at, Iterations: 10, Checkpoint: 5, Restarts: 1, Failures: 2, Attempt: 3, Version: 9},
		{ID: "j-000003", Name: "c", State: StateHeld, SubmittedAt: at.In(time.FixedZone("x", 3600)), FinishedAt: later},
	}
	entries := []QueueEntry{
		{Job: recs[0], GPUs: 4, Reason: "not scheduled yet", WaitingS: 3.25, AsOf: at, ETAReason: "not estimated yet"},
		{Job: recs[1], GPUs: 16, Reason: "waits for <rack> & \"more\"", WaitingS: 1e-9, AsOf: at, ETAS: &tiny, ETAAt: &later,
			Timers: &sched.JobTimers{Job: "j-000002", GPUs: 16, ServerTimer: 30, RackTimer: 1e22, Starved: 0.1, AcceptTier: perf.TierRack, Why: "a<b", NwSens: 1}},
		{Job: recs[2], GPUs: 1, Reason: "held by the operator", WaitingS: 123456789012, AsOf: at, ETAS: &huge, ETAAt: &at},
		{Job: recs[0], GPUs: 0, Reason: "", WaitingS: -2, AsOf: later, ETAS: &zero, ETAAt: &later,
			Timers: &sched.JobTimers{Job: "j-000001", Index: 7, ServerTimer: -1e-8, AcceptTier: perf.TierCrossRack, NwSens: 0.25, LossRack: 0.125, LossCross: 3e21, ServerFrom: 4}},
		{Job: recs[1], GPUs: 2, Reason: "x", WaitingS: 0, AsOf: at.In(time.FixedZone("y", -1800)), ETAS: &plain, ETAAt: &later, ETAReason: "ignored \u2029",
			Timers: &sched.JobTimers{AcceptTier: perf.TierServer, Why: "\u2028<\xff>"}},
	}
	for _, q := range [][]QueueEntry{{}, entries[:1], entries} {
		var want bytes.Buffer
		if err := json.NewEncoder(&want).Encode(q); err != nil {
			t.Fatal(err)
		}
		var c encCache
		for pass := 0; pass < 2; pass++ { // the second pass splices cached records
			got, err := c.encodeQueue(q)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want.Bytes()) {
				t.Fatalf("pass %d: encoded queue differs from encoding/json:\n got %s\nwant %s", pass, got, want.Bytes())
			}
		}
	}
}

// appendTimers writes what encoding/json writes for every field of
// sched.JobTimers: random values in every field (a field added later is
// filled too, and must be written).
func TestEncodedTimersEqualEncodingJSON(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	strs := []string{"", "j-000001", "a<b>&\"c\"", "\u2028\xff", "waits for one server until 12.0 h (starved 1.0 h)"}
	floats := []float64{0, math.Copysign(0, -1), 1, -2.5, 1e-7, 1e21, 123456789.125, 1.0 / 3}
	for i := 0; i < 500; i++ {
		var jt sched.JobTimers
		v := reflect.ValueOf(&jt).Elem()
		for f := 0; f < v.NumField(); f++ {
			switch fv := v.Field(f); {
			case fv.Type() == reflect.TypeOf(perf.Tier(0)):
				fv.SetInt(int64(rng.IntN(3)))
			case fv.Kind() == reflect.String:
				fv.SetString(strs[rng.IntN(len(strs))])
			case fv.Kind() == reflect.Int:
				fv.SetInt(rng.Int64N(1<<40) - 1<<39)
			case fv.Kind() == reflect.Float64:
				x := floats[rng.IntN(len(floats))]
				if rng.IntN(2) == 0 {
					x = rng.NormFloat64() * math.Pow(10, float64(rng.IntN(30)-10))
				}
				fv.SetFloat(x)
			default:
				t.Fatalf("JobTimers field %s of kind %s: teach this test and appendTimers about it", v.Type().Field(f).Name, fv.Kind())
			}
		}
		want, err := json.Marshal(&jt)
		if err != nil {
			t.Fatal(err)
		}
		got, err := appendTimers(nil, &jt, map[string][]byte{})
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("timers %+v:\n got %s\nwant %s", jt, got, want)
		}
	}
}

// sameRecord compares every field of JobRecord: a field it forgot would
// let a changed record be served with its old JSON.
func TestSameRecordSeesEveryField(t *testing.T) {
	base := JobRecord{ID: "j-1", Spec: json.RawMessage(`{"a":1}`), SubmittedAt: time.Unix(100, 0).UTC()}
	typ := reflect.TypeOf(base)
	for i := 0; i < typ.NumField(); i++ {
		changed := base
		f := reflect.ValueOf(&changed).Elem().Field(i)
		switch f.Kind() {
		case reflect.String:
			f.SetString(f.String() + "x")
		case reflect.Int, reflect.Int64:
			f.SetInt(f.Int() + 1)
		case reflect.Slice:
			f.SetBytes(append(append([]byte(nil), f.Bytes()...), ' '))
		case reflect.Struct:
			if tm, ok := f.Interface().(time.Time); ok {
				f.Set(reflect.ValueOf(tm.Add(time.Nanosecond)))
				break
			}
			t.Fatalf("field %s: kind %s not covered by this test", typ.Field(i).Name, f.Kind())
		default:
			t.Fatalf("field %s: kind %s not covered by this test", typ.Field(i).Name, f.Kind())
		}
		if sameRecord(&base, &changed) {
			t.Errorf("sameRecord does not see a change of %s", typ.Field(i).Name)
		}
	}
	cp := base
	cp.Spec = append(json.RawMessage(nil), base.Spec...)
	if !sameRecord(&base, &cp) {
		t.Error("sameRecord: an equal copy differs")
	}
	local := base
	local.SubmittedAt = base.SubmittedAt.In(time.FixedZone("x", 3600)) // encodes with +01:00
	if sameRecord(&base, &local) {
		t.Error("sameRecord: the same instant in another zone encodes differently")
	}
}

// GET /v1/queue and GET /v1/jobs?state=... come from encodings cached per
// view: a submit, a start and a cancel show up without any other request
// (never an indefinitely stale answer), the body is what encoding the
// view afresh gives, and the live-state jobs list equals the store's.
func TestEncodedReadsFollowChanges(t *testing.T) {
	ctx := context.Background()
	cl, d, _, _, _ := startAPI(t, "")
	opt := waitfor.Options{Stall: 20 * time.Second, Poll: 10 * time.Millisecond}
	queueIDs := func() (map[string]JobState, []byte, error) {
		body, err := getBody(ctx, cl, "/v1/queue")
		if err != nil {
			return nil, nil, err
		}
		var q []QueueEntry
		if err := json.Unmarshal(body, &q); err != nil {
			return nil, nil, err
		}
		out := map[string]JobState{}
		for _, e := range q {
			out[e.Job.ID] = e.Job.State
		}
		return out, body, nil
	}
	// Prime both keys (the first read encodes), then change things.
	if _, _, err := queueIDs(); err != nil {
		t.Fatal(err)
	}
	if _, err := getBody(ctx, cl, "/v1/jobs?state=queued,running"); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i := 0; i < 6; i++ { // 6 × 4 GPUs on 16: two wait
		rec, err := cl.Submit(ctx, "a.yaml", []byte(strings.Replace(specYAML, "%s", fmt.Sprintf("e%d", i), 1)))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, rec.ID)
	}
	last := ids[len(ids)-1]
	waitfor.T(t, ctx, "the queue shows the last submitted job", opt, func() error {
		q, _, err := queueIDs()
		if err != nil {
			return err
		}
		if _, ok := q[last]; !ok {
			return fmt.Errorf("queue has %d jobs, not %s", len(q), last)
		}
		return nil
	})
	running := func() (map[string]bool, error) {
		body, err := getBody(ctx, cl, "/v1/jobs?state=running")
		if err != nil {
			return nil, err
		}
		var run []JobRecord
		if err := json.Unmarshal(body, &run); err != nil {
			return nil, err
		}
		out := map[string]bool{}
		for _, r := range run {
			out[r.ID] = true
		}
		return out, nil
	}
	// The round starts some: they leave the queue and are listed running.
	waitfor.T(t, ctx, "started jobs listed running, the others queued", opt, func() error {
		run, err := running()
		if err != nil {
			return err
		}
		q, _, err := queueIDs()
		if err != nil {
			return err
		}
		for _, id := range ids {
			if run[id] == (q[id] != "") {
				return fmt.Errorf("%d running, %d in the queue; %s in both or neither", len(run), len(q), id)
			}
		}
		if len(run) == 0 {
			return fmt.Errorf("none running, %d in the queue", len(q))
		}
		return nil
	})
	for _, id := range []string{ids[0], last} {
		if _, err := cl.JobOp(ctx, id, "cancel"); err != nil {
			t.Fatal(err)
		}
		waitfor.T(t, ctx, "the cancelled job "+id+" is neither running nor queued", opt, func() error {
			run, err := running()
			if err != nil {
				return err
			}
			q, _, err := queueIDs()
			if err != nil {
				return err
			}
			if run[id] || q[id] != "" {
				return fmt.Errorf("%s: running %v, queued as %q", id, run[id], q[id])
			}
			return nil
		})
	}
	// The live-state list equals the store's once the view caught up.
	waitfor.T(t, ctx, "jobs?state=queued,running equals the store's list", opt, func() error {
		got, err := getBody(ctx, cl, "/v1/jobs?state=running,queued")
		if err != nil {
			return err
		}
		recs, err := d.cfg.Store.ListJobs(ctx, JobFilter{States: []JobState{StateQueued, StateRunning}})
		if err != nil {
			return err
		}
		want, _ := json.Marshal(recs)
		if !bytes.Equal(got, append(want, '\n')) {
			return fmt.Errorf("served %d bytes, the store's %d", len(got), len(want)+1)
		}
		return nil
	})
	// What is served is the fresh encoding of the view it came from.
	if _, _, err := queueIDs(); err != nil {
		t.Fatal(err)
	}
	d.enc.mu.Lock()
	e := d.enc.entries["queue"]
	body, v := e.body, e.view
	d.enc.mu.Unlock()
	want, _ := json.Marshal(d.withETA(v))
	if !bytes.Equal(body, append(want, '\n')) {
		t.Fatalf("cached queue differs from encoding its view afresh:\n got %s\nwant %s", body, want)
	}
}

// sortedJobIDs reuses the last view's order: whatever jobs came and went
// since, it lists exactly the daemon's jobs in order.
func TestSortedJobIDs(t *testing.T) {
	d := &Daemon{jobs: map[string]*jobState{}}
	check := func(step string) {
		t.Helper()
		got := d.sortedJobIDs()
		want := make([]string, 0, len(d.jobs))
		for id := range d.jobs {
			want = append(want, id)
		}
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Fatalf("%s: got %v, want %v", step, got, want)
		}
		d.published.Store(&readView{jobs: got})
	}
	add := func(ids ...string) {
		for _, id := range ids {
			d.jobs[id] = &jobState{}
		}
	}
	check("empty")
	add("j-000003", "j-000001", "j-000002")
	check("first")
	add("j-000005", "j-000004")
	delete(d.jobs, "j-000002")
	check("added after, one gone")
	check("unchanged")
	add("j-000000") // before the last view's first: sorted afresh
	check("added before")
	add("j-999999", "j-1000000") // the id outgrows its width
	check("wider id")
	for id := range d.jobs {
		delete(d.jobs, id)
	}
	check("all gone")
}

// A read shows everything published before it began: one right after a
// submit or a cancel shows it at once (without the background re-encodes
// of publishes, which would only make it likelier).
func TestEncodedReadSeesOwnWrite(t *testing.T) {
	warm := EncodeKeepWarm
	EncodeKeepWarm = 0
	t.Cleanup(func() { EncodeKeepWarm = warm })
	ctx := context.Background()
	cl, d, _, _, _ := startAPI(t, "")
	// sameAsFresh: what was served for key equals encoding its view afresh.
	sameAsFresh := func(key string, fresh func(v *readView) []byte) {
		t.Helper()
		d.enc.mu.Lock()
		e := d.enc.entries[key]
		body, v := e.body, e.view
		d.enc.mu.Unlock()
		if want := fresh(v); !bytes.Equal(body, want) {
			t.Fatalf("%s: served body differs from encoding its view afresh:\n got %s\nwant %s", key, body, want)
		}
	}
	queued := JobFilter{States: []JobState{StateQueued, StateHeld}}
	has := func(id string) bool {
		q, err := cl.Queue(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range q {
			if e.Job.ID == id {
				return true
			}
		}
		return false
	}
	big := strings.Replace(strings.Replace(specYAML, "%s", "big", 1), "gpus: 4", "gpus: 16", 1)
	if _, err := cl.Submit(ctx, "big.yaml", []byte(big)); err != nil { // takes the whole cluster
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		rec, err := cl.Submit(ctx, "a.yaml", []byte(strings.Replace(big, "name: big", fmt.Sprintf("name: w%d", i), 1)))
		if err != nil {
			t.Fatal(err)
		}
		if !has(rec.ID) {
			t.Fatalf("the queue read right after submitting %s does not show it", rec.ID)
		}
		sameAsFresh("queue", func(v *readView) []byte {
			b, _ := json.Marshal(d.withETA(v))
			return append(b, '\n')
		})
		if _, err := getBody(ctx, cl, "/v1/jobs?state=queued,held"); err != nil {
			t.Fatal(err)
		}
		sameAsFresh(jobsKey(queued), func(v *readView) []byte {
			var recs []JobRecord
			for _, r := range v.recs {
				if r.State == StateQueued || r.State == StateHeld {
					recs = append(recs, r)
				}
			}
			if recs == nil {
				recs = []JobRecord{}
			}
			b, _ := json.Marshal(recs)
			return append(b, '\n')
		})
		if _, err := cl.JobOp(ctx, rec.ID, "cancel"); err != nil {
			t.Fatal(err)
		}
		if has(rec.ID) {
			t.Fatalf("the queue read right after cancelling %s still shows it", rec.ID)
		}
	}

}

// BenchmarkEncodeQueue: a 5,000-entry queue (each with its ~1 KB spec),
// encoded by encoding/json, by the splicing encoder with no record
// encoded yet, and re-encoded with every record's JSON kept (what a new
// view costs): go test -run - -bench EncodeQueue ./control/
func BenchmarkEncodeQueue(b *testing.B) {
	s := spec(&testing.T{}, "bench", 4, "best-effort")
	raw, _ := json.Marshal(s)
	at := time.Date(2026, 11, 25, 14, 0, 0, 0, time.UTC)
	q := make([]QueueEntry, 5000)
	for i := range q {
		q[i] = QueueEntry{Job: JobRecord{ID: fmt.Sprintf("j-%06d", i), Name: "bench", Tenant: "research", Class: "best-effort", Spec: raw, State: StateQueued, SubmittedAt: at, Version: 3},
			GPUs: 4, Reason: "waits for 4 GPUs on one server", WaitingS: float64(i)*1.5 + 0.123456789, AsOf: at, ETAReason: "not estimated yet"}
		// As the replan policy leaves them: timers on every waiting job,
		// with starvation and a reason that vary.
		q[i].Timers = &sched.JobTimers{Job: q[i].Job.ID, Index: i, GPUs: 4, ServerTimer: 1834.25, RackTimer: 43200, Starved: q[i].WaitingS,
			AcceptTier: perf.TierServer, Why: fmt.Sprintf("waits for one server until 0.5 h (starved %.1f h)", q[i].WaitingS/3600), NwSens: 1, LossRack: 0.0312, LossCross: 0.1187}
	}
	b.Run("encoding/json", func(b *testing.B) {
		for range b.N {
			var buf bytes.Buffer
			json.NewEncoder(&buf).Encode(q)
		}
	})
	b.Run("splice/cold", func(b *testing.B) {
		for range b.N {
			var c encCache
			c.encodeQueue(q)
		}
	})
	b.Run("splice/cached", func(b *testing.B) {
		var c encCache
		c.encodeQueue(q)
		b.ResetTimer()
		for range b.N {
			c.encodeQueue(q)
		}
	})
}

// A submit appends its job to the view; the encodings are then extended,
// not redone, and equal encoding the new view afresh.
func TestEncodingExtendedBySubmits(t *testing.T) {
	ctx := context.Background()
	st, _ := openTest(t)
	d, _ := newDaemon(t, st, &recorder{}, "static")
	h := (&API{D: d, Version: "test"}).Handler()
	get := func(path string) []byte {
		rr := httptest.NewRecorder()
		h.ServeHTTP(rr, httptest.NewRequest(http.MethodGet, path, nil))
		if rr.Code != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, rr.Code, rr.Body)
		}
		return rr.Body.Bytes()
	}
	for i := 0; i < 4; i++ {
		if _, err := d.Submit(ctx, spec(t, fmt.Sprintf("x%d", i), 4, "best-effort")); err != nil {
			t.Fatal(err)
		}
		q := get("/v1/queue")
		want, _ := json.Marshal(d.Queue())
		if !bytes.Equal(q, append(want, '\n')) {
			t.Fatalf("after submit %d: GET /v1/queue\n got %s\nwant %s", i, q, want)
		}
		j := get("/v1/jobs?state=queued")
		recs, err := st.ListJobs(ctx, JobFilter{States: []JobState{StateQueued}})
		if err != nil {
			t.Fatal(err)
		}
		want, _ = json.Marshal(recs)
		if !bytes.Equal(j, append(want, '\n')) {
			t.Fatalf("after submit %d: GET /v1/jobs?state=queued\n got %s\nwant %s", i, j, want)
		}
	}
	if extended := d.enc.extended.Load(); extended < 6 { // both keys, after the second, third and fourth submits
		t.Errorf("%d encodings made by extending the one before, want at least 6", extended)
	}
}

// A read never waits for the encoding of what a round, an observation or
// new estimates changed: while an encoding holds the encoder (here the
// test holds it), a read after such a publish answers at once with the
// kept body, as of its view's time. A read after a client operation
// (here a cancel) waits for an encoding that has it, and never shows the
// cancelled job.
func TestEncodedReadDoesNotWaitForARound(t *testing.T) {
	ctx := context.Background()
	d, c, get := readRuleDaemon(t, time.Hour)
	var ids []string
	for i := 0; i < 3; i++ {
		rec, err := d.Submit(ctx, spec(t, fmt.Sprintf("w%d", i), 4, "best-effort"))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, rec.ID)
	}
	before, asOf := get("/v1/queue") // encoded now
	c.advance(time.Minute)
	// An encoding under way, for as long as the test says: held before
	// the publish, so that the re-encode the publish starts cannot finish
	// first.
	d.enc.buildMu.Lock()
	d.publishNow() // what a round's end does: a newer view, no client operation
	if v := d.published.Load(); v.at.Format(time.RFC3339Nano) == asOf {
		d.enc.buildMu.Unlock()
		t.Fatalf("the new view has the old view's time %s", asOf)
	}
	type answer struct {
		body []byte
		asOf string
	}
	got := make(chan answer, 1)
	go func() {
		b, a := get("/v1/queue")
		got <- answer{b, a}
	}()
	select {
	case a := <-got:
		if !bytes.Equal(a.body, before) || a.asOf != asOf {
			t.Errorf("the read answered with a body as of %s, want the kept one as of %s", a.asOf, asOf)
		}
	case <-time.After(time.Minute):
		d.enc.buildMu.Unlock()
		t.Fatal("a queue read waited for the encoding of a view no client operation changed")
	}
	// A cancel: the next read must show it, so it waits for the encoder.
	if _, err := d.Cancel(ctx, ids[0]); err != nil {
		d.enc.buildMu.Unlock()
		t.Fatal(err)
	}
	go func() {
		b, a := get("/v1/queue")
		got <- answer{b, a}
	}()
	d.enc.buildMu.Unlock()
	a := <-got
	var q []QueueEntry
	if err := json.Unmarshal(a.body, &q); err != nil {
		t.Fatal(err)
	}
	for _, e := range q {
		if e.Job.ID == ids[0] {
			t.Fatalf("the read after the cancel shows the cancelled job %s (as of %s)", ids[0], a.asOf)
		}
	}
	if len(q) != len(ids)-1 {
		t.Errorf("the queue after the cancel has %d jobs, want %d", len(q), len(ids)-1)
	}
}

// A read after a submit, when a round published since the kept encoding
// and its encoding is under way (here the test holds the encoder), does
// not wait for it: it answers with the kept body and the submitted jobs
// appended as submitted — exactly the body of the kept view with the
// submits published on it — and a read of running jobs, which a submit
// does not change, answers with its kept body.
func TestEncodedReadAppendsSubmitsWithoutWaiting(t *testing.T) {
	ctx := context.Background()
	d, c, get := readRuleDaemon(t, time.Hour)
	for i := 0; i < 2; i++ {
		if _, err := d.Submit(ctx, spec(t, fmt.Sprintf("w%d", i), 4, "best-effort")); err != nil {
			t.Fatal(err)
		}
	}
	_, asOf := get("/v1/queue") // encoded now
	running, _ := get("/v1/jobs?state=running")
	queued, _ := get("/v1/jobs?state=queued")
	kept := d.published.Load()
	c.advance(time.Minute)
	d.enc.buildMu.Lock() // before the publish: its re-encode waits for the test
	d.publishNow()       // a round's end: a newer view
	type answer struct {
		q, run, queued []byte
		asOf           string
	}
	got := make(chan answer, 1)
	var subs []JobRecord
	go func() {
		for i := 0; i < 2; i++ {
			rec, err := d.Submit(ctx, spec(t, fmt.Sprintf("s%d", i), 2, "best-effort"))
			if err != nil {
				t.Error(err)
			}
			subs = append(subs, rec)
		}
		q, a := get("/v1/queue")
		run, _ := get("/v1/jobs?state=running")
		qd, _ := get("/v1/jobs?state=queued")
		got <- answer{q, run, qd, a}
	}()
	var a answer
	select {
	case a = <-got:
		d.enc.buildMu.Unlock()
	case <-time.After(time.Minute):
		d.enc.buildMu.Unlock()
		t.Fatal("reads after a submit waited for the encoding of a round's view")
	}
	if a.asOf != asOf {
		t.Errorf("as of %s, want the kept view's %s", a.asOf, asOf)
	}
	if !bytes.Equal(a.run, running) {
		t.Errorf("running jobs after a submit:\n got %s\nwant the kept body %s", a.run, running)
	}
	// What publishAdded makes from the kept view with the two submits.
	want := &readView{queue: slices.Clone(kept.queue), recs: slices.Clone(kept.recs), at: kept.at}
	var wantQueue []QueueEntry
	wantQueue = append(wantQueue, d.withETA(want)...)
	for _, r := range subs {
		wantQueue = append(wantQueue, d.withETA(&readView{queue: []QueueEntry{{Job: r, GPUs: 2, Reason: "not scheduled yet"}}, at: r.SubmittedAt})...)
	}
	wq, _ := json.Marshal(wantQueue)
	if !bytes.Equal(a.q, append(wq, '\n')) {
		t.Errorf("queue after two submits:\n got %s\nwant %s", a.q, wq)
	}
	var qd []JobRecord
	if err := json.Unmarshal(a.queued, &qd); err != nil {
		t.Fatal(err)
	}
	var before []JobRecord
	json.Unmarshal(queued, &before)
	if len(qd) != len(before)+2 || qd[len(qd)-1].ID != subs[1].ID || qd[len(qd)-2].ID != subs[0].ID {
		t.Errorf("queued jobs after two submits: %d records, want the %d kept and %s, %s", len(qd), len(before), subs[0].ID, subs[1].ID)
	}
	// A cancel is not a submit: the next read waits for the encoder and
	// shows the newest view.
	if _, err := d.Cancel(ctx, subs[0].ID); err != nil {
		t.Fatal(err)
	}
	q, _ := get("/v1/queue")
	if bytes.Contains(q, []byte(`"id":"`+subs[0].ID+`"`)) {
		t.Errorf("the queue after cancelling %s still shows it", subs[0].ID)
	}
}

// A kept encoding older than MaxReadLag does not answer for a newer view,
// even when what changed carried no event (here a wait reason): a key
// read now and then shows the reasons of now.
func TestEncodedReadOfAnOldViewWaits(t *testing.T) {
	ctx := context.Background()
	d, _, read := readRuleDaemon(t, MaxReadLag)
	get := func() []byte { b, _ := read("/v1/queue"); return b }
	rec, err := d.Submit(ctx, spec(t, "w", 4, "best-effort"))
	if err != nil {
		t.Fatal(err)
	}
	get()          // encoded now
	MaxReadLag = 0 // every kept encoding is old
	d.mu.Lock()
	d.waits[rec.ID] = "a reason of now"
	d.publish() // no event, no client operation
	d.mu.Unlock()
	if q := get(); !bytes.Contains(q, []byte("a reason of now")) {
		t.Errorf("the read answered with an old encoding: %s", q)
	}
}

// readRuleDaemon is a static-policy daemon for the read-rule tests, with
// MaxReadLag set to lag for the test (a loaded machine may take seconds
// between encoding and reading: the tests of the other rules set the age
// bound aside), and a GET that returns the body and its as-of header.
func readRuleDaemon(t *testing.T, lag time.Duration) (*Daemon, *clock, func(path string) ([]byte, string)) {
	t.Helper()
	old := MaxReadLag
	t.Cleanup(func() { MaxReadLag = old })
	MaxReadLag = lag
	st, _ := openTest(t)
	d, c := newDaemon(t, st, &recorder{}, "static")
	h := (&API{D: d, Version: "test"}).Handler()
	return d, c, func(path string) ([]byte, string) {
		rr := httptest.NewRecorder()
		h.ServeHTTP(rr, httptest.NewRequest(http.MethodGet, path, nil))
		if rr.Code != http.StatusOK {
			t.Errorf("GET %s: %d %s", path, rr.Code, rr.Body)
		}
		return rr.Body.Bytes(), rr.Header().Get(AsOfHeader)
	}
}
