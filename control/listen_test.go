package control

import (
	"bufio"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/replan/replan/internal/waitfor"
	"github.com/replan/replan/jobspec"
	"github.com/replan/replan/sched"
)

// serveForTest serves h on l with lim until ctx ends and returns the
// listener's tracker.
func serveForTest(ctx context.Context, l net.Listener, h http.Handler, lim Limits) *tracker {
	tl := newTrackedListener(l, lim)
	go serveTracked(ctx, tl, h)
	return tl.t
}

// queueDaemon is a daemon on two servers with n jobs queued (stored up
// front, recovered by New as after a restart): a large GET /v1/queue.
func queueDaemon(t *testing.T, n int) *Daemon {
	t.Helper()
	ctx := context.Background()
	st, _ := openTest(t)
	for lo := 0; lo < n; lo += 500 {
		var b Batch
		for i := lo; i < min(lo+500, n); i++ {
			id, err := st.NextJobID(ctx)
			if err != nil {
				t.Fatal(err)
			}
			data := fmt.Sprintf("version: 1\nname: q%d\ntenant: research\nclass: best-effort\nmodel: bert\nframework: deepspeed\nworkdir: /w\nentrypoint: train.py\nglobal_batch: 32\niterations: 1000\ncheckpoint_dir: /ckpt/q%d\nrequest: {gpus: 16}\n", i, i)
			s, err := jobspec.Parse("q.yaml", []byte(data), nil)
			if err != nil {
				t.Fatal(err)
			}
			raw, _ := json.Marshal(s)
			b.Jobs = append(b.Jobs, JobWrite{Create: true, Rec: JobRecord{ID: id, Name: s.Name, Tenant: s.Tenant, Class: string(s.Class), Spec: raw, State: StateQueued, SubmittedAt: time.Now().UTC(), Version: 1}})
		}
		if _, err := st.Commit(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	p, _ := sched.New("static")
	d, err := New(ctx, Config{Store: st, Exec: NewSimExecutor(time.Now, []string{"a", "b"}, nil, nil, 0), Policy: p,
		Servers: []ServerInfo{{Name: "a", Address: "10.0.0.1", Rack: "r1", GPUs: 8, CPUs: 64, MemGB: 1000}, {Name: "b", Address: "10.0.0.2", Rack: "r1", GPUs: 8, CPUs: 64, MemGB: 1000}},
		Tenants: []TenantInfo{{Name: "research", QuotaGPUs: 16}}})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// sharedDir is a directory every local user may enter (for a shared
// socket and the scripts other users run).
func sharedDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "replan-listen-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// asUser is a command run as the local user u (setpriv: the test runs as
// root, and the daemon knows callers by their uid).
func asUserCmd(t *testing.T, u string, args ...string) *exec.Cmd {
	t.Helper()
	if os.Getuid() != 0 {
		t.Fatalf("this test runs other users' clients through setpriv and needs root (uid %d)", os.Getuid())
	}
	pw, err := user.Lookup(u)
	if err != nil {
		t.Fatal(err)
	}
	return exec.Command("setpriv", append([]string{"--reuid=" + pw.Uid, "--regid=" + pw.Gid, "--clear-groups", "/usr/bin/python3"}, args...)...)
}

// slowReader opens n connections to a unix socket, asks each for
// /v1/queue and never reads, until a line arrives on stdin; then it reads
// what each got and prints a JSON summary.
const slowReader = `
import json, socket, sys
path, n = sys.argv[1], int(sys.argv[2])
socks = []
for i in range(n):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    s.sendall(b"GET /v1/queue HTTP/1.1\r\nHost: replan\r\n\r\n")
    socks.append(s)
print("sent", flush=True)
sys.stdin.readline()
res = {"closed": 0, "stuck": 0, "ok_full": 0, "ok_cut": 0, "busy": 0, "other": []}
for s in socks:
    s.settimeout(10)
    buf = b""
    try:
        while True:
            b = s.recv(1 << 20)
            if not b:
                break
            buf += b
        res["closed"] += 1
    except socket.timeout:
        res["stuck"] += 1
    except OSError:
        res["closed"] += 1
    head, _, body = buf.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = lines[0].split(" ")[1] if lines[0] else ""
    length = [int(l.split(":")[1]) for l in lines if l.lower().startswith("content-length:")]
    if status == "200" and length and len(body) >= length[0]:
        res["ok_full"] += 1
    elif status == "200":
        res["ok_cut"] += 1
    elif status == "503":
        res["busy"] += 1
    else:
        res["other"].append(lines[0] + " " + body[:200].decode("latin-1"))
print(json.dumps(res), flush=True)
`

// oneRequest asks a unix socket for path once and prints the status line.
const oneRequest = `
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.settimeout(30)
s.connect(sys.argv[1])
s.sendall(b"GET " + sys.argv[2].encode() + b" HTTP/1.1\r\nHost: replan\r\nConnection: close\r\n\r\n")
buf = b""
while True:
    b = s.recv(65536)
    if not b:
        break
    buf += b
print(buf.split(b"\r\n")[0].decode(), flush=True)
`

// Issue 24 item 6: 300 requests for a large /v1/queue that are never read
// held all 256 slots of the unix socket for ever (no write timeout): no one
// else got an answer. Now one user holds at most its share, an admin and
// another user are answered at once, and the stuck connections are closed
// by the write timeout (or refused 503 over the user's limit).
func TestSlowReadersDoNotLockOutAdminsOrOthers(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	d := queueDaemon(t, 600)
	dir := sharedDir(t)
	sock := filepath.Join(dir, "replan.sock")
	l, err := ListenUnixShared(sock)
	if err != nil {
		t.Fatal(err)
	}
	lim := DefaultLimits
	lim.WriteTimeout, lim.ClaimWait = 2*time.Second, time.Second
	lim.SendBuffer = 32 << 10 // the answer is many times the socket's buffer
	acc := &Access{DaemonUID: os.Getuid(), Tenants: []TenantAccess{{Name: "research", Users: []string{"nobody", "daemon"}}}}
	tr := serveForTest(ctx, l, (&API{D: d, Version: "test", Access: acc}).Handler(), lim)

	admin := NewUnixClient(sock)
	body, err := getBody(ctx, admin, "/v1/queue")
	if err != nil {
		t.Fatal(err)
	}
	if len(body) < 10*lim.SendBuffer {
		t.Fatalf("the queue is %d bytes: too small to fill a %d-byte socket buffer", len(body), lim.SendBuffer)
	}

	script := filepath.Join(dir, "slow.py")
	os.WriteFile(script, []byte(slowReader), 0o644)
	os.WriteFile(filepath.Join(dir, "one.py"), []byte(oneRequest), 0o644)
	slow := asUserCmd(t, "nobody", script, sock, "300")
	stdin, _ := slow.StdinPipe()
	stdout, _ := slow.StdoutPipe()
	slow.Stderr = os.Stderr
	if err := slow.Start(); err != nil {
		t.Fatal(err)
	}
	defer slow.Process.Kill()
	out := bufio.NewScanner(stdout)
	if !out.Scan() || out.Text() != "sent" {
		t.Fatalf("slow reader: %q %v", out.Text(), out.Err())
	}
	waitfor.T(t, ctx, "nobody's connections reach the server", waitfor.Options{Stall: 30 * time.Second}, func() error {
		if s := tr.stats(); s.Users["nobody"] < lim.MaxConnsPerUser {
			return fmt.Errorf("%+v", s)
		}
		return nil
	})

	// The admin (root: this test) and another user are answered while
	// nobody's connections are stuck, on new connections.
	admin = NewUnixClient(sock)
	actx, acancel := context.WithTimeout(ctx, 10*time.Second)
	defer acancel()
	a0 := time.Now()
	w, err := admin.WhoAmI(actx)
	if err != nil || w.Role != "admin" {
		t.Fatalf("the admin was not answered while a user's slow readers were stuck: %+v %v (%+v)", w, err, tr.stats())
	}
	if _, err := admin.Queue(actx); err != nil {
		t.Fatalf("the admin's queue: %v", err)
	}
	t.Logf("admin answered in %s with %+v", time.Since(a0), tr.stats())
	other, err := asUserCmd(t, "daemon", filepath.Join(dir, "one.py"), sock, "/v1/whoami").Output()
	if err != nil || !strings.Contains(string(other), " 200 ") {
		t.Fatalf("user daemon was not answered while nobody's slow readers were stuck: %q %v", other, err)
	}
	if s := tr.stats(); s.Users["nobody"] > lim.MaxConnsPerUser {
		t.Fatalf("nobody holds %d connections, over its share %d", s.Users["nobody"], lim.MaxConnsPerUser)
	}

	// The server closes every one of them: the write timeout for those
	// that got a slot, 503 for the others.
	waitfor.T(t, ctx, "the server closes nobody's connections", waitfor.Options{Stall: 30 * time.Second}, func() error {
		if s := tr.stats(); s.Users["nobody"] > 0 || s.Pending > 0 {
			return fmt.Errorf("%+v", s)
		}
		return nil
	})
	fmt.Fprintln(stdin)
	if !out.Scan() {
		t.Fatalf("slow reader: %v", out.Err())
	}
	var res struct {
		Closed, Stuck, OKFull, OKCut, Busy int
		Other                              []string
	}
	if err := json.Unmarshal([]byte(strings.NewReplacer("ok_full", "okfull", "ok_cut", "okcut").Replace(out.Text())), &res); err != nil {
		t.Fatalf("%s: %v", out.Text(), err)
	}
	t.Logf("slow reader saw %+v", res)
	if res.Closed != 300 || res.Stuck != 0 || res.OKFull != 0 || res.OKCut == 0 || res.OKCut+res.Busy != 300 || len(res.Other) > 0 {
		t.Fatalf("want all 300 closed by the server, those served cut off by the write timeout, the rest 503: %+v", res)
	}
}

// A stream that keeps being read is not cut by the write timeout, however
// long it lasts: each chunk gets a fresh deadline.
func TestWriteTimeoutSparesProgressingStreams(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sock := filepath.Join(t.TempDir(), "s.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	lim := DefaultLimits
	lim.WriteTimeout, lim.WriteChunk, lim.SendBuffer = 300*time.Millisecond, 4<<10, 4<<10
	const total = 4 << 20
	serveForTest(ctx, l, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write(make([]byte, total)) // one write, many times the deadline's worth
	}), lim)
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	// Read slowly: 64 KiB at a time with pauses, for well over the
	// write timeout in all.
	start := time.Now()
	n, buf := 0, make([]byte, 64<<10)
	for {
		k, err := io.ReadFull(resp.Body, buf)
		n += k
		if err != nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n != total {
		t.Fatalf("read %d of %d bytes in %s", n, total, time.Since(start))
	}
	if el := time.Since(start); el < 3*lim.WriteTimeout {
		t.Fatalf("the read took %s, not well over the write timeout %s: the test shows nothing", el, lim.WriteTimeout)
	}
}

// Issue 24 item 12: 400-2,000 idle TCP connections that never start a TLS
// handshake held every slot (the handshake ran in the connection's slot,
// under the 10 s header timeout), so token holders waited 10-20 s. Now
// handshakes have their own pool, the oldest idle one giving way, and an
// authenticated request is answered at once.
func TestTLSHandshakeFloodDoesNotStallTokenHolders(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir := t.TempDir()
	cert, _, err := LoadOrCreateCert(filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem"), []string{"head"})
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte("alice-token"))
	acc := &Access{DaemonUID: os.Getuid(), Tokens: map[string][sha256.Size]byte{"alice": sum}, Tenants: []TenantAccess{{Name: "research", Users: []string{"alice"}}}}
	d := queueDaemon(t, 1)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lim := DefaultLimits
	lim.HandshakeTimeout = time.Minute // the flood does not expire on its own during the test
	lim.MaxPending = 128
	tr := serveForTest(ctx, tls.NewListener(l, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}), (&API{D: d, Version: "test", Access: acc}).Handler(), lim)

	var flood []net.Conn
	defer func() {
		for _, c := range flood {
			c.Close()
		}
	}()
	for i := 0; i < 600; i++ {
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		flood = append(flood, c)
	}
	waitfor.T(t, ctx, "the server takes the flood", waitfor.Options{Stall: 30 * time.Second}, func() error {
		if s := tr.stats(); s.Pending+s.Evicted < len(flood) {
			return fmt.Errorf("%+v", s)
		}
		return nil
	})
	cl, err := NewTLSClient("https://"+l.Addr().String(), "alice-token", Fingerprint(cert.Certificate[0]))
	if err != nil {
		t.Fatal(err)
	}
	rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
	defer rcancel()
	a0 := time.Now()
	w, err := cl.WhoAmI(rctx)
	if err != nil || w.User != "alice" {
		t.Fatalf("alice was not answered within 5 s of %d idle connections: %+v %v (%+v)", len(flood), w, err, tr.stats())
	}
	s := tr.stats()
	t.Logf("alice answered in %s; %+v", time.Since(a0), s)
	if s.Pending > lim.MaxPending || s.Users["alice"] != 1 {
		t.Fatalf("pending %d over the pool of %d, or alice's connection not counted as hers: %+v", s.Pending, lim.MaxPending, s)
	}
}

// A user at its share whose connections are idle keep-alives (a client's
// pool) is not refused: the oldest idle one is closed to make room.
func TestUserAtShareReusesIdleConnections(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sock := filepath.Join(t.TempDir(), "s.sock")
	l, err := ListenUnix(sock)
	if err != nil {
		t.Fatal(err)
	}
	lim := DefaultLimits
	lim.MaxConnsPerUser, lim.ClaimWait = 2, time.Minute
	tr := serveForTest(ctx, l, (&API{D: queueDaemon(t, 1), Version: "test"}).Handler(), lim)
	var idle []net.Conn
	defer func() {
		for _, c := range idle {
			c.Close()
		}
	}()
	for i := 0; i < 2; i++ {
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		idle = append(idle, c)
		fmt.Fprintf(c, "GET /v1/whoami HTTP/1.1\r\nHost: x\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%v %v", resp, err)
		}
		io.Copy(io.Discard, resp.Body)
	}
	rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
	defer rcancel()
	if _, err := NewUnixClient(sock).WhoAmI(rctx); err != nil {
		t.Fatalf("a third connection of a user whose two are idle: %v (%+v)", err, tr.stats())
	}
	if s := tr.stats(); s.Claimed != 2 {
		t.Fatalf("want 2 connections claimed (an idle one closed for the new one): %+v", s)
	}
}

// Issue 24 item 6 over TLS: one token holder's 300 unread requests for
// /v1/queue made the API unusable for 26 minutes. The holder is known by
// its token: it gets its share, and the admin and another user are
// answered at once. (The write timeout itself is
// TestSlowReadersDoNotLockOutAdminsOrOthers': loopback TCP buffers
// would take 200 MB to fill here.)
func TestTokenHolderSlowReadersOverTLS(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir := t.TempDir()
	cert, _, err := LoadOrCreateCert(filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem"), []string{"head"})
	if err != nil {
		t.Fatal(err)
	}
	toks := map[string][sha256.Size]byte{"alice": sha256.Sum256([]byte("alice-token")), "bob": sha256.Sum256([]byte("bob-token"))}
	acc := &Access{DaemonUID: os.Getuid(), Tokens: toks, Tenants: []TenantAccess{{Name: "research", Users: []string{"alice", "bob"}}}}
	d := queueDaemon(t, 600)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lim := DefaultLimits
	lim.WriteTimeout, lim.ClaimWait = 2*time.Second, time.Second
	api := &API{D: d, Version: "test", Access: acc, Token: "admin-token"} // --token-file: the daemon's user, an admin
	tr := serveForTest(ctx, tls.NewListener(l, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}), api.Handler(), lim)
	base, fp := "https://"+l.Addr().String(), Fingerprint(cert.Certificate[0])

	// alice's 300 connections are opened at once (a dial waiting for a
	// slot must not delay the rest of the test).
	var (
		mu   sync.Mutex
		slow []*tls.Conn
		wg   sync.WaitGroup
	)
	defer func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range slow {
			c.Close()
		}
	}()
	for i := 0; i < 300; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Minute}, "tcp", l.Addr().String(), &tls.Config{InsecureSkipVerify: true})
			if err != nil {
				return
			}
			mu.Lock()
			slow = append(slow, c)
			mu.Unlock()
			fmt.Fprintf(c, "GET /v1/queue HTTP/1.1\r\nHost: head\r\nAuthorization: Bearer alice-token\r\n\r\n")
		}()
	}
	waitfor.T(t, ctx, "alice's connections reach the server", waitfor.Options{Stall: 30 * time.Second}, func() error {
		if s := tr.stats(); s.Users["alice"] < lim.MaxConnsPerUser {
			return fmt.Errorf("%+v", s)
		}
		return nil
	})
	for _, who := range []string{"admin-token", "bob-token"} {
		cl, err := NewTLSClient(base, who, fp)
		if err != nil {
			t.Fatal(err)
		}
		rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
		w, err := cl.WhoAmI(rctx)
		rcancel()
		if err != nil {
			t.Fatalf("%s was not answered while alice's slow readers were stuck: %v (%+v)", who, err, tr.stats())
		}
		t.Logf("%s answered as %s (%s)", who, w.User, w.Role)
	}
	wg.Wait()
	if len(slow) != 300 {
		t.Fatalf("only %d of alice's 300 connections were made", len(slow))
	}
	// Every one of alice's requests is served (over loopback TCP the
	// kernel buffers take the answer whole) or refused 503; she never
	// holds more than her share.
	waitfor.T(t, ctx, "alice's requests are all served or refused", waitfor.Options{Stall: 30 * time.Second}, func() error {
		if s := tr.stats(); s.Users["alice"] > lim.MaxConnsPerUser || s.Pending > 0 {
			return fmt.Errorf("%+v", s)
		}
		return nil
	})
}
