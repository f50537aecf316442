package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/replan/replan/control"
	"github.com/replan/replan/internal/waitfor"
	"github.com/replan/replan/sched"
)

// serveControl runs an in-process daemon (simulated executor, two 8-GPU
// servers, tenant research with 16 GPUs) and its API on a unix socket.
func serveControl(t *testing.T) (string, *control.Daemon) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	dir := t.TempDir()
	st, err := control.OpenSQLite(ctx, filepath.Join(dir, "r.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	p, _ := sched.New("morphling")
	d, err := control.New(ctx, control.Config{Store: st, Exec: control.NewSimExecutor(time.Now, []string{"a", "b"}, nil, nil, 0), Policy: p,
		Servers: []control.ServerInfo{{Name: "a", Rack: "r1", GPUs: 8, CPUs: 64, MemGB: 1000}, {Name: "b", Rack: "r1", GPUs: 8, CPUs: 64, MemGB: 1000}},
		Tenants: []control.TenantInfo{{Name: "research", QuotaGPUs: 16}}})
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "s.sock")
	l, err := control.ListenUnix(sock)
	if err != nil {
		t.Fatal(err)
	}
	go control.Serve(ctx, l, (&control.API{D: d, Version: "test"}).Handler())
	return sock, d
}

const cliSpec = `version: 1
name: x
tenant: TENANT
class: best-effort
model: MODEL
framework: deepspeed
workdir: /w
entrypoint: train.py
global_batch: 16
iterations: 50
checkpoint_dir: /ckpt/x
request: REQUEST
`

// Issue 12: `replan submit` of a job that can never run exits 1 and names
// file, line and field; nothing is created.
func TestSubmitRefusedNamesFileLineField(t *testing.T) {
	sock, _ := serveControl(t)
	dir := t.TempDir()
	for _, tc := range []struct{ tenant, model, request, want string }{
		{"nosuchteam", "gpt2", "{gpus: 4}", ":3: tenant: unknown tenant \"nosuchteam\""},
		{"research", "gpt2", "{gpus: 1000}", ":12: request.gpus: 1000 GPUs asked, the cluster has 16"},
		{"research", "llama7b", `{gpus: 8, plan: "dp=8,tp=1,pp=1,mb=2,ga=1,zero=0"}`, ":12: request.plan: gpu-memory: needs"},
	} {
		file := filepath.Join(dir, "job.yaml")
		os.WriteFile(file, []byte(strings.NewReplacer("TENANT", tc.tenant, "MODEL", tc.model, "REQUEST", tc.request).Replace(cliSpec)), 0o644)
		var out, errb bytes.Buffer
		if st := Run(context.Background(), []string{"submit", "--socket", sock, file}, &out, &errb); st != 1 {
			t.Errorf("%s: exit %d, stdout %q", tc.want, st, out.String())
		}
		if !strings.Contains(errb.String(), file+tc.want) {
			t.Errorf("stderr %q, want %q", errb.String(), file+tc.want)
		}
	}
	var out, errb bytes.Buffer
	if st := Run(context.Background(), []string{"jobs", "--all", "--socket", sock, "--json"}, &out, &errb); st != 0 || strings.TrimSpace(out.String()) != "[]" {
		t.Errorf("jobs after refusals: %d %s %s", st, out.String(), errb.String())
	}
}

// Issue 12: a job that became impossible (every server drained) shows as
// unschedulable with its reason in `replan queue` and `replan jobs`.
func TestQueueShowsUnschedulable(t *testing.T) {
	sock, d := serveControl(t)
	ctx := context.Background()
	file := filepath.Join(t.TempDir(), "job.yaml")
	os.WriteFile(file, []byte(strings.NewReplacer("TENANT", "research", "MODEL", "gpt2", "REQUEST", "{gpus: 2}").Replace(cliSpec)), 0o644)
	var out, errb bytes.Buffer
	if st := Run(ctx, []string{"submit", "--socket", sock, file}, &out, &errb); st != 0 {
		t.Fatalf("submit: %s", errb.String())
	}
	for _, srv := range []string{"a", "b"} {
		if st := Run(ctx, []string{"drain", "--socket", sock, srv}, &out, &errb); st != 0 {
			t.Fatalf("drain %s: %s", srv, errb.String())
		}
	}
	if _, err := d.Round(ctx); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []string{"queue", "jobs"} {
		out.Reset()
		if st := Run(ctx, []string{cmd, "--socket", sock}, &out, &errb); st != 0 {
			t.Fatalf("%s: %s", cmd, errb.String())
		}
		if !strings.Contains(out.String(), "unschedulable") {
			t.Errorf("%s:\n%s", cmd, out.String())
		}
	}
	if !strings.Contains(out.String(), "unschedulable") {
		return
	}
	out.Reset()
	Run(ctx, []string{"queue", "--socket", sock}, &out, &errb)
	if !strings.Contains(out.String(), "needs at least 1 GPUs, the servers in service have 0 (drained: a, b)") {
		t.Errorf("queue reason:\n%s", out.String())
	}
}

