package control

import (
	"crypto/sha256"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
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
