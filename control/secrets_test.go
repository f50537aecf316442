package control

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/replan/replan/internal/waitfor"
)

// Issue 24, item 1: in a multi-user daemon any caller read every job's env
// (API keys) through GET /v1/jobs/{id}, /v1/jobs, /v1/running, /v1/queue,
// /v1/history, and its logs. The authorization matrix: every route, as
// the job's owner, its tenant's admin, a cluster admin, a user of another
// tenant and a user with no role. Only the first three see env values and
// logs; everyone else sees env keys only and is refused the logs. Lists
// carry keys only for everyone.
func TestAuthMatrixSecrets(t *testing.T) {
	ctx := context.Background()
	f := newSecretsFixture(t, "")
	call, submit, advanceUntil := f.call, f.submit, f.advanceUntil
	const secret = secretValue
	// One after the other: the first job takes every free GPU.
	done := submit("done", "20")
	advanceUntil(done.ID, StateFinished)
	run := submit("run", "1000000")
	advanceUntil(run.ID, StateRunning)
	held := submit("held", "50")
	if code, body := call("alice", "POST", "/v1/jobs/"+held.ID+"/hold", nil); code != 200 {
		t.Fatalf("hold: %d %s", code, body)
	}
	waitfor.T(t, ctx, "the queue shows the held job", waitfor.Options{}, func() error {
		if _, body := call("alice", "GET", "/v1/queue", nil); !strings.Contains(body, held.ID) {
			return fmt.Errorf("queue: %.200s", body)
		}
		return nil
	})

	owners := []string{"alice", "carol", "root-ish"} // owner, tenant admin, admin
	others := []string{"bob", "dave"}                // another tenant's user, no role
	lists := []string{"/v1/jobs", "/v1/jobs?state=running", "/v1/jobs?state=held", "/v1/jobs?state=finished",
		"/v1/queue", "/v1/running", "/v1/history", "/v1/events", "/v1/status", "/v1/nodes", "/v1/links",
		"/v1/jobs/" + run.ID + "/curve?gpus=4", "/v1/whoami", "/metrics"}
	for _, u := range append(append([]string{}, owners...), others...) {
		for _, p := range lists {
			code, body := call(u, "GET", p, nil)
			if code != 200 {
				t.Errorf("GET %s as %s: %d %s", p, u, code, body)
			}
			if strings.Contains(body, secret) {
				t.Errorf("GET %s as %s shows an env value:\n%.300s", p, u, body)
			}
		}
		for _, j := range []JobRecord{run, done, held} {
			code, body := call(u, "GET", "/v1/jobs/"+j.ID, nil)
			if code != 200 {
				t.Errorf("GET job %s as %s: %d %s", j.ID, u, code, body)
				continue
			}
			var det JobDetail
			json.Unmarshal([]byte(body), &det)
			var spec struct {
				Env map[string]string `json:"env"`
			}
			json.Unmarshal(det.Job.Spec, &spec)
			owner := strings.Contains(strings.Join(owners, ","), u)
			want := HiddenValue
			if owner {
				want = secret
			}
			if got := spec.Env["WANDB_API_KEY"]; got != want || len(spec.Env) != 2 {
				t.Errorf("GET job %s as %s: env %v, want WANDB_API_KEY=%s and both keys", j.ID, u, spec.Env, want)
			}
			code, body = call(u, "GET", "/v1/jobs/"+j.ID+"/logs?tail=3", nil)
			if owner && code != 200 && code != 501 {
				t.Errorf("logs of %s as %s: %d %s", j.ID, u, code, body)
			}
			if !owner && (code != 403 || !strings.Contains(body, "rule job-owner") || !strings.Contains(body, "read the logs of")) {
				t.Errorf("logs of %s as %s: %d %s, want 403 by rule job-owner", j.ID, u, code, body)
			}
		}
	}
	// The lists still name the env's keys (what a job sets, not its values).
	if _, body := call("bob", "GET", "/v1/queue", nil); !strings.Contains(body, "WANDB_API_KEY") {
		t.Errorf("queue lacks the env's keys:\n%.300s", body)
	}
	// A job that has just started may not have logged an iteration yet
	// (an empty 200): the clock moves on until it has.
	waitfor.T(t, ctx, "alice reads her job's logs", waitfor.Options{Stall: 20 * time.Second}, func() error {
		code, body := call("alice", "GET", "/v1/jobs/"+run.ID+"/logs?tail=3", nil)
		if code == 200 && strings.Contains(body, "global_step=") {
			return nil
		}
		f.c.advance(time.Second)
		return fmt.Errorf("%d %q", code, body)
	})
	// Writes: the rules as they were (the matrix's other half).
	for _, w := range []struct {
		user, path string
		code       int
	}{
		{"bob", "/v1/jobs/" + held.ID + "/release", 403},
		{"dave", "/v1/jobs/" + held.ID + "/cancel", 403},
		{"bob", "/v1/nodes/a/drain", 403},
		{"carol", "/v1/nodes/a/drain", 403},
		{"carol", "/v1/jobs/" + held.ID + "/release", 200},
		{"root-ish", "/v1/jobs/" + held.ID + "/cancel", 200},
	} {
		if code, body := call(w.user, "POST", w.path, nil); code != w.code {
			t.Errorf("POST %s as %s: %d %s, want %d", w.path, w.user, code, body, w.code)
		}
	}
	if code, body := call("dave", "POST", "/v1/jobs", SubmitRequest{File: "x.yaml", Spec: fmt.Sprintf(specYAML, "x")}); code != 403 {
		t.Errorf("dave submitting: %d %s", code, body)
	}
}

