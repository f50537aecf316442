package control

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/replan/replan/agent"
	"github.com/replan/replan/jobspec"
	"github.com/replan/replan/launch"
)

// faultCluster is a daemon on the simulated cluster (servers a and b, 8
// GPUs each) whose GPU health comes from fake agent backends.
type faultCluster struct {
	d   *Daemon
	st  *SQLite
	ex  *SimExecutor
	c   *clock
	gpu map[string]*agent.FakeBackend
}

func newFaultCluster(t *testing.T) *faultCluster {
	t.Helper()
	st, _ := openTest(t)
	c := &clock{t: time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)}
	ex := NewSimExecutor(c.now, []string{"a", "b"}, nil, nil, 30*time.Second)
	f := &faultCluster{st: st, ex: ex, c: c, gpu: map[string]*agent.FakeBackend{}}
	for _, s := range []string{"a", "b"} {
		b, err := agent.NewFakeBackend("8xA800")
		if err != nil {
			t.Fatal(err)
		}
		f.gpu[s] = b
		ex.SetGPUBackend(s, b)
	}
	f.d, _ = newDaemonWith(t, st, ex, "static", c)
	return f
}

// step advances the clock, observes and runs a round.
func (f *faultCluster) step(t *testing.T, by time.Duration) {
	t.Helper()
	f.c.advance(by)
	if err := f.d.Observe(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := f.d.Round(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func (f *faultCluster) placement(t *testing.T, id string) []launch.Server {
	t.Helper()
	rec, err := f.st.GetJob(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	var pl []launch.Server
	if len(rec.Placement) > 0 {
		if err := json.Unmarshal(rec.Placement, &pl); err != nil {
			t.Fatal(err)
		}
	}
	return pl
}

func (f *faultCluster) events(t *testing.T, kind string) []Event {
	t.Helper()
	evs, err := f.st.Events(context.Background(), 0, 100000)
	if err != nil {
		t.Fatal(err)
	}
	var out []Event
	for _, e := range evs {
		if e.Kind == kind {
			out = append(out, e)
		}
	}
	return out
}

func nodeOf(d *Daemon, name string) NodeView {
	for _, n := range d.Nodes() {
		if n.Name == name {
			return n
		}
	}
	return NodeView{}
}

// TestXid79CordonsTheGPUAndMovesOnlyItsJob: Xid 79 on one GPU of a
// running job whose processes died with it: the GPU is cordoned at that
// observation with an event naming the server, GPU and cause, the job is
// requeued from its checkpoint without being charged and resumes on
// other GPUs, the job beside it is not touched, and the server serves
// its 7 other GPUs. The cordon survives a restart of the daemon, and
// only an uncordon clears it (the old Xid the agent still reports does
// not cordon it again).
func TestXid79CordonsTheGPUAndMovesOnlyItsJob(t *testing.T) {
	ctx := context.Background()
	f := newFaultCluster(t)
	victim, err := f.d.Submit(ctx, spec(t, "victim", 4, jobspec.BestEffort))
	if err != nil {
		t.Fatal(err)
	}
	other, err := f.d.Submit(ctx, spec(t, "other", 4, jobspec.BestEffort))
	if err != nil {
		t.Fatal(err)
	}
	f.d.Round(ctx)
	for i := 0; i < 4; i++ {
		f.step(t, 20*time.Second)
	}
	pl := f.placement(t, victim.ID)
	if len(pl) != 1 || len(pl[0].GPUs) != 4 {
		t.Fatalf("victim placed on %+v", pl)
	}
	server, bad := pl[0].Name, pl[0].GPUs[1]
	otherBefore, _ := f.st.GetJob(ctx, other.ID)
	victimBefore, _ := f.st.GetJob(ctx, victim.ID)
	if victimBefore.State != StateRunning || otherBefore.State != StateRunning || victimBefore.Checkpoint == 0 {
		t.Fatalf("before the fault: victim %s (checkpoint %d), other %s", victimBefore.State, victimBefore.Checkpoint, otherBefore.State)
	}

	if err := f.gpu[server].InjectXid(bad, 79); err != nil {
		t.Fatal(err)
	}
	f.ex.Kill(victim.ID, 1) // the GPU took the job's processes with it
	f.c.advance(20 * time.Second)
	if err := f.d.Observe(ctx); err != nil {
		t.Fatal(err)
	}
	// Within this one observation: cordoned, event, the job requeued.
	n := nodeOf(f.d, server)
	if len(n.CordonedGPUs) != 1 || n.CordonedGPUs[0].GPU != bad || n.CordonedGPUs[0].Cause != "xid-79" {
		t.Fatalf("cordoned GPUs of %s: %+v", server, n.CordonedGPUs)
	}
	if !n.GPUStats[bad].Cordoned || !strings.Contains(n.GPUStats[bad].CordonWhy, "fallen off the bus") {
		t.Errorf("GPU stat %d: %+v", bad, n.GPUStats[bad])
	}
	evs := f.events(t, "cordon")
	if len(evs) != 1 || evs[0].Node != server || !strings.Contains(evs[0].Msg, server+" GPU ") || !strings.Contains(evs[0].Msg, "Xid 79") || !strings.Contains(evs[0].Msg, victim.ID) {
		t.Fatalf("cordon events: %+v", evs)
	}
	vr, _ := f.st.GetJob(ctx, victim.ID)
	if vr.State != StatePreempted || vr.Failures != 0 || vr.Checkpoint < victimBefore.Checkpoint {
		t.Fatalf("victim after the Xid: %s, %d failures, checkpoint %d (was %d): %s", vr.State, vr.Failures, vr.Checkpoint, victimBefore.Checkpoint, vr.Reason)
	}
	// It resumes elsewhere; the other job is undisturbed.
	for i := 0; i < 3; i++ {
		f.step(t, 20*time.Second)
	}
	vr, _ = f.st.GetJob(ctx, victim.ID)
	if vr.State != StateRunning || vr.Failures != 0 {
		t.Fatalf("victim did not resume: %s (%s), %d failures", vr.State, vr.Reason, vr.Failures)
	}
	for _, s := range f.placement(t, victim.ID) {
		if s.Name == server && slices.Contains(s.GPUs, bad) {
			t.Fatalf("victim placed on the cordoned GPU again: %+v", s)
		}
	}
	or, _ := f.st.GetJob(ctx, other.ID)
	if or.State != StateRunning || or.Attempt != otherBefore.Attempt || or.Restarts != otherBefore.Restarts || or.Iterations <= otherBefore.Iterations {
		t.Errorf("other job disturbed: %s, attempt %d (was %d), iterations %d (was %d)", or.State, or.Attempt, otherBefore.Attempt, or.Iterations, otherBefore.Iterations)
	}

	// The server still serves its 7 healthy GPUs: fill the cluster with
	// 1-GPU jobs; every GPU but the cordoned one is taken.
	free := 0
	for _, n := range f.d.Nodes() {
		free += n.FreeGPUs
	}
	if free != 16-1-8 {
		t.Fatalf("free GPUs %d, want 7 (16, less the cordoned one and 8 held)", free)
	}
	var fillers []string
	for k := 0; k < free+1; k++ {
		r, err := f.d.Submit(ctx, spec(t, "fill"+string(rune('a'+k)), 1, jobspec.BestEffort))
		if err != nil {
			t.Fatal(err)
		}
		fillers = append(fillers, r.ID)
	}
	f.step(t, 20*time.Second)
	n = nodeOf(f.d, server)
	held := 0
	for g, o := range n.GPUOwners {
		if g == bad && o != "" {
			t.Fatalf("the cordoned GPU went to %s", o)
		}
		if o != "" {
			held++
		}
	}
	if held != 7 || n.FreeGPUs != 0 {
		t.Fatalf("%s: %d GPUs held, %d free; want 7 and 0 (owners %v)", server, held, n.FreeGPUs, n.GPUOwners)
	}
	running := 0
	for _, id := range fillers {
		if r, _ := f.st.GetJob(ctx, id); r.State == StateRunning {
			running++
		}
	}
	if running != free {
		t.Fatalf("%d of %d fillers run, want %d", running, len(fillers), free)
	}

	// The metrics count it apart: neither free nor allocated.
	if got := gpuGauges(t, f.d); got["cordoned"] != 1 || got["free"] != 0 || got["allocated"] != 15 {
		t.Errorf("replan_gpus %v, want 1 cordoned, 0 free, 15 allocated", got)
	}

	// A restarted daemon keeps the cordon.
	d2, err := New(ctx, Config{Store: f.st, Exec: f.ex, Policy: f.d.cfg.Policy, Clock: f.c.now, Servers: f.d.cfg.Servers, Tenants: f.d.cfg.Tenants})
	if err != nil {
		t.Fatal(err)
	}
	d2.publish()
	if cs := nodeOf(d2, server).CordonedGPUs; len(cs) != 1 || cs[0].GPU != bad {
		t.Fatalf("after a restart: cordoned %+v", cs)
	}
	if err := d2.Uncordon(ctx, server, bad); err != nil {
		t.Fatal(err)
	}
	if err := d2.Uncordon(ctx, server, bad); err == nil || !strings.Contains(err.Error(), "not cordoned") {
		t.Errorf("second uncordon: %v", err)
	}
	f.c.advance(20 * time.Second)
	if err := d2.Observe(ctx); err != nil {
		t.Fatal(err)
	}
	if cs := nodeOf(d2, server).CordonedGPUs; len(cs) != 0 {
		t.Fatalf("the old Xid cordoned it again: %+v", cs)
	}
	if evs := f.events(t, "uncordon"); len(evs) != 1 || !strings.Contains(evs[0].Msg, "back in service") {
		t.Errorf("uncordon events: %+v", evs)
	}
	// A new Xid does.
	f.gpu[server].InjectXid(bad, 48)
	f.c.advance(20 * time.Second)
	if err := d2.Observe(ctx); err != nil {
		t.Fatal(err)
	}
	if cs := nodeOf(d2, server).CordonedGPUs; len(cs) != 1 || cs[0].Cause != "xid-48" {
		t.Fatalf("after a new Xid 48: %+v", cs)
	}
}

// TestDoubleBitECCCheckpointsALiveJob: a double-bit ECC error on a GPU of
// a job that still runs: the job is checkpointed at its stop (its
// checkpoint reaches the iterations it had done) and moved; an Xid that
// is an application error (13) cordons nothing.
func TestDoubleBitECCCheckpointsALiveJob(t *testing.T) {
	ctx := context.Background()
	f := newFaultCluster(t)
	j, err := f.d.Submit(ctx, spec(t, "live", 8, jobspec.BestEffort))
	if err != nil {
		t.Fatal(err)
	}
	f.d.Round(ctx)
	for i := 0; i < 4; i++ {
		f.step(t, 20*time.Second)
	}
	server := f.placement(t, j.ID)[0].Name
	f.gpu[server].InjectXid(5, 13)
	f.step(t, 20*time.Second)
	if cs := nodeOf(f.d, server).CordonedGPUs; len(cs) != 0 {
		t.Fatalf("Xid 13 cordoned %+v", cs)
	}
	f.gpu[server].InjectECC(5, true)
	f.c.advance(20 * time.Second)
	doneBefore := 0
	if it, ok := f.ex.progressOf(j.ID); ok {
		doneBefore = it
	}
	if err := f.d.Observe(ctx); err != nil {
		t.Fatal(err)
	}
	cs := nodeOf(f.d, server).CordonedGPUs
	if len(cs) != 1 || cs[0].GPU != 5 || cs[0].Cause != "ecc-dbe" {
		t.Fatalf("cordoned %+v", cs)
	}
	r, _ := f.st.GetJob(ctx, j.ID)
	if r.State != StatePreempted || r.Failures != 0 || r.Checkpoint < doneBefore || doneBefore == 0 {
		t.Fatalf("job after the ECC error: %s, %d failures, checkpoint %d, had done %d", r.State, r.Failures, r.Checkpoint, doneBefore)
	}
	f.step(t, 20*time.Second)
	r, _ = f.st.GetJob(ctx, j.ID)
	pl := f.placement(t, j.ID)
	if r.State != StateRunning || len(pl) != 1 || pl[0].Name == server {
		t.Fatalf("8-GPU job not moved to the healthy server: %s on %+v", r.State, pl)
	}
}

// TestMemoryFaultsAndFailedReadsCordon: pending retired pages and a
// failed row remapping cordon at once; failed reads only after
// GPUReadFailures observations in a row.
func TestMemoryFaultsAndFailedReadsCordon(t *testing.T) {
	ctx := context.Background()
	f := newFaultCluster(t)
	f.gpu["a"].SetMemoryFaults(2, true, false, false)
	f.gpu["b"].SetMemoryFaults(6, false, false, true)
	f.gpu["b"].SetReadError(3, "memory: GPU is lost")
	for k := 1; k <= DefaultGPUReadFailures; k++ {
		f.c.advance(20 * time.Second)
		if err := f.d.Observe(ctx); err != nil {
			t.Fatal(err)
		}
		a, b := nodeOf(f.d, "a").CordonedGPUs, nodeOf(f.d, "b").CordonedGPUs
		if len(a) != 1 || a[0].Cause != "retired-pages" {
			t.Fatalf("observation %d: a cordoned %+v", k, a)
		}
		want := []int{6}
		if k == DefaultGPUReadFailures {
			want = []int{3, 6}
		}
		var got []int
		for _, c := range b {
			got = append(got, c.GPU)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("observation %d: b cordoned %+v, want GPUs %v", k, b, want)
		}
	}
	if b := nodeOf(f.d, "b"); b.CordonedGPUs[0].Cause != "read-errors" || !strings.Contains(b.CordonedGPUs[0].Why, "GPU is lost") || b.FreeGPUs != 6 {
		t.Fatalf("b: %+v, %d free", b.CordonedGPUs, b.FreeGPUs)
	}
}

// progressOf is the iterations a simulated job has done by now.
func (e *SimExecutor) progressOf(id string) (int, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	j := e.running[id]
	if j == nil {
		return 0, false
	}
	return int(e.progress(j)), true
}

// gpuGauges is the replan_gpus gauge by use.
func gpuGauges(t *testing.T, d *Daemon) map[string]float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(&collector{d})
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "replan_gpus" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "use" {
					out[l.GetValue()] = m.GetGauge().GetValue()
				}
			}
		}
	}
	return out
}

