package control_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/replan/replan/cluster"
	"github.com/replan/replan/control"
	"github.com/replan/replan/fleet"
	"github.com/replan/replan/jobspec"
	"github.com/replan/replan/launch"
)

// outageTrainer is a trainer under replan's contract that checkpoints
// every 25 iterations (and at the end; a SIGTERM saves too); its rank 0
// keeps a trail of where each launch started and what it saved
// ("start|save ATTEMPT IT") and logs every iteration it does ("ATTEMPT
// IT") to $ckpt/iters.
const outageTrainer = `#!/bin/sh
ckpt="$REPLAN_CHECKPOINT_DIR"
rank="${REPLAN_NODE_RANK:-0}"
it=0
if [ "$REPLAN_RESUME" = 1 ] && [ -f "$ckpt/latest" ]; then it=$(cat "$ckpt/latest"); fi
log() { if [ "$rank" = 0 ]; then echo "$1" >> "$ckpt/$2"; fi; }
log "start $REPLAN_ATTEMPT $it" trail
save() {
	if [ "$rank" = 0 ]; then
		log "saving $REPLAN_ATTEMPT $it" trail
		echo "$it" > "$ckpt/latest.tmp" && mv "$ckpt/latest.tmp" "$ckpt/latest"
		log "save $REPLAN_ATTEMPT $it" trail
	fi
}
trap 'save; exit 0' TERM
while [ "$it" -lt "$REPLAN_ITERATIONS" ]; do
	it=$((it + 1))
	log "$REPLAN_ATTEMPT $it" iters
	echo "[Rank 0] epoch=0/micro_step=$it/global_step=$it, RunningAvgSamplesPerSec=20.0, CurrSamplesPerSec=20.0"
	[ $((it % 25)) = 0 ] && save
	sleep 0.04
done
save
`

// The outage test's lease and how long each fault lasts (longer than the
// lease, as the 60 s link blip was longer than a real lease).
const (
	outageLease = 2 * time.Second
	outageFault = 4 * outageLease
)

