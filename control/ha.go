package control

// Followers and the status of a highly available control plane (issue 27;
// docs/ha.md, "Leader election and failover").
//
// Only the leader runs a Daemon (rounds, observation, executors). A
// follower serves the same API by forwarding every request to the leader
// it finds in the election (Member.Addr, its TLS certificate checked
// against Member.Fingerprint). The follower first identifies the caller as
// the leader would (its own socket's peer credentials, or a bearer token);
// it then speaks for the caller with the members' shared daemon token
// (--token-file) and the caller's identity in HeaderForwardedUser and
// HeaderForwardedUID. The leader accepts those headers only with that
// token, which already speaks for the daemon's own user (an admin).
//
// With a view of the store (a store on etcd: followview.go) a follower
// answers the reads of stored records itself.
//
// A follower answers GET /v1/status itself when no leader answers, with
// its role, the members and an empty leader. Anything else without a
// leader is 503 with HeaderNoLeader: clients retry it (a submit with the
// same Idempotency-Key, so it creates its job once).

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"sync"
	"time"
)

// HeaderForwardedUser and HeaderForwardedUID carry, on a request a
// follower forwards, the caller it identified; HeaderForwardedVia how
// ("unix" or "token").
const (
	HeaderForwardedUser = "X-Replan-Forwarded-User"
	HeaderForwardedUID  = "X-Replan-Forwarded-Uid"
	HeaderForwardedVia  = "X-Replan-Forwarded-Via"
	// HeaderForwardedBy names the follower that forwarded a request (its
	// address); a response carries HeaderLeader, the leader's.
	HeaderForwardedBy = "X-Replan-Forwarded-By"
	HeaderLeader      = "X-Replan-Leader"
	// HeaderNoLeader marks a 503 answered because no leader could be
	// reached: the request changed nothing and may be retried.
	HeaderNoLeader = "X-Replan-No-Leader"
)

// HAReporter tells Status the role of this daemon, the leader, the members
// and the leader's epoch.
type HAReporter interface {
	HAView(ctx context.Context) HAView
}

// HAView is a daemon's view of the control plane.
type HAView struct {
	Role    string // "leader" or "follower"
	Leader  Member // zero: none known
	Members []Member
	// Why is set when the view is incomplete (etcd unreachable).
	Why string
}

// HAView implements HAReporter: the members as etcd lists them.
func (e *Election) HAView(ctx context.Context) HAView {
	v := HAView{Role: "follower"}
	if e.Leading() != nil {
		v.Role = "leader"
	}
	ctx, cancel := context.WithTimeout(ctx, e.cfg.TTL)
	defer cancel()
	ms, err := e.Members(ctx)
	if err != nil {
		v.Why = fmt.Sprintf("etcd does not answer (%v): without a majority of its members no daemon can lead, and none schedules", err)
		if v.Role == "leader" {
			v.Leader = e.cfg.Self
			v.Members = []Member{e.cfg.Self}
		}
		return v
	}
	v.Members = ms
	if len(ms) > 0 {
		v.Leader = ms[0]
	}
	return v
}

// fillRole sets st's role, leader, members and epoch.
func (a *API) fillRole(ctx context.Context, st *Status) {
	if a.HA == nil {
		st.Role, st.Leader, st.Members = "leader", a.Self, []string{a.Self}
		if a.D != nil {
			st.Epoch = a.D.Epoch()
		}
		return
	}
	v := a.HA.HAView(ctx)
	st.Role, st.Leader, st.Members, st.Election = v.Role, v.Leader.Addr, []string{}, v.Why
	st.Epoch = uint64(max(v.Leader.Rev, 0))
	for _, m := range v.Members {
		st.Members = append(st.Members, m.Addr)
	}
}

// forwardedIdentity is the caller a follower forwarded a request for, when
// the request carries the daemon's own token (a.Token) and the headers.
func (a *API) forwardedIdentity(r *http.Request, tok string) (Identity, bool) {
	u := r.Header.Get(HeaderForwardedUser)
	if u == "" || a.Token == "" || tok != a.Token {
		return Identity{}, false
	}
	uid, err := strconv.Atoi(r.Header.Get(HeaderForwardedUID))
	if err != nil {
		uid = -1
	}
	return Identity{User: u, UID: uid, Via: "forwarded-" + r.Header.Get(HeaderForwardedVia)}, true
}