// TestExitJustBeforeTheXidIsGivenBack: the job's processes die one
// observation before the agent reports the Xid (the failure is charged
// then); the cordon that follows gives the failure back, with a refund
// event. An exit longer than CordonRefundWindow before keeps its charge.
func TestExitJustBeforeTheXidIsGivenBack(t *testing.T) {
	ctx := context.Background()
	f := newFaultCluster(t)
	j, _ := f.d.Submit(ctx, spec(t, "early", 4, jobspec.BestEffort))
	k, _ := f.d.Submit(ctx, spec(t, "late", 4, jobspec.BestEffort))
	f.d.Round(ctx)
	for i := 0; i < 3; i++ {
		f.step(t, 20*time.Second)
	}
	pj, pk := f.placement(t, j.ID)[0], f.placement(t, k.ID)[0]
	f.ex.Kill(j.ID, 1)
	f.ex.Kill(k.ID, 1)
	f.c.advance(20 * time.Second)
	if err := f.d.Observe(ctx); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{j.ID, k.ID} {
		if r, _ := f.st.GetJob(ctx, id); r.Failures != 1 || r.State != StatePreempted {
			t.Fatalf("%s after its exit: %s, %d failures", id, r.State, r.Failures)
		}
	}
	f.gpu[pj.Name].InjectXid(pj.GPUs[0], 79)
	f.c.advance(20 * time.Second)
	if err := f.d.Observe(ctx); err != nil {
		t.Fatal(err)
	}
	if r, _ := f.st.GetJob(ctx, j.ID); r.Failures != 0 {
		t.Errorf("%s after its GPU was cordoned: %d failures, want 0", j.ID, r.Failures)
	}
	if evs := f.events(t, "refund"); len(evs) != 1 || evs[0].JobID != j.ID {
		t.Errorf("refund events %+v", evs)
	}
	f.c.advance(CordonRefundWindow)
	f.gpu[pk.Name].InjectXid(pk.GPUs[1], 79)
	if err := f.d.Observe(ctx); err != nil {
		t.Fatal(err)
	}
	if cs := nodeOf(f.d, pk.Name).CordonedGPUs; !slices.ContainsFunc(cs, func(c GPUCordon) bool { return c.GPU == pk.GPUs[1] }) {
		t.Fatalf("not cordoned: %+v", cs)
	}
	if r, _ := f.st.GetJob(ctx, k.ID); r.Failures != 1 {
		t.Errorf("%s, exited %s before the Xid: %d failures, want 1", k.ID, CordonRefundWindow+20*time.Second, r.Failures)
	}
}

