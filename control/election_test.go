package control

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/replan/replan/agent"
	"github.com/replan/replan/internal/etcdtest"
	"github.com/replan/replan/internal/waitfor"
)

// startElectionEtcd runs a one-member etcd server (the real one, embedded)
// for the test and returns its client URL.
func startElectionEtcd(t *testing.T) string { return etcdtest.Start(t)[0] }

func electionClient(t *testing.T, endpoint string) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func newTestElection(t *testing.T, cli *clientv3.Client, name string) *Election {
	t.Helper()
	el, err := NewElection(ElectionConfig{Client: cli, Prefix: "/test/election/", TTL: 2 * time.Second, Self: Member{Name: name, Addr: "https://" + name + ":1"}})
	if err != nil {
		t.Fatal(err)
	}
	return el
}

type campaignResult struct {
	name string
	term *Term
	err  error
}

// Three daemons campaign: exactly one leads, the members list all three
// with the leader first and its epoch; when the leader resigns another
// leads with a higher epoch, and when a leader's lease is revoked (what
// etcd does when the leader stops renewing it) its term ends: it steps
// down, and the last one leads.
func TestElectionOneLeaderStepDown(t *testing.T) {
	endpoint := startElectionEtcd(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	els := map[string]*Election{}
	res := make(chan campaignResult, 3)
	for _, n := range []string{"a", "b", "c"} {
		el := newTestElection(t, electionClient(t, endpoint), n)
		els[n] = el
		go func() {
			term, err := el.Campaign(ctx)
			res <- campaignResult{n, term, err}
		}()
	}
	first := <-res
	if first.err != nil {
		t.Fatal(first.err)
	}
	var ms []Member
	err := waitfor.Progress(ctx, "three members", waitfor.Options{Stall: 30 * time.Second}, func() error {
		var err error
		if ms, err = els["a"].Members(ctx); err != nil {
			return err
		}
		if len(ms) != 3 {
			return fmt.Errorf("%d members", len(ms))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if ms[0].Name != first.name || uint64(ms[0].Rev) != first.term.Epoch {
		t.Fatalf("members %+v: want %s (epoch %d) first", ms, first.name, first.term.Epoch)
	}
	select {
	case r := <-res:
		t.Fatalf("%s leads too (err %v) while %s leads", r.name, r.err, first.name)
	default:
	}
	for n, el := range els {
		v := el.HAView(ctx)
		want := "follower"
		if n == first.name {
			want = "leader"
		}
		if v.Role != want || v.Leader.Name != first.name || len(v.Members) != 3 {
			t.Errorf("%s's view: role %s, leader %q, %d members; want %s, %s, 3", n, v.Role, v.Leader.Name, len(v.Members), want, first.name)
		}
	}

	first.term.Resign()
	second := <-res
	if second.err != nil {
		t.Fatal(second.err)
	}
	if second.term.Epoch <= first.term.Epoch {
		t.Fatalf("second leader's epoch %d is not above the first's %d", second.term.Epoch, first.term.Epoch)
	}
	if els[first.name].Leading() != nil {
		t.Errorf("%s still leads after resigning", first.name)
	}

	// Revoke the second leader's lease, as etcd does when it is not
	// renewed: its term ends and it says why.
	lease := leaseOf(t, ctx, electionClient(t, endpoint), second.term.Epoch)
	if _, err := electionClient(t, endpoint).Revoke(ctx, lease); err != nil {
		t.Fatal(err)
	}
	select {
	case <-second.term.Done():
		t.Logf("%s stepped down: %v", second.name, second.term.Err())
	case <-time.After(30 * time.Second):
		t.Fatal("the leader whose lease was revoked did not step down")
	}
	if second.term.Err() == nil {
		t.Error("a term that ended has no reason")
	}
	third := <-res
	if third.err != nil {
		t.Fatal(third.err)
	}
	if third.term.Epoch <= second.term.Epoch {
		t.Fatalf("third leader's epoch %d is not above the second's %d", third.term.Epoch, second.term.Epoch)
	}
}

// leaseOf is the lease of the election key created at revision rev.
func leaseOf(t *testing.T, ctx context.Context, cli *clientv3.Client, rev uint64) clientv3.LeaseID {
	t.Helper()
	resp, err := cli.Get(ctx, "/test/election/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range resp.Kvs {
		if uint64(kv.CreateRevision) == rev {
			return clientv3.LeaseID(kv.Lease)
		}
	}
	t.Fatalf("no election key created at revision %d", rev)
	return 0
}

// buildAgentBinary builds cmd/replan-agent for a test.
func buildAgentBinary(t *testing.T) string {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go tool not on PATH")
	}
	bin := filepath.Join(t.TempDir(), "replan-agent")
	if out, err := exec.Command(gobin, "build", "-o", bin, "github.com/replan/replan/cmd/replan-agent").CombinedOutput(); err != nil {
		t.Fatalf("build agent: %v\n%s", err, out)
	}
	return bin
}

// A deposed leader's agent commands are refused by epoch: leader A (its
// election revision the epoch its commands carry) starts a process on a
// real agent; its lease is revoked (a partition: etcd gives up on it) and
// B is elected with a higher revision; once B has spoken to the agent,
// A's stop and start are refused (412, agent.ErrStaleEpoch) and the
// process A started still runs, while B's commands are obeyed.
func TestElectionEpochFencesDeposedLeader(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the agent binary")
	}
	bin := buildAgentBinary(t)
	endpoint := startElectionEtcd(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	dir := t.TempDir()
	sock := filepath.Join(dir, "agent.sock")
	cmd := exec.Command(bin, "serve", "--socket", sock, "--state-dir", filepath.Join(dir, "state"), "--fake-gpus", "2xA800")
	logf, err := os.Create(filepath.Join(dir, "agent.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("agent log:\n%s", b)
		}
	})
	clientFor := func(epoch uint64) *agent.Client {
		c := agent.NewSocketClient(sock)
		c.SetHeaders(func(h http.Header) { h.Set(agent.HeaderEpoch, strconv.FormatUint(epoch, 10)) })
		return c
	}
	probe := agent.NewSocketClient(sock)
	if err := waitfor.Progress(ctx, "the agent", waitfor.Options{Stall: time.Minute}, func() error { _, err := probe.Status(ctx); return err }); err != nil {
		t.Fatal(err)
	}

	a := newTestElection(t, electionClient(t, endpoint), "a")
	ta, err := a.Campaign(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ca := clientFor(ta.Epoch)
	_, err = ca.Start(ctx, agent.ProcessSpec{ID: "job-a", Argv: []string{"sh", "-c", "while :; do sleep 0.1; done"}})
	if err != nil {
		t.Fatalf("leader A (epoch %d) start: %v", ta.Epoch, err)
	}
	t.Cleanup(func() { probe.Stop(context.Background(), "job-a", 0) })

	b := newTestElection(t, electionClient(t, endpoint), "b")
	tb := make(chan campaignResult, 1)
	go func() { term, err := b.Campaign(ctx); tb <- campaignResult{"b", term, err} }()
	if _, err := electionClient(t, endpoint).Revoke(ctx, leaseOf(t, ctx, electionClient(t, endpoint), ta.Epoch)); err != nil {
		t.Fatal(err)
	}
	rb := <-tb
	if rb.err != nil {
		t.Fatal(rb.err)
	}
	if rb.term.Epoch <= ta.Epoch {
		t.Fatalf("B's epoch %d is not above A's %d", rb.term.Epoch, ta.Epoch)
	}
	select {
	case <-ta.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("A did not step down")
	}
	cb := clientFor(rb.term.Epoch)
	if _, err := cb.Status(ctx); err != nil {
		t.Fatalf("leader B (epoch %d): %v", rb.term.Epoch, err)
	}
	// A, deposed but still running, tries to stop the job and to start
	// another attempt: both refused, with the epochs named.
	_, err = ca.Stop(ctx, "job-a", time.Second)
	if !errors.Is(err, agent.ErrStaleEpoch) {
		t.Fatalf("deposed leader's stop: %v, want %v", err, agent.ErrStaleEpoch)
	}
	want := fmt.Sprintf("carries epoch %d, this agent obeys epoch %d or later", ta.Epoch, rb.term.Epoch)
	if !strings.Contains(err.Error(), want) {
		t.Errorf("refusal %q does not say %q", err, want)
	}
	if _, err := ca.Start(ctx, agent.ProcessSpec{ID: "job-a-2", Argv: []string{"true"}}); !errors.Is(err, agent.ErrStaleEpoch) {
		t.Fatalf("deposed leader's start: %v, want %v", err, agent.ErrStaleEpoch)
	}
	info, err := cb.Process(ctx, "job-a")
	if err != nil || info.State != agent.StateRunning {
		t.Fatalf("the job after the deposed leader's stop: %+v, %v; want still running", info, err)
	}
	// The new leader adopts and commands it.
	if info, err := cb.Stop(ctx, "job-a", time.Second); err != nil || info.State != agent.StateExited {
		t.Fatalf("leader B's stop: %+v, %v", info, err)
	}
}
