package control

import (
	"context"
	"net"
	"net/http"
	"path/filepath"
	"testing"
	"time"
)

// Issue 12: slow or idle unauthenticated clients could hold connections
// for ever. The server now drops a client that never finishes its request
// headers, and caps open connections.
func TestServeDropsSlowClientsAndCapsConnections(t *testing.T) {
	if ReadHeaderTimeout > 10*time.Second || ReadTimeout == 0 || IdleTimeout == 0 || MaxConns == 0 || WriteTimeout == 0 || HandshakeTimeout == 0 ||
		MaxConnsPerUser >= MaxConns-AdminConns || AdminConns < MaxConnsPerUser || MaxPending == 0 {
		t.Fatalf("limits %+v: want every timeout set, and one user's share below what non-admins may hold, admins keeping at least a share", DefaultLimits)
	}
	sock := filepath.Join(t.TempDir(), "s.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	lim := DefaultLimits
	lim.ReadHeaderTimeout = 300 * time.Millisecond
	lim.MaxPending = 2
	serveForTest(ctx, l, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) }), lim)
	// Two silent clients hold both slots...
	var silent []net.Conn
	for i := 0; i < 2; i++ {
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		silent = append(silent, c)
	}
	// ...until the header timeout drops them: the server closes them.
	for _, c := range silent {
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		buf := make([]byte, 512)
		for {
			if _, err := c.Read(buf); err != nil {
				if ne, ok := err.(net.Error); ok && ne.Timeout() {
					t.Fatal("a client that sent nothing was kept for 5 s")
				}
				break
			}
		}
	}
	// And a real client gets through afterwards.
	cl := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return net.Dial("unix", sock)
	}}, Timeout: 5 * time.Second}
	resp, err := cl.Get("http://x/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
}
