package control

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/replan/replan/agent"
	"github.com/replan/replan/cluster"
	"github.com/replan/replan/fleet"
	"github.com/replan/replan/internal/sshtest"
	"github.com/replan/replan/internal/waitfor"
	"github.com/replan/replan/jobspec"
	"github.com/replan/replan/launch"
	"github.com/replan/replan/perf"
	"github.com/replan/replan/ssh"
)

// agentHost is one netns sshd test host with a real agent deployed to it.
type agentHost struct {
	fl     *fleet.Fleet
	server cluster.Server
	dir    string         // a private directory (mode 0755) for the test's files
	ns     *sshtest.NetNS // its network namespace; nil on loopback
}

// newAgentHost starts one sshd host (in a network namespace where
// possible), builds cmd/replan-agent and deploys it there with fake GPUs.
func newAgentHost(t *testing.T, prefix string, seed int) agentHost {
	t.Helper()
	if testing.Short() {
		t.Skip("real-host test skipped in -short mode")
	}
	if ok, why := sshtest.Available(); !ok {
		t.Skip(why)
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go toolchain not on PATH: cannot build the agent")
	}
	// Not t.TempDir (mode 0700): a run_as user must reach the job's files.
	dir, err := os.MkdirTemp("", "rpl-host-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "replan-agent")
	if out, err := exec.Command(gobin, "build", "-o", bin, "github.com/replan/replan/cmd/replan-agent").CombinedOutput(); err != nil {
		t.Fatalf("build agent: %v\n%s", err, out)
	}
	clientKey := sshtest.ClientKey(t)
	hosts, netns := sshtest.StartHosts(t, 1, clientKey, prefix, seed)
	t.Logf("test host in a network namespace: %v", netns)
	h := hosts[0]
	kh := filepath.Join(dir, "known_hosts")
	h.SSHD.AppendKnownHosts(kh)
	pool, err := ssh.NewPool(ssh.Config{HostKeys: ssh.NewHostKeys(kh, false, nil), ConnectTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pool.Close() })
	remote := filepath.Join(dir, "remote")
	fl := fleet.New(pool, fleet.Options{RemoteDir: remote})
	srv := cluster.Server{Name: h.Name, Address: h.SSHD.Host, Port: h.SSHD.Port, User: h.SSHD.User, IdentityFile: clientKey, GPUs: 8}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	t.Cleanup(func() { killAgentDir(remote) })
	res, err := fl.Deploy(ctx, []cluster.Server{srv}, fleet.DeployOptions{AgentBinary: bin, FakeGPUs: "8xA800"})
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Status != fleet.StatusDeployed {
		t.Fatalf("deploy: %+v", res[0])
	}
	return agentHost{fl: fl, server: srv, dir: dir, ns: h.NS}
}

// killAgentDir stops the agent deployed under dir and what it supervises,
// by the PIDs they recorded.
func killAgentDir(dir string) {
	recs, _ := filepath.Glob(filepath.Join(dir, "agent", "procs", "*", "process.json"))
	for _, r := range recs {
		var p agent.ProcessInfo
		if b, err := os.ReadFile(r); err == nil && json.Unmarshal(b, &p) == nil && p.State == agent.StateRunning && p.PID > 1 {
			_ = syscall.Kill(-p.PID, syscall.SIGKILL)
		}
	}
	if b, err := os.ReadFile(filepath.Join(dir, "agent.pid")); err == nil {
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 1 {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// testUser creates a system user for the test (root only) and returns it.
func testUser(t *testing.T, name string) *user.User {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates a Unix user (useradd) for run_as")
	}
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Skip("no setpriv (util-linux) on this machine")
	}
	exec.Command("userdel", name).Run()
	if out, err := exec.Command("useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name).CombinedOutput(); err != nil {
		t.Skipf("useradd: %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("userdel", name).Run() })
	u, err := user.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// cmdlineScanner reads every process's /proc/PID/cmdline until stopped
// and keeps those that contain needle.
type cmdlineScanner struct {
	stop chan struct{}
	done chan struct{}
	mu   sync.Mutex
	hits []string
	runs int
}

func scanCmdlines(needle string) *cmdlineScanner {
	s := &cmdlineScanner{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		for {
			files, _ := filepath.Glob("/proc/[0-9]*/cmdline")
			for _, f := range files {
				if b, err := os.ReadFile(f); err == nil && bytes.Contains(b, []byte(needle)) {
					hit := f + ": " + strings.ReplaceAll(string(b), "\x00", " ")
					s.mu.Lock()
					if !slices.Contains(s.hits, hit) {
						s.hits = append(s.hits, hit)
					}
					s.mu.Unlock()
				}
			}
			s.mu.Lock()
			s.runs++
			s.mu.Unlock()
			select {
			case <-s.stop:
				return
			default:
			}
		}
	}()
	return s
}

func (s *cmdlineScanner) finish() (hits []string, runs int) {
	close(s.stop)
	<-s.done
	return s.hits, s.runs
}

// Issue 24 item 2: the checkpoint conversion ran over SSH as the SSH user
// (root) with the job's environment on its command line (exec env K=V),
// while the job's ranks ran as its tenant's run_as user; marker reads and
// the launch files were root's too. Now a requeued run_as job converted on
// start: the converter runs as the user, gets the job's env as its
// environment (no process's cmdline ever holds a value of it), and the
// launch files and their directories belong to the user. A marker that is
// a symbolic link into a root-only directory is read as the user: its
// target's content does not come back.
func TestRunAsJobWorkRunsAsTheUser(t *testing.T) {
	u := testUser(t, "rpl24-job")
	h := newAgentHost(t, "rp-ra", 23)
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	bin := filepath.Join(h.dir, "bin")
	ckpt := filepath.Join(h.dir, "ckpt")
	for _, d := range []string{bin, ckpt} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chown(ckpt, uid, gid); err != nil {
		t.Fatal(err)
	}
	// The converter says who it is and what its environment holds, then
	// waits for the test (which looks at every process meanwhile).
	python := `#!/bin/sh
out=""
while [ $# -gt 0 ]; do
	if [ "$1" = --output_folder ]; then out="$2"; fi
	shift
done
id -u > "$out.uid"
printf '%s' "$TEST_API_KEY" > "$out.env"
while [ ! -e "$out.go" ]; do sleep 0.05; done
mkdir -p "$out"
`
	files := map[string]string{"python": python, "deepspeed": "#!/bin/sh\nexec sleep 600\n", "train.sh": "#!/bin/sh\nexit 0\n"}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(bin, name), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	const secret = "s3cr3t-4f1c9e"
	yaml := fmt.Sprintf(`version: 1
name: ra
tenant: research
class: best-effort
model: gpt2
framework: deepspeed
workdir: %s
entrypoint: %s
env: {PATH: "%s:/usr/bin:/bin", TEST_API_KEY: %s}
global_batch: 16
iterations: 1000
checkpoint_dir: %s
request: {gpus: 8, plan: "dp=8,tp=1,pp=1,mb=2,ga=1"}
`, bin, filepath.Join(bin, "train.sh"), bin, secret, ckpt)
	spec, err := jobspec.Parse("ra.yaml", []byte(yaml), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(launch.CheckpointMarker(spec), []byte("global_step42\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ex, err := NewSSHExecutor(h.fl, []cluster.Server{h.server}, SSHOptions{RunAs: map[string]string{"research": u.Username},
		NoCPUBinding: true, KillGrace: time.Second, Poll: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	gpus := func(n int) []int {
		var g []int
		for i := range n {
			g = append(g, i)
		}
		return g
	}
	// Requeued from dp=8 and started with dp=2: the checkpoint is
	// converted first.
	l := Launch{JobID: "j-24001", Spec: spec, Plan: perf.Plan{DP: 2, TP: 1, PP: 1, MicroBatch: 8, GA: 1}, CheckpointPlan: spec.Request.Plan,
		Servers: []launch.Server{{Name: h.server.Name, Address: h.server.Address, GPUs: gpus(2)}}, Attempt: 3, Resume: true, From: 42}
	out := filepath.Join(ckpt, "global_step42_universal")
	scan := scanCmdlines(secret)
	errc := make(chan error, 1)
	go func() { errc <- ex.Start(ctx, l) }()
	waitfor.T(t, ctx, "the converter runs", waitfor.Options{Stall: time.Minute}, func() error {
		select {
		case err := <-errc:
			t.Fatalf("start returned before the conversion ran: %v", err)
		default:
		}
		if b, err := os.ReadFile(out + ".env"); err != nil || len(b) == 0 {
			return fmt.Errorf("no %s.env yet", out)
		}
		return nil
	})
	if err := os.WriteFile(out+".go", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatalf("start: %v", err)
	}
	hits, runs := scan.finish()
	defer ex.Stop(context.WithoutCancel(ctx), l.JobID, false)
	if got, _ := os.ReadFile(out + ".uid"); strings.TrimSpace(string(got)) != u.Uid {
		t.Errorf("the converter ran as uid %q, want %s (%s, the tenant's run_as)", strings.TrimSpace(string(got)), u.Uid, u.Username)
	}
	if got, _ := os.ReadFile(out + ".env"); string(got) != secret {
		t.Errorf("the converter's environment has TEST_API_KEY=%q, want the job's value", got)
	}
	if len(hits) > 0 {
		t.Errorf("a value of the job's env on a command line (%d scans of /proc): %s", runs, strings.Join(hits, "; "))
	}
	t.Logf("%d scans of every /proc/PID/cmdline while the job started", runs)
	for _, p := range []string{filepath.Join(ckpt, ".replan"), filepath.Join(ckpt, ".replan", "attempt-3"), filepath.Join(ckpt, ".replan", "attempt-3", "ds_config.json"), filepath.Join(ckpt, ".replan", "attempt-3", "hostfile")} {
		fi, err := os.Lstat(p)
		if err != nil {
			t.Errorf("launch file: %v", err)
			continue
		}
		if st := fi.Sys().(*syscall.Stat_t); int(st.Uid) != uid {
			t.Errorf("%s belongs to uid %d, want %d (%s)", p, st.Uid, uid, u.Username)
		}
	}

	// A marker that points into a root-only directory: read as the user,
	// its target's content never comes back.
	private := filepath.Join(h.dir, "root-only")
	if err := os.Mkdir(private, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(private, "secret"), []byte("global_step77\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ckpt2 := filepath.Join(h.dir, "ckpt2")
	if err := os.Mkdir(ckpt2, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(private, "secret"), filepath.Join(ckpt2, "latest")); err != nil {
		t.Fatal(err)
	}
	spec2 := *spec
	spec2.CheckpointDir = ckpt2
	l2 := l
	l2.JobID, l2.Spec = "j-24002", &spec2
	n, tag, err := ex.readMarker(ctx, l2)
	if strings.Contains(tag, "77") || n == 77 {
		t.Errorf("a marker linked to a root-only file read %d %q (err %v): read as root, not as %s", n, tag, err, u.Username)
	}
	t.Logf("marker linked into a root-only directory: %d %q %v", n, tag, err)
}

// Issue 24 item 5: `mkdir -p <ckpt>/.replan/attempt-N` and the uploads
// followed a symbolic link the job planted at <ckpt>/.replan, so
// ds_config.json and hostfile landed in a root-only directory. Now the
// start fails with an error naming the link, for a run_as job and for one
// that runs as the agent's user alike, and nothing is written through it.
func TestLaunchFilesRefuseSymlinks(t *testing.T) {
	u := testUser(t, "rpl24-sym")
	h := newAgentHost(t, "rp-rs", 29)
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	bin := filepath.Join(h.dir, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{"deepspeed": "#!/bin/sh\nexec sleep 600\n", "train.sh": "#!/bin/sh\nexit 0\n"} {
		if err := os.WriteFile(filepath.Join(bin, name), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ex, err := NewSSHExecutor(h.fl, []cluster.Server{h.server}, SSHOptions{RunAs: map[string]string{"research": u.Username},
		NoCPUBinding: true, KillGrace: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for i, tenant := range []string{"research", "other"} {
		ckpt := filepath.Join(h.dir, "ckpt-"+tenant)
		private := filepath.Join(h.dir, "root-only-"+tenant)
		for _, d := range []string{ckpt, private} {
			if err := os.Mkdir(d, 0o700); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Chown(ckpt, uid, gid); err != nil {
			t.Fatal(err)
		}
		link := filepath.Join(ckpt, ".replan")
		if err := os.Symlink(private, link); err != nil {
			t.Fatal(err)
		}
		yaml := fmt.Sprintf(`version: 1
name: sym
tenant: %s
class: best-effort
model: gpt2
framework: deepspeed
workdir: %s
entrypoint: %s
env: {PATH: "%s:/usr/bin:/bin"}
global_batch: 16
iterations: 1000
checkpoint_dir: %s
request: {gpus: 8, plan: "dp=8,tp=1,pp=1,mb=2,ga=1"}
`, tenant, bin, filepath.Join(bin, "train.sh"), bin, ckpt)
		spec, err := jobspec.Parse("sym.yaml", []byte(yaml), nil)
		if err != nil {
			t.Fatal(err)
		}
		l := Launch{JobID: fmt.Sprintf("j-2410%d", i), Spec: spec, Plan: spec.Request.Plan,
			Servers: []launch.Server{{Name: h.server.Name, Address: h.server.Address, GPUs: []int{0, 1, 2, 3, 4, 5, 6, 7}}}}
		err = ex.Start(ctx, l)
		if err == nil {
			ex.Stop(ctx, l.JobID, false)
		}
		if err == nil || !strings.Contains(err.Error(), link) || !strings.Contains(err.Error(), "symbolic link") {
			t.Errorf("tenant %s: start with %s linked to a root-only directory: %v, want an error naming the link", tenant, link, err)
		}
		ents, _ := os.ReadDir(private)
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		if len(names) > 0 {
			t.Errorf("tenant %s: written through the link into %s: %v", tenant, private, names)
		}
		t.Logf("tenant %s: %v", tenant, err)
	}
}
