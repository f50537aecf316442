package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/replan/replan/control"
	"github.com/replan/replan/internal/etcdtest"
	"github.com/replan/replan/internal/freeport"
	"github.com/replan/replan/internal/waitfor"
)

// haFreePort is a loopback port free a moment ago, below the ephemeral
// range and not handed out before (internal/freeport).
func haFreePort(t *testing.T) string {
	t.Helper()
	return freeport.Addr(t, "127.0.0.1")
}

// haMember is one daemon process of the test's control plane.
type haMember struct {
	name, sock, addr string
	args             []string
	log              *os.File
	mu               sync.Mutex
	cmd              *exec.Cmd
}

func (m *haMember) start(t *testing.T, bin, dir string) {
	t.Helper()
	cmd := exec.Command(bin, m.args...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = m.log, m.log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	m.mu.Lock()
	m.cmd = cmd
	m.mu.Unlock()
}

func (m *haMember) kill() {
	m.mu.Lock()
	cmd := m.cmd
	m.cmd = nil
	m.mu.Unlock()
	if cmd != nil {
		cmd.Process.Kill()
		cmd.Wait()
	}
}

func (m *haMember) status(ctx context.Context) (control.Status, error) {
	c := control.NewUnixClient(m.sock)
	c.Timeout = 3 * time.Second
	return c.Status(ctx)
}

// percentile is the q-quantile of sorted ds (nearest rank).
func percentile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	i := int(q*float64(len(ds))+0.999999) - 1
	return ds[min(max(i, 0), len(ds)-1)]
}