// Follower serves the API of a daemon that does not lead: every request
// goes to the leader.
type Follower struct {
	// API identifies callers (its Access and Token; its D is nil).
	API *API
	El  *Election
	// Token is the members' shared daemon token (--token-file).
	Token string
	// Version is this binary's, for a status answered without a leader.
	Version string
	// View, when set (a store on etcd), answers the reads of stored
	// records (GET /v1/jobs, /v1/jobs/{id}, /v1/events): followview.go.
	View *FollowView

	red redactor // the view's lists: env keys only

	mu    sync.Mutex
	proxy map[string]*httputil.ReverseProxy // per leader address+fingerprint
}

// Handler is the follower's API.
func (f *Follower) Handler() http.Handler {
	if f.API.HA == nil {
		f.API.HA = f.El
	}
	var h http.Handler = http.HandlerFunc(f.serve)
	if f.View != nil {
		mux := http.NewServeMux()
		mux.HandleFunc("GET /v1/jobs", f.viewJobs) // followview.go
		mux.HandleFunc("GET /v1/jobs/{id}", f.viewJob)
		mux.HandleFunc("GET /v1/events", f.viewEvents)
		mux.Handle("/", h)
		h = mux
	}
	return f.API.authorize(h)
}

// serve forwards r to the leader.
func (f *Follower) serve(w http.ResponseWriter, r *http.Request) {
	leader, err := f.leader(r.Context())
	if err != nil {
		f.noLeader(w, r, err)
		return
	}
	f.forwardTo(w, r, leader)
}

// leader is the leader to forward to (ErrNoLeader: none).
func (f *Follower) leader(ctx context.Context) (Member, error) {
	ctx, cancel := context.WithTimeout(ctx, max(f.El.cfg.TTL/2, time.Second))
	leader, err := f.El.Leader(ctx)
	cancel()
	if err == nil && leader.Addr == f.El.cfg.Self.Addr {
		err = fmt.Errorf("%w: this daemon was just elected and is taking over", ErrNoLeader)
	}
	return leader, err
}

func (f *Follower) forwardTo(w http.ResponseWriter, r *http.Request, leader Member) {
	p := f.proxyTo(leader)
	id := callerOf(r.Context())
	out := r.Clone(r.Context())
	out.Header.Del(HeaderForwardedUser)
	out.Header.Del(HeaderForwardedUID)
	out.Header.Del(HeaderForwardedVia)
	out.Header.Set("Authorization", "Bearer "+f.Token)
	out.Header.Set(HeaderForwardedUser, id.User)
	out.Header.Set(HeaderForwardedUID, strconv.Itoa(id.UID))
	out.Header.Set(HeaderForwardedVia, id.Via)
	out.Header.Set(HeaderForwardedBy, f.El.cfg.Self.Addr)
	if r.Method == http.MethodGet && r.URL.Path == "/v1/status" {
		f.status(w, out, p, leader)
		return
	}
	w.Header().Set(HeaderLeader, leader.Addr)
	if f.View != nil && r.Method != http.MethodGet && r.Method != http.MethodHead {
		f.forwardWrite(w, out, p) // followview.go: reads after it see it
		return
	}
	p.ServeHTTP(w, out)
}

// status forwards GET /v1/status and answers it as a follower: the
// leader's figures, this daemon's role.
func (f *Follower) status(w http.ResponseWriter, r *http.Request, p *httputil.ReverseProxy, leader Member) {
	rec := &bufferedResponse{header: http.Header{}}
	p.ServeHTTP(rec, r)
	var st Status
	if rec.code != http.StatusOK || json.Unmarshal(rec.body, &st) != nil {
		f.noLeader(w, r, fmt.Errorf("%w: the leader %s answered %d", ErrNoLeader, leader.Addr, rec.code))
		return
	}
	f.API.fillRole(r.Context(), &st)
	w.Header().Set(HeaderLeader, leader.Addr)
	writeJSON(w, http.StatusOK, st)
}

