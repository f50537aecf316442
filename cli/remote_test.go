package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"testing"

	"github.com/replan/replan/control"
	"github.com/replan/replan/internal/sshtest"
)

// Issue 12: remote users reach the daemon's socket through SSH: `replan
// --remote user@head:port CMD` dials it over a real sshd's streamlocal
// forwarding, the head's host key checked against replan's known_hosts,
// and the daemon sees the user sshd authenticated (peer credentials of
// sshd's forwarding child).
func TestRemoteThroughRealSSHD(t *testing.T) {
	if ok, why := sshtest.Available(); !ok {
		t.Skip(why)
	}
	sock, _ := serveControl(t)
	s := sshtest.Start(t, sshtest.Config{})
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("SSH_AUTH_SOCK", "")
	os.MkdirAll(filepath.Join(home, ".ssh"), 0o700)
	key, _ := os.ReadFile(s.ClientKey)
	os.WriteFile(filepath.Join(home, ".ssh", "id_ed25519"), key, 0o600)
	kh := filepath.Join(home, ".config", "replan", "known_hosts")
	os.MkdirAll(filepath.Dir(kh), 0o700)

	remote := s.User + "@" + s.Addr()
	run := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		st := Run(context.Background(), args, &out, &errb)
		return st, out.String(), errb.String()
	}
	// The head's key is not in known_hosts yet: refused.
	if st, out, errb := run("--remote", remote, "whoami", "--socket", sock); st != 1 || !strings.Contains(errb, "known_hosts") {
		t.Fatalf("unknown host key: exit %d\n%s\n%s", st, out, errb)
	}
	s.AppendKnownHosts(kh)
	st, out, errb := run("--remote", remote, "whoami", "--socket", sock, "--json")
	if st != 0 {
		t.Fatalf("whoami over --remote: exit %d\n%s\n%s\nsshd: %s", st, out, errb, s.Logs())
	}
	var w control.WhoAmI
	if err := json.Unmarshal([]byte(out), &w); err != nil {
		t.Fatal(err)
	}
	me, _ := user.Lookup(s.User)
	if w.User != me.Username || w.Via != "unix" {
		t.Errorf("the daemon saw %+v, sshd authenticated %s", w, s.User)
	}
	// A submit goes through as well, and the job is that user's.
	file := filepath.Join(t.TempDir(), "job.yaml")
	os.WriteFile(file, []byte(strings.NewReplacer("TENANT", "research", "MODEL", "gpt2", "REQUEST", "{gpus: 2}").Replace(cliSpec)), 0o644)
	if st, out, errb := run("--remote", remote, "submit", "--socket", sock, file); st != 0 || !strings.Contains(out, "submitted j-") {
		t.Fatalf("submit over --remote: %d %s %s", st, out, errb)
	}
	if st, out, _ := run("--remote", remote, "events", "--socket", sock, "--json"); st != 0 || !strings.Contains(out, `"user":"`+me.Username+`"`) {
		t.Errorf("events over --remote: %d %s", st, out)
	}
	if st, out, _ := run("--remote", remote, "events", "--socket", sock); st != 0 || !strings.Contains(out, "(by "+me.Username+")") {
		t.Errorf("events table over --remote: %d %s", st, out)
	}
}

// `replan whoami` on the local socket: the test's own user, admin (it is
// the daemon's user), single-user daemon.
func TestWhoamiLocal(t *testing.T) {
	sock, _ := serveControl(t)
	var out, errb bytes.Buffer
	if st := Run(context.Background(), []string{"whoami", "--socket", sock}, &out, &errb); st != 0 {
		t.Fatalf("exit %d: %s", st, errb.String())
	}
	me, _ := user.Current()
	for _, want := range []string{"user     " + me.Username, "role     admin (single-user daemon"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("whoami printed\n%s\nwant %q", out.String(), want)
		}
	}
}
