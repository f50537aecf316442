package ssh_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/replan/replan/cluster"
	"github.com/replan/replan/internal/sshtest"
	"github.com/replan/replan/internal/waitfor"
	"github.com/replan/replan/ssh"
	xssh "golang.org/x/crypto/ssh"
	xknownhosts "golang.org/x/crypto/ssh/knownhosts"
)

func host(s *sshtest.Server, name string) ssh.Host {
	return ssh.Host{Name: name, Addr: s.Addr(), User: s.User, IdentityFile: s.ClientKey}
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// newPool returns a pool whose known_hosts holds the given servers' keys.
func newPool(t *testing.T, cfg ssh.Config, servers ...*sshtest.Server) (*ssh.Pool, string) {
	t.Helper()
	kh := filepath.Join(t.TempDir(), "known_hosts")
	for _, s := range servers {
		s.AppendKnownHosts(kh)
	}
	if cfg.HostKeys == nil {
		cfg.HostKeys = ssh.NewHostKeys(kh, false, testLogger(t))
	}
	if cfg.Logger == nil {
		cfg.Logger = testLogger(t)
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = 10 * time.Second
	}
	if cfg.BackoffInitial == 0 {
		cfg.BackoffInitial = 50 * time.Millisecond
	}
	p, err := ssh.NewPool(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p, kh
}

func TestKnownHostAccepted(t *testing.T) {
	s := sshtest.Start(t, sshtest.Config{})
	p, _ := newPool(t, ssh.Config{}, s)
	out, err := p.Output(context.Background(), host(s, "a"), "echo", "hello")
	if err != nil {
		t.Fatalf("%v\nsshd log:\n%s", err, s.Logs())
	}
	if string(out) != "hello\n" {
		t.Fatalf("output %q", out)
	}
}

func TestUnknownHostRefusedThenAcceptedWithAcceptNew(t *testing.T) {
	s := sshtest.Start(t, sshtest.Config{})
	kh := filepath.Join(t.TempDir(), "sub", "known_hosts")
	p, _ := newPool(t, ssh.Config{HostKeys: ssh.NewHostKeys(kh, false, nil)})
	_, err := p.Output(context.Background(), host(s, "a"), "true")
	if !errors.Is(err, ssh.ErrUnknownHost) {
		t.Fatalf("want ErrUnknownHost, got %v", err)
	}
	if !strings.Contains(err.Error(), xssh.FingerprintSHA256(s.HostPublicKey("ed25519"))) {
		t.Errorf("error lacks the fingerprint: %v", err)
	}
	if _, err := os.Stat(kh); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("known_hosts written without AcceptNew: %v", err)
	}

	p2, _ := newPool(t, ssh.Config{HostKeys: ssh.NewHostKeys(kh, true, testLogger(t))})
	if _, err := p2.Output(context.Background(), host(s, "a"), "true"); err != nil {
		t.Fatalf("AcceptNew: %v", err)
	}
	data, err := os.ReadFile(kh)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.TrimSpace(string(data)), s.KnownHostsLine("ed25519"); got != want {
		t.Fatalf("known_hosts = %q, want %q", got, want)
	}
	// And now a pool without AcceptNew trusts it.
	p3, _ := newPool(t, ssh.Config{HostKeys: ssh.NewHostKeys(kh, false, nil)})
	if _, err := p3.Output(context.Background(), host(s, "a"), "true"); err != nil {
		t.Fatalf("after accepting: %v", err)
	}
}

func TestChangedKeyRefusedWithBothFingerprints(t *testing.T) {
	s := sshtest.Start(t, sshtest.Config{})
	old := xssh.FingerprintSHA256(s.HostPublicKey("ed25519"))
	kh := filepath.Join(t.TempDir(), "known_hosts")
	s.AppendKnownHosts(kh)
	s.RegenerateHostKey("ed25519")
	s.Restart()
	newFP := xssh.FingerprintSHA256(s.HostPublicKey("ed25519"))
	// Even with AcceptNew a changed key is refused.
	p, _ := newPool(t, ssh.Config{HostKeys: ssh.NewHostKeys(kh, true, nil)})
	_, err := p.Output(context.Background(), host(s, "a"), "true")
	if !errors.Is(err, ssh.ErrHostKeyMismatch) {
		t.Fatalf("want ErrHostKeyMismatch, got %v", err)
	}
	for _, fp := range []string{old, newFP} {
		if !strings.Contains(err.Error(), fp) {
			t.Errorf("error lacks %s: %v", fp, err)
		}
	}
	info, err := ssh.Trust(context.Background(), s.Addr(), kh, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if info.Status != ssh.KeyChanged || info.Fingerprint != newFP || !errors.Is(info.Err, ssh.ErrHostKeyMismatch) {
		t.Errorf("trust info = %+v", info)
	}
}

func TestOtherKeyTypeFirstIsNoMismatch(t *testing.T) {
	// The server has ecdsa (which x/crypto prefers) and ed25519 host keys;
	// the client knows only the ed25519 key.
	s := sshtest.Start(t, sshtest.Config{HostKeyTypes: []string{"ecdsa", "ed25519"}})
	kh := filepath.Join(t.TempDir(), "known_hosts")
	s.AppendKnownHosts(kh, "ed25519")
	p, _ := newPool(t, ssh.Config{HostKeys: ssh.NewHostKeys(kh, false, nil)})
	if _, err := p.Output(context.Background(), host(s, "a"), "true"); err != nil {
		t.Fatalf("ed25519-only known_hosts: %v", err)
	}
	// A plain x/crypto client that does not restrict the algorithms sees
	// a "changed" key: the test really exercises the restriction.
	cb, err := xknownhosts.New(kh)
	if err != nil {
		t.Fatal(err)
	}
	signer := clientSigner(t, s.ClientKey)
	_, err = xssh.Dial("tcp", s.Addr(), &xssh.ClientConfig{User: s.User, Auth: []xssh.AuthMethod{xssh.PublicKeys(signer)}, HostKeyCallback: cb})
	var kerr *xknownhosts.KeyError
	if !errors.As(err, &kerr) || len(kerr.Want) == 0 {
		t.Fatalf("unrestricted client: want a key mismatch, got %v", err)
	}
}

func clientSigner(t *testing.T, path string) xssh.Signer {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s, err := xssh.ParsePrivateKey(b)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestTrustAndAppend(t *testing.T) {
	s := sshtest.Start(t, sshtest.Config{})
	kh := filepath.Join(t.TempDir(), "known_hosts")
	info, err := ssh.Trust(context.Background(), s.Addr(), kh, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if info.Status != ssh.KeyUnknown || info.Fingerprint != xssh.FingerprintSHA256(s.HostPublicKey("ed25519")) {
		t.Fatalf("info = %+v", info)
	}
	if err := ssh.AppendKnownHost(kh, s.Addr(), info.Key); err != nil {
		t.Fatal(err)
	}
	info, err = ssh.Trust(context.Background(), s.Addr(), kh, 5*time.Second)
	if err != nil || info.Status != ssh.KeyKnown {
		t.Fatalf("after append: %+v, %v", info, err)
	}
}

func TestOutputAndStreams(t *testing.T) {
	s := sshtest.Start(t, sshtest.Config{})
	p, _ := newPool(t, ssh.Config{}, s)
	var out, errb bytes.Buffer
	err := p.Run(context.Background(), host(s, "a"), ssh.Cmd{
		Script: "echo out; echo err >&2; cat; pwd",
		Dir:    "/tmp",
		Stdin:  strings.NewReader("from stdin\n"),
		Stdout: &out, Stderr: &errb,
	})
	if err != nil {
		t.Fatal(err)
	}
	if out.String() != "out\nfrom stdin\n/tmp\n" || errb.String() != "err\n" {
		t.Fatalf("stdout %q stderr %q", out.String(), errb.String())
	}
	err = p.Run(context.Background(), host(s, "a"), ssh.Cmd{Script: "exit 7"})
	var ee *xssh.ExitError
	if !errors.As(err, &ee) || ee.ExitStatus() != 7 {
		t.Fatalf("want exit 7, got %v", err)
	}
}

var hostile = []string{
	"$(touch /tmp/replan-pwned)",
	"`touch /tmp/replan-pwned`",
	"; rm -rf /tmp/replan-nonexistent-dir",
	"a'b\"c",
	"'",
	"''",
	`\`,
	"line1\nline2",
	"tab\there",
	"$HOME ${PATH} $$ $1",
	"*",
	"-n",
	"",
	" leading and trailing ",
	"&& echo injected || true",
	"> /tmp/replan-pwned",
	"ünïcödé ✓",
	"#comment",
	"~root",
}

func TestQuoteLocalShell(t *testing.T) {
	for _, a := range hostile {
		out, err := exec.Command("sh", "-c", "printf '%s' "+ssh.Quote(a)).Output()
		if err != nil {
			t.Fatalf("%q: %v", a, err)
		}
		if string(out) != a {
			t.Errorf("quote(%q) through sh gave %q", a, out)
		}
	}
	if ssh.Quote("plain-path/x.y") != "plain-path/x.y" || ssh.Quote("") != "''" || ssh.Quote("it's") != `'it'\''s'` {
		t.Error("quote forms")
	}
}

func TestHostileArgsArriveVerbatim(t *testing.T) {
	os.Remove("/tmp/replan-pwned")
	s := sshtest.Start(t, sshtest.Config{})
	p, _ := newPool(t, ssh.Config{}, s)
	// printf '%s\0' prints each argument NUL-terminated: exactly what the
	// remote process received.
	args := append([]string{"printf", `%s\0`}, hostile...)
	out, err := p.Output(context.Background(), host(s, "a"), args...)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
	if len(got) != len(hostile) {
		t.Fatalf("got %d args, want %d: %q", len(got), len(hostile), got)
	}
	for i := range hostile {
		if got[i] != hostile[i] {
			t.Errorf("arg %d: got %q, want %q", i, got[i], hostile[i])
		}
	}
	// A hostile working directory too.
	dir := filepath.Join(t.TempDir(), "d $(id) `id` 'x'\"; echo")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var pwd bytes.Buffer
	if err := p.Run(context.Background(), host(s, "a"), ssh.Cmd{Args: []string{"pwd"}, Dir: dir, Stdout: &pwd}); err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(pwd.String()) != dir {
		t.Errorf("pwd %q, want %q", pwd.String(), dir)
	}
	if _, err := os.Stat("/tmp/replan-pwned"); err == nil {
		t.Fatal("/tmp/replan-pwned exists: shell injection")
	}
}

// pgrep reports whether a process whose command line contains marker
// exists.
func pgrep(t *testing.T, marker string) bool {
	out, err := exec.Command("pgrep", "-f", marker).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) && ee.ExitCode() == 1 {
			return false
		}
		t.Fatalf("pgrep: %v", err)
	}
	return len(bytes.TrimSpace(out)) > 0
}

func TestCancelKillsRemoteProcess(t *testing.T) {
	if _, err := exec.LookPath("pgrep"); err != nil {
		t.Skip("pgrep not installed")
	}
	s := sshtest.Start(t, sshtest.Config{})
	p, _ := newPool(t, ssh.Config{KillGrace: 500 * time.Millisecond}, s)
	for _, tc := range []struct {
		name string
		cmd  func(marker string) ssh.Cmd
	}{
		// A plain command, and a script whose children ignore SIGTERM
		// and SIGHUP (only the process group kill + KILL gets them).
		{"argv", func(m string) ssh.Cmd { return ssh.Command("sleep", "300", m) }},
		{"script", func(m string) ssh.Cmd {
			return ssh.Cmd{Script: "trap '' TERM HUP; (trap '' TERM HUP; sleep 301 " + m + " ; true) & sleep 302 " + m + "; wait"}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The marker is a unique number: sleep adds its arguments
			// up, and pgrep -f finds the process by it.
			marker := fmt.Sprintf("%d.%d", 1000+time.Now().UnixNano()%1000, os.Getpid())
			ctx, cancel := context.WithCancel(context.Background())
			started := make(chan struct{})
			var out bytes.Buffer
			errc := make(chan error, 1)
			go func() {
				cmd := tc.cmd(marker)
				cmd.Stdout = &out
				errc <- p.Run(ctx, host(s, "a"), cmd)
			}()
			// Wait until the remote sleep exists (polling, not timing).
			stop := make(chan struct{})
			defer close(stop)
			go func() {
				for !pgrep(t, marker) {
					select {
					case <-stop:
						return
					case <-time.After(20 * time.Millisecond):
					}
				}
				close(started)
			}()
			select {
			case <-started:
			case err := <-errc:
				t.Fatalf("command ended early: %v", err)
			}
			cancel()
			if err := <-errc; !errors.Is(err, context.Canceled) {
				t.Fatalf("want context.Canceled, got %v", err)
			}
			// Run returns after the kill session finished, so nothing
			// may be left.
			if pgrep(t, marker) {
				t.Fatalf("remote process %s still running after cancel", marker)
			}
		})
	}
}

func TestUploadAtomicAndVerified(t *testing.T) {
	s := sshtest.Start(t, sshtest.Config{})
	p, _ := newPool(t, ssh.Config{}, s)
	dir := t.TempDir()
	local := filepath.Join(dir, "local.bin")
	data := bytes.Repeat([]byte("replan\x00\xff"), 100000)
	if err := os.WriteFile(local, data, 0o600); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(dir, "remote dir $(x)", "agent")
	if err := os.Mkdir(filepath.Dir(target), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(target, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := p.Upload(context.Background(), host(s, "a"), local, target, 0o755); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(target)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("uploaded content differs (err %v, %d bytes)", err, len(got))
	}
	fi, _ := os.Stat(target)
	if fi.Mode().Perm() != 0o755 {
		t.Errorf("mode %v", fi.Mode())
	}
	// No temp file left behind.
	ents, _ := os.ReadDir(filepath.Dir(target))
	if len(ents) != 1 {
		t.Errorf("directory holds %d entries, want only the target", len(ents))
	}

	// A failed upload (unwritable target: the path is a directory) leaves
	// the old content and no temp file.
	blocked := filepath.Join(dir, "blocked")
	if err := os.MkdirAll(filepath.Join(blocked, "agent", "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := p.UploadBytes(context.Background(), host(s, "a"), []byte("new"), filepath.Join(blocked, "agent"), 0o644); err == nil {
		t.Fatal("upload over a non-empty directory: want error")
	}
	ents, _ = os.ReadDir(blocked)
	inner, _ := os.ReadDir(filepath.Join(blocked, "agent"))
	if len(ents) != 1 || len(inner) != 1 {
		t.Errorf("failed upload left %d entries beside and %d inside the target", len(ents), len(inner))
	}
}

func TestFanOutWithDeadServer(t *testing.T) {
	key := sshtest.ClientKey(t)
	var servers []*sshtest.Server
	for i := 0; i < 3; i++ {
		servers = append(servers, sshtest.Start(t, sshtest.Config{ClientKey: key}))
	}
	p, _ := newPool(t, ssh.Config{DialAttempts: 2}, servers...)
	servers[1].Stop()
	var hosts []ssh.Host
	for i, s := range servers {
		hosts = append(hosts, host(s, fmt.Sprintf("s%d", i)))
	}
	var bar bytes.Buffer
	var calls []int
	pb := &ssh.ProgressBar{W: &bar}
	res := p.FanOut(context.Background(), hosts, ssh.Command("echo", "hi"), 2, func(done, total int, r ssh.Result) {
		calls = append(calls, done)
		pb.Update(done, total, r)
	})
	if len(res) != 3 {
		t.Fatalf("%d results", len(res))
	}
	for i, r := range res {
		if r.Host.Name != hosts[i].Name {
			t.Errorf("result %d is for %s", i, r.Host.Name)
		}
		if i == 1 {
			if r.Err == nil || !strings.Contains(r.Err.Error(), "s1") {
				t.Errorf("dead server: err %v", r.Err)
			}
			continue
		}
		if r.Err != nil || string(r.Stdout) != "hi\n" {
			t.Errorf("server %d: %q %v", i, r.Stdout, r.Err)
		}
	}
	if fmt.Sprint(calls) != "[1 2 3]" {
		t.Errorf("progress calls %v", calls)
	}
	if !strings.Contains(bar.String(), "3/3") {
		t.Errorf("progress bar %q", bar.String())
	}
	errs := ssh.ForEach(context.Background(), hosts, 1, nil, func(ctx context.Context, h ssh.Host) error {
		if h.Name == "s2" {
			return errors.New("boom")
		}
		return nil
	})
	if errs[0] != nil || errs[1] != nil || errs[2] == nil {
		t.Errorf("ForEach errs %v", errs)
	}
}

func TestPoolReusesAndRedials(t *testing.T) {
	s := sshtest.Start(t, sshtest.Config{})
	// A keepalive loose enough that a loaded machine answering late does
	// not drop the connection in the middle of the 12 commands (100ms
	// did: a second dial, a failed test).
	p, _ := newPool(t, ssh.Config{Keepalive: time.Second}, s)
	h := host(s, "a")
	ctx := context.Background()
	var wg sync.WaitGroup
	for i := 0; i < 12; i++ { // more than MaxSessions: the semaphore queues them
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := p.Output(ctx, h, "sh", "-c", "echo $PPID"); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if st := p.Stats(h); st.Dials != 1 || !st.Connected || st.Sessions != 0 {
		t.Fatalf("after 12 commands: %+v, want one dial", st)
	}
	s.Restart() // kills the connection too
	// The pool notices (the connection ends, or its keepalive goes
	// unanswered) before the next command, which redials.
	waitfor.T(t, ctx, "the pool notices the restart", waitfor.Options{Stall: 30 * time.Second}, func() error {
		if st := p.Stats(h); st.Connected {
			return fmt.Errorf("still connected: %+v", st)
		}
		return nil
	})
	if _, err := p.Output(ctx, h, "true"); err != nil {
		t.Fatalf("after restart: %v", err)
	}
	if st := p.Stats(h); st.Dials != 2 {
		t.Fatalf("after restart: %+v, want a second dial", st)
	}
}

func TestSessionCapPerServer(t *testing.T) {
	s := sshtest.Start(t, sshtest.Config{})
	p, _ := newPool(t, ssh.Config{MaxSessions: 2}, s)
	h := host(s, "a")
	dir := t.TempDir()
	// Each command records itself running, waits for a release file, and
	// the test checks that never more than 2 ran at once.
	script := `mkdir ` + ssh.Quote(dir) + `/run.$$ && ls ` + ssh.Quote(dir) + ` | grep -c '^run' >> ` + ssh.Quote(dir) + `/counts; ` +
		`while [ ! -e ` + ssh.Quote(dir) + `/go ]; do sleep 0.02; done; rmdir ` + ssh.Quote(dir) + `/run.$$`
	var wg sync.WaitGroup
	for i := 0; i < 5; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := p.Run(context.Background(), h, ssh.Cmd{Script: script}); err != nil {
				t.Error(err)
			}
		}()
	}
	for p.Stats(h).Sessions < 2 {
		time.Sleep(10 * time.Millisecond)
	}
	os.WriteFile(filepath.Join(dir, "go"), nil, 0o644)
	wg.Wait()
	counts, _ := os.ReadFile(filepath.Join(dir, "counts"))
	for _, c := range strings.Fields(string(counts)) {
		if c != "1" && c != "2" {
			t.Fatalf("%s commands ran at once (counts %q)", c, counts)
		}
	}
}

func TestDialUnixReachesHTTPServer(t *testing.T) {
	s := sshtest.Start(t, sshtest.Config{})
	p, _ := newPool(t, ssh.Config{}, s)
	sock := filepath.Join(t.TempDir(), "agent.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "agent says hi to %s", r.URL.Path)
	})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })

	c := p.HTTPClient(host(s, "a"), sock)
	for i := 0; i < 3; i++ {
		resp, err := c.Get("http://agent/v1/gpus")
		if err != nil {
			t.Fatalf("%v\nsshd log:\n%s", err, s.Logs())
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != "agent says hi to /v1/gpus" {
			t.Fatalf("body %q", b)
		}
	}
	if st := p.Stats(host(s, "a")); st.Dials != 1 {
		t.Errorf("stats %+v", st)
	}
	if _, err := p.DialUnix(context.Background(), host(s, "a"), sock+".missing"); err == nil {
		t.Error("missing socket: want error")
	}
}