// noLeader answers a request no leader could take: GET /v1/status with
// what this follower knows, anything else 503 (retry).
func (f *Follower) noLeader(w http.ResponseWriter, r *http.Request, why error) {
	if r.Method == http.MethodGet && r.URL.Path == "/v1/status" {
		// What this follower knows without asking etcd again (it may be
		// what does not answer): no leader, and why.
		st := Status{Version: f.Version, Now: time.Now().UTC(), Role: "follower", Members: []string{}, Election: why.Error()}
		writeJSON(w, http.StatusOK, st)
		return
	}
	w.Header().Set(HeaderNoLeader, "1")
	w.Header().Set("Retry-After", "1")
	writeErr(w, http.StatusServiceUnavailable, fmt.Errorf("this daemon (%s) is a follower and cannot reach a leader: %v; retry (a new leader is elected within the election's TTL while a majority of etcd members is up)", f.El.cfg.Self.Addr, why))
}

// proxyTo is the reverse proxy to leader, its certificate pinned to the
// fingerprint it campaigns with.
func (f *Follower) proxyTo(leader Member) *httputil.ReverseProxy {
	key := leader.Addr + " " + leader.Fingerprint
	f.mu.Lock()
	defer f.mu.Unlock()
	if p, ok := f.proxy[key]; ok {
		return p
	}
	target, err := url.Parse(leader.Addr)
	if err != nil || target.Host == "" {
		target = &url.URL{Scheme: "https", Host: leader.Addr}
	}
	tr := &http.Transport{ResponseHeaderTimeout: 0, IdleConnTimeout: 90 * time.Second}
	if target.Scheme == "https" {
		tr.TLSClientConfig = pinnedTLS(leader.Fingerprint)
	}
	p := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Host = target.Host
		},
		Transport:     tr,
		FlushInterval: -1, // long polls and followed logs stream
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			f.mu.Lock()
			delete(f.proxy, key)
			f.mu.Unlock()
			var op *net.OpError
			if errors.As(err, &op) && op.Op == "dial" {
				// The request never reached the leader: nothing changed.
				f.noLeader(w, r, fmt.Errorf("%w: the leader %s: %v", ErrNoLeader, leader.Addr, err))
				return
			}
			w.Header().Set("Retry-After", "1")
			writeErr(w, http.StatusBadGateway, fmt.Errorf("this daemon (%s) forwarded the request to the leader %s, which did not answer (%v): it may or may not have been carried out", f.El.cfg.Self.Addr, leader.Addr, err))
		},
	}
	if f.proxy == nil {
		f.proxy = map[string]*httputil.ReverseProxy{}
	}
	f.proxy[key] = p
	return p
}

// pinnedTLS accepts exactly the certificate with fingerprint fp (SHA-256,
// as Fingerprint writes it); with none, the system's CAs.
func pinnedTLS(fp string) *tls.Config {
	if fp == "" {
		return &tls.Config{MinVersion: tls.VersionTLS12}
	}
	want := normFingerprint(fp)
	return &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: true,
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			if len(raw) == 0 {
				return errors.New("the leader sent no certificate")
			}
			sum := sha256.Sum256(raw[0])
			if got := hex.EncodeToString(sum[:]); got != want {
				return fmt.Errorf("the leader's certificate has fingerprint %s, the election says %s", got, want)
			}
			return nil
		}}
}

// bufferedResponse is an http.ResponseWriter that keeps the answer.
type bufferedResponse struct {
	header http.Header
	code   int
	body   []byte
}

func (b *bufferedResponse) Header() http.Header { return b.header }
func (b *bufferedResponse) WriteHeader(code int) {
	if b.code == 0 {
		b.code = code
	}
}
func (b *bufferedResponse) Write(p []byte) (int, error) {
	if b.code == 0 {
		b.code = http.StatusOK
	}
	b.body = append(b.body, p...)
	return len(p), nil
}

// IsNoLeader reports whether err is a follower's 503 for want of a leader
// (the request changed nothing: retry it).
func IsNoLeader(err error) bool {
	var re *RemoteError
	return errors.As(err, &re) && re.Status == http.StatusServiceUnavailable && re.noLeader
}

var _ io.Writer = (*bufferedResponse)(nil)