// TestOutage cuts a running job's server off from the daemon three ways
// (issue 24): its link down, its sshd stopped, its agent killed (and
// deployed again afterwards). Each time the daemon moves the job to
// another server while the hosts' processes, polled throughout, never
// show two attempts of the job alive at once; the job finishes with every
// launch resuming from the last checkpoint and its iteration log in order
// (checkIterations: what a killed attempt did after its last checkpoint
// is redone by the next; the last attempt logs each of its iterations
// once).
func TestOutage(t *testing.T) {
	c := newTestCluster(t)
	if !c.netns && os.Getenv("REPLAN_OUTAGE_NETNS") == "required" {
		t.Fatal("REPLAN_OUTAGE_NETNS=required: the outage test needs the network-namespace hosts (root, ip netns)")
	}
	trainer := filepath.Join(c.tmp, "outage-trainer.sh")
	if err := os.WriteFile(trainer, []byte(outageTrainer), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := testDaemonConfig{Inventory: c.invPath, RemoteDir: c.remoteDir, DB: filepath.Join(c.tmp, "replan.db"), Socket: filepath.Join(c.tmp, "replan.sock"),
		LeaseMS: int(outageLease / time.Millisecond), CallTimeoutMS: 2000}
	startDaemon, client, daemonLog := startTestDaemon(t, c.ctx, c.tmp, cfg)
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(daemonLog)
			t.Logf("daemon log:\n%s", tail(string(b), 80))
		}
	})
	startDaemon()
	byAddr := map[string]testHost{}
	for _, h := range c.hosts {
		byAddr[h.SSHD.Host] = h
	}
	serverOf := map[string]cluster.Server{}
	for _, s := range c.inv.Servers {
		serverOf[s.Name] = s
	}

	type fault struct {
		name         string
		netns        bool // needs the network-namespace hosts
		cut, restore func(t *testing.T, h testHost)
	}
	agentDir := func(h testHost) string { return fleet.ExpandDir(c.remoteDir, h.Name, "/") }
	faults := []fault{
		{name: "link-down", netns: true,
			cut:     func(t *testing.T, h testHost) { ipLink(t, h.NS.HostIf, "down") },
			restore: func(t *testing.T, h testHost) { ipLink(t, h.NS.HostIf, "up") }},
		{name: "sshd-stopped",
			cut: func(t *testing.T, h testHost) {
				h.SSHD.Stop()
				// Stopping sshd kills the shells of its sessions, maybe
				// in the middle of this machine's .bashrc `pyenv rehash`,
				// whose lock would then hold every later SSH command for
				// a minute (see .ci/run).
				clearRehashLock(t)
			},
			restore: func(t *testing.T, h testHost) { h.SSHD.Restart() }},
		{name: "agent-killed",
			cut: func(t *testing.T, h testHost) {
				b, err := os.ReadFile(filepath.Join(agentDir(h), "agent.pid"))
				pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
				if err != nil || pid <= 1 {
					t.Fatalf("agent pid of %s: %q, %v", h.Name, b, err)
				}
				if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
					t.Fatal(err)
				}
			},
			restore: func(t *testing.T, h testHost) {
				res, err := c.fl.Deploy(c.ctx, []cluster.Server{serverOf[h.Name]}, fleet.DeployOptions{AgentBinary: c.agentBin, FakeGPUs: "8xA800"})
				if err != nil || len(res) != 1 || res[0].Status != fleet.StatusDeployed {
					t.Fatalf("deploy the agent on %s again: %+v, %v", h.Name, res, err)
				}
			}},
	}
	const total = 300
	for _, f := range faults {
		t.Run(f.name, func(t *testing.T) {
			if f.netns && !c.netns {
				t.Skip("needs the network-namespace hosts")
			}
			began := time.Now()
			name := "outage-" + f.name
			spec := strings.Replace(string(c.jobSpec(name, "best-effort", 8, total)), c.trainer, trainer, 1)
			r, err := client.Submit(c.ctx, name+".yaml", []byte(spec))
			if err != nil {
				t.Fatal(err)
			}
			ckpt := filepath.Join(c.tmp, "ckpt", name)
			w := watchAttempts(trainer, name)
			defer w.stop()
			// Running, past its first checkpoint.
			var host testHost
			poll(t, c.ctx, name+" runs past its first checkpoint", 60*time.Second, func() error {
				live := w.now()
				if len(live) != 1 {
					return fmt.Errorf("live attempts %v", live)
				}
				b, _ := os.ReadFile(filepath.Join(ckpt, "latest"))
				if n, _ := strconv.Atoi(strings.TrimSpace(string(b))); n < 25 {
					return fmt.Errorf("checkpoint %q", b)
				}
				for _, addr := range live {
					host = byAddr[addr]
				}
				return nil
			})
			t.Logf("%s on %s; cut off at %s for %s", r.ID, host.Name, time.Since(began).Round(time.Millisecond), outageFault)
			f.cut(t, host)
			cut := time.Now()
			restored := false
			restore := func() {
				if !restored {
					restored = true
					f.restore(t, host)
				}
			}
			defer restore()
			// The fault lasts outageFault, and until the daemon has moved
			// the job (so that each case shows the move).
			poll(t, c.ctx, "the daemon moves "+r.ID, 60*time.Second, func() error {
				live := w.now()
				if time.Since(cut) < outageFault {
					return fmt.Errorf("fault for %s of %s; live %v", time.Since(cut).Round(time.Second), outageFault, live)
				}
				for _, addr := range live {
					if addr != host.SSHD.Host {
						return nil
					}
				}
				return fmt.Errorf("live attempts %v", live)
			})
			t.Logf("moved %s after the cut; restoring %s", time.Since(cut).Round(time.Millisecond), host.Name)
			restore()
			poll(t, c.ctx, r.ID+" finishes", 60*time.Second, func() error {
				d, err := client.Job(c.ctx, r.ID)
				if err != nil {
					return err
				}
				if d.Job.State != control.StateFinished {
					b, _ := os.ReadFile(filepath.Join(ckpt, "latest"))
					return fmt.Errorf("%s at %d (marker %q): %s", d.Job.State, d.Job.Iterations, strings.TrimSpace(string(b)), d.Job.Reason)
				}
				if d.Job.Iterations != total {
					return fmt.Errorf("finished after %d iterations, want %d", d.Job.Iterations, total)
				}
				return nil
			})
			w.stop()
			if m := w.maxLive(); m != 1 {
				t.Errorf("at most %d attempts alive at once, want 1 (%d polls): %s", m, w.polls, w.overlaps())
			}
			if w.polls < 20 {
				t.Errorf("only %d polls of the hosts' processes", w.polls)
			}
			trail := readTrail(t, filepath.Join(ckpt, "trail"))
			if err := checkTrail(trail, total); err != nil {
				t.Errorf("trail: %v\n%s", err, strings.Join(trail, "\n"))
			}
			launches := 0
			for _, l := range trail {
				if strings.HasPrefix(l, "start ") {
					launches++
				}
			}
			if launches < 2 {
				t.Errorf("%d launches: the job did not move\n%s", launches, strings.Join(trail, "\n"))
			}
			if err := checkIterations(filepath.Join(ckpt, "iters"), total); err != nil {
				t.Error(err)
			}
			t.Logf("%s: %d launches, at most %d alive at once over %d polls, %s in all", f.name, launches, w.maxLive(), w.polls, time.Since(began).Round(time.Millisecond))
		})
	}
}

