package control

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/replan/replan/internal/freeport"
)

// A client that names several members goes on to the next when one cannot
// be reached (nothing listens there), stays with the one that answered,
// and pins each member's own certificate. A member that answers with an
// error is not left; when none can be reached the error names them all.
// Before, only one member could be named: with its host down every
// command failed.
func TestClientGoesOnToAMemberItCanReach(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	cert, _, err := LoadOrCreateCert(filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem"), []string{"head-2"})
	if err != nil {
		t.Fatal(err)
	}
	other, _, err := LoadOrCreateCert(filepath.Join(dir, "o", "cert.pem"), filepath.Join(dir, "o", "key.pem"), []string{"head-1"})
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte("alice-token"))
	_, d, _ := startAdmitAPI(t)
	acc := &Access{DaemonUID: os.Getuid(), Tokens: map[string][sha256.Size]byte{"alice": sum}, Tenants: []TenantAccess{{Name: "research", Users: []string{"alice"}}}}
	_, addr := serveTLSAPI(t, d, acc, cert)
	live := "https://" + addr
	dead := "https://" + freeport.Addr(t, "127.0.0.1")  // nothing listens
	dead2 := "https://" + freeport.Addr(t, "127.0.0.1") // nor here
	pins := Fingerprint(other.Certificate[0]) + "," + Fingerprint(cert.Certificate[0])

	c, err := NewTLSClient(dead, "alice-token", pins)
	if err != nil {
		t.Fatal(err)
	}
	c.SetOthers([]string{live})
	w, err := c.WhoAmI(ctx)
	if err != nil || w.User != "alice" {
		t.Fatalf("first member down, second up: %+v %v", w, err)
	}
	if c.base() != live {
		t.Fatalf("the client is on %s after %s answered", c.base(), live)
	}
	// A job's logs (their own request path) go the same way.
	c2, _ := NewTLSClient(dead, "alice-token", pins)
	c2.SetOthers([]string{live})
	if rc, err := c2.Logs(ctx, "j-999999", 5, false); err == nil {
		rc.Close()
		t.Fatal("logs of a job that does not exist: no error")
	} else if !strings.Contains(err.Error(), "j-999999") && !strings.Contains(err.Error(), "not found") && !strings.Contains(err.Error(), "no job") {
		t.Fatalf("logs through the second member: %v", err)
	}
	if c2.base() != live {
		t.Fatalf("logs: the client is on %s", c2.base())
	}
	// An answer that is an error is the member's: no other is asked.
	c3, _ := NewTLSClient(live, "wrong-token", pins)
	c3.SetOthers([]string{dead})
	if _, err := c3.Status(ctx); err == nil || !strings.Contains(err.Error(), "wrong bearer token") || c3.base() != live {
		t.Fatalf("a refusal moved the client or was not reported: %v (on %s)", err, c3.base())
	}
	// A certificate that is none of the pins is refused, not skipped.
	c4, _ := NewTLSClient(live, "alice-token", Fingerprint(other.Certificate[0]))
	c4.SetOthers([]string{dead})
	if _, err := c4.Status(ctx); err == nil || !strings.Contains(err.Error(), "fingerprint") {
		t.Fatalf("a certificate not pinned: %v", err)
	}
	// None can be reached: the error names every member.
	c5, _ := NewTLSClient(dead, "alice-token", pins)
	c5.SetOthers([]string{dead2})
	_, err = c5.Status(ctx)
	if err == nil {
		t.Fatal("no member up: no error")
	}
	for _, m := range []string{strings.TrimPrefix(dead, "https://"), strings.TrimPrefix(dead2, "https://")} {
		if !strings.Contains(err.Error(), m) {
			t.Errorf("error %q does not name %s", err, m)
		}
	}
	t.Logf("none reachable: %v", err)
}

// A member whose host drops the connection's packets (no refusal) is left
// after the member dial bound, well within the request's timeout. The
// silent member is a listening socket with a backlog of 0 whose queue is
// filled: the kernel drops further SYNs, as for a host that is gone.
func TestClientLeavesAMemberThatDropsItsConnections(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out a member dial bound")
	}
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, _ := syscall.Getsockname(fd)
	silent := fmt.Sprintf("127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)
	// Fill its queue until a dial hangs.
	for i := 0; ; i++ {
		c, err := net.DialTimeout("tcp", silent, 500*time.Millisecond)
		if err != nil {
			break
		}
		defer c.Close()
		if i > 64 {
			t.Skip("the kernel keeps accepting connections into a backlog of 0")
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"user":"alice"}`)
	})}
	go srv.Serve(l)
	defer srv.Close()
	c := NewTCPClient("http://"+silent, "")
	c.Timeout = 5 * MemberDialTimeout // the request's own bound: never reached
	c.SetOthers([]string{"http://" + l.Addr().String()})
	w, err := c.WhoAmI(context.Background())
	if err != nil || w.User != "alice" {
		t.Fatalf("first member silent, second up: %+v %v", w, err)
	}
}
