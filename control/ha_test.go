package control

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/replan/replan/sched"
)

// A forwarded caller (HeaderForwardedUser) is believed only with the
// daemon's own token, which followers forward with: a user's own token
// with the header is still that user, and a wrong token is refused.
func TestForwardedIdentityNeedsDaemonToken(t *testing.T) {
	a := &API{Token: "daemon-token", Access: &Access{Tokens: map[string][sha256.Size]byte{"alice": sha256.Sum256([]byte("alice-token"))}}}
	h := a.Handler()
	who := func(tok, fwd string) (int, WhoAmI) {
		r := httptest.NewRequest("GET", "/v1/whoami", nil)
		r.Header.Set("Authorization", "Bearer "+tok)
		if fwd != "" {
			r.Header.Set(HeaderForwardedUser, fwd)
			r.Header.Set(HeaderForwardedUID, "0")
			r.Header.Set(HeaderForwardedVia, "unix")
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		var out WhoAmI
		json.Unmarshal(w.Body.Bytes(), &out)
		return w.Code, out
	}
	if code, w := who("alice-token", "root"); code != http.StatusOK || w.User != "alice" || w.UID != -1 {
		t.Errorf("alice's token claiming to forward root: %d, %+v; want alice", code, w)
	}
	if code, w := who("daemon-token", "bob"); code != http.StatusOK || w.User != "bob" || w.Via != "forwarded-unix" {
		t.Errorf("a follower forwarding bob: %d, %+v; want bob via forwarded-unix", code, w)
	}
	if code, _ := who("wrong", "root"); code != http.StatusUnauthorized {
		t.Errorf("a wrong token claiming to forward root: %d, want 401", code)
	}
}

// A single daemon's status: the leader, its only member, with the epoch
// its start took from the store (one more at each start), whatever its
// executor.
func TestSingleDaemonStatusRole(t *testing.T) {
	ctx := context.Background()
	db := filepath.Join(t.TempDir(), "r.db")
	for want := uint64(1); want <= 2; want++ {
		st, err := OpenSQLite(ctx, db)
		if err != nil {
			t.Fatal(err)
		}
		p, _ := sched.New("morphling")
		d, err := New(ctx, Config{Store: st, Exec: NewSimExecutor(time.Now, []string{"s1"}, nil, nil, time.Minute), Policy: p,
			Servers: []ServerInfo{{Name: "s1", GPUs: 8, CPUs: 64}}})
		if err != nil {
			t.Fatal(err)
		}
		a := &API{D: d, Self: "unix:///run/replan.sock"}
		w := httptest.NewRecorder()
		a.Handler().ServeHTTP(w, httptest.NewRequest("GET", "/v1/status", nil))
		var got map[string]any
		if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil {
			t.Fatal(err)
		}
		members, _ := got["members"].([]any)
		if got["role"] != "leader" || got["leader"] != "unix:///run/replan.sock" || len(members) != 1 || members[0] != "unix:///run/replan.sock" || got["epoch"] != float64(want) {
			t.Errorf("start %d: status %v; want role leader, leader and only member itself, epoch %d", want, w.Body.String(), want)
		}
		st.Close()
	}
}
