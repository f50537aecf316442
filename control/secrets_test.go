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
	st, _ := openTest(t)
	c := &clock{t: time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)}
	ex := NewSimExecutor(c.now, []string{"a", "b"}, nil, nil, 0)
	d, _ := newDaemonWith(t, st, ex, "morphling", c)
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
	defer cancel()
	go Serve(sctx, l, (&API{D: d, Version: "test", Access: acc}).Handler())
	go d.Run(sctx, 20*time.Millisecond)
	base := "http://" + l.Addr().String()
	hc := &http.Client{Timeout: 20 * time.Second}
	call := func(user, method, path string, body any) (int, string) {
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
	const secret = "sk-live-0123456789abcdef"
	submit := func(name, iters string) JobRecord {
		t.Helper()
		y := strings.Replace(strings.Replace(specYAML, "%s", name, 1), "iterations: 50", "iterations: "+iters, 1) +
			"env: {WANDB_API_KEY: " + secret + ", NCCL_DEBUG: WARN}\n"
		code, body := call("alice", "POST", "/v1/jobs", SubmitRequest{File: name + ".yaml", Spec: y})
		var rec JobRecord
		json.Unmarshal([]byte(body), &rec)
		if code != 201 {
			t.Fatalf("alice submitting %s: %d %s", name, code, body)
		}
		return rec
	}
	// One after the other: the first job takes every free GPU.
	done := submit("done", "20")
	advanceUntil := func(id string, want JobState) {
		t.Helper()
		waitfor.T(t, ctx, id+" "+string(want), waitfor.Options{Stall: 20 * time.Second}, func() error {
			c.advance(time.Second)
			if r, _ := st.GetJob(ctx, id); r.State != want {
				return fmt.Errorf("%s %s (%d iterations)", id, r.State, r.Iterations)
			}
			return nil
		})
	}
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
	if code, body := call("alice", "GET", "/v1/jobs/"+run.ID+"/logs?tail=3", nil); code != 200 || !strings.Contains(body, "global_step=") {
		t.Errorf("alice reading her job's logs: %d %s", code, body)
	}
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
