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
	if ReadHeaderTimeout > 10*time.Second || ReadTimeout == 0 || IdleTimeout == 0 || MaxConns == 0 {
		t.Fatalf("limits %v %v %v %d", ReadHeaderTimeout, ReadTimeout, IdleTimeout, MaxConns)
	}
	sock := filepath.Join(t.TempDir(), "s.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	lim := limitListener(l, 2)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) }), ReadHeaderTimeout: 300 * time.Millisecond}
	go srv.Serve(lim)
	go func() { <-ctx.Done(); srv.Close() }()
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

func TestLimitListenerCaps(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "s.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	lim := limitListener(l, 1)
	defer lim.Close()
	a, _ := net.Dial("unix", sock)
	defer a.Close()
	first, err := lim.Accept()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := net.Dial("unix", sock)
	defer b.Close()
	got := make(chan net.Conn, 1)
	go func() {
		c, err := lim.Accept()
		if err == nil {
			got <- c
		}
	}()
	select {
	case <-got:
		t.Fatal("a second connection was accepted over the cap of 1")
	case <-time.After(200 * time.Millisecond):
	}
	first.Close()
	select {
	case c := <-got:
		c.Close()
	case <-time.After(5 * time.Second):
		t.Fatal("the slot was not released by Close")
	}
}
