package control

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/replan/replan/internal/etcdtest"
	"github.com/replan/replan/internal/waitfor"
)

// followFixture is a leader daemon on a real etcd (its API on TLS, as
// elected, with the members' shared token) and a follower with its view
// of the store, in one process: what two `replan daemon --store etcd`
// members run.
type followFixture struct {
	t          *testing.T
	d          *Daemon
	st         *EtcdStore
	cli        *clientv3.Client // the follower's
	view       *FollowView
	elF        *Election
	leader     string // base URL
	follower   string
	killLeader func()
	toks       map[string]string
	hc         *http.Client
	// The leader's simulated cluster and clock.
	ex *SimExecutor
	c  *clock
}

const followSecret = "sk-live-follow-0123456789"

func startFollowFixture(t *testing.T, endpoints []string) *followFixture {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	const shared = "members-token"
	fx := &followFixture{t: t, toks: map[string]string{"alice": "tok-alice", "bob": "tok-bob", "root-ish": "tok-admin"},
		hc: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}}
	acc := &Access{DaemonUID: -2, Admins: []string{"root-ish"}, Tokens: map[string][sha256.Size]byte{}, Tenants: []TenantAccess{
		{Name: "research", Users: []string{"alice"}},
		{Name: "product", Users: []string{"bob"}},
	}}
	for u, tok := range fx.toks {
		acc.Tokens[u] = sha256.Sum256([]byte(tok))
	}

	// The leader: elected, its daemon on the etcd store, its API on TLS.
	fx.st = openEtcdTest(t, endpoints, "/replan/")
	c := &clock{t: time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)}
	ex := NewSimExecutor(c.now, []string{"a", "b"}, nil, nil, 0)
	fx.d, _ = newDaemonWith(t, fx.st, ex, "morphling", c)
	fx.ex, fx.c = ex, c
	dir := t.TempDir()
	cert, _, err := LoadOrCreateCert(filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem"), []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	ll, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fx.leader = "https://" + ll.Addr().String()
	lctx, lcancel := context.WithCancel(ctx)
	go Serve(lctx, tls.NewListener(ll, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}),
		(&API{D: fx.d, Version: "test", Token: shared, Access: acc}).Handler())
	cliL := electionClient(t, endpoints[0])
	elL, err := NewElection(ElectionConfig{Client: cliL, Prefix: "/replan/election/", TTL: 2 * time.Second,
		Self: Member{Name: "leader", Addr: fx.leader, Fingerprint: Fingerprint(cert.Certificate[0])}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := elL.Campaign(ctx); err != nil {
		t.Fatal(err)
	}
	// Killed: it answers nothing and renews nothing; its key stays until
	// its lease expires.
	fx.killLeader = func() { lcancel(); ll.Close(); cliL.Close() }

	// The follower: the same members' API, and its view.
	fx.cli = electionClient(t, endpoints[0])
	fx.elF, err = NewElection(ElectionConfig{Client: fx.cli, Prefix: "/replan/election/", TTL: 2 * time.Second, Self: Member{Name: "follower", Addr: "https://follower:1"}})
	if err != nil {
		t.Fatal(err)
	}
	fx.view = NewFollowView(fx.cli, "/replan/", nil)
	go fx.view.Run(ctx)
	f := &Follower{API: &API{Access: acc, Token: shared}, El: fx.elF, Token: shared, Version: "test", View: fx.view}
	fl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fx.follower = "http://" + fl.Addr().String()
	go Serve(ctx, fl, f.Handler())
	return fx
}

// call is one request to base as user: its status, headers and body.
func (fx *followFixture) call(base, user, method, path string, body any) (int, http.Header, []byte) {
	fx.t.Helper()
	var in io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		in = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, base+path, in)
	req.Header.Set("Authorization", "Bearer "+fx.toks[user])
	resp, err := fx.hc.Do(req)
	if err != nil {
		fx.t.Fatalf("%s %s%s as %s: %v", method, base, path, user, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b
}

func (fx *followFixture) submit(user, name string) JobRecord {
	fx.t.Helper()
	y := strings.Replace(specYAML, "%s", name, 1) + "env: {WANDB_API_KEY: " + followSecret + ", NCCL_DEBUG: WARN}\n"
	code, _, body := fx.call(fx.leader, user, "POST", "/v1/jobs", SubmitRequest{File: name + ".yaml", Spec: y})
	var rec JobRecord
	if err := json.Unmarshal(body, &rec); err != nil || code != http.StatusCreated {
		fx.t.Fatalf("%s submitting %s: %d %s", user, name, code, body)
	}
	return rec
}

// runningAndQueued submits two jobs of alice's with a round between
// (the first runs) and waits for the second in the follower's view, whose
// revision it returns.
func (fx *followFixture) runningAndQueued() (first, second JobRecord, rev int64) {
	fx.t.Helper()
	first = fx.submit("alice", "first")
	if _, err := fx.d.Round(context.Background()); err != nil {
		fx.t.Fatal(err)
	}
	second = fx.submit("alice", "second")
	return first, second, fx.waitInView(second.ID)
}

// waitInView waits until the follower answers GET /v1/jobs/{id} from its
// view, and returns the view's revision it answered at.
func (fx *followFixture) waitInView(id string) int64 {
	fx.t.Helper()
	var rev int64
	waitfor.T(fx.t, context.Background(), id+" in the follower's view", waitfor.Options{Stall: 20 * time.Second}, func() error {
		code, h, body := fx.call(fx.follower, "alice", "GET", "/v1/jobs/"+id, nil)
		if code != http.StatusOK || h.Get(HeaderViewRevision) == "" {
			return fmt.Errorf("%d, view revision %q: %.200s", code, h.Get(HeaderViewRevision), body)
		}
		rev, _ = strconv.ParseInt(h.Get(HeaderViewRevision), 10, 64)
		return nil
	})
	return rev
}

// sameJSON fails unless a and b decode to the same value.
func sameJSON(t *testing.T, what string, a, b []byte) {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatalf("%s: %v: %s", what, err, a)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatalf("%s: %v: %s", what, err, b)
	}
	if !reflect.DeepEqual(x, y) {
		t.Errorf("%s: the follower answered\n%s\nthe leader\n%s", what, a, b)
	}
}

// Issue 27, item 2: a follower answers the reads of stored records
// (jobs, a job, events) from its watch-fed view, with the leader's
// answer, the view's headers and the leader's redaction; a job submitted
// through the leader appears in the view; a running job's detail (live
// figures) is the leader's.
func TestFollowViewAnswersReadsAsTheLeader(t *testing.T) {
	ctx := context.Background()
	fx := startFollowFixture(t, etcdtest.Start(t))
	j1, j2, rev := fx.runningAndQueued()
	kv, err := fx.cli.Get(ctx, "/replan/jobs/"+j2.ID)
	if err != nil || len(kv.Kvs) == 0 {
		t.Fatalf("%s in etcd: %v", j2.ID, err)
	}
	if rev < kv.Kvs[0].ModRevision {
		t.Errorf("the view answered %s at revision %d, before the job was stored (revision %d)", j2.ID, rev, kv.Kvs[0].ModRevision)
	}
	if rec, _ := fx.st.GetJob(ctx, j1.ID); rec.State != StateRunning {
		t.Fatalf("%s is %s after the round, want running", j1.ID, rec.State)
	}

	for _, path := range []string{"/v1/jobs", "/v1/jobs?state=queued", "/v1/jobs?state=running,queued&user=alice", "/v1/jobs/" + j2.ID, "/v1/events", "/v1/events?after=1", "/v1/jobs/j-999999"} {
		for _, user := range []string{"alice", "bob", "root-ish"} {
			fcode, fh, fbody := fx.call(fx.follower, user, "GET", path, nil)
			lcode, _, lbody := fx.call(fx.leader, user, "GET", path, nil)
			if fcode != lcode {
				t.Errorf("GET %s as %s: the follower answered %d, the leader %d", path, user, fcode, lcode)
			}
			sameJSON(t, "GET "+path+" as "+user, fbody, lbody)
			if r, _ := strconv.ParseInt(fh.Get(HeaderViewRevision), 10, 64); r < rev || fh.Get(HeaderView) != "current" || fh.Get(HeaderLeader) != "" {
				t.Errorf("GET %s as %s through the follower: headers %v; want it answered from a current view at revision >= %d, not forwarded", path, user, fh, rev)
			}
		}
	}

	// Redaction as on the leader: the owner and admins see env values in
	// the job's detail, others the keys only; lists carry keys only.
	for user, see := range map[string]bool{"alice": true, "root-ish": true, "bob": false} {
		_, _, body := fx.call(fx.follower, user, "GET", "/v1/jobs/"+j2.ID, nil)
		var jd JobDetail
		json.Unmarshal(body, &jd)
		if got := bytes.Contains(jd.Job.Spec, []byte(followSecret)); got != see || !bytes.Contains(jd.Job.Spec, []byte("WANDB_API_KEY")) {
			t.Errorf("GET /v1/jobs/%s through the follower as %s: spec %s; want the env key, its value shown %v", j2.ID, user, jd.Job.Spec, see)
		}
		_, _, list := fx.call(fx.follower, user, "GET", "/v1/jobs", nil)
		if bytes.Contains(list, []byte(followSecret)) || !bytes.Contains(list, []byte(HiddenValue)) {
			t.Errorf("GET /v1/jobs through the follower as %s shows an env value: %s", user, list)
		}
	}

	// A running job's detail carries the leader's live figures: forwarded.
	fcode, fh, fbody := fx.call(fx.follower, "alice", "GET", "/v1/jobs/"+j1.ID, nil)
	if fcode != http.StatusOK || fh.Get(HeaderLeader) != fx.leader || fh.Get(HeaderViewRevision) != "" {
		t.Errorf("GET /v1/jobs/%s (running) through the follower: %d %v; want the leader's answer", j1.ID, fcode, fh)
	}
	_, _, lbody := fx.call(fx.leader, "alice", "GET", "/v1/jobs/"+j1.ID, nil)
	sameJSON(t, "GET /v1/jobs/"+j1.ID, fbody, lbody)

	// Writes are the leader's.
	code, h, body := fx.call(fx.follower, "alice", "POST", "/v1/jobs/"+j2.ID+"/hold", nil)
	if code != http.StatusOK || h.Get(HeaderLeader) != fx.leader {
		t.Fatalf("hold through the follower: %d %v %s", code, h, body)
	}
	// A write through the follower is answered once its view has it: a
	// read through it after the write sees the write.
	_, h, body = fx.call(fx.follower, "alice", "GET", "/v1/jobs/"+j2.ID, nil)
	var jd JobDetail
	json.Unmarshal(body, &jd)
	if jd.Job.State != StateHeld || h.Get(HeaderViewRevision) == "" {
		t.Errorf("%s read through the follower after its hold through it: %s, headers %v; want held, from the view", j2.ID, jd.Job.State, h)
	}
	y := strings.Replace(specYAML, "%s", "third", 1)
	code, _, body = fx.call(fx.follower, "alice", "POST", "/v1/jobs", SubmitRequest{File: "third.yaml", Spec: y})
	var j3 JobRecord
	if err := json.Unmarshal(body, &j3); err != nil || code != http.StatusCreated {
		t.Fatalf("alice submitting through the follower: %d %s", code, body)
	}
	code, h, body = fx.call(fx.follower, "bob", "GET", "/v1/jobs/"+j3.ID, nil)
	if code != http.StatusOK || h.Get(HeaderViewRevision) == "" {
		t.Errorf("%s read through the follower after its submit through it: %d %v %s; want it from the view", j3.ID, code, h, body)
	}
}

// Issue 24, item 1, through a follower's view: the log lines a failure's
// event quotes are hidden from a caller who may not read the job's logs,
// as the leader hides them (the view's events were everyone's before).
func TestFollowViewHidesLogLines(t *testing.T) {
	ctx := context.Background()
	fx := startFollowFixture(t, etcdtest.Start(t))
	j := fx.submit("alice", "crash")
	if _, err := fx.d.Round(ctx); err != nil {
		t.Fatal(err)
	}
	fx.c.advance(time.Second) // it logs iterations (of its 50)
	if err := fx.d.Observe(ctx); err != nil || !fx.ex.Kill(j.ID, 3) {
		t.Fatalf("%s not running: %v", j.ID, err)
	}
	if err := fx.d.Observe(ctx); err != nil {
		t.Fatal(err)
	}
	fx.waitInView(j.ID)
	const logged = "global_step="
	waitfor.T(t, ctx, "the requeue event in the follower's view", waitfor.Options{Stall: 20 * time.Second}, func() error {
		if _, _, body := fx.call(fx.follower, "alice", "GET", "/v1/events", nil); !bytes.Contains(body, []byte(logged)) {
			return fmt.Errorf("no event quoting log lines: %.300s", body)
		}
		return nil
	})
	for user, see := range map[string]bool{"alice": true, "root-ish": true, "bob": false} {
		for _, path := range []string{"/v1/events", "/v1/events?user=alice", "/v1/jobs/" + j.ID} {
			_, fh, fbody := fx.call(fx.follower, user, "GET", path, nil)
			_, _, lbody := fx.call(fx.leader, user, "GET", path, nil)
			sameJSON(t, "GET "+path+" as "+user, fbody, lbody)
			if fh.Get(HeaderViewRevision) == "" {
				t.Errorf("GET %s as %s through the follower: not answered from its view (%v)", path, user, fh)
			}
			if got := bytes.Contains(fbody, []byte(logged)); got != see || !bytes.Contains(fbody, []byte("last lines: ")) {
				t.Errorf("GET %s through the follower as %s: log lines shown %v, want %v:\n%.600s", path, user, got, see, fbody)
			}
		}
	}
}

// Issue 27, item 3: with the leader killed (before any other is elected)
// a follower still answers reads from its view, current since etcd is
// fine; a running job's detail, whose live figures only the leader had,
// comes from the view saying what it lacks; writes are 503, retried.
func TestFollowViewReadsWithoutALeader(t *testing.T) {
	ctx := context.Background()
	fx := startFollowFixture(t, etcdtest.Start(t))
	j1, j2, _ := fx.runningAndQueued()
	_, _, before := fx.call(fx.follower, "alice", "GET", "/v1/jobs", nil)
	_, _, evBefore := fx.call(fx.leader, "alice", "GET", "/v1/events", nil)

	fx.killLeader()
	check := func(when string) {
		t.Helper()
		code, h, body := fx.call(fx.follower, "alice", "GET", "/v1/jobs", nil)
		if code != http.StatusOK || h.Get(HeaderView) != "current" {
			t.Errorf("%s: GET /v1/jobs through the follower: %d %v %s", when, code, h, body)
		}
		sameJSON(t, when+": GET /v1/jobs", body, before)
		code, _, body = fx.call(fx.follower, "bob", "GET", "/v1/events", nil)
		if code != http.StatusOK {
			t.Errorf("%s: GET /v1/events through the follower: %d %s", when, code, body)
		}
		sameJSON(t, when+": GET /v1/events", body, evBefore)
		code, h, body = fx.call(fx.follower, "alice", "GET", "/v1/jobs/"+j1.ID, nil)
		var jd JobDetail
		json.Unmarshal(body, &jd)
		if code != http.StatusOK || jd.Job.ID != j1.ID || jd.Job.State != StateRunning || h.Get(HeaderViewOmits) == "" || h.Get(HeaderViewRevision) == "" {
			t.Errorf("%s: GET /v1/jobs/%s (running) through the follower: %d %v %s; want the view's answer saying what it lacks", when, j1.ID, code, h, body)
		}
		code, h, body = fx.call(fx.follower, "alice", "POST", "/v1/jobs/"+j2.ID+"/hold", nil)
		if code != http.StatusServiceUnavailable || h.Get(HeaderNoLeader) == "" {
			t.Errorf("%s: hold through the follower: %d %v %s; want 503 no leader", when, code, h, body)
		}
	}
	// Its key still there (its lease not yet expired): the follower finds
	// a leader that does not answer.
	check("the leader killed, its lease running")
	waitfor.T(t, ctx, "the killed leader's lease to expire", waitfor.Options{Stall: 20 * time.Second}, func() error {
		lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		l, err := fx.elF.Leader(lctx)
		if errors.Is(err, ErrNoLeader) {
			return nil
		}
		return fmt.Errorf("leader %+v, %v", l, err)
	})
	check("no leader")
}

// Issue 27, item 3: etcd without quorum stops the view's watch: the
// follower still answers from its view, marked stale with why and how old;
// once quorum returns the view is current again and has what was written.
func TestFollowViewStaleWithoutQuorum(t *testing.T) {
	ctx := context.Background()
	ms := etcdtest.StartCluster(t, 3)
	st := openEtcdTest(t, etcdtest.Endpoints(ms), "/replan/")
	sub := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	if err := st.CreateJob(ctx, JobRecord{ID: "j-000001", Name: "one", Tenant: "research", State: StateQueued, SubmittedAt: sub, Spec: json.RawMessage(`{"name":"one"}`)}); err != nil {
		t.Fatal(err)
	}
	cli := electionClient(t, ms[0].ClientURL)
	el, err := NewElection(ElectionConfig{Client: cli, Prefix: "/replan/election/", TTL: 2 * time.Second, Self: Member{Name: "follower", Addr: "https://follower:1"}})
	if err != nil {
		t.Fatal(err)
	}
	view := NewFollowView(cli, "/replan/", nil)
	vctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go view.Run(vctx)
	f := &Follower{API: &API{}, El: el, Token: "t", View: view}
	h := f.Handler()
	get := func(path string) (int, http.Header, []byte) {
		t.Helper()
		w := &bufferedResponse{header: http.Header{}}
		r, _ := http.NewRequestWithContext(ctx, "GET", path, nil)
		h.ServeHTTP(w, r)
		return w.code, w.header, w.body
	}
	ids := func(body []byte) string {
		var jobs []JobRecord
		json.Unmarshal(body, &jobs)
		var out []string
		for _, j := range jobs {
			out = append(out, j.ID)
		}
		return strings.Join(out, ",")
	}
	waitfor.T(t, ctx, "a current view", waitfor.Options{Stall: 20 * time.Second}, func() error {
		code, hd, body := get("/v1/jobs")
		if code != http.StatusOK || hd.Get(HeaderView) != "current" || ids(body) != "j-000001" {
			return fmt.Errorf("%d %v %s", code, hd, body)
		}
		return nil
	})

	ms[1].Stop()
	ms[2].Stop()
	waitfor.T(t, ctx, "the view to say it is stale", waitfor.Options{Stall: 30 * time.Second}, func() error {
		code, hd, body := get("/v1/jobs")
		if code != http.StatusOK || ids(body) != "j-000001" {
			t.Fatalf("GET /v1/jobs without quorum: %d %v %s; want the view's answer", code, hd, body)
		}
		if hd.Get(HeaderView) != "stale" {
			return fmt.Errorf("view %q", hd.Get(HeaderView))
		}
		age, _ := strconv.ParseFloat(hd.Get(HeaderViewAge), 64)
		if hd.Get(HeaderViewStale) == "" || hd.Get(HeaderViewConfirmed) == "" || age <= 0 {
			t.Errorf("a stale view's headers %v: want why, when it was last confirmed and its age", hd)
		}
		if w := viewWarning(hd); !strings.Contains(w, "not current") || !strings.Contains(w, hd.Get(HeaderViewStale)) {
			t.Errorf("the client's note on a stale answer: %q", w)
		}
		t.Logf("stale: %s (age %s s)", hd.Get(HeaderViewStale), hd.Get(HeaderViewAge))
		return nil
	})

	ms[1].Restart(t, false)
	ms[2].Restart(t, true)
	st2 := openEtcdTest(t, etcdtest.Endpoints(ms), "/replan/")
	if err := st2.CreateJob(ctx, JobRecord{ID: "j-000002", Name: "two", Tenant: "research", State: StateQueued, SubmittedAt: sub.Add(time.Second), Spec: json.RawMessage(`{"name":"two"}`)}); err != nil {
		t.Fatal(err)
	}
	waitfor.T(t, ctx, "the view current again, with the job written meanwhile", waitfor.Options{Stall: 30 * time.Second}, func() error {
		code, hd, body := get("/v1/jobs")
		if code != http.StatusOK || hd.Get(HeaderView) != "current" || ids(body) != "j-000001,j-000002" {
			return fmt.Errorf("%d view %q: %s", code, hd.Get(HeaderView), ids(body))
		}
		return nil
	})
}

// The revisions a view's watch starts from were compacted between its
// list and its watch: the watch fails (ErrCompacted), the view lists again
// and watches from there, and has what was written meanwhile; changes
// after that arrive by the watch.
func TestFollowViewRelistsAfterCompaction(t *testing.T) {
	ctx := context.Background()
	eps := etcdtest.Start(t)
	st := openEtcdTest(t, eps, "/replan/")
	sub := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	job := func(n int) JobRecord {
		return JobRecord{ID: fmt.Sprintf("j-%06d", n), Name: "n", Tenant: "research", State: StateQueued, SubmittedAt: sub.Add(time.Duration(n) * time.Second), Spec: json.RawMessage(`{}`)}
	}
	if err := st.CreateJob(ctx, job(1)); err != nil {
		t.Fatal(err)
	}
	cli := electionClient(t, eps[0])
	var lists atomic.Int32
	viewListedHook = func(rev int64) {
		if lists.Add(1) > 1 {
			return
		}
		// After the first list: a job is written and etcd compacts its
		// history past the list's revision.
		if err := st.CreateJob(ctx, job(2)); err != nil {
			t.Error(err)
		}
		// One more revision (a key outside the prefix): the compaction
		// removes rev+1, where the watch would start.
		r, err := cli.Put(ctx, "/elsewhere/x", "1")
		if err != nil {
			t.Error(err)
			return
		}
		if _, err := cli.Compact(ctx, r.Header.Revision); err != nil {
			t.Error(err)
		}
	}
	t.Cleanup(func() { viewListedHook = nil })
	view := NewFollowView(cli, "/replan/", nil)
	vctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go view.Run(vctx)
	vs := view.Store()
	ids := func() string {
		jobs, err := vs.ListJobs(ctx, JobFilter{})
		if err != nil {
			return err.Error()
		}
		var out []string
		for _, j := range jobs {
			out = append(out, j.ID)
		}
		return strings.Join(out, ",")
	}
	waitfor.T(t, ctx, "the view listed again after the compaction", waitfor.Options{Stall: 20 * time.Second}, func() error {
		if got := ids(); got != "j-000001,j-000002" || !view.State().Current {
			return fmt.Errorf("view %s, %+v", got, view.State())
		}
		return nil
	})
	if n := lists.Load(); n < 2 {
		t.Errorf("the view listed %d times, want a second list after the compaction", n)
	}
	if err := st.CreateJob(ctx, job(3)); err != nil {
		t.Fatal(err)
	}
	waitfor.T(t, ctx, "a job written after the relist in the view", waitfor.Options{Stall: 20 * time.Second}, func() error {
		if got := ids(); got != "j-000001,j-000002,j-000003" {
			return fmt.Errorf("view %s", got)
		}
		return nil
	})
}
