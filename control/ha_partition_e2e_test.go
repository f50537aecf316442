package control_test

import (
	"context"
	"errors"
	"fmt"
	"io"
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
	"github.com/replan/replan/internal/freeport"
	"github.com/replan/replan/internal/sshtest"
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

// TestHAPartitionedLeaderIsFenced is issue 27's proof "partition the
// leader (netns link down) while it is launching": three `replan daemon`
// processes (--store etcd on a real etcd, --executor ssh against real
// agents on three sshd hosts in network namespaces); the first leader runs
// in a network namespace of its own. It launches a job and, the moment the
// job's process has started on its server, its veth link is set down: it
// reaches neither etcd nor the agents. It steps down while cut off;
// another daemon leads with a higher epoch within 10 s, adopts the running
// job (the same processes on the agents; the trainer's trail shows one
// launch) and speaks to the agents with its epoch. With the link up again
// the old leader follows the new one, its epoch is refused by the job's
// agent (412), and the job was never launched twice nor lost.
func TestHAPartitionedLeaderIsFenced(t *testing.T) { runHAPartition(t, true) }

// TestHAPausedLeaderIsFenced is the same with the leader paused (SIGSTOP)
// instead of cut off, until another daemon leads and adopts the job, then
// resumed (SIGCONT): it steps down on resuming, and nothing it sends with
// its old epoch is obeyed.
func TestHAPausedLeaderIsFenced(t *testing.T) { runHAPartition(t, false) }

// runHAPartition runs the partition test: linkDown cuts the leader's
// network namespace off, else the leader is paused.
func runHAPartition(t *testing.T, linkDown bool) {
	c := newTestCluster(t)
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go tool not on PATH")
	}
	if linkDown && !c.netns {
		t.Skip("needs network namespaces (root, ip netns): the test hosts run on loopback")
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
	// With linkDown, m0 runs in a network namespace of its own, routed
	// to the test hosts through this one; it reaches etcd through a TCP
	// relay on its veth's host side.
	var ns *sshtest.NetNS
	m0Endpoint := endpoint
	if linkDown {
		sub, err := sshtest.FreeSubnet(os.Getpid() + 131)
		if err == nil {
			ns, err = sshtest.NewNetNS(t, fmt.Sprintf("rp-hap-%d", os.Getpid()), fmt.Sprintf("10.250.%d.1", sub), fmt.Sprintf("10.250.%d.2", sub))
		}
		if err == nil {
			err = sshtest.Route(t, c.hosts)
		}
		if err == nil {
			_, err = exec.Command("ip", "-n", ns.Name, "route", "replace", "default", "via", ns.HostAddr).CombinedOutput()
		}
		if err != nil {
			t.Skipf("the leader's network namespace: %v", err)
		}
		m0Endpoint = "http://" + relayTCP(t, ns.HostAddr, strings.TrimPrefix(endpoint, "http://"))
	}
	var members []*partitionMember
	for i := range 3 {
		port := freeport.Addr(t, "127.0.0.1")
		ep := endpoint
		if i == 0 && ns != nil {
			port, ep = ns.NSAddr+":7070", m0Endpoint
		}
		m := &partitionMember{name: fmt.Sprintf("m%d", i), sock: filepath.Join(c.tmp, fmt.Sprintf("m%d.sock", i)), addr: "https://" + port}
		m.logPath = filepath.Join(c.tmp, m.name+".log")
		m.client = control.NewUnixClient(m.sock)
		lf, err := os.Create(m.logPath)
		if err != nil {
			t.Fatal(err)
		}
		var wrap []string
		if i == 0 && ns != nil {
			wrap = ns.Wrap()
		}
		argv := append(wrap, bin, "daemon", "--inventory", inv, "--executor", "ssh", "--remote-dir", c.remoteDir,
			"--agent-binary", c.agentBin, "--db", filepath.Join(c.tmp, m.name+".db"), "--socket", m.sock,
			"--listen", port, "--advertise", m.addr, "--token-file", token,
			"--store", "etcd", "--etcd-endpoints", ep, "--etcd-prefix", "/ha-partition/",
			"--name", m.name, "--election-ttl", "2s", "--tick", "500ms")
		m.cmd = exec.Command(argv[0], argv[1:]...) // ip netns exec execs the daemon: one process
		m.cmd.Stdout, m.cmd.Stderr = lf, lf
		t.Cleanup(func() { lf.Close() })
		members = append(members, m)
	}
	started := 0
	startMembers := func(n int) {
		for _, m := range members[started:n] {
			if err := m.cmd.Start(); err != nil {
				t.Fatal(err)
			}
		}
		started = n
	}
	t.Cleanup(func() {
		for _, m := range members[:started] {
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
			for _, m := range members[:started] {
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
	// The cut-off leader is m0 in its namespace: it starts first, and the
	// others once it leads.
	if linkDown {
		startMembers(1)
	} else {
		startMembers(3)
	}
	old, oldSt := leaderOf("the first leader", nil, 0, time.Time{}, 2*time.Minute)
	startMembers(3)
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
				// (not its model's profile runs, "<id>-profile-<k>": one
				// still stopping at the cut is not the job's launch)
				if strings.HasPrefix(p.Spec.ID, rec.ID+"-a") && p.State == agent.StateRunning {
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
			d, err := old.client.Job(ctx, rec.ID)
			if err != nil {
				return fmt.Errorf("no launch in the trail yet (job: %v)", err)
			}
			return fmt.Errorf("no launch in the trail yet (%s: %s)", d.Job.State, d.Job.Reason)
		}
		return nil
	})
	how := "paused (SIGSTOP)"
	if linkDown {
		how = "cut off (link down)"
		ipLink(t, ns.HostIf, "down")
	} else if err := old.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	cut := time.Now()
	stopped := true
	restore := func() {
		if stopped && linkDown {
			ipLink(t, ns.HostIf, "up")
		} else if stopped {
			old.cmd.Process.Signal(syscall.SIGCONT)
		}
		stopped = false
	}
	defer restore()
	first := launches()
	// The leader paused with the launch possibly not yet answered: wait
	// for the agents to show the process it started (at most one set).
	poll(t, ctx, "the agents record the job's process", time.Minute, func() error {
		if atCut = jobProcs(); len(atCut) == 0 {
			return fmt.Errorf("no running process of %s on any agent", rec.ID)
		}
		return nil
	})
	t.Logf("%s %s with the job's launch %q under way", old.name, how, first)

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

	// A cut-off leader (still running) steps down without etcd.
	if linkDown {
		poll(t, ctx, "the cut-off leader steps down", time.Minute, func() error {
			s, err := old.status(ctx)
			if err != nil {
				return err
			}
			if s.Role == "leader" {
				return fmt.Errorf("%s: still leader (epoch %d)", old.name, s.Epoch)
			}
			return nil
		})
		t.Logf("%s stepped down while cut off (%v after the cut)", old.name, time.Since(cut).Round(time.Millisecond))
	}
	// Reconnect (resume) the old leader: it follows the new one.
	restore()
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
	t.Logf("%s back: it follows %s after %v", old.name, next.name, time.Since(resumed).Round(time.Millisecond))
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
	// When each term ended and began, from the daemons' logs: the old
	// leader's step-down and the new one's start, against the cut.
	nextLog, err := os.ReadFile(next.logPath)
	if err != nil {
		t.Fatal(err)
	}
	down, up := logTime(string(oldLog), "stepped down"), logTime(string(nextLog), "leading: running rounds")
	t.Logf("after the cut: %s stepped down at +%v, %s began leading at +%v", old.name, down.Sub(cut).Round(time.Millisecond), next.name, up.Sub(cut).Round(time.Millisecond))
	// What the old leader did after the cut, as it logged it.
	var tried []string
	for _, l := range strings.Split(string(oldLog), "\n") {
		if at := logTime(l, "level="); at.After(cut) && (strings.Contains(l, "level=WARN") || strings.Contains(l, "level=ERROR")) {
			tried = append(tried, l)
		}
	}
	t.Logf("%s's warnings and errors after the cut: %d", old.name, len(tried))
	for _, l := range tried[:min(len(tried), 6)] {
		t.Logf("  %s", l)
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

// relayTCP relays connections to addr from a listener on host (a port of
// its choosing) until the test ends; it returns the listener's address.
func relayTCP(t *testing.T, host, addr string) string {
	t.Helper()
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			in, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer in.Close()
				out, err := net.Dial("tcp", addr)
				if err != nil {
					return
				}
				defer out.Close()
				go func() { io.Copy(out, in); out.Close() }()
				io.Copy(in, out)
			}()
		}
	}()
	return l.Addr().String()
}

// logTime is the time of the first line of a daemon's log that holds
// what (zero when none does).
func logTime(log, what string) time.Time {
	for _, l := range strings.Split(log, "\n") {
		if !strings.Contains(l, what) {
			continue
		}
		if i := strings.Index(l, "time="); i >= 0 {
			f := strings.Fields(l[i+len("time="):])
			if at, err := time.Parse(time.RFC3339Nano, f[0]); err == nil {
				return at
			}
		}
	}
	return time.Time{}
}