// TestCordonedGPUsLeaveTheClusterShort: a job pinned to a 16-GPU plan on
// 2 × 8 GPUs with one cordoned cannot run: it is unschedulable with a
// reason that names the cordon, and runs once the GPU is uncordoned.
func TestCordonedGPUsLeaveTheClusterShort(t *testing.T) {
	ctx := context.Background()
	f := newFaultCluster(t)
	f.gpu["b"].InjectECC(2, true)
	f.step(t, 20*time.Second)
	s := spec(t, "whole", 16, jobspec.BestEffort)
	s.Pin.Plan = true
	j, err := f.d.Submit(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	f.step(t, 20*time.Second)
	r, _ := f.st.GetJob(ctx, j.ID)
	if r.State != StateUnschedulable || !strings.Contains(r.Reason, "the servers in service have 15 (cordoned: 1 GPUs)") {
		t.Fatalf("16-GPU job with a GPU cordoned: %s (%s)", r.State, r.Reason)
	}
	if err := f.d.Uncordon(ctx, "b", 2); err != nil {
		t.Fatal(err)
	}
	f.step(t, 20*time.Second)
	if r, _ := f.st.GetJob(ctx, j.ID); r.State != StateRunning {
		t.Fatalf("after the uncordon: %s (%s)", r.State, r.Reason)
	}
}
