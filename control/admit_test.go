package control

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/replan/replan/jobspec"
	"github.com/replan/replan/perf"
	"github.com/replan/replan/sched"
)

// startAdmitAPI serves a daemon of two 8-GPU servers in one rack (a, b)
// and two tenants: research (16 GPUs) and small (4 GPUs).
func startAdmitAPI(t *testing.T) (*Client, *Daemon, *SQLite) {
	t.Helper()
	st, _ := openTest(t)
	c := &clock{t: time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)}
	p, _ := sched.New("morphling")
	d, err := New(context.Background(), Config{
		Store: st, Exec: &recorder{}, Policy: p, Clock: c.now,
		Servers: []ServerInfo{{Name: "a", Address: "10.0.0.1", Rack: "r1", GPUs: 8, CPUs: 64, MemGB: 1000}, {Name: "b", Address: "10.0.0.2", Rack: "r1", GPUs: 8, CPUs: 64, MemGB: 1000}},
		Tenants: []TenantInfo{{Name: "research", QuotaGPUs: 16}, {Name: "small", QuotaGPUs: 4}},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	sock := filepath.Join(t.TempDir(), "replan.sock")
	l, err := ListenUnix(sock)
	if err != nil {
		t.Fatal(err)
	}
	go Serve(ctx, l, (&API{D: d, Version: "test"}).Handler())
	return NewUnixClient(sock), d, st
}

// admitSpec is a job spec; fields are replaced by name.
func admitSpec(repl map[string]string) string {
	f := map[string]string{"tenant": "research", "class": "best-effort", "model": "gpt2", "global_batch": "16",
		"request": "{gpus: 4}", "pin": "{}", "checkpoint_dir": "/ckpt/x"}
	for k, v := range repl {
		f[k] = v
	}
	return fmt.Sprintf(`version: 1
name: x
tenant: %s
class: %s
model: %s
framework: deepspeed
workdir: /w
entrypoint: train.py
global_batch: %s
iterations: 50
checkpoint_dir: %s
request: %s
pin: %s
`, f["tenant"], f["class"], f["model"], f["global_batch"], f["checkpoint_dir"], f["request"], f["pin"])
}

// Issue 12: each of these was accepted and then waited forever with a
// misleading reason; now each is refused with 400 naming file, line and
// field, and nothing is stored.
func TestAPIAdmissionRefusesWhatCanNeverRun(t *testing.T) {
	ctx := context.Background()
	cl, _, _ := startAdmitAPI(t)
	for _, tc := range []struct {
		name  string
		repl  map[string]string
		line  int
		field string
		msg   string
	}{
		{"unknown tenant", map[string]string{"tenant": "nosuchteam"}, 3, "tenant", `unknown tenant "nosuchteam"`},
		{"more GPUs than the cluster", map[string]string{"request": "{gpus: 1000}"}, 12, "request.gpus", "the cluster has 16"},
		{"more cores than the cluster", map[string]string{"request": "{gpus: 4, cpus: 500}"}, 12, "request.cpus", "the cluster has 128"},
		{"more memory than the cluster", map[string]string{"request": "{gpus: 4, memory_gb: 5000}"}, 12, "request.memory_gb", "the cluster has 2000 GB"},
		{"guaranteed above its quota", map[string]string{"tenant": "small", "class": "guaranteed", "request": `{gpus: 8, plan: "dp=8,tp=1,pp=1,mb=2,ga=1"}`}, 12, "request.gpus", "quota of 4 GPUs"},
		{"plan does not fit GPU memory", map[string]string{"model": "llama7b", "request": `{gpus: 8, plan: "dp=8,tp=1,pp=1,mb=2,ga=1,zero=0"}`}, 12, "request.plan", "gpu-memory: needs 2"},
		{"no plan fits at any size", map[string]string{"model": "{name: huge, params: 4e12, layers: 96, hidden: 65536, heads: 64, seq_len: 2048, vocab: 50000}"}, 5, "model", "no plan of huge fits"},
		{"pin no server can satisfy", map[string]string{"request": `{gpus: 16, plan: "dp=16,tp=1,pp=1,mb=1,ga=1"}`, "pin": "{plan: true, tiers: [server]}"}, 13, "pin.tiers", "largest server of the inventory has 8"},
		{"control characters", map[string]string{"tenant": `"research\u001b]0;pwned\u0007"`}, 3, "tenant", "control character"},
		{"backslash in checkpoint_dir", map[string]string{"checkpoint_dir": `'/ckpt/a\b'`}, 11, "checkpoint_dir", "backslash"},
	} {
		_, err := cl.Submit(ctx, "job.yaml", []byte(admitSpec(tc.repl)))
		var re *RemoteError
		if !errors.As(err, &re) || re.Status != http.StatusBadRequest {
			t.Errorf("%s: want 400, got %v", tc.name, err)
			continue
		}
		found := false
		for _, p := range re.Problems {
			if p.File == "job.yaml" && p.Line == tc.line && p.Field == tc.field && strings.Contains(p.Msg, tc.msg) {
				found = true
			}
		}
		if !found {
			t.Errorf("%s: want job.yaml:%d: %s: ...%s..., got %+v", tc.name, tc.line, tc.field, tc.msg, re.Problems)
		}
	}
	jobs, err := cl.Jobs(ctx)
	if err != nil || len(jobs) != 0 {
		t.Fatalf("refused specs stored jobs: %+v %v", jobs, err)
	}
	// What can run is admitted: the same shapes within the limits.
	for _, ok := range []map[string]string{
		{},
		{"tenant": "small", "class": "guaranteed", "request": `{gpus: 4, plan: "dp=4,tp=1,pp=1,mb=4,ga=1"}`},
		{"model": "llama7b", "request": `{gpus: 8, plan: "dp=8,tp=1,pp=1,mb=2,ga=1,zero=3,ckpt"}`},
		{"request": `{gpus: 16, plan: "dp=16,tp=1,pp=1,mb=1,ga=1"}`, "pin": "{plan: true, tiers: [server, rack]}"},
	} {
		if _, err := cl.Submit(ctx, "ok.yaml", []byte(admitSpec(ok))); err != nil {
			t.Errorf("%v refused: %v", ok, err)
		}
	}
}

// Issue 12: a job that becomes impossible later (its servers drained) is
// shown unschedulable with its reason (queue, store, event), survives a
// daemon restart so, and waits (then runs) again when capacity returns.
func TestDaemonUnschedulableAfterDrainAndBackAfterUndrain(t *testing.T) {
	ctx := context.Background()
	st, _ := openTest(t)
	ex := &recorder{}
	d, _ := newDaemon(t, st, ex, "morphling")
	j, err := d.Submit(ctx, spec(t, "w", 8, "best-effort"))
	if err != nil {
		t.Fatal(err)
	}
	d.Round(ctx)
	if r, _ := st.GetJob(ctx, j.ID); r.State != StateRunning {
		t.Fatalf("not started: %+v", r)
	}
	for _, s := range []string{"a", "b"} {
		if _, err := d.Drain(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := d.Round(ctx); err != nil {
		t.Fatal(err)
	}
	q := d.Queue()
	if len(q) != 1 || q[0].Job.State != StateUnschedulable || !strings.Contains(q[0].Reason, "drained: a, b") {
		t.Fatalf("queue after draining every server: %+v", q)
	}
	if r, _ := st.GetJob(ctx, j.ID); r.State != StateUnschedulable || r.Reason != q[0].Reason {
		t.Fatalf("stored %s %q", r.State, r.Reason)
	}
	evs, _ := st.Events(ctx, 0, 100)
	if !hasKind(evs, "unschedulable") {
		t.Fatalf("no unschedulable event: %+v", evs)
	}
	// A second round changes nothing (no event per round).
	d.Round(ctx)
	evs2, _ := st.Events(ctx, 0, 100)
	if len(evs2) != len(evs) {
		t.Errorf("a round without change added events: %+v", evs2[len(evs):])
	}
	// A restarted daemon keeps it unschedulable.
	d2, _ := newDaemon(t, st, &recorder{}, "morphling")
	if q := d2.Queue(); len(q) != 1 || q[0].Job.State != StateUnschedulable {
		t.Fatalf("after a restart: %+v", q)
	}
	starts := len(ex.starts)
	if err := d.Undrain(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	d.Round(ctx)
	if r, _ := st.GetJob(ctx, j.ID); r.State != StateRunning {
		t.Fatalf("after undrain: %s %q", r.State, r.Reason)
	}
	if len(ex.starts) != starts+1 || ex.starts[len(ex.starts)-1].Servers[0].Name != "a" {
		t.Errorf("starts %+v", ex.starts[starts:])
	}
	h, _ := st.History(ctx, j.ID)
	var path []string
	for _, x := range h {
		path = append(path, string(x.To))
	}
	if !strings.Contains(strings.Join(path, ","), "preempted,unschedulable,preempted,running") {
		t.Errorf("history %v", path)
	}
	evs, _ = st.Events(ctx, 0, 100)
	if !hasKind(evs, "schedulable") {
		t.Errorf("no schedulable event")
	}
}

// Issue 12: the docs' pinned example (jobspec/testdata/gpt2.yaml,
// pin.tiers [server, rack]) never started on the idle 64-GPU reference
// cluster: the policy offered it GPUs across racks and the daemon vetoed
// the offer every round. The pins are now the scheduler's constraints: it
// starts in the first round, inside one rack.
func TestDaemonDocsPinnedExampleStartsInOneRound(t *testing.T) {
	ctx := context.Background()
	for _, policy := range []string{"replan", "morphling", "dally"} {
		st, _ := openTest(t)
		ex := &recorder{}
		p, _ := sched.New(policy)
		var servers []ServerInfo
		for i := 0; i < 8; i++ {
			servers = append(servers, ServerInfo{Name: fmt.Sprintf("a800-%02d", i), Rack: []string{"rack-a", "rack-b"}[i/4], GPUs: 8, CPUs: 96, MemGB: 1600})
		}
		d, err := New(ctx, Config{Store: st, Exec: ex, Policy: p, Servers: servers, Tenants: []TenantInfo{{Name: "research", QuotaGPUs: 32}}})
		if err != nil {
			t.Fatal(err)
		}
		spec, err := jobspec.Load("../jobspec/testdata/gpt2.yaml", nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Admit(ctx, spec, nil); err != nil {
			t.Fatal(err)
		}
		j, err := d.Submit(ctx, spec)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := d.Round(ctx); err != nil {
			t.Fatal(err)
		}
		r, _ := st.GetJob(ctx, j.ID)
		if r.State != StateRunning || len(ex.starts) != 1 {
			t.Errorf("%s: after one round %s: %q", policy, r.State, r.Reason)
			continue
		}
		racks := map[string]bool{}
		for _, s := range ex.starts[0].Servers {
			racks[servers[d.srvIdx[s.Name]].Rack] = true
		}
		if len(racks) != 1 {
			t.Errorf("%s: placed across racks: %+v", policy, ex.starts[0].Servers)
		}
	}
}

// A Megatron job is admitted only when a plan Megatron-LM runs (ZeRO-0/1
// without offload, the same GPU count on every server) fits the cluster:
// a model that fits only with ZeRO-Offload is refused for Megatron, with
// the framework named, and admitted for DeepSpeed.
func TestAdmissionKnowsTheFramework(t *testing.T) {
	ctx := context.Background()
	cl, d, _ := startAdmitAPI(t)
	env := d.cfg.Model(perf.Arch{Name: "x"}).Env
	// The smallest model (by parameters) that fits the 16 GPUs only
	// with offload: found, not assumed.
	var arch perf.Arch
	for p := 20e9; p <= 400e9 && arch.Name == ""; p *= 1.25 {
		a := perf.Arch{Name: "big", Params: p, Layers: 96, Hidden: 12288, Heads: 96, SeqLen: 2048, Vocab: 50000, GlobalBatch: 16}
		if minFeasible(a, env, perf.MegatronSpace, 8, 8, 16) == 0 && minFeasible(a, env, perf.Space{}, 8, 8, 16) > 0 {
			arch = a
		}
	}
	if arch.Name == "" {
		t.Fatal("no model size fits 16 A800 only with offload: the test proves nothing")
	}
	model := fmt.Sprintf("{name: big, params: %g, layers: 96, hidden: 12288, heads: 96, seq_len: 2048, vocab: 50000}", arch.Params)
	spec := admitSpec(map[string]string{"model": model, "request": "{gpus: 16, cpus: 128}"})
	mg := strings.Replace(spec, "framework: deepspeed", "framework: megatron", 1)
	_, err := cl.Submit(ctx, "job.yaml", []byte(mg))
	var re *RemoteError
	if !errors.As(err, &re) || re.Status != http.StatusBadRequest || !strings.Contains(fmt.Sprint(re.Problems), "that megatron runs") {
		t.Errorf("megatron job of %.3g parameters: want 400 naming the framework, got %v", arch.Params, err)
	}
	if _, err := cl.Submit(ctx, "job.yaml", []byte(spec)); err != nil {
		t.Errorf("deepspeed job of %.3g parameters: %v", arch.Params, err)
	}
}