// secretsFixture is a multi-user daemon on the simulated cluster behind
// its TCP API: alice (a user of research), carol (research's admin),
// root-ish (an admin), bob (a user of product) and dave (no role), each
// with a token. A job that fails twice is not restarted.
type secretsFixture struct {
	st Store
	c  *clock
	ex *SimExecutor
	// call makes a request as user: status and body.
	call func(user, method, path string, body any) (int, string)
	// submit submits alice's job name with iterations, its env carrying
	// secretValue (and the fixture's extra YAML).
	submit func(name, iters string) JobRecord
	// advanceUntil advances the clock until job id is in state want.
	advanceUntil func(id string, want JobState)
}

// secretValue is the env value only those allowed may read.
const secretValue = "sk-live-0123456789abcdef"

func newSecretsFixture(t *testing.T, extraYAML string) *secretsFixture {
	ctx := context.Background()
	st, _ := openTest(t)
	c := &clock{t: time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)}
	ex := NewSimExecutor(c.now, []string{"a", "b"}, nil, nil, 0)
	d, _ := newDaemonWith(t, st, ex, "morphling", c)
	d.cfg.MaxRestarts = 1
	toks := map[string]string{"alice": "tok-alice", "carol": "tok-carol", "bob": "tok-bob", "dave": "tok-dave", "root-ish": "tok-admin"}
	acc := &Access{DaemonUID: -2, Admins: []string{"root-ish"}, Tokens: map[string][sha256.Size]byte{}, Tenants: []TenantAccess{
		{Name: "research", Users: []string{"alice"}, Admins: []string{"carol"}},
		{Name: "product", Users: []string{"bob"}},
	}}
	for u, tok := range toks {
		acc.Tokens[u] = sha256.Sum256([]byte(tok))
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	go Serve(sctx, l, (&API{D: d, Version: "test", Access: acc}).Handler())
	go d.Run(sctx, 20*time.Millisecond)
	base := "http://" + l.Addr().String()
	hc := &http.Client{Timeout: 20 * time.Second}
	f := &secretsFixture{st: st, c: c, ex: ex}
	f.call = func(user, method, path string, body any) (int, string) {
		t.Helper()
		var in io.Reader
		if body != nil {
			b, _ := json.Marshal(body)
			in = bytes.NewReader(b)
		}
		req, _ := http.NewRequest(method, base+path, in)
		req.Header.Set("Authorization", "Bearer "+toks[user])
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("%s %s as %s: %v", method, path, user, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	f.submit = func(name, iters string) JobRecord {
		t.Helper()
		y := strings.Replace(strings.Replace(specYAML, "%s", name, 1), "iterations: 50", "iterations: "+iters, 1) +
			"env: {WANDB_API_KEY: " + secretValue + ", NCCL_DEBUG: WARN}\n" + extraYAML
		code, body := f.call("alice", "POST", "/v1/jobs", SubmitRequest{File: name + ".yaml", Spec: y})
		var rec JobRecord
		json.Unmarshal([]byte(body), &rec)
		if code != 201 {
			t.Fatalf("alice submitting %s: %d %s", name, code, body)
		}
		return rec
	}
	f.advanceUntil = func(id string, want JobState) {
		t.Helper()
		waitfor.T(t, ctx, id+" "+string(want), waitfor.Options{Stall: 20 * time.Second}, func() error {
			c.advance(time.Second)
			if r, _ := st.GetJob(ctx, id); r.State != want {
				return fmt.Errorf("%s %s (%d iterations)", id, r.State, r.Iterations)
			}
			return nil
		})
	}
	return f
}

// Issue 24, item 1, continued: the lines of a job's log that a failure's
// reason and a hang event quote ("…; last lines: …") are its logs too.
// Its owner, its tenant's admin and an admin see them in the job's detail
// and its events; everyone else sees "last lines: (hidden)" there, and
// every list (jobs, queue, running, history, nodes) hides them from
// everyone. Before, any caller read them in history, the job's detail
// and every event.
func TestAuthMatrixLogLines(t *testing.T) {
	ctx := context.Background()
	f := newSecretsFixture(t, "hang: {factor: 2, floor: 5m}\n")
	const logged = "global_step=" // in each line the simulated job logs

	// Killed twice: requeued once (restart limit 1), then failed; each
	// failure's reason quotes the last lines of its log.
	crash := f.submit("crash", "1000000")
	f.advanceUntil(crash.ID, StateRunning)
	for kill := 1; kill <= 2; kill++ {
		waitfor.T(t, ctx, fmt.Sprintf("%s killed %d times", crash.ID, kill), waitfor.Options{Stall: 20 * time.Second}, func() error {
			r, _ := f.st.GetJob(ctx, crash.ID)
			if r.Failures >= kill {
				return nil
			}
			if r.State == StateRunning && r.Iterations > 0 {
				f.ex.Kill(crash.ID, 3)
			}
			f.c.advance(time.Second)
			return fmt.Errorf("%s %s, %d failures, %d iterations", crash.ID, r.State, r.Failures, r.Iterations)
		})
	}
	f.advanceUntil(crash.ID, StateFailed)

	// Silent past its hang bound: restarted with a hang event that quotes
	// its last log lines.
	stuck := f.submit("stuck", "1000000")
	f.advanceUntil(stuck.ID, StateRunning)
	waitfor.T(t, ctx, stuck.ID+" logs iterations", waitfor.Options{Stall: 20 * time.Second}, func() error {
		f.c.advance(time.Second)
		if r, _ := f.st.GetJob(ctx, stuck.ID); r.Iterations == 0 {
			return fmt.Errorf("%s at %d iterations", stuck.ID, r.Iterations)
		}
		return nil
	})
	f.ex.Hang(stuck.ID)
	waitfor.T(t, ctx, "a hang event of "+stuck.ID, waitfor.Options{Stall: 20 * time.Second}, func() error {
		f.c.advance(10 * time.Second)
		evs, _ := f.st.Events(ctx, 0, 1000)
		for _, e := range evs {
			if e.Kind == "hang" && e.JobID == stuck.ID {
				return nil
			}
		}
		return fmt.Errorf("no hang event of %s", stuck.ID)
	})

	owners := []string{"alice", "carol", "root-ish"} // owner, tenant admin, admin
	others := []string{"bob", "dave"}                // another tenant's user, no role
	lists := []string{"/v1/jobs", "/v1/jobs?state=failed", "/v1/jobs?state=failed&user=alice", "/v1/queue", "/v1/queue?user=alice",
		"/v1/running", "/v1/history", "/v1/history?user=alice", "/v1/nodes"}
	for _, u := range append(append([]string{}, owners...), others...) {
		owner := slices.Contains(owners, u)
		for _, p := range lists {
			code, body := f.call(u, "GET", p, nil)
			if code != 200 || strings.Contains(body, logged) {
				t.Errorf("GET %s as %s: %d, want 200 with no log line:\n%.600s", p, u, code, body)
			}
		}
		if _, body := f.call(u, "GET", "/v1/jobs?state=failed", nil); !strings.Contains(body, "exited with code 3 (killed); not restarted: failed 2 times, restart limit 1; last lines: "+HiddenValue) {
			t.Errorf("GET /v1/jobs?state=failed as %s: want the failure's reason with its log lines hidden:\n%.600s", u, body)
		}
		for _, p := range []string{"/v1/events", "/v1/events?user=alice"} {
			code, body := f.call(u, "GET", p, nil)
			var evs []Event
			json.Unmarshal([]byte(body), &evs)
			kinds := map[string]bool{}
			for _, e := range evs {
				if e.JobID != crash.ID && e.JobID != stuck.ID || !strings.Contains(e.Msg, "last lines: ") && !strings.Contains(e.Msg, "last log lines: ") {
					continue
				}
				kinds[e.Kind] = true
				if got := strings.Contains(e.Msg, logged); got != owner {
					t.Errorf("GET %s as %s: %s event %q: log lines shown %v, want %v", p, u, e.Kind, e.Msg, got, owner)
				}
				if !owner && !strings.HasSuffix(e.Msg, ": "+HiddenValue) {
					t.Errorf("GET %s as %s: %s event %q, want its log lines hidden", p, u, e.Kind, e.Msg)
				}
				if got := strings.Contains(string(e.Data), logged); e.Kind == "hang" && got != owner {
					t.Errorf("GET %s as %s: hang event's data %s: log lines shown %v, want %v", p, u, e.Data, got, owner)
				}
			}
			if code != 200 || !kinds["requeue"] || !kinds["fail"] || !kinds["hang"] {
				t.Errorf("GET %s as %s: %d, events quoting log lines of kinds %v; want requeue, fail and hang", p, u, code, kinds)
			}
		}
		code, body := f.call(u, "GET", "/v1/jobs/"+crash.ID, nil)
		var jd JobDetail
		json.Unmarshal([]byte(body), &jd)
		quoted := 0
		for _, h := range jd.History {
			if strings.Contains(h.Reason, "last lines: ") {
				quoted++
			}
		}
		want := "exited with code 3 (killed); not restarted: failed 2 times, restart limit 1; last lines: "
		if code != 200 || !strings.HasPrefix(jd.Job.Reason, want) || strings.Contains(body, logged) != owner || quoted != 2 ||
			owner != strings.Contains(jd.Job.Reason, logged) || !owner && jd.Job.Reason != want+HiddenValue {
			t.Errorf("GET /v1/jobs/%s as %s: %d, reason %q, %d transitions quoting log lines; want %q followed by its log lines shown %v:\n%.600s",
				crash.ID, u, code, jd.Job.Reason, quoted, want, owner, body)
		}
	}
}
