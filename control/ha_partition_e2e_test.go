package control_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/replan/replan/agent"
	"github.com/replan/replan/control"
	"github.com/replan/replan/fleet"
	"github.com/replan/replan/internal/etcdtest"
)

// partitionMember is one `replan daemon` process of the partition test.
type partitionMember struct {
	name, sock, addr, logPath string
	cmd                       *exec.Cmd
	client                    *control.Client
}

func (m *partitionMember) status(ctx context.Context) (control.Status, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return m.client.Status(ctx)
}

// TestHAPartitionedLeaderIsFenced (issue 27's proof: "partition the leader
// while it is launching"): three `replan daemon` processes (--store etcd
// on a real etcd, --executor ssh against real agents on three sshd hosts)
// elect a leader; it launches a job and, the moment the job's process has
// started on its server, the leader is paused (SIGSTOP: cut off from etcd
// and from the agents, its lease no longer renewed). Another daemon leads
// with a higher epoch within 10 s, adopts the running job (the same
// attempt; the trainer's trail shows one launch) and speaks to the
// agents with its epoch. The old leader is resumed (SIGCONT): it steps
// down (status: follower of the new leader) and anything it sends the
// agents with its old epoch is refused (412, "stale epoch" in its log);
// the job is never launched a second time and never lost.
func TestHAPartitionedLeaderIsFenced(t *testing.T) {
	c := newTestCluster(t)
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go tool not on PATH")
	}
	ctx := c.ctx
	bin := filepath.Join(c.tmp, "replan")
	if out, err := exec.Command(gobin, "build", "-o", bin, "github.com/replan/replan").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	endpoint := etcdtest.Start(t)[0]
	token := filepath.Join(c.tmp, "token")
	if err := os.WriteFile(token, []byte("ha-partition-token-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// The daemon binds a job's processes to its servers' cores (the
	// test hosts share this machine's): give the servers the cores there
	// are.
	invRaw, err := os.ReadFile(c.invPath)
	if err != nil {
		t.Fatal(err)
	}
	inv := filepath.Join(c.tmp, "inventory-cores.yaml")
	cores := fmt.Sprintf("cpu_cores: %d", runtime.NumCPU())
	if err := os.WriteFile(inv, []byte(strings.Replace(string(invRaw), "cpu_cores: 64", cores, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	var members []*partitionMember
	for i := range 3 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().String()
		l.Close()
		m := &partitionMember{name: fmt.Sprintf("m%d", i), sock: filepath.Join(c.tmp, fmt.Sprintf("m%d.sock", i)), addr: "https://" + port}
		m.logPath = filepath.Join(c.tmp, m.name+".log")
		m.client = control.NewUnixClient(m.sock)
		lf, err := os.Create(m.logPath)
		if err != nil {
			t.Fatal(err)
		}
		m.cmd = exec.Command(bin, "daemon", "--inventory", inv, "--executor", "ssh", "--remote-dir", c.remoteDir,
			"--agent-binary", c.agentBin, "--db", filepath.Join(c.tmp, m.name+".db"), "--socket", m.sock,
			"--listen", port, "--advertise", m.addr, "--token-file", token,
			"--store", "etcd", "--etcd-endpoints", endpoint, "--etcd-prefix", "/ha-partition/",
			"--name", m.name, "--election-ttl", "2s", "--tick", "500ms")
		m.cmd.Stdout, m.cmd.Stderr = lf, lf
		if err := m.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		lf.Close()
		members = append(members, m)
	}
	t.Cleanup(func() {
		for _, m := range members {
			m.cmd.Process.Kill() // a stopped process dies of SIGKILL too
			m.cmd.Wait()
			if t.Failed() {
				b, _ := os.ReadFile(m.logPath)
				t.Logf("%s's log (end):\n%s", m.name, tail(string(b), 60))
			}
		}
	})

	// leaderOf waits for a member other than not to lead (its own
	// address the leader's) with an epoch above minEpoch, having run a
	// round after since.
	leaderOf := func(what string, not *partitionMember, minEpoch uint64, since time.Time, bound time.Duration) (*partitionMember, control.Status) {
		var found *partitionMember
		var st control.Status
		poll(t, ctx, what, bound, func() error {
			var seen []string
			for _, m := range members {
				if m == not {
					continue
				}
				s, err := m.status(ctx)
				if err != nil {
					seen = append(seen, fmt.Sprintf("%s: %v", m.name, err))
					continue
				}
				seen = append(seen, fmt.Sprintf("%s: %s of %s (epoch %d)", m.name, s.Role, s.Leader, s.Epoch))
				if s.Role == "leader" && s.Leader == m.addr && s.Epoch > minEpoch && s.LastRound.At.After(since) {
					found, st = m, s
					return nil
				}
			}
			return fmt.Errorf("%s", strings.Join(seen, "; "))
		})
		return found, st
	}
	old, oldSt := leaderOf("the first leader", nil, 0, time.Time{}, 2*time.Minute)
	t.Logf("first leader: %s (epoch %d)", old.name, oldSt.Epoch)

	// The job: one server's 8 GPUs, long enough to outlive the test.
	const name = "partition-job"
	spec := strings.Replace(string(c.jobSpec(name, "best-effort", 8, 100000)), "request: {gpus: 8,", fmt.Sprintf("request: {gpus: 8, cpus: %d,", runtime.NumCPU()), 1)
	rec, err := old.client.Submit(ctx, name+".yaml", []byte(spec))
	if err != nil {
		t.Fatal(err)
	}
	trailPath := filepath.Join(c.tmp, "ckpt", name, "trail")
	launches := func() []string {
		b, _ := os.ReadFile(trailPath)
		var out []string
		for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			if strings.HasPrefix(l, "start ") {
				out = append(out, l)
			}
		}
		return out
	}
	// jobProcs is what the agents record of the job's processes that
	// run: "server id pid", sorted (read without an epoch: a local
	// tool's read, which fences nothing and renews nothing).
	agentOf := func(h testHost) *agent.Client {
		return agent.NewSocketClient(filepath.Join(fleet.ExpandDir(c.remoteDir, h.Name, "/"), "agent.sock"))
	}
	jobProcs := func() []string {
		var out []string
		for _, h := range c.hosts {
			ps, err := agentOf(h).Processes(ctx)
			if err != nil {
				t.Fatalf("the agent on %s: %v", h.Name, err)
			}
			for _, p := range ps {
				if strings.HasPrefix(p.Spec.ID, rec.ID) && p.State == agent.StateRunning {
					out = append(out, fmt.Sprintf("%s %s %d", h.Name, p.Spec.ID, p.PID))
				}
			}
		}
		slices.Sort(out)
		return out
	}
	// sameProcs: the job's processes are still exactly those it had at
	// the cut (adopted, never stopped, never a second set beside them).
	var atCut []string
	sameProcs := func(when string) {
		t.Helper()
		if got := jobProcs(); !slices.Equal(got, atCut) {
			t.Errorf("%s: the job's processes on the agents are %q, at the cut %q", when, got, atCut)
		}
	}
	// Cut the leader off the moment the job's process has started on its
	// server (the leader is still launching: waiting for the job's first
	// progress, its start not yet observed).
	poll(t, ctx, "the job's process started", 2*time.Minute, func() error {
		if n := len(launches()); n == 0 {
			return fmt.Errorf("no launch in the trail yet")
		}
		return nil
	})
	if err := old.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	cut := time.Now()
	stopped := true
	defer func() {
		if stopped {
			old.cmd.Process.Signal(syscall.SIGCONT)
		}
	}()
	first := launches()
	// The leader paused with the launch possibly not yet answered: wait
	// for the agents to show the process it started (at most one set).
	poll(t, ctx, "the agents record the job's process", time.Minute, func() error {
		if atCut = jobProcs(); len(atCut) == 0 {
			return fmt.Errorf("no running process of %s on any agent", rec.ID)
		}
		return nil
	})
	t.Logf("%s paused (SIGSTOP) with the job's launch %q under way", old.name, first)

	// Another daemon leads with a higher epoch and runs rounds.
	next, nextSt := leaderOf("a new leader", old, oldSt.Epoch, cut, time.Minute)
	took := time.Since(cut)
	t.Logf("%s leads (epoch %d > %d) and ran a round %v after the cut", next.name, nextSt.Epoch, oldSt.Epoch, took.Round(time.Millisecond))
	if took > 10*time.Second {
		t.Errorf("the new leader ran its first round %v after the cut, want within 10 s", took)
	}

	// It adopts the running job: an adopt event, the job running, the
	// same attempt, no second launch.
	poll(t, ctx, "the new leader adopts the job", time.Minute, func() error {
		evs, err := next.client.Events(ctx, 0, 0)
		if err != nil {
			return err
		}
		for _, e := range evs {
			if e.JobID == rec.ID && (e.Kind == "requeue" || e.Kind == "fail") {
				t.Fatalf("the job was %sd after the cut: %s", e.Kind, e.Msg)
			}
			if e.JobID == rec.ID && e.Kind == "adopt" && e.At.After(cut) {
				return nil
			}
		}
		return fmt.Errorf("no adopt event for %s after the cut", rec.ID)
	})
	adopted := mustDetail(t, ctx, next.client, rec.ID)
	if adopted.Job.State != control.StateRunning {
		t.Fatalf("the adopted job is %s, want running", adopted.Job.State)
	}
	sameProcs("adopted")
	// The agents now obey the new leader's epoch: the job's server's
	// agent has it on disk (it has heard the new leader).
	var server string
	poll(t, ctx, "the job's agent obeys the new epoch", time.Minute, func() error {
		for _, h := range c.hosts {
			b, err := os.ReadFile(filepath.Join(fleet.ExpandDir(c.remoteDir, h.Name, "/"), "agent", "epoch"))
			if err != nil {
				continue
			}
			if e, _ := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64); e >= nextSt.Epoch && strings.Contains(string(adopted.Job.Placement), h.Name) {
				server = h.Name
				return nil
			}
		}
		return fmt.Errorf("no agent on the job's placement %s has epoch %d yet", adopted.Job.Placement, nextSt.Epoch)
	})

	// Resume the old leader: it steps down and follows the new one.
	if err := old.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	stopped = false
	resumed := time.Now()
	poll(t, ctx, "the old leader steps down", time.Minute, func() error {
		s, err := old.status(ctx)
		if err != nil {
			return err
		}
		if s.Role != "follower" || s.Leader != next.addr {
			return fmt.Errorf("%s: %s of %s (epoch %d)", old.name, s.Role, s.Leader, s.Epoch)
		}
		return nil
	})
	t.Logf("%s resumed and follows %s after %v", old.name, next.name, time.Since(resumed).Round(time.Millisecond))
	// The new leader keeps going: a few more rounds after the old one
	// stepped down, in which the job stays the one launch.
	after := time.Now()
	poll(t, ctx, "the new leader's rounds after the step-down", time.Minute, func() error {
		s, err := next.status(ctx)
		if err != nil {
			return err
		}
		if s.Role != "leader" || s.Epoch != nextSt.Epoch || !s.LastRound.At.After(after.Add(time.Second)) {
			return fmt.Errorf("%s: %s, epoch %d, last round %v", next.name, s.Role, s.Epoch, s.LastRound.At)
		}
		return nil
	})

	sameProcs("after the old leader resumed")

	// What the deposed leader's epoch gets from the job's agent now: its
	// stop and a start of another attempt are refused (412, the epochs
	// named), and nothing changes on the server.
	var jobHost testHost
	for _, h := range c.hosts {
		if h.Name == server {
			jobHost = h
		}
	}
	stale := agentOf(jobHost)
	stale.SetHeaders(func(h http.Header) { h.Set(agent.HeaderEpoch, strconv.FormatUint(oldSt.Epoch, 10)) })
	procID := strings.Fields(atCut[0])[1]
	if _, err := stale.Stop(ctx, procID, time.Second); !errors.Is(err, agent.ErrStaleEpoch) {
		t.Errorf("a stop with the deposed leader's epoch %d: %v, want %v", oldSt.Epoch, err, agent.ErrStaleEpoch)
	} else {
		t.Logf("the deposed leader's stop: %v", err)
	}
	if _, err := stale.Start(ctx, agent.ProcessSpec{ID: rec.ID + "-stale", Argv: []string{"sleep", "60"}}); !errors.Is(err, agent.ErrStaleEpoch) {
		t.Errorf("a start with the deposed leader's epoch %d: %v, want %v", oldSt.Epoch, err, agent.ErrStaleEpoch)
	}
	sameProcs("after the deposed leader's epoch tried to stop and start")

	oldLog, err := os.ReadFile(old.logPath)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(oldLog), "stepped down") {
		t.Errorf("%s's log does not say it stepped down", old.name)
	}
	var refused []string
	for _, l := range strings.Split(string(oldLog), "\n") {
		if strings.Contains(l, "stale epoch") {
			refused = append(refused, l)
		}
	}
	// Whatever the resumed leader sent before it noticed it no longer
	// leads was refused: it launched nothing (the trail and the agents'
	// records below), and any answer it got is a stale-epoch refusal.
	t.Logf("the deposed leader's own agent calls refused by epoch: %d", len(refused))
	for i, l := range refused {
		if i == 3 {
			break
		}
		t.Logf("  %s", l)
	}
	if got := launches(); len(got) != 1 {
		t.Errorf("the job was launched %d times: %q; want once (adopted, never relaunched)", len(got), got)
	}
	d := mustDetail(t, ctx, next.client, rec.ID)
	if d.Job.State != control.StateRunning || d.Job.Attempt != adopted.Job.Attempt {
		t.Errorf("the job after the step-down: %s, attempt %d; want running, attempt %d", d.Job.State, d.Job.Attempt, adopted.Job.Attempt)
	}
	starts := 0
	for _, dec := range d.Decisions {
		if dec.Kind == "start" {
			starts++
		}
	}
	if starts != 1 {
		t.Errorf("the job has %d start decisions, want 1", starts)
	}
	t.Logf("job %s on %s: attempt %d, launched once; new leader after %v", rec.ID, server, d.Job.Attempt, took.Round(time.Millisecond))
}
