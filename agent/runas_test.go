package agent

import (
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"testing"
)

// Issue 12: with tenants[].run_as the agent (as root) starts the tenant's
// processes as that Unix user; such a process cannot open the agent's
// socket (mode 0600 in a 0700 directory), so a job cannot reach the agent.
func TestRunAsStartsTheProcessAsTheUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates a Unix user (useradd) and runs a process as it")
	}
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Skip("no setpriv (util-linux) on this machine")
	}
	name := "rpl12-job"
	exec.Command("userdel", name).Run()
	if out, err := exec.Command("useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name).CombinedOutput(); err != nil {
		t.Skipf("useradd: %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("userdel", name).Run() })
	u, _ := user.Lookup(name)

	dir := t.TempDir()
	ctx := context.Background()
	sock := filepath.Join(dir, "run", "agent.sock")
	ln, err := ListenUnix(ctx, sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	s := openSup(t, filepath.Join(dir, "state"), nil)
	stopAll(t, s)
	// The process reports who it is, and tries the agent's socket.
	// (/usr/bin/python3: a python under root's home is not the user's.)
	script := `id -u; id -g; echo "home=$HOME"; /usr/bin/python3 -c '
import socket, sys
s = socket.socket(socket.AF_UNIX)
try:
    s.connect(sys.argv[1]); print("socket=open")
except PermissionError:
    print("socket=refused")
except Exception as e:
    print("socket=" + type(e).__name__)
' "$1"; exit 7`
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("no /usr/bin/python3 to try the agent's socket as the user")
	}
	info, err := s.Start(ctx, ProcessSpec{ID: "job-a0-r0", Argv: []string{"sh", "-c", script, "sh", sock}, Dir: "/", RunAs: name})
	if err != nil {
		t.Fatal(err)
	}
	if info.Spec.RunAs != name {
		t.Errorf("recorded spec %+v", info.Spec)
	}
	done := waitExit(t, s, "job-a0-r0")
	if done.ExitCode == nil || *done.ExitCode != 7 {
		t.Errorf("exit code %v (the wrapper records it)", done.ExitCode)
	}
	out := readLog(t, s, "job-a0-r0")
	lines := strings.Fields(out)
	if len(lines) < 4 || lines[0] != u.Uid || lines[1] != u.Gid || lines[2] != "home="+u.HomeDir || lines[3] != "socket=refused" {
		t.Fatalf("the process reported %q, want uid %s gid %s, home %s, socket refused", out, u.Uid, u.Gid, u.HomeDir)
	}
	// An unknown user is a field error, and nothing starts.
	if _, err := s.Start(ctx, ProcessSpec{ID: "bad", Argv: []string{"true"}, RunAs: "rpl12-nosuchuser"}); err == nil || !strings.Contains(err.Error(), "run_as") {
		t.Errorf("unknown run_as: %v", err)
	}
}

// TestAgentRefusesOtherUsers: even with the socket opened to everyone, a
// process of another user (a job started with run_as) gets no answer from
// the agent's API; the agent's own user does.
func TestAgentRefusesOtherUsers(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates a Unix user (useradd) and connects as it")
	}
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Skip("no setpriv (util-linux) on this machine")
	}
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("no /usr/bin/python3 to call the agent's socket as the user")
	}
	name := "rpl12-peer"
	exec.Command("userdel", name).Run()
	if out, err := exec.Command("useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name).CombinedOutput(); err != nil {
		t.Skipf("useradd: %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("userdel", name).Run() })

	dir, err := os.MkdirTemp("", "rpl-peer-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "agent.sock")
	ln, err := ListenUnix(context.Background(), sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "agent") })}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	// Open the door as a careless operator might: only the kernel's word
	// on who connects is left.
	for _, p := range []string{dir, sock} {
		if err := os.Chmod(p, 0o777); err != nil {
			t.Fatal(err)
		}
	}
	call := `
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.settimeout(20)
try:
    s.connect(sys.argv[1])
    s.sendall(b"GET / HTTP/1.0\r\n\r\n")
    data = s.recv(4096)
    print("api=answered" if data else "api=closed")
except Exception as e:
    print("api=" + type(e).__name__)
`
	as := func(who ...string) string {
		args := append(who, "/usr/bin/python3", "-c", call, sock)
		out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
		if err != nil {
			t.Fatalf("%v: %v: %s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	// The agent closes the connection unanswered: the client sees the close,
	// or a broken pipe or reset when it writes after it.
	if got := as("setpriv", "--reuid", name, "--regid", name, "--clear-groups"); got != "api=closed" && got != "api=BrokenPipeError" && got != "api=ConnectionResetError" {
		t.Fatalf("another user's process: %s, want the connection closed unanswered", got)
	}
	if got := as("env"); got != "api=answered" {
		t.Fatalf("the agent's own user: %s, want api=answered", got)
	}
}
