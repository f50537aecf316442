package control

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"testing"
)

func nodeNamed(t *testing.T, nodes []NodeView, name string) NodeView {
	t.Helper()
	for _, n := range nodes {
		if n.Name == name {
			return n
		}
	}
	t.Fatalf("no node %s in %+v", name, nodes)
	return NodeView{}
}

// Issue 28: drain moved a server's jobs off at once; there was no drain
// that lets them finish (Slurm's DRAIN), and nodes did not say why a
// server was drained, by whom or since when. drain --after-jobs places
// nothing new there and leaves its jobs running until they end; the
// reason, the user and the time are stored and survive a restart.
func TestAPIDrainAfterJobsKeepsJobsAndRecordsWhy(t *testing.T) {
	ctx := context.Background()
	alice, bob, d, ex, c, st := startUsersAPI(t)
	j1, err := alice.Submit(ctx, "j1.yaml", []byte(admitSpec(map[string]string{"request": pinned8, "pin": "{plan: true}"})))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Round(ctx); err != nil {
		t.Fatal(err)
	}
	if len(ex.starts) != 1 || len(ex.starts[0].Servers) != 1 {
		t.Fatalf("starts %+v, want j1 on one server", ex.starts)
	}
	s := ex.starts[0].Servers[0].Name
	other := map[string]string{"a": "b", "b": "a"}[s]
	drainedAt := c.now()
	// Bob is no admin.
	var re *RemoteError
	if _, err := bob.Drain(ctx, s, DrainRequest{Reason: "mine", AfterJobs: true}); !errors.As(err, &re) || re.Status != http.StatusForbidden {
		t.Fatalf("bob draining: %v, want 403", err)
	}
	moved, err := alice.Drain(ctx, s, DrainRequest{Reason: "bad fan", AfterJobs: true})
	if err != nil || len(moved) != 0 {
		t.Fatalf("drain --after-jobs: moved %v, %v (want nothing moved)", moved, err)
	}
	if rec, _ := st.GetJob(ctx, j1.ID); rec.State != StateRunning || len(ex.stops) != 0 {
		t.Fatalf("after drain --after-jobs j1 is %s, stops %v (want it left running)", rec.State, ex.stops)
	}
	n := nodeNamed(t, d.Nodes(), s)
	if n.State != "draining" || !n.Drained || n.DrainReason != "bad fan" || n.DrainedBy != "alice" || n.DrainedAt == nil || !n.DrainedAt.Equal(drainedAt) || n.DrainMode != DrainAfterJobs {
		t.Fatalf("draining %s: %+v", s, n)
	}
	// Nothing new goes there: a second 8-GPU job takes the other
	// server, a third waits.
	j2, _ := alice.Submit(ctx, "j2.yaml", []byte(admitSpec(map[string]string{"request": pinned8, "pin": "{plan: true}"})))
	j3, _ := alice.Submit(ctx, "j3.yaml", []byte(admitSpec(map[string]string{"request": pinned8, "pin": "{plan: true}"})))
	if _, err := d.Round(ctx); err != nil {
		t.Fatal(err)
	}
	if len(ex.starts) != 2 || ex.starts[1].JobID != j2.ID || ex.starts[1].Servers[0].Name != other {
		t.Fatalf("starts %+v, want j2 on %s only", ex.starts, other)
	}
	// j1 ends: the server is drained, and stays out of placement.
	ex.next = Observation{Jobs: []JobObservation{{JobID: j1.ID, Iterations: 50, Exited: true}}}
	if err := d.Observe(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Round(ctx); err != nil {
		t.Fatal(err)
	}
	if n := nodeNamed(t, d.Nodes(), s); n.State != "drained" || n.DrainReason != "bad fan" || len(n.Jobs) != 0 {
		t.Errorf("after its last job %s is %+v, want drained", s, n)
	}
	// The loop says so once, in an event.
	d.settleDrains(ctx)
	d.settleDrains(ctx)
	evs, _ := alice.EventsWhere(ctx, 0, 0, ReadFilter{})
	var drained []Event
	for _, e := range evs {
		if e.Kind == "drained" {
			drained = append(drained, e)
		}
	}
	if len(drained) != 1 || drained[0].Node != s || drained[0].User != "alice" || drained[0].Msg != s+" drained: its last job has ended (reason: bad fan)" {
		t.Errorf("drained events %+v, want one for %s", drained, s)
	}
	if rec, _ := st.GetJob(ctx, j3.ID); rec.State == StateRunning {
		t.Errorf("j3 placed on the drained server: %+v", rec)
	}
	// drain now moves the jobs off and records its own reason.
	c.advance(60e9)
	drainedNow := c.now()
	moved, err = alice.Drain(ctx, other, DrainRequest{Reason: "firmware"})
	if err != nil || !slices.Equal(moved, []string{j2.ID}) {
		t.Fatalf("drain now: moved %v %v, want %s", moved, err, j2.ID)
	}
	if n := nodeNamed(t, d.Nodes(), other); n.State != "drained" || n.DrainReason != "firmware" || n.DrainMode != DrainNow || !n.DrainedAt.Equal(c.now()) {
		t.Errorf("drained now: %+v", n)
	}
	if drs, err := st.NodeDrains(ctx); err != nil || len(drs) != 2 || drs[slices.IndexFunc(drs, func(x NodeDrain) bool { return x.Name == s })] != (NodeDrain{Name: s, Reason: "bad fan", By: "alice", Mode: DrainAfterJobs, At: drainedAt}) {
		t.Errorf("stored drains: %+v %v", drs, err)
	}
	// undrain clears the record, also in the store.
	if _, err := alice.NodeOp(ctx, s, "undrain"); err != nil {
		t.Fatal(err)
	}
	if n := nodeNamed(t, d.Nodes(), s); n.State != "up" || n.DrainReason != "" || n.DrainedAt != nil || n.DrainMode != "" {
		t.Errorf("undrained: %+v", n)
	}
	drs, err := st.NodeDrains(ctx)
	if err != nil || len(drs) != 1 || drs[0].Name != other {
		t.Errorf("stored drains after undrain: %+v %v, want only %s", drs, err, other)
	}
	// The records survive a restart (a new daemon on the same store).
	c.advance(60e9)
	d2 := newUsersDaemon(t, st, &recorder{}, c)
	if n := nodeNamed(t, d2.Nodes(), other); n.State != "drained" || n.DrainReason != "firmware" || n.DrainedBy != "alice" || n.DrainedAt == nil || !n.DrainedAt.Equal(drainedNow) || n.DrainMode != DrainNow {
		t.Errorf("after a restart %s is %+v", other, n)
	}
	if n := nodeNamed(t, d2.Nodes(), s); n.State != "up" || n.DrainReason != "" {
		t.Errorf("after a restart the undrained %s is %+v", s, n)
	}
}

// pinned8 asks for 8 GPUs with a fixed plan (no policy grows it).
const pinned8 = `{gpus: 8, plan: "dp=8,tp=1,pp=1,mb=1,ga=2,zero=0"}`
