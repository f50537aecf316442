package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/replan/replan/control"
)

// runSecondDaemon runs `replan daemon` as a child on dir's database with
// socket sock and returns its exit error and output; a daemon that does not
// exit within a minute is killed and reported.
func runSecondDaemon(t *testing.T, dir, db, sock string) (string, error) {
	t.Helper()
	args := []string{"daemon", "--inventory", filepath.Join(dir, "inv.yaml"), "--db", db, "--socket", sock,
		"--tick", "100ms", "--restart-cost", "0s", "--data", ""}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run", "^$")
	cmd.Env = append(os.Environ(), "REPLAN_TEST_RUN="+strings.Join(args, "\x1f"))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("the second daemon did not exit:\n%s", out.String())
	}
	return out.String(), err
}

// TestSecondDaemonOnOneDatabaseExits: with the same socket and with
// another one, a second daemon on a database in use exits non-zero at
// once naming the first one's PID, and changes nothing (the first
// daemon's running job is not requeued).
func TestSecondDaemonOnOneDatabaseExits(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "inv.yaml"), []byte(smokeInventory), 0o644)
	sock := filepath.Join(dir, "s.sock")
	spec := "version: 1\nname: long\ntenant: research\nclass: best-effort\nmodel: bert\nframework: deepspeed\nworkdir: /w\nentrypoint: train.py\nglobal_batch: 32\niterations: 100000000\ncheckpoint_dir: /ckpt/l\nrequest: {gpus: 8}\n"
	os.WriteFile(filepath.Join(dir, "long.yaml"), []byte(spec), 0o644)
	first := startDaemon(t, dir)
	out, err := runCLI(t, "submit", filepath.Join(dir, "long.yaml"), "--socket", sock, "--json")
	if err != nil {
		t.Fatalf("submit: %v\n%s", err, out)
	}
	var job control.JobRecord
	json.Unmarshal([]byte(out), &job)
	c := control.NewUnixClient(sock)
	deadline := time.Now().Add(30 * time.Second)
	for {
		d, err := c.Job(context.Background(), job.ID)
		if err == nil && d.Job.State == control.StateRunning {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the job did not start: %+v %v", d.Job, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	before, _ := c.Job(context.Background(), job.ID)
	for _, s := range []string{sock, filepath.Join(dir, "other.sock")} {
		out, err := runSecondDaemon(t, dir, filepath.Join(dir, "r.db"), s)
		if err == nil {
			t.Fatalf("a second daemon on the same database (socket %s) ran:\n%s", s, out)
		}
		if want := fmt.Sprintf("pid %d", first.Process.Pid); !strings.Contains(out, want) {
			t.Errorf("the second daemon (socket %s) does not name the holder (%s):\n%s", s, want, out)
		}
	}
	after, err := c.Job(context.Background(), job.ID)
	if err != nil {
		t.Fatalf("the first daemon stopped answering: %v", err)
	}
	if after.Job.State != control.StateRunning || after.Job.Attempt != before.Job.Attempt || len(after.History) != len(before.History) {
		t.Errorf("the second daemon changed the first one's job: before %s attempt %d (%d transitions), after %s attempt %d (%d transitions)",
			before.Job.State, before.Job.Attempt, len(before.History), after.Job.State, after.Job.Attempt, len(after.History))
	}
	if _, err := os.Stat(filepath.Join(dir, "other.sock")); err == nil {
		t.Error("the refused daemon left a socket behind")
	}
}

// TestDaemonFilesArePrivateAndSocketFilesKept: the database's directory is
// created 0700 and its files 0600; a --socket naming a regular file is
// refused and the file kept.
func TestDaemonFilesArePrivateAndSocketFilesKept(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "inv.yaml"), []byte(smokeInventory), 0o644)
	notes := filepath.Join(dir, "notes.txt")
	os.WriteFile(notes, []byte("keep me"), 0o644)
	out, err := runSecondDaemon(t, dir, filepath.Join(dir, "state", "r.db"), notes)
	if err == nil || !strings.Contains(out, "not a socket") {
		t.Errorf("daemon with --socket at a regular file: %v\n%s", err, out)
	}
	if b, _ := os.ReadFile(notes); string(b) != "keep me" {
		t.Fatalf("the file named by --socket was changed: %q", b)
	}
	// A daemon that runs: its database directory and files are private.
	db := filepath.Join(dir, "private", "r.db")
	st, err := control.OpenSQLite(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.NextJobID(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if fi, err := os.Stat(filepath.Dir(db)); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("database directory: %v %v (want 0700)", fi.Mode().Perm(), err)
	}
	if _, err := os.Stat(db + "-shm"); err == nil {
		t.Errorf("%s-shm exists: the WAL index should live in the daemon's heap", db)
	}
	for _, p := range []string{db, db + "-wal"} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Errorf("%s: %v", p, err)
			continue
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s is %v (want 0600)", p, fi.Mode().Perm())
		}
	}
}

// Issue 24: after the database's directory was deleted, the daemon kept
// acknowledging writes that were lost at restart, and a second daemon
// could start on the same path. Now it refuses the writes (503) and
// stops with an error naming the database.
func TestDaemonStopsWhenItsDatabaseIsDeleted(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "inv.yaml"), []byte(smokeInventory), 0o644)
	state := filepath.Join(dir, "state")
	spec := "version: 1\nname: lost\ntenant: research\nclass: best-effort\nmodel: bert\nframework: deepspeed\nworkdir: /w\nentrypoint: train.py\nglobal_batch: 32\niterations: 100\ncheckpoint_dir: /ckpt/l\nrequest: {gpus: 8}\n"
	os.WriteFile(filepath.Join(dir, "j.yaml"), []byte(spec), 0o644)
	d := startDaemon(t, dir, "--db", filepath.Join(state, "r.db"))
	if out, err := runCLI(t, "submit", filepath.Join(dir, "j.yaml"), "--socket", filepath.Join(dir, "s.sock"), "--json"); err != nil {
		t.Fatalf("submit: %v\n%s", err, out)
	}
	if err := os.RemoveAll(state); err != nil {
		t.Fatal(err)
	}
	// A submit now is not acknowledged (refused, or the daemon is gone).
	if out, err := runCLI(t, "submit", filepath.Join(dir, "j.yaml"), "--socket", filepath.Join(dir, "s.sock"), "--json"); err == nil {
		t.Errorf("a submit after the database was deleted was acknowledged:\n%s", out)
	}
	exited := make(chan error, 1)
	go func() { exited <- d.Wait() }()
	select {
	case err := <-exited:
		if err == nil {
			t.Error("the daemon exited 0")
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("the daemon still runs two minutes after its database was deleted")
	}
	log, _ := os.ReadFile(filepath.Join(dir, "daemon.log"))
	if !strings.Contains(string(log), "deleted or replaced while the daemon had it open") || !strings.Contains(string(log), state) {
		t.Errorf("the daemon's last words do not name the deleted database:\n%s", log)
	}
}