// Three daemon processes (the replan binary, sim executor, the store on
// etcd: --store etcd) elect a leader on a real etcd. The leader
// is killed with SIGKILL again and again (5 times; REPLAN_HA_KILLS sets
// how often: make e2e-ha kills 20 times) while client processes submit
// and cancel through every member. After each kill another daemon leads
// and runs rounds within 10 s (p50/p99 logged); over all kills no
// acknowledged submit is lost, none is created twice, and no job was
// launched twice (every start decision begins exactly one stay in running).
func TestHAFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the replan binary and runs three daemons")
	}
	kills := 5
	if v := os.Getenv("REPLAN_HA_KILLS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("REPLAN_HA_KILLS=%q: want a positive integer", v)
		}
		kills = n
	}
	dir, bin, inv, endpoint, token := haTestEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	members := startHAMembers(t, bin, dir, "m", func(m *haMember, port string) []string {
		return []string{"daemon", "--inventory", inv, "--db", filepath.Join(dir, "shared.db"), "--socket", m.sock,
			"--listen", port, "--advertise", m.addr, "--token-file", token, "--store", "etcd", "--etcd-endpoints", endpoint, "--etcd-prefix", "/ha-test/",
			"--name", m.name, "--election-ttl", "2s", "--tick", "500ms"}
	})

	// leader waits until every member answers and one leads, having run
	// a round after since; it returns that member.
	leader := func(since time.Time, what string) (*haMember, time.Duration) {
		var found *haMember
		var at time.Duration
		err := waitfor.Progress(ctx, what, waitfor.Options{Stall: 90 * time.Second, Poll: 50 * time.Millisecond}, func() error {
			var seen []string
			found = nil
			for _, m := range members {
				st, err := m.status(ctx)
				if err != nil {
					seen = append(seen, m.name+": down")
					continue
				}
				seen = append(seen, fmt.Sprintf("%s: %s of %s (epoch %d)", m.name, st.Role, st.Leader, st.Epoch))
				if st.Role == "leader" && st.Leader == m.addr && st.LastRound.At.After(since) {
					found, at = m, time.Since(since)
				}
			}
			if found == nil || strings.Contains(strings.Join(seen, " "), "down") {
				return fmt.Errorf("%s", strings.Join(seen, "; "))
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return found, at
	}
	// newLeader waits for a member other than old to lead and run a round
	// after since; it does not wait for old to come back.
	newLeader := func(old *haMember, since time.Time) (*haMember, time.Duration) {
		for {
			for _, m := range members {
				if m == old {
					continue
				}
				st, err := m.status(ctx)
				if err == nil && st.Role == "leader" && st.Leader == m.addr && st.LastRound.At.After(since) {
					return m, time.Since(since)
				}
			}
			if time.Since(since) > 60*time.Second {
				t.Fatalf("no new leader ran a round within 60 s of killing %s", old.name)
			}
			select {
			case <-ctx.Done():
				t.Fatal(ctx.Err())
			case <-time.After(50 * time.Millisecond):
			}
		}
	}

	cur, _ := leader(time.Time{}, "the first leader")
	t.Logf("first leader: %s", cur.name)
	// One client names every member's TLS listener (--server A,B,C), each
	// member's certificate pinned: it goes on to the next member when the
	// one it is on was killed (control/clientfailover.go).
	var urls, fps []string
	fpRE := regexp.MustCompile(`fingerprint ([0-9A-F:]{95})`)
	for _, m := range members {
		b, _ := os.ReadFile(m.log.Name())
		f := fpRE.FindSubmatch(b)
		if f == nil {
			t.Fatalf("%s printed no certificate fingerprint:\n%s", m.name, b)
		}
		urls, fps = append(urls, m.addr), append(fps, string(f[1]))
	}
	everyMember := []string{"--server", strings.Join(urls, ","), "--token-file", token, "--tls-fingerprint", strings.Join(fps, ",")}

	// Load: client processes submit (each with its own job name) and
	// cancel through random members.
	spec, err := os.ReadFile("../examples/job.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var (
		lmu        sync.Mutex
		acked      = map[string]string{} // job id → name
		submits    int
		failedSubs int
		srvSubs    int // of submits, through --server naming every member
		srvFailed  int
		cancels    int
		failedCanc int
		endedCanc  int      // cancels of jobs that had ended (cancelled before)
		deadSock   int      // failures where nothing listened on the member's socket
		why        []string // the first failures, for the log
	)
	loadCtx, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	run := func(args ...string) ([]byte, error) {
		cmd := exec.Command(bin, args...)
		cmd.Dir = dir
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		if err != nil {
			return out.Bytes(), fmt.Errorf("%v: %s", err, strings.TrimSpace(errb.String()))
		}
		return out.Bytes(), nil
	}
	for c := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; loadCtx.Err() == nil; n++ {
				name := fmt.Sprintf("ha-%d-%d", c, n)
				file := filepath.Join(dir, name+".yaml")
				body := strings.Replace(string(spec), "name: gpt2-pretrain", "name: "+name, 1)
				if err := os.WriteFile(file, []byte(body), 0o600); err != nil {
					t.Error(err)
					return
				}
				m := members[rand.IntN(len(members))]
				via := []string{"--socket", m.sock}
				if c == 2 {
					via = everyMember
				}
				out, err := run(append(append([]string{"submit"}, via...), "--json", "--daemon-timeout", "20s", file)...)
				lmu.Lock()
				submits++
				if c == 2 {
					srvSubs++
				}
				if err != nil {
					failedSubs++
					if strings.Contains(err.Error(), "no daemon listens at") {
						deadSock++ // a killed member: nothing listened on its socket
					}
					if c == 2 {
						srvFailed++
					}
					if len(why) < 8 {
						why = append(why, fmt.Sprintf("submit via %s: %v", via[1], err))
					}
				} else {
					var rec control.JobRecord
					if jerr := json.Unmarshal(out, &rec); jerr != nil || rec.ID == "" || rec.Name != name {
						t.Errorf("submit %s: acknowledged with %q (%v)", name, out, jerr)
					} else {
						acked[rec.ID] = name
					}
				}
				lmu.Unlock()
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for loadCtx.Err() == nil {
			lmu.Lock()
			var id string
			for k := range acked {
				if rand.IntN(4) == 0 {
					id = k
					break
				}
			}
			lmu.Unlock()
			if id == "" {
				select {
				case <-loadCtx.Done():
				case <-time.After(50 * time.Millisecond): // pacing: nothing to cancel yet
				}
				continue
			}
			m := members[rand.IntN(len(members))]
			_, err := run("cancel", "--socket", m.sock, "--daemon-timeout", "20s", id)
			lmu.Lock()
			cancels++
			if err != nil && strings.Contains(err.Error(), "cancel "+id+": it is ") {
				endedCanc++ // cancelled before (or finished): the daemon's answer, not a failure
			} else if err != nil {
				failedCanc++
				if strings.Contains(err.Error(), "no daemon listens at") {
					deadSock++ // a killed member: nothing listened on its socket
				}
				if len(why) < 8 {
					why = append(why, fmt.Sprintf("cancel %s via %s: %v", id, m.name, err))
				}
			}
			lmu.Unlock()
		}
	}()
	// And an operator draining and undraining servers through random
	// members (a drain moves the server's jobs: checkpoint, stop, requeue).
	var drains, failedDrains int
	wg.Add(1)
	go func() {
		defer wg.Done()
		for n := 0; loadCtx.Err() == nil; n++ {
			server := fmt.Sprintf("a800-%02d", 1+n%4)
			for _, op := range []string{"drain", "undrain"} {
				m := members[rand.IntN(len(members))]
				_, err := run(op, "--socket", m.sock, "--daemon-timeout", "20s", server)
				lmu.Lock()
				drains++
				if err != nil {
					failedDrains++
					if strings.Contains(err.Error(), "no daemon listens at") {
						deadSock++ // a killed member: nothing listened on its socket
					}
					if len(why) < 8 {
						why = append(why, fmt.Sprintf("%s %s via %s: %v", op, server, m.name, err))
					}
				}
				lmu.Unlock()
				select {
				case <-loadCtx.Done():
					return
				case <-time.After(300 * time.Millisecond): // pacing: an operator, not a storm
				}
			}
		}
	}()

	var took []time.Duration
	var killedAt []haEvent
	for k := range kills {
		// Some load between kills: a few more submits acknowledged.
		lmu.Lock()
		base := len(acked)
		lmu.Unlock()
		if err := waitfor.Progress(ctx, "submits before the kill", waitfor.Options{Stall: 90 * time.Second}, func() error {
			lmu.Lock()
			defer lmu.Unlock()
			if len(acked) < base+3 {
				return fmt.Errorf("%d acknowledged (%d submits, %d failed)", len(acked), submits, failedSubs)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		t0 := time.Now()
		killedAt = append(killedAt, haEvent{at: t0, member: cur.name, kind: "killed"})
		cur.kill()
		next, dt := newLeader(cur, t0)
		took = append(took, dt)
		t.Logf("kill %d: %s killed, %s leads and ran a round after %v", k+1, cur.name, next.name, dt.Round(time.Millisecond))
		if dt > 10*time.Second {
			t.Errorf("kill %d: the new leader ran its first round %v after the kill, want within 10 s", k+1, dt)
		}
		cur.start(t, bin, dir)
		cur, _ = leader(t0, "all three members back")
	}
	stopLoad()
	wg.Wait()

	// The leader's memory is the store: every job its queue and running
	// lists hold (memory) is in the store in the same state, attempt and
	// placement, and every stored queued, preempted or running job is in
	// them. (Jobs move between the two reads: wait for a moment they agree.)
	c := control.NewUnixClient(cur.sock)
	memOpt := waitfor.Options{Stall: 30 * time.Second, Poll: 200 * time.Millisecond}
	memory := "the leader's memory = its store"
	if err := waitfor.Progress(ctx, "the leader's memory equal to the store", memOpt, func() error {
		return memoryIsStore(ctx, c)
	}); err != nil {
		t.Error(err)
		memory = "the leader's memory ≠ its store"
	}

	// Every acknowledged submit is there, none twice, none launched twice.
	all, err := c.Jobs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string][]string{}
	byID := map[string]control.JobRecord{}
	for _, j := range all {
		byName[j.Name] = append(byName[j.Name], j.ID)
		byID[j.ID] = j
	}
	lost, dup := 0, 0
	for id, name := range acked {
		if j, ok := byID[id]; !ok || j.Name != name {
			lost++
			t.Errorf("acknowledged submit %s (%s) is not in the store", id, name)
		}
	}
	for name, ids := range byName {
		if len(ids) > 1 {
			dup++
			t.Errorf("job %s created %d times: %v", name, len(ids), ids)
		}
	}
	twice := 0
	for _, j := range all {
		d, err := c.Job(ctx, j.ID)
		if err != nil {
			t.Fatal(err)
		}
		starts := 0
		for _, dec := range d.Decisions {
			if dec.Kind == "start" {
				starts++
			}
		}
		runs := 0
		for _, tr := range d.History {
			if tr.To == control.StateRunning && tr.From != control.StateRunning {
				runs++
			}
		}
		if starts != runs {
			twice++
			t.Errorf("job %s: %d start decisions but %d stays in running: launched twice?", j.ID, starts, runs)
		}
	}
	// Never two leaders: from the daemons' logs and the kills, each
	// daemon began leading only while no other led, with a higher epoch.
	events := slices.Clone(killedAt)
	for _, m := range members {
		b, err := os.ReadFile(m.log.Name())
		if err != nil {
			t.Fatal(err)
		}
		events = append(events, haEvents(t, m.name, string(b))...)
	}
	slices.SortStableFunc(events, func(a, b haEvent) int { return a.at.Compare(b.at) })
	leading := map[string]bool{}
	var lastEpoch uint64
	terms := 0
	for _, e := range events {
		switch e.kind {
		case "leading":
			if len(leading) > 0 {
				t.Errorf("%s began leading (epoch %d) at %s while %v led", e.member, e.epoch, e.at.Format(time.StampMilli), leading)
			}
			if e.epoch <= lastEpoch {
				t.Errorf("%s leads with epoch %d after epoch %d", e.member, e.epoch, lastEpoch)
			}
			leading[e.member], lastEpoch = true, e.epoch
			terms++
		case "killed", "stepped":
			delete(leading, e.member)
		}
	}
	if terms < kills+1 {
		t.Errorf("the daemons' logs show %d terms for %d kills: want at least one more than kills", terms, kills)
	} else if terms > kills+1 {
		t.Logf("%d terms for %d kills (a term also ends when a loaded leader misses its lease)", terms, kills)
	}
	slices.Sort(took)
	summary := fmt.Sprintf("ha failover: %d kills, new leader's first round after p50 %v p99 %v max %v; %d submits (%d acknowledged, %d failed; %d through --server naming every member, %d failed), %d cancels (%d of jobs already ended, %d failed), %d drains and undrains (%d failed); %d of the failures found nothing listening on a killed member's socket; %d jobs: %d lost, %d duplicated, %d launched twice; %s",
		kills, percentile(took, 0.5).Round(time.Millisecond), percentile(took, 0.99).Round(time.Millisecond), took[len(took)-1].Round(time.Millisecond),
		submits, len(acked), failedSubs, srvSubs, srvFailed, cancels, endedCanc, failedCanc, drains, failedDrains, deadSock, len(all), lost, dup, twice, memory)
	t.Log(summary)
	for _, w := range why {
		t.Logf("a client's failure: %s", w)
	}
	if p := os.Getenv("REPLAN_HA_SUMMARY"); p != "" {
		os.WriteFile(p, []byte(summary+"\n"), 0o644)
	}
	if len(acked) == 0 {
		t.Error("no submit was acknowledged")
	}
}

// Three daemon processes, each with its own embedded etcd member
// (--etcd-embedded --peers). Losing one member (a follower's daemon, with
// its etcd) changes nothing: the leader keeps its epoch and runs rounds.
// Losing two: the last daemon's etcd has no quorum, so it steps down,
// stops scheduling and says why in its status; when a member returns, a
// leader is elected again and runs rounds. The election's TTL is 4 s: a
// leader steps down 3/4 of a TTL after its last renewal that succeeded was
// sent, and when the member killed was etcd's raft leader, renewals wait
// for raft to elect another (1-2 s with the embedded members' 1 s election
// timeout); with 2 s the daemon leader stepped down (docs/ha.md, Setup).
func TestHAEmbeddedQuorum(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the replan binary and runs three daemons with embedded etcd")
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go tool not on PATH")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "replan")
	if out, err := exec.Command(gobin, "build", "-o", bin, "..").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	inv, err := filepath.Abs("../inventory.yaml")
	if err != nil {
		t.Fatal(err)
	}
	token := filepath.Join(dir, "token")
	if err := os.WriteFile(token, []byte("ha-test-token-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var peers []string
	peerURL := map[string]string{}
	for i := range 3 {
		name := fmt.Sprintf("e%d", i)
		peerURL[name] = "http://" + haFreePort(t)
		peers = append(peers, name+"="+peerURL[name])
	}
	members := startHAMembers(t, bin, dir, "e", func(m *haMember, port string) []string {
		return []string{"daemon", "--inventory", inv, "--db", filepath.Join(dir, "shared.db"), "--socket", m.sock,
			"--listen", port, "--advertise", m.addr, "--token-file", token, "--store", "etcd", "--etcd-embedded", "--peers", strings.Join(peers, ","),
			"--etcd-client-url", "http://" + haFreePort(t), "--etcd-dir", filepath.Join(dir, "etcd-"+m.name),
			"--name", m.name, "--election-ttl", "4s", "--tick", "500ms"}
	})
	opt := waitfor.Options{Stall: 90 * time.Second, Poll: 100 * time.Millisecond}
	var lead *haMember
	var epoch uint64
	if err := waitfor.Progress(ctx, "a leader among three embedded members", opt, func() error {
		var err error
		lead, epoch, err = leaderOfThree(ctx, members, true)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	var followers []*haMember
	for _, m := range members {
		if m != lead {
			followers = append(followers, m)
		}
	}

	// Lose one member: the leader stays, with its epoch, running rounds
	// for three election TTLs after the loss.
	t0 := time.Now()
	followers[0].kill()
	if err := waitfor.Progress(ctx, "rounds after losing one member", opt, func() error {
		st, err := lead.status(ctx)
		if err != nil {
			return err
		}
		if st.Role != "leader" || st.Epoch != epoch {
			t.Fatalf("after losing one of three members the leader is %s of %s, epoch %d (was leader, epoch %d)", st.Role, st.Leader, st.Epoch, epoch)
		}
		if st.LastRound.At.Before(t0.Add(6 * time.Second)) {
			return fmt.Errorf("last round %v after the loss", st.LastRound.At.Sub(t0).Round(100*time.Millisecond))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	// Lose two: no quorum; the last daemon steps down and says why.
	followers[1].kill()
	var why string
	if err := waitfor.Progress(ctx, "the last daemon stepping down", opt, func() error {
		st, err := lead.status(ctx)
		if err != nil {
			return err
		}
		if st.Role != "follower" || st.Election == "" {
			return fmt.Errorf("%s, leader %q, election %q", st.Role, st.Leader, st.Election)
		}
		why = st.Election
		if b, _ := os.ReadFile(lead.log.Name()); !strings.Contains(string(b), "stepped down") {
			return fmt.Errorf("a follower (%s), but its log does not say it stepped down", why)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("without quorum %s says: %s", lead.name, why)

	// A member returns: a leader again, running rounds.
	t1 := time.Now()
	followers[1].start(t, bin, dir)
	if err := waitfor.Progress(ctx, "a leader after a member returned", opt, func() error {
		var seen []string
		for _, m := range []*haMember{lead, followers[1]} {
			st, err := m.status(ctx)
			if err != nil {
				seen = append(seen, m.name+": "+err.Error())
				continue
			}
			if st.Role == "leader" && st.LastRound.At.After(t1) {
				if st.Epoch <= epoch {
					t.Fatalf("the new leader's epoch %d is not above the old %d", st.Epoch, epoch)
				}
				return nil
			}
			seen = append(seen, fmt.Sprintf("%s: %s of %q (%s)", m.name, st.Role, st.Leader, st.Election))
		}
		return fmt.Errorf("%s", strings.Join(seen, "; "))
	}); err != nil {
		t.Fatal(err)
	}
}

// A daemon elected again and again that cannot take over (its store does
// not open) stops with the error after three tries instead of flapping,
// and resigns each time so that another member could lead.
func TestHADaemonStopsWhenItCannotTakeOver(t *testing.T) {
	endpoint := etcdtest.Start(t)[0]
	dir := t.TempDir()
	token := filepath.Join(dir, "token")
	if err := os.WriteFile(token, []byte("tok\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// The database's directory is a file: LockDB cannot create it.
	if err := os.WriteFile(filepath.Join(dir, "notadir"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	port := haFreePort(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var stderr bytes.Buffer
	err := run(ctx, []string{"daemon", "--inventory", "../inventory.yaml", "--db", filepath.Join(dir, "notadir", "r.db"),
		"--socket", filepath.Join(dir, "r.sock"), "--listen", port, "--advertise", "https://" + port, "--token-file", token,
		"--tls-cert", filepath.Join(dir, "cert.pem"), "--tls-key", filepath.Join(dir, "key.pem"),
		"--etcd-endpoints", endpoint, "--etcd-prefix", "/takeover/", "--name", "x", "--election-ttl", "1s"}, io.Discard, &stderr)
	if ctx.Err() != nil {
		t.Fatalf("the daemon still runs after %v:\n%s", 2*time.Minute, stderr.String())
	}
	if err == nil || !strings.Contains(err.Error(), "elected 3 times in a row, could not take over") || !strings.Contains(err.Error(), "notadir") {
		t.Fatalf("daemon: %v, want the store's error after three take-overs\n%s", err, stderr.String())
	}
}

// haEvent is a daemon that began leading, stepped down or was killed.
type haEvent struct {
	at     time.Time
	member string
	kind   string // leading, stepped, killed
	epoch  uint64
}

var haLogLine = regexp.MustCompile(`^time=(\S+) level=\S+ msg="(leading: running rounds|stopped leading)[^"]*"(?: epoch=(\d+))?`)

// haEvents are the leading and stopped-leading lines of a daemon's log.
func haEvents(t *testing.T, member, log string) []haEvent {
	t.Helper()
	var out []haEvent
	for _, line := range strings.Split(log, "\n") {
		m := haLogLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, m[1])
		if err != nil {
			t.Fatalf("%s's log: %q: %v", member, line, err)
		}
		e := haEvent{at: at, member: member, kind: "stepped"}
		if strings.HasPrefix(m[2], "leading") {
			e.kind = "leading"
			e.epoch, _ = strconv.ParseUint(m[3], 10, 64)
		}
		out = append(out, e)
	}
	return out
}

// startHAMembers starts three daemon processes of bin named prefix0..2
// (args gives each one's arguments, on its own loopback port), each
// logging to dir/NAME.log; they are killed when the test ends, and their
// logs' ends shown when it failed.
func startHAMembers(t *testing.T, bin, dir, prefix string, args func(m *haMember, port string) []string) []*haMember {
	t.Helper()
	var members []*haMember
	for i := range 3 {
		name := fmt.Sprintf("%s%d", prefix, i)
		port := haFreePort(t)
		m := &haMember{name: name, sock: filepath.Join(dir, name+".sock"), addr: "https://" + port}
		m.args = args(m, port)
		var err error
		if m.log, err = os.Create(filepath.Join(dir, name+".log")); err != nil {
			t.Fatal(err)
		}
		members = append(members, m)
		m.start(t, bin, dir)
	}
	t.Cleanup(func() {
		for _, m := range members {
			m.kill()
			m.log.Close()
			if t.Failed() {
				b, _ := os.ReadFile(m.log.Name())
				if len(b) > 6000 {
					b = b[len(b)-6000:]
				}
				t.Logf("%s's log (end):\n%s", m.name, b)
			}
		}
	})
	return members
}

// Issue 27, item 2: a client pointed at any member works, reads included
// while no daemon leads. Three daemon processes on one etcd: a job
// submitted through a follower is in that follower's `replan jobs` at once
// (its view holds the write before the submit returns); the leader is
// killed, and at once, before another is elected, both followers answer
// GET /v1/jobs and /v1/jobs/{id} from their views (X-Replan-View-Revision,
// not forwarded), and `replan jobs` and `replan job` through them work.
func TestHAFollowerReadsWhileLeaderKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the replan binary and runs three daemons")
	}
	dir, bin, inv, endpoint, token := haTestEnv(t)
	ctx := context.Background()
	members := startHAMembers(t, bin, dir, "f", func(m *haMember, port string) []string {
		return []string{"daemon", "--inventory", inv, "--db", filepath.Join(dir, "shared.db"), "--socket", m.sock,
			"--listen", port, "--advertise", m.addr, "--token-file", token, "--store", "etcd", "--etcd-endpoints", endpoint, "--etcd-prefix", "/ha-follow/",
			"--name", m.name, "--election-ttl", "2s", "--tick", "500ms"}
	})
	var lead *haMember
	waitfor.T(t, ctx, "a leader and two followers", waitfor.Options{Stall: 90 * time.Second}, func() error {
		var err error
		lead, _, err = leaderOfThree(ctx, members, false)
		return err
	})
	var followers []*haMember
	for _, m := range members {
		if m != lead {
			followers = append(followers, m)
		}
	}
	run := func(args ...string) ([]byte, string, error) {
		cmd := exec.Command(bin, args...)
		cmd.Dir = dir
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		return out.Bytes(), errb.String(), err
	}
	jobFile, err := filepath.Abs("../examples/job.yaml")
	if err != nil {
		t.Fatal(err)
	}
	out, stderr, err := run("submit", "--socket", followers[0].sock, "--json", jobFile)
	var rec control.JobRecord
	if err != nil || json.Unmarshal(out, &rec) != nil || rec.ID == "" {
		t.Fatalf("submit through the follower %s: %v %s %s", followers[0].name, err, out, stderr)
	}
	out, stderr, err = run("jobs", "--socket", followers[0].sock, "--json")
	if err != nil || !bytes.Contains(out, []byte(`"`+rec.ID+`"`)) {
		t.Fatalf("replan jobs through %s right after its submit through it: %v %s %s; want %s", followers[0].name, err, out, stderr, rec.ID)
	}
	// The other follower's view has it soon (its watch).
	waitfor.T(t, ctx, rec.ID+" in "+followers[1].name+"'s view", waitfor.Options{Stall: 30 * time.Second}, func() error {
		code, h, body := haViewGet(ctx, followers[1].sock, "/v1/jobs/"+rec.ID)
		if code != 200 || h.Get(control.HeaderViewRevision) == "" && h.Get(control.HeaderLeader) == "" {
			return fmt.Errorf("%d %v %.200s", code, h, body)
		}
		return nil
	})

	lead.kill()
	killed := time.Now()
	for _, f := range followers {
		code, h, body := haViewGet(ctx, f.sock, "/v1/jobs")
		if code != 200 || h.Get(control.HeaderViewRevision) == "" || h.Get(control.HeaderView) != "current" || h.Get(control.HeaderLeader) != "" || !bytes.Contains(body, []byte(`"`+rec.ID+`"`)) {
			t.Errorf("GET /v1/jobs through %s %v after the leader was killed: %d %v %.300s; want the view's current answer with %s", f.name, time.Since(killed), code, h, body, rec.ID)
		}
		code, h, body = haViewGet(ctx, f.sock, "/v1/jobs/"+rec.ID)
		if code != 200 || h.Get(control.HeaderViewRevision) == "" || h.Get(control.HeaderLeader) != "" {
			t.Errorf("GET /v1/jobs/%s through %s %v after the leader was killed: %d %v %.300s; want the view's answer", rec.ID, f.name, time.Since(killed), code, h, body)
		}
	}
	answered := time.Since(killed)
	for _, f := range followers {
		st, err := f.status(ctx)
		t.Logf("%s after the reads (answered %v after the kill of %s, %s; status %v after): role %s, leader %q, election %q, %v", f.name, answered, lead.name, lead.addr, time.Since(killed), st.Role, st.Leader, st.Election, err)
	}
	for _, f := range followers {
		out, stderr, err := run("jobs", "--socket", f.sock, "--json")
		if err != nil || !bytes.Contains(out, []byte(`"`+rec.ID+`"`)) {
			t.Errorf("replan jobs through %s with the leader killed: %v %s %s", f.name, err, out, stderr)
		}
		out, stderr, err = run("job", rec.ID, "--socket", f.sock, "--json")
		if err != nil || !bytes.Contains(out, []byte(`"`+rec.ID+`"`)) {
			t.Errorf("replan job %s through %s with the leader killed: %v %s %s", rec.ID, f.name, err, out, stderr)
		}
		if stderr != "" {
			t.Logf("replan job through %s: stderr %s", f.name, stderr)
		}
	}
}

// haViewGet is GET path on a daemon's socket: status, headers, body.
func haViewGet(ctx context.Context, sock, path string) (int, http.Header, []byte) {
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}}
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://replan"+path, nil)
	resp, err := hc.Do(req)
	if err != nil {
		return 0, nil, []byte(err.Error())
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b
}

// haTestEnv prepares what the HA tests' daemon processes share: a
// temporary directory, the replan binary built into it, the example
// inventory, a real etcd (embedded, its client endpoint) and the members'
// token file.
func haTestEnv(t *testing.T) (dir, bin, inv, endpoint, token string) {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go tool not on PATH")
	}
	dir = t.TempDir()
	bin = filepath.Join(dir, "replan")
	if out, err := exec.Command(gobin, "build", "-o", bin, "..").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	inv, err = filepath.Abs("../inventory.yaml")
	if err != nil {
		t.Fatal(err)
	}
	endpoint = etcdtest.Start(t)[0]
	token = filepath.Join(dir, "token")
	if err := os.WriteFile(token, []byte("ha-test-token-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir, bin, inv, endpoint, token
}

// leaderOfThree is the member that leads with all three members up and
// campaigning (having run a round, with ran), and its epoch; else an
// error saying what each member says.
func leaderOfThree(ctx context.Context, members []*haMember, ran bool) (*haMember, uint64, error) {
	var seen []string
	var lead *haMember
	var epoch uint64
	for _, m := range members {
		st, err := m.status(ctx)
		if err != nil {
			seen = append(seen, m.name+": down")
			continue
		}
		seen = append(seen, fmt.Sprintf("%s: %s, %d members", m.name, st.Role, len(st.Members)))
		if st.Role == "leader" && st.Leader == m.addr && (!ran || !st.LastRound.At.IsZero()) && len(st.Members) == 3 {
			lead, epoch = m, st.Epoch
		}
	}
	if lead == nil || strings.Contains(strings.Join(seen, " "), "down") {
		return nil, 0, fmt.Errorf("%s", strings.Join(seen, "; "))
	}
	return lead, epoch, nil
}

// memoryIsStore compares what a leader holds in memory (GET /v1/queue and
// /v1/running) with its store (GET /v1/jobs reads the store): the same
// jobs waiting or running, each in the same state, attempt and placement.
func memoryIsStore(ctx context.Context, c *control.Client) error {
	q, err := c.Queue(ctx)
	if err != nil {
		return err
	}
	run, err := c.Running(ctx)
	if err != nil {
		return err
	}
	stored, err := c.Jobs(ctx)
	if err != nil {
		return err
	}
	key := func(j control.JobRecord) string {
		return fmt.Sprintf("%s %s attempt %d on %s", j.ID, j.State, j.Attempt, j.Placement)
	}
	mem := map[string]string{}
	for _, e := range q {
		mem[e.Job.ID] = key(e.Job)
	}
	for _, r := range run {
		mem[r.Job.ID] = key(r.Job)
	}
	var diff []string
	seen := map[string]bool{}
	for _, j := range stored {
		seen[j.ID] = true
		m, inMem := mem[j.ID]
		live := j.State == control.StateQueued || j.State == control.StatePreempted || j.State == control.StateRunning
		switch {
		case live && !inMem:
			diff = append(diff, "stored "+key(j)+", not in memory")
		case inMem && m != key(j):
			diff = append(diff, "memory "+m+", stored "+key(j))
		}
	}
	for id, m := range mem {
		if !seen[id] {
			diff = append(diff, "memory "+m+", not stored")
		}
	}
	if len(diff) > 0 {
		slices.Sort(diff)
		return fmt.Errorf("%d differences: %s", len(diff), strings.Join(diff[:min(len(diff), 5)], "; "))
	}
	return nil
}
