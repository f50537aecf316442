package cli

import (
	"bufio"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// Issue 24 item 11: `--server http://…` with a token sent the token in
// cleartext. Now the CLI refuses before connecting, and says to use
// https://. The listener here answers nothing and records what it got.
func TestServerHTTPWithTokenRefused(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var got []string
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			req, err := http.ReadRequest(bufio.NewReader(c))
			mu.Lock()
			if err == nil {
				got = append(got, req.Header.Get("Authorization"))
			} else {
				got = append(got, "unreadable: "+err.Error())
			}
			mu.Unlock()
			c.Close() // no answer: the client fails either way
		}
	}()
	tok := filepath.Join(t.TempDir(), "token")
	os.WriteFile(tok, []byte("s3cret\n"), 0o600)
	out, err := runCLI(t, "whoami", "--server", "http://"+l.Addr().String(), "--token-file", tok)
	if err == nil || !strings.Contains(err.Error(), "cleartext") || !strings.Contains(err.Error(), "https://"+l.Addr().String()) {
		t.Errorf("--server http:// with a token: %v\n%s", err, out)
	}
	l.Close()
	<-done
	mu.Lock()
	defer mu.Unlock()
	if len(got) > 0 {
		t.Fatalf("the CLI connected over plain HTTP with a token and sent %q", got)
	}
}

// Issue 24 item 13: with the daemon stopped (its socket listened on,
// nobody accepting), a command waited for ever. Now it fails after
// --daemon-timeout and names the socket and the cause.
func TestCommandsTimeOutOnAStoppedDaemon(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "replan.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for _, args := range [][]string{{"queue"}, {"logs", "j-000001", "-f"}} {
		out, err := runCLI(t, append(args, "--socket", sock, "--daemon-timeout", "1s")...)
		if err == nil || !strings.Contains(err.Error(), "the daemon at "+sock+" did not answer within 1s") || !strings.Contains(err.Error(), "replan daemon") {
			t.Errorf("%v with the daemon stopped: %v\n%s", args, err, out)
		}
	}
}
