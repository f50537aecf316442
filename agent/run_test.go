package agent

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// RunCommand runs a command to its end: stdin in, stdout and stderr out,
// the exit status, the environment given as the command's environment and
// the command found on that environment's PATH (not the agent's).
func TestRunCommand(t *testing.T) {
	ctx := context.Background()
	bin := t.TempDir()
	script := "#!/bin/sh\necho \"key=$API_KEY dir=$(pwd)\"\ncat\necho oops >&2\nexit 3\n"
	if err := os.WriteFile(filepath.Join(bin, "job-tool"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	res, err := RunCommand(ctx, RunRequest{Argv: []string{"job-tool"}, Env: map[string]string{"PATH": bin + ":/usr/bin:/bin", "API_KEY": "k1"},
		Dir: dir, Stdin: []byte("from stdin\n")})
	if err != nil {
		t.Fatal(err)
	}
	if want := "key=k1 dir=" + dir + "\nfrom stdin\n"; string(res.Stdout) != want || res.ExitCode != 3 || strings.TrimSpace(res.Stderr) != "oops" {
		t.Fatalf("run: %+v (stdout %q), want stdout %q, exit 3, stderr oops", res, res.Stdout, want)
	}
	// Not on the agent's PATH nor on the one given: a field error.
	_, err = RunCommand(ctx, RunRequest{Argv: []string{"job-tool"}})
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Field != "argv" {
		t.Fatalf("a command not on PATH: %v", err)
	}
	if _, err := RunCommand(ctx, RunRequest{Argv: []string{"true"}, Dir: "relative"}); !errors.As(err, &fe) || fe.Field != "dir" {
		t.Fatalf("a relative dir: %v", err)
	}
	// Output beyond the bound is cut and said to be.
	res, err = RunCommand(ctx, RunRequest{Argv: []string{"head", "-c", strconv.Itoa(MaxRunOutput + 10), "/dev/zero"}})
	if err != nil || len(res.Stdout) != MaxRunOutput || !res.StdoutTruncated || res.ExitCode != 0 {
		t.Fatalf("long output: %d bytes, truncated %v, exit %d, %v", len(res.Stdout), res.StdoutTruncated, res.ExitCode, err)
	}
}

// A run that outlives its timeout is killed; one whose caller goes away
// is killed with what it started.
func TestRunCommandTimeoutKillsTheGroup(t *testing.T) {
	res, err := RunCommand(context.Background(), RunRequest{Argv: []string{"sleep", "300"}, TimeoutSeconds: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	if !res.TimedOut || res.ExitCode != 128+int(syscall.SIGKILL) {
		t.Fatalf("timed-out run: %+v", res)
	}
	pidFile := filepath.Join(t.TempDir(), "pid")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		_, err := RunCommand(ctx, RunRequest{Argv: []string{"sh", "-c", `sleep 300 & echo $! > "$1.tmp"; mv "$1.tmp" "$1"; wait`, "sh", pidFile}})
		errc <- err
	}()
	var pid int
	waitFor(t, "the run to start its background sleep", func() bool {
		b, err := os.ReadFile(pidFile)
		pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil && pid > 0
	})
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled run: %v", err)
	}
	waitFor(t, "the background sleep to go", func() bool {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		return err != nil || strings.Contains(string(b), ") Z ")
	})
}

// With run_as (the agent as root) the command runs as the user, with the
// user's HOME, and the environment reaches it as its environment.
func TestRunCommandAsUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates a Unix user (useradd) and runs a command as it")
	}
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Skip("no setpriv (util-linux) on this machine")
	}
	name := "rpl24-run"
	exec.Command("userdel", name).Run()
	if out, err := exec.Command("useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name).CombinedOutput(); err != nil {
		t.Skipf("useradd: %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("userdel", name).Run() })
	u, _ := user.Lookup(name)
	res, err := RunCommand(context.Background(), RunRequest{Argv: []string{"sh", "-c", `id -u; id -g; echo "$HOME $API_KEY"; tr '\0' ' ' < /proc/$$/cmdline`},
		Env: map[string]string{"API_KEY": "k-4711"}, RunAs: name})
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(res.Stdout)), "\n")
	if res.ExitCode != 0 || len(lines) != 4 || lines[0] != u.Uid || lines[1] != u.Gid || lines[2] != u.HomeDir+" k-4711" || strings.Contains(lines[3], "k-4711") {
		t.Fatalf("as %s (uid %s gid %s): %+v\n%s", name, u.Uid, u.Gid, res, res.Stdout)
	}
	if _, err := RunCommand(context.Background(), RunRequest{Argv: []string{"true"}, RunAs: "rpl24-nosuchuser"}); err == nil || !strings.Contains(err.Error(), "run_as") {
		t.Fatalf("unknown run_as: %v", err)
	}
}