// clearRehashLock removes pyenv's rehash lock when no rehash runs (one
// killed with its session leaves it behind).
func clearRehashLock(t *testing.T) {
	root := os.Getenv("PYENV_ROOT")
	if root == "" {
		home, _ := os.UserHomeDir()
		root = filepath.Join(home, ".pyenv")
	}
	lock := filepath.Join(root, "shims", ".pyenv-shim")
	if _, err := os.Stat(lock); err != nil {
		return
	}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline")); err == nil && strings.Contains(string(b), "pyenv-rehash") {
			return
		}
	}
	if os.Remove(lock) == nil {
		t.Logf("removed %s left by a killed pyenv rehash", lock)
	}
}

// ipLink sets a link up or down.
func ipLink(t *testing.T, dev, state string) {
	t.Helper()
	if out, err := exec.Command("ip", "link", "set", dev, state).CombinedOutput(); err != nil {
		t.Fatalf("ip link set %s %s: %v: %s", dev, state, err, out)
	}
}

// checkIterations checks the iteration log ("ATTEMPT IT" lines): attempts
// follow each other (no line of an earlier attempt after a later one's:
// never two at once), each runs consecutive iterations from where it
// resumed, and the last one ends at total having logged each of its
// iterations once.
func checkIterations(path string, total int) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	lastAttempt, lastIt := -1, 0
	for i, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(l)
		if len(f) != 2 {
			return fmt.Errorf("%s: line %d: %q", path, i+1, l)
		}
		a, err1 := strconv.Atoi(f[0])
		it, err2 := strconv.Atoi(f[1])
		if err1 != nil || err2 != nil {
			return fmt.Errorf("%s: line %d: %q", path, i+1, l)
		}
		switch {
		case a < lastAttempt:
			return fmt.Errorf("%s: line %d: attempt %d logs iteration %d after attempt %d had started: two attempts alive at once", path, i+1, a, it, lastAttempt)
		case a == lastAttempt && it != lastIt+1:
			return fmt.Errorf("%s: line %d: attempt %d logs iteration %d after %d", path, i+1, a, it, lastIt)
		case a > lastAttempt && it > lastIt+1:
			return fmt.Errorf("%s: line %d: attempt %d starts at iteration %d, after %d: iterations skipped", path, i+1, a, it, lastIt)
		}
		lastAttempt, lastIt = a, it
	}
	if lastIt != total {
		return fmt.Errorf("%s: ends at iteration %d, want %d", path, lastIt, total)
	}
	return nil
}

// attemptWatch polls the hosts' processes for a job's live attempts.
type attemptWatch struct {
	trainer, job string
	done         chan struct{}
	once         sync.Once
	wg           sync.WaitGroup

	mu      sync.Mutex
	last    map[string]string // attempt → MASTER_ADDR, as last polled
	polls   int
	max     int
	overlap []string
}

