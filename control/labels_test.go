package control

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/replan/replan/jobspec"
	"github.com/replan/replan/sched"
)

// launchWatch is the simulated cluster, recording the servers of every
// launch (start or reconfiguration) by job.
type launchWatch struct {
	*SimExecutor
	mu      sync.Mutex
	servers map[string][]string
}

func (w *launchWatch) record(l Launch) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, s := range l.Servers {
		w.servers[l.JobID] = append(w.servers[l.JobID], s.Name)
	}
}

func (w *launchWatch) Start(ctx context.Context, l Launch) error {
	w.record(l)
	return w.SimExecutor.Start(ctx, l)
}

func (w *launchWatch) Reconfigure(ctx context.Context, from, to Launch, last int) error {
	w.record(to)
	return w.SimExecutor.Reconfigure(ctx, from, to, last)
}

// labelledSpec is spec with a constraint block (none when labels is "").
func labelledSpec(t *testing.T, name string, gpus, iters int, labels string) *jobspec.Spec {
	t.Helper()
	data := fmt.Sprintf("version: 1\nname: %s\ntenant: research\nclass: best-effort\nmodel: gpt2\nframework: deepspeed\nworkdir: /w\n"+
		"entrypoint: train.py\nglobal_batch: 16\niterations: %d\ncheckpoint_dir: /ckpt/%s\nrequest: {gpus: %d, plan: \"dp=%d,tp=1,pp=1,mb=%d,ga=1\"}\n",
		name, iters, name, gpus, gpus, 16/gpus)
	if labels != "" {
		data += "constraint: {labels: [" + labels + "]}\n"
	}
	s, err := jobspec.Parse(name+".yaml", []byte(data), nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func labelledDaemon(t *testing.T, policy string, ex Executor, c *clock) *Daemon {
	t.Helper()
	st, _ := openTest(t)
	p, err := sched.New(policy)
	if err != nil {
		t.Fatal(err)
	}
	d, err := New(context.Background(), Config{
		Store: st, Exec: ex, Policy: p, Clock: c.now,
		Servers: []ServerInfo{
			{Name: "a", Address: "10.0.0.1", Rack: "r1", GPUs: 8, CPUs: 64, MemGB: 1000},
			{Name: "b", Address: "10.0.0.2", Rack: "r1", GPUs: 8, CPUs: 64, MemGB: 1000, Labels: map[string]string{"ib-hdr": ""}},
			{Name: "c", Address: "10.0.0.3", Rack: "r1", GPUs: 8, CPUs: 64, MemGB: 1000, Labels: map[string]string{"nvme": ""}},
		},
		Tenants: []TenantInfo{{Name: "research", QuotaGPUs: 24}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// Node features on the daemon with the simulated cluster: a job that
// requires ib-hdr (only server b has it) waits while b is busy, however
// many GPUs are free on a and c, with a reason naming its labelled
// servers; it starts on b when b frees, and no launch of a constrained
// job is ever on another server. Unconstrained jobs use a and c.
func TestConstrainedJobWaitsForALabelledServer(t *testing.T) {
	for _, policy := range []string{"static", "dally", "replan"} {
		t.Run(policy, func(t *testing.T) {
			ctx := context.Background()
			c := &clock{t: time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)}
			ex := &launchWatch{SimExecutor: NewSimExecutor(c.now, []string{"a", "b", "c"}, nil, nil, 10*time.Second), servers: map[string][]string{}}
			d := labelledDaemon(t, policy, ex, c)
			submit := func(s *jobspec.Spec) string {
				if err := d.Admit(ctx, s, nil); err != nil {
					t.Fatal(err)
				}
				r, err := d.Submit(ctx, s)
				if err != nil {
					t.Fatal(err)
				}
				return r.ID
			}
			step := func() {
				c.advance(10 * time.Second)
				if err := d.Observe(ctx); err != nil {
					t.Fatal(err)
				}
				if _, err := d.Round(ctx); err != nil {
					t.Fatal(err)
				}
			}
			hog := submit(labelledSpec(t, "hog", 8, 400, "ib-hdr"))
			d.Round(ctx)
			for i := 0; i < 3; i++ {
				step()
			}
			if got := ex.servers[hog]; len(got) == 0 || got[0] != "b" {
				t.Fatalf("hog (ib-hdr) launched on %v, want b", got)
			}
			ib := submit(labelledSpec(t, "ib", 8, 200, "ib-hdr"))
			free := submit(labelledSpec(t, "free", 8, 200, ""))
			step()
			waited := false
			for i := 0; i < 3000; i++ {
				rec, _ := d.cfg.Store.GetJob(ctx, ib)
				hr, _ := d.cfg.Store.GetJob(ctx, hog)
				if rec.State == StateRunning || rec.State == StateFinished {
					break
				}
				if hr.State == StateRunning && len(ex.servers[ib]) == 0 {
					for _, q := range d.Queue() {
						if q.Job.ID == ib && strings.Contains(q.Reason, "needs servers labelled ib-hdr: 1 such server (8 GPUs, 0 free), 1 of them busy") {
							waited = true
						}
					}
				}
				step()
			}
			if !waited {
				q := d.Queue()
				t.Errorf("ib never waited for b with a reason naming its labelled servers (queue %+v)", q)
			}
			for i := 0; i < 3000 && len(d.jobsSnapshot()) > 0; i++ {
				step()
			}
			for _, id := range []string{hog, ib, free} {
				rec, _ := d.cfg.Store.GetJob(ctx, id)
				if rec.State != StateFinished {
					t.Errorf("%s: %s (%s)", rec.Name, rec.State, rec.Reason)
				}
			}
			ex.mu.Lock()
			defer ex.mu.Unlock()
			for _, id := range []string{hog, ib} {
				if len(ex.servers[id]) == 0 {
					t.Errorf("%s never launched", id)
				}
				for _, s := range ex.servers[id] {
					if s != "b" {
						t.Errorf("%s (ib-hdr) launched on %s: %v", id, s, ex.servers[id])
					}
				}
			}
		})
	}
}

// Admission: a constraint no server carries, or a request above the GPUs
// of the servers that carry it, is refused at submit naming the field; a
// job whose labelled servers are all drained is unschedulable, and says
// so.
func TestAdmitConstraintLabels(t *testing.T) {
	ctx := context.Background()
	c := &clock{t: time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)}
	d := labelledDaemon(t, "static", &recorder{}, c)
	var ae *AdmissionError
	err := d.Admit(ctx, labelledSpec(t, "x", 8, 100, "roce"), nil)
	if !errors.As(err, &ae) || !strings.Contains(err.Error(), "x.yaml:13: constraint.labels: no server of the inventory carries roce (the servers' labels: ib-hdr, nvme)") {
		t.Errorf("unknown label: %v", err)
	}
	err = d.Admit(ctx, labelledSpec(t, "y", 16, 100, "ib-hdr"), nil)
	if !errors.As(err, &ae) || !strings.Contains(err.Error(), "y.yaml:12: request.gpus: 16 GPUs asked, the 1 servers labelled ib-hdr have 8 in all") {
		t.Errorf("too large for the labelled servers: %v", err)
	}
	if err := d.Admit(ctx, labelledSpec(t, "z", 8, 100, "ib-hdr"), nil); err != nil {
		t.Errorf("fits b: %v", err)
	}
	if err := d.Admit(ctx, labelledSpec(t, "w", 16, 100, ""), nil); err != nil {
		t.Errorf("no constraint: %v", err)
	}
	// b drained: the constrained job cannot run anywhere in service.
	r, err := d.Submit(ctx, labelledSpec(t, "z", 8, 100, "ib-hdr"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Drain(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Round(ctx); err != nil {
		t.Fatal(err)
	}
	rec, _ := d.cfg.Store.GetJob(ctx, r.ID)
	if rec.State != StateUnschedulable || !strings.Contains(rec.Reason, "needs at least 1 GPUs on servers labelled ib-hdr, those in service have 0 (drained: b)") {
		t.Errorf("after draining b: %s (%s)", rec.State, rec.Reason)
	}
}

// A daemon that recovers its jobs from the store keeps each job's
// constraint: its snapshot still asks for the labelled servers.
func TestRecoveredSpecKeepsItsConstraint(t *testing.T) {
	ctx := context.Background()
	c := &clock{t: time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)}
	st, _ := openTest(t)
	p, _ := sched.New("static")
	cfg := func() Config {
		return Config{Store: st, Exec: &recorder{}, Policy: p, Clock: c.now,
			Servers: []ServerInfo{{Name: "a", Address: "10.0.0.1", Rack: "r1", GPUs: 8, CPUs: 64, MemGB: 1000},
				{Name: "b", Address: "10.0.0.2", Rack: "r1", GPUs: 8, CPUs: 64, MemGB: 1000, Labels: map[string]string{"ib-hdr": ""}}},
			Tenants: []TenantInfo{{Name: "research", QuotaGPUs: 16}}}
	}
	d, err := New(ctx, cfg())
	if err != nil {
		t.Fatal(err)
	}
	rec, err := d.Submit(ctx, labelledSpec(t, "ib", 8, 100, "ib-hdr"))
	if err != nil {
		t.Fatal(err)
	}
	d2, err := New(ctx, cfg())
	if err != nil {
		t.Fatal(err)
	}
	d2.mu.Lock()
	snap, _ := d2.snapshot()
	d2.mu.Unlock()
	if len(snap.Jobs) != 1 || snap.Jobs[0].ID != rec.ID || strings.Join(snap.Jobs[0].Labels, ",") != "ib-hdr" {
		t.Errorf("recovered snapshot jobs %+v", snap.Jobs)
	}
	if len(snap.Servers) != 2 || snap.Servers[1].Labels == nil {
		t.Errorf("snapshot servers %+v", snap.Servers)
	}
}