// `replan job ID` of a running job shows its predicted and measured
// throughput with the prediction's error, and how often it checkpoints
// (the interval replan chose and why); --json carries the same.
func TestJobShowsThroughputErrorAndCheckpointInterval(t *testing.T) {
	sock, d, rec := startedLongJob(t)
	ctx := context.Background()
	// The simulated job reports a throughput once it has run a little.
	// (The policy gives it both servers: a one-day MTBF per server is
	// 12 h for the job.)
	waitfor.T(t, ctx, "a measured throughput", waitfor.Options{}, func() error {
		if err := d.Observe(ctx); err != nil {
			return err
		}
		if tp := d.JobThroughput(rec.ID); tp.MeasuredSPS <= 0 {
			return fmt.Errorf("throughput %+v", tp)
		}
		return nil
	})
	out, err := runCLI(t, "job", rec.ID, "--socket", sock)
	if err != nil {
		t.Fatalf("job: %v\n%s", err, out)
	}
	for _, want := range []string{"throughput: predicted ", "(the prediction is ", "% off)", "checkpoint: every ", "Young/Daly from a ", "(estimated from the model's size) and a 12h0m0s MTBF"} {
		if !strings.Contains(out, want) {
			t.Errorf("replan job lacks %q:\n%s", want, out)
		}
	}
	out, err = runCLI(t, "job", rec.ID, "--socket", sock, "--json")
	if err != nil {
		t.Fatal(err)
	}
	var jd control.JobDetail
	if err := json.Unmarshal([]byte(out), &jd); err != nil {
		t.Fatal(err)
	}
	if c := jd.Checkpointing; c == nil || c.IntervalIters <= 0 || c.Source != "replan" || c.CostS <= 0 || c.MTBFS <= 0 || c.IntervalS < 60 {
		t.Errorf("--json checkpointing %+v", jd.Checkpointing)
	}
}

// Issue 28: `jobs` and `job` say where a running job runs and on how many
// GPUs ("2 servers × 8 GPUs: a [0-7], b [0-7]"); --json keeps its fields.
func TestJobsShowPlacement(t *testing.T) {
	sock, d := serveControl(t)
	ctx := context.Background()
	file := filepath.Join(t.TempDir(), "job.yaml")
	os.WriteFile(file, []byte(strings.NewReplacer("TENANT", "research", "MODEL", "gpt2", "REQUEST", `{gpus: 16, plan: "dp=16,tp=1,pp=1,mb=1,ga=1,zero=0"}`).Replace(cliSpec)), 0o644)
	var out, errb bytes.Buffer
	if st := Run(ctx, []string{"submit", "--socket", sock, file}, &out, &errb); st != 0 {
		t.Fatalf("submit: %s", errb.String())
	}
	if _, err := d.Round(ctx); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if st := Run(ctx, []string{"jobs", "--socket", sock}, &out, &errb); st != 0 {
		t.Fatalf("jobs: %s", errb.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "GPUS") || !strings.Contains(lines[0], "WHERE") {
		t.Fatalf("jobs:\n%s", out.String())
	}
	if f := strings.Fields(lines[1]); !strings.Contains(lines[1], " 16 ") || !strings.Contains(lines[1], "2 servers × 8 GPUs") || f[4] != "running" {
		t.Errorf("jobs row does not say 16 GPUs on 2 servers × 8 GPUs:\n%s", out.String())
	}
	out.Reset()
	if st := Run(ctx, []string{"job", "--socket", sock, "j-000001"}, &out, &errb); st != 0 {
		t.Fatalf("job: %s", errb.String())
	}
	if !strings.Contains(out.String(), "runs on 16 GPUs, 2 servers × 8 GPUs: a [0-7], b [0-7]\n") {
		t.Errorf("job does not say where it runs:\n%s", out.String())
	}
	out.Reset()
	var recs []struct {
		Placement []struct{ Name string } `json:"placement"`
	}
	if st := Run(ctx, []string{"jobs", "--socket", sock, "--json"}, &out, &errb); st != 0 || json.Unmarshal(out.Bytes(), &recs) != nil || len(recs) != 1 || len(recs[0].Placement) != 2 {
		t.Errorf("jobs --json: %s %s", out.String(), errb.String())
	}
}

// startedLongJob serves a daemon on the simulated cluster, submits a
// gpt2 job of 8 GPUs and a million iterations through the CLI and runs a
// round: the job runs on the simulated servers.
func startedLongJob(t *testing.T) (string, *control.Daemon, control.JobRecord) {
	t.Helper()
	sock, d := serveControl(t)
	file := filepath.Join(t.TempDir(), "j.yaml")
	spec := strings.NewReplacer("TENANT", "research", "MODEL", "gpt2", "REQUEST", "{gpus: 8}", "iterations: 50", "iterations: 1000000").Replace(cliSpec)
	if err := os.WriteFile(file, []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := runCLI(t, "submit", file, "--socket", sock, "--json")
	if err != nil {
		t.Fatalf("submit: %v\n%s", err, out)
	}
	var rec control.JobRecord
	if err := json.Unmarshal([]byte(out), &rec); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Round(context.Background()); err != nil {
		t.Fatal(err)
	}
	return sock, d, rec
}