func TestJumpHost(t *testing.T) {
	key := sshtest.ClientKey(t)
	jump := sshtest.Start(t, sshtest.Config{ClientKey: key})
	target := sshtest.Start(t, sshtest.Config{ClientKey: key})
	jh := host(jump, "jump")
	p, _ := newPool(t, ssh.Config{JumpHost: &jh}, jump, target)
	out, err := p.Output(context.Background(), host(target, "t"), "echo", "via")
	if err != nil || string(out) != "via\n" {
		t.Fatalf("%q %v", out, err)
	}
	if !strings.Contains(jump.Logs(), "direct-tcpip") && !strings.Contains(jump.Logs(), "Accepted publickey") {
		t.Logf("jump log:\n%s", jump.Logs())
	}
	if p.Stats(jh).Dials != 1 {
		t.Errorf("jump host not dialled: %+v", p.Stats(jh))
	}
}

func TestCancelledDialReturns(t *testing.T) {
	// A listener that accepts and never speaks: the handshake must end
	// with the context.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	key := sshtest.ClientKey(t)
	p, _ := newPool(t, ssh.Config{DialAttempts: 1})
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := p.Output(ctx, ssh.Host{Name: "mute", Addr: l.Addr().String(), User: "x", IdentityFile: key}, "true")
		errc <- err
	}()
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("want context.Canceled, got %v", err)
	}
}

