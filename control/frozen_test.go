package control

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/replan/replan/internal/waitfor"
	"github.com/replan/replan/jobspec"
	"github.com/replan/replan/sched"
)

const frozenHelperEnv = "REPLAN_FROZEN_HELPER"

// TestFrozenDiskHelper is not a test: TestDaemonAnswersWithItsDiskFrozen
// runs the test binary with it selected, as the daemon: its store on the
// file system named in the environment, its API on the socket named
// there, and a load of submits (writes), store reads and collections.
func TestFrozenDiskHelper(t *testing.T) {
	v := os.Getenv(frozenHelperEnv)
	if v == "" {
		t.Skip("helper process of TestDaemonAnswersWithItsDiskFrozen")
	}
	db, sock, _ := strings.Cut(v, "|")
	ctx := context.Background()
	st, err := OpenSQLite(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	p, _ := sched.New("static")
	d, err := New(ctx, Config{Store: st, Exec: &recorder{}, Policy: p,
		Servers: []ServerInfo{{Name: "a", Rack: "r1", GPUs: 8, CPUs: 64, MemGB: 1000}},
		Tenants: []TenantInfo{{Name: "research", QuotaGPUs: 8}}})
	if err != nil {
		t.Fatal(err)
	}
	l, err := ListenUnix(sock)
	if err != nil {
		t.Fatal(err)
	}
	go Serve(ctx, l, (&API{D: d, Version: "test"}).Handler())
	s := spec(t, "load", 8, jobspec.BestEffort)
	go func() {
		for {
			d.Submit(ctx, s)
		}
	}()
	for range 2 {
		go func() {
			for {
				st.ListJobs(ctx, JobFilter{})
				st.Events(ctx, 0, 20)
			}
		}()
	}
	go func() {
		for {
			runtime.GC()
			time.Sleep(5 * time.Millisecond)
		}
	}()
	select {}
}

// Issue 24: with a store read in flight, freezing the file system of the
// daemon's database (fsfreeze) froze the whole daemon, whoami and
// /metrics included: SQLite's WAL index was a mmapped -shm file, a thread
// faulting on it cannot be stopped for a garbage collection, and every
// other goroutine waits for that collection. On a real ext4 file system
// (a loop device), a daemon under a load of writes, store reads and
// collections is frozen; whoami and /metrics must keep answering.
func TestDaemonAnswersWithItsDiskFrozen(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: mounts a loop device and freezes it")
	}
	for _, tool := range []string{"mkfs.ext4", "mount", "umount", "fsfreeze"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s on this machine", tool)
		}
	}
	ctx := context.Background()
	dir := t.TempDir()
	img, mnt := filepath.Join(dir, "disk.img"), filepath.Join(dir, "mnt")
	os.Mkdir(mnt, 0o700)
	run := func(name string, args ...string) error {
		out, err := exec.Command(name, args...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
		}
		return nil
	}
	if err := run("truncate", "-s", "64M", img); err != nil {
		t.Fatal(err)
	}
	if err := run("mkfs.ext4", "-q", "-F", img); err != nil {
		t.Fatal(err)
	}
	if err := run("mount", "-o", "loop", img, mnt); err != nil {
		t.Skipf("cannot mount a loop device here: %v", err)
	}
	t.Cleanup(func() { run("fsfreeze", "-u", mnt); run("umount", "-l", mnt) })

	sock := filepath.Join(dir, "s.sock")
	child := exec.Command(os.Args[0], "-test.run=^TestFrozenDiskHelper$")
	child.Env = append(os.Environ(), frozenHelperEnv+"="+filepath.Join(mnt, "replan.db")+"|"+sock)
	out, _ := os.Create(filepath.Join(dir, "daemon.log"))
	child.Stdout, child.Stderr = out, out
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { run("fsfreeze", "-u", mnt); child.Process.Kill(); child.Wait() })
	cl := NewUnixClient(sock)
	waitfor.T(t, ctx, "the daemon stores a few hundred jobs", waitfor.Options{}, func() error {
		st, err := cl.Status(ctx)
		if err != nil {
			return err
		}
		if st.Jobs < 300 {
			return fmt.Errorf("%d jobs", st.Jobs)
		}
		return nil
	})
	if err := run("fsfreeze", "-f", mnt); err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	// Each request has a minute: a daemon that answers at all answers in
	// milliseconds; a frozen one never does.
	for i := range 20 {
		rctx, cancel := context.WithTimeout(ctx, time.Minute)
		w, err := cl.WhoAmI(rctx)
		if err != nil || w.User == "" {
			cancel()
			b, _ := os.ReadFile(filepath.Join(dir, "daemon.log"))
			t.Fatalf("whoami %d with the disk frozen: %+v %v\n%s", i, w, err, b)
		}
		req, _ := http.NewRequestWithContext(rctx, "GET", "http://replan/metrics", nil)
		resp, err := hc.Do(req)
		if err != nil {
			cancel()
			t.Fatalf("/metrics %d with the disk frozen: %v", i, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		if resp.StatusCode != 200 || !strings.Contains(string(body), "replan_jobs") {
			t.Fatalf("/metrics %d with the disk frozen: %d %s", i, resp.StatusCode, body)
		}
	}
}