// watchAttempts polls every 20 ms until stop.
func watchAttempts(trainer, job string) *attemptWatch {
	w := &attemptWatch{trainer: trainer, job: job, done: make(chan struct{})}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		for {
			live := liveAttempts(trainer, job)
			w.mu.Lock()
			w.last, w.polls = live, w.polls+1
			if len(live) > w.max {
				w.max = len(live)
			}
			if len(live) > 1 && len(w.overlap) < 10 {
				w.overlap = append(w.overlap, fmt.Sprintf("%s: %v", time.Now().Format("15:04:05.000"), live))
			}
			w.mu.Unlock()
			select {
			case <-w.done:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	return w
}

func (w *attemptWatch) stop() {
	w.once.Do(func() { close(w.done) })
	w.wg.Wait()
}

func (w *attemptWatch) now() map[string]string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.last
}

func (w *attemptWatch) maxLive() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.max
}

func (w *attemptWatch) overlaps() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Join(w.overlap, "; ")
}

// liveAttempts scans /proc (the hosts share this machine's processes)
// for trainer processes ("sh TRAINER") of job: attempt → its server's
// address (MASTER_ADDR; one server per attempt in this test).
func liveAttempts(trainer, job string) map[string]string {
	out := map[string]string{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		dir := filepath.Join("/proc", e.Name())
		cmd, err := os.ReadFile(filepath.Join(dir, "cmdline"))
		if err != nil {
			continue
		}
		argv := strings.Split(string(cmd), "\x00")
		if len(argv) < 2 || argv[1] != trainer {
			continue
		}
		if st, err := os.ReadFile(filepath.Join(dir, "stat")); err != nil || zombie(string(st)) {
			continue
		}
		env, err := os.ReadFile(filepath.Join(dir, "environ"))
		if err != nil {
			continue
		}
		var name, attempt, addr string
		for _, kv := range strings.Split(string(env), "\x00") {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "REPLAN_JOB":
				name = v
			case "REPLAN_ATTEMPT":
				attempt = v
			case "MASTER_ADDR":
				addr = v
			}
		}
		if name == job {
			out[attempt] = addr
		}
	}
	return out
}

func zombie(stat string) bool {
	i := strings.LastIndexByte(stat, ')')
	return i >= 0 && i+2 < len(stat) && stat[i+2] == 'Z'
}

// TestLeaseRenewedWhileLoopBusy: the executor renews its servers' leases
// on its own, so a daemon loop held for many lease periods (a long
// reconfiguration, a checkpointed stop) does not let them run out and
// kill every job; without the renewer the job below died after one
// lease.
func TestLeaseRenewedWhileLoopBusy(t *testing.T) {
	c := newTestCluster(t)
	const lease = time.Second
	ex, err := control.NewSSHExecutor(c.fl, c.inv.Servers, control.SSHOptions{Logger: c.log, KillGrace: time.Second, Poll: 100 * time.Millisecond,
		CallTimeout: 2 * time.Second, NoCPUBinding: true, Lease: lease})
	if err != nil {
		t.Fatal(err)
	}
	spec, err := jobspec.Parse("busy.yaml", c.jobSpec("busy", "best-effort", 8, 100000), nil)
	if err != nil {
		t.Fatal(err)
	}
	s := c.inv.Servers[0]
	l := control.Launch{JobID: "j-920001", Spec: spec, Plan: spec.Request.Plan, Servers: []launch.Server{{Name: s.Name, Address: s.Address, GPUs: []int{0, 1, 2, 3, 4, 5, 6, 7}}}}
	if err := ex.Start(c.ctx, l); err != nil {
		t.Fatal(err)
	}
	poll(t, c.ctx, "the job runs", 30*time.Second, func() error {
		if live := liveAttempts(c.trainer, "busy"); len(live) != 1 {
			return fmt.Errorf("live attempts %v", live)
		}
		return nil
	})
	began := time.Now()
	// No Observe from here on: the trainer must live through 5 leases.
	poll(t, c.ctx, "the job lives through 5 leases without an Observe", 30*time.Second, func() error {
		live := liveAttempts(c.trainer, "busy")
		if len(live) != 1 {
			t.Fatalf("%s after the start: live attempts %v; want the job running", time.Since(began).Round(time.Millisecond), live)
		}
		if time.Since(began) < 5*lease {
			return fmt.Errorf("alive after %s", time.Since(began).Round(100*time.Millisecond))
		}
		return nil
	})
	if _, err := ex.Stop(c.ctx, l.JobID, false); err != nil {
		t.Fatal(err)
	}
}
