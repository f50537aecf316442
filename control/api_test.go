package control

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/replan/replan/jobspec"
)

func startAPI(t *testing.T, token string) (*Client, *Daemon, *clock, *SimExecutor, string) {
	t.Helper()
	st, _ := openTest(t)
	c := &clock{t: time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)}
	ex := NewSimExecutor(c.now, []string{"a", "b"}, nil, nil, 0)
	d, _ := newDaemonWith(t, st, ex, "morphling", c)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	sock := filepath.Join(t.TempDir(), "replan.sock")
	l, err := ListenUnix(sock)
	if err != nil {
		t.Fatal(err)
	}
	api := &API{D: d, Version: "test", Token: token}
	go Serve(ctx, l, api.Handler())
	go d.Run(ctx, 50*time.Millisecond)
	cl := NewUnixClient(sock)
	cl.Token = token
	return cl, d, c, ex, sock
}

const specYAML = `version: 1
name: %s
tenant: research
class: best-effort
model: bert
framework: deepspeed
workdir: /w
entrypoint: train.py
global_batch: 32
iterations: 50
checkpoint_dir: /ckpt/x
request: {gpus: 4}
`

func TestAPISubmitQueueEventsCancel(t *testing.T) {
	ctx := context.Background()
	cl, _, c, _, sock := startAPI(t, "")
	fi, err := os.Stat(sock)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode %v %v", fi.Mode(), err)
	}
	if _, err := ListenUnix(sock); err == nil {
		t.Error("a second daemon could listen on a live socket")
	}
	rec, err := cl.Submit(ctx, "a.yaml", []byte(strings.Replace(specYAML, "%s", "a", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if rec.ID == "" || rec.State != StateQueued {
		t.Fatalf("submitted %+v", rec)
	}
	// The loop places it; events tell.
	var seen []Event
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		evs, err := cl.Events(ctx, lastID(seen), time.Second)
		if err != nil {
			t.Fatal(err)
		}
		seen = append(seen, evs...)
		if hasKind(seen, "start") {
			break
		}
	}
	if !hasKind(seen, "submit") || !hasKind(seen, "start") {
		t.Fatalf("events %+v", seen)
	}
	run, err := cl.Running(ctx)
	if err != nil || len(run) != 1 || run[0].Job.ID != rec.ID || run[0].Throughput.PredictedSPS <= 0 || run[0].SLA != "" {
		t.Fatalf("running %+v %v", run, err)
	}
	det, err := cl.Job(ctx, rec.ID)
	if err != nil || det.Job.State != StateRunning || len(det.History) < 2 || len(det.Decisions) == 0 || det.Throughput.PredictedSPS <= 0 {
		t.Fatalf("job detail %+v %v", det, err)
	}
	// A bad spec is refused with file, line and field, and nothing is stored.
	_, err = cl.Submit(ctx, "bad.yaml", []byte("version: 1\nname: Bad Name\ncolour: red\n"))
	var re *RemoteError
	if !errors.As(err, &re) || re.Status != http.StatusBadRequest || len(re.Problems) < 2 || re.Problems[0].File != "bad.yaml" || re.Problems[0].Line == 0 {
		t.Fatalf("bad spec: %#v", err)
	}
	jobs, _ := cl.Jobs(ctx)
	if len(jobs) != 1 {
		t.Fatalf("%d jobs after a rejected submission", len(jobs))
	}
	if _, err := cl.JobOp(ctx, rec.ID, "cancel"); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.JobOp(ctx, rec.ID, "cancel"); err == nil {
		t.Error("cancelled twice")
	}
	if _, err := cl.JobOp(ctx, "j-nope", "hold"); !IsNotFound(err) {
		t.Errorf("unknown job: %v", err)
	}
	h, _ := cl.History(ctx)
	if len(h) != 1 || h[0].Job.State != StateCancelled {
		t.Errorf("history %+v", h)
	}
	if pts, err := cl.Curve(ctx, rec.ID, 16); err != nil || len(pts) != 16 || pts[15].Throughput <= 0 {
		t.Errorf("curve %v %v", len(pts), err)
	}
	if _, err := cl.Curve(ctx, "j-nope", 16); !IsNotFound(err) {
		t.Errorf("curve of an unknown job: %v", err)
	}
	if lr, err := cl.Links(ctx); err != nil || lr.Shared != 0 {
		t.Errorf("links on a one-job cluster: %+v %v", lr, err)
	}
	_ = c
}

func TestAPIRunsJobsToTheEnd(t *testing.T) {
	ctx := context.Background()
	cl, d, c, _, _ := startAPI(t, "")
	for _, n := range []string{"a", "b", "c"} {
		if _, err := cl.Submit(ctx, n+".yaml", []byte(strings.Replace(specYAML, "%s", n, 1))); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		c.advance(10 * time.Second)
		d.Kick()
		h, _ := cl.History(ctx)
		if len(h) == 3 {
			for _, e := range h {
				if e.Job.State != StateFinished || e.JCTS <= 0 {
					t.Errorf("history %+v", e)
				}
			}
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	h, _ := cl.History(ctx)
	t.Fatalf("only %d of 3 jobs finished", len(h))
}

func TestAPITokenAndMetrics(t *testing.T) {
	ctx := context.Background()
	st, _ := openTest(t)
	c := &clock{t: time.Now()}
	d, _ := newDaemonWith(t, st, NewSimExecutor(c.now, []string{"a", "b"}, nil, nil, 0), "morphling", c)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go Serve(cctx, l, (&API{D: d, Token: "s3cret"}).Handler())
	base := "http://" + l.Addr().String()
	// Over plain HTTP (this test's listener) the client sends no token:
	// the requests go by hand.
	get := func(tok string) (*http.Response, error) {
		req, _ := http.NewRequest("GET", base+"/v1/status", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		return http.DefaultClient.Do(req)
	}
	if resp, err := get("wrong"); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("wrong token: %v %v", resp, err)
	}
	resp0, err := get("s3cret")
	if err != nil {
		t.Fatal(err)
	}
	var st2 Status
	json.NewDecoder(resp0.Body).Decode(&st2)
	resp0.Body.Close()
	if resp0.StatusCode != 200 || st2.GPUs != 16 || st2.Servers != 2 {
		t.Fatalf("status %d %+v", resp0.StatusCode, st2)
	}
	req, _ := http.NewRequest("GET", base+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer s3cret")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`replan_jobs{state="queued"}`, `replan_gpus{use="free"} 16`, "replan_schedule_round_seconds", `replan_nodes{condition="up"} 2`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %s:\n%s", want, body)
		}
	}
	_ = jobspec.Guaranteed
}

func lastID(evs []Event) int64 {
	if len(evs) == 0 {
		return 0
	}
	return evs[len(evs)-1].ID
}

func hasKind(evs []Event, k string) bool {
	for _, e := range evs {
		if e.Kind == k {
			return true
		}
	}
	return false
}

func TestAPILogsFollowTheSimulatedJob(t *testing.T) {
	ctx := context.Background()
	cl, d, c, _, _ := startAPI(t, "")
	long := strings.Replace(strings.Replace(specYAML, "%s", "a", 1), "iterations: 50", "iterations: 100000", 1)
	rec, err := cl.Submit(ctx, "a.yaml", []byte(long))
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		det, _ := cl.Job(ctx, rec.ID)
		if det.Job.State == StateRunning {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("job never started")
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.advance(3 * time.Second)
	rc, err := cl.Logs(ctx, rec.ID, 3, false)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(rc)
	rc.Close()
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 3 || !strings.Contains(lines[2], "global_step=") || !strings.Contains(lines[2], "CurrSamplesPerSec=") {
		t.Fatalf("tail 3:\n%s", b)
	}
	// follow: more lines arrive as the virtual clock moves
	fctx, cancel := context.WithCancel(ctx)
	rc, err = cl.Logs(fctx, rec.ID, 1, true)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for i := 0; i < 5; i++ {
			time.Sleep(250 * time.Millisecond)
			c.advance(2 * time.Second)
		}
		cancel()
	}()
	b, _ = io.ReadAll(rc)
	if n := strings.Count(string(b), "global_step="); n < 3 {
		t.Errorf("followed %d lines:\n%s", n, b)
	}
	if _, err := cl.Logs(ctx, "j-nope", 1, false); !IsNotFound(err) {
		t.Errorf("unknown job: %v", err)
	}
	// --attempt: the current launch is attempt 1; there is no attempt 3.
	if rc, err := cl.AttemptLogs(ctx, rec.ID, 1, 2, false); err != nil {
		t.Errorf("attempt 1: %v", err)
	} else {
		b, _ := io.ReadAll(rc)
		rc.Close()
		if strings.Count(string(b), "global_step=") != 2 {
			t.Errorf("attempt 1, tail 2:\n%s", b)
		}
	}
	if _, err := cl.AttemptLogs(ctx, rec.ID, 3, 2, false); !IsNotFound(err) || !strings.Contains(err.Error(), "attempts 1 to 1, not 3") {
		t.Errorf("attempt 3: %v", err)
	}
	_ = d
}