func TestKeepaliveDropsFrozenConnection(t *testing.T) {
	s := sshtest.Start(t, sshtest.Config{})
	p, _ := newPool(t, ssh.Config{Keepalive: 50 * time.Millisecond}, s)
	h := host(s, "a")
	if _, err := p.Output(context.Background(), h, "true"); err != nil {
		t.Fatal(err)
	}
	// Freeze the per-connection sshd processes: keepalives go unanswered
	// and the pool must notice on its own, without a command failing.
	kids := sshtest.Descendants(s.PID())
	if len(kids) == 0 {
		t.Fatal("no per-connection sshd process found")
	}
	for _, k := range kids {
		syscall.Kill(k, syscall.SIGSTOP)
	}
	for p.Stats(h).Connected {
		time.Sleep(10 * time.Millisecond)
	}
	for _, k := range kids {
		syscall.Kill(k, syscall.SIGKILL)
		syscall.Kill(k, syscall.SIGCONT)
	}
	if _, err := p.Output(context.Background(), h, "true"); err != nil {
		t.Fatalf("after keepalive failure: %v", err)
	}
	if st := p.Stats(h); st.Dials != 2 {
		t.Errorf("stats %+v, want a redial", st)
	}
}

func TestFromInventory(t *testing.T) {
	inv := &cluster.Inventory{
		Defaults: cluster.Defaults{User: "replan", IdentityFile: "/k"},
		SSH:      cluster.SSHOptions{KnownHosts: "/kh", ConnectTimeout: time.Second, Keepalive: 2 * time.Second, MaxSessions: 3, JumpHost: "ops@bastion"},
	}
	cfg := ssh.FromInventory(inv, nil)
	if cfg.HostKeys.Path() != "/kh" || cfg.ConnectTimeout != time.Second || cfg.Keepalive != 2*time.Second || cfg.MaxSessions != 3 {
		t.Errorf("cfg %+v", cfg)
	}
	if j := cfg.JumpHost; j == nil || j.Addr != "bastion:22" || j.User != "ops" || j.IdentityFile != "/k" {
		t.Errorf("jump %+v", cfg.JumpHost)
	}
	s := cluster.Server{Name: "n", Address: "::1", Port: 2222, User: "u", IdentityFile: "/k"}
	if h := ssh.HostFromServer(s); h.Addr != "[::1]:2222" || h.Name != "n" || h.User != "u" {
		t.Errorf("host %+v", h)
	}
}
