package control

// The API's listeners: how many connections, whose, and for how long.
//
// A connection is "pending" from accept until a request on it has been
// identified (peer credentials on the unix socket, the bearer token on
// TLS): its TLS handshake and its first request happen there. Pending
// connections have their own pool (MaxPending; when it is full the oldest
// is closed to make room, so idle or half-open connections cannot keep new
// clients out) and never use the slots of identified ones. An identified
// connection belongs to its user: each user holds at most MaxConnsPerUser,
// users who are not admins hold at most MaxConns-AdminConns together, so
// admins always get a slot. A request over a limit waits up to ClaimWait
// for a slot (an idle keep-alive connection is closed to make one), then
// is answered 503. Every write has a deadline (WriteTimeout for each
// WriteChunk): a client that stops reading loses its connection, while
// streams (`logs -f`, long-polled events) last as long as they progress.

import (
	"container/list"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"
)

// Limits of every API listener (DefaultLimits).
const (
	ReadHeaderTimeout = 10 * time.Second
	ReadTimeout       = 30 * time.Second
	IdleTimeout       = 2 * time.Minute
	// WriteTimeout bounds each write of WriteChunk bytes (the deadline
	// moves on as the client reads).
	WriteTimeout = 30 * time.Second
	WriteChunk   = 256 << 10
	// HandshakeTimeout bounds a TLS handshake.
	HandshakeTimeout = 5 * time.Second
	// MaxConns is the most identified connections open at once;
	// AdminConns of them only admins may use; MaxConnsPerUser is one
	// user's share.
	MaxConns        = 256
	AdminConns      = 32
	MaxConnsPerUser = 32
	// MaxPending is the most connections not yet identified (in their
	// TLS handshake, or before their first request).
	MaxPending = 512
	// ClaimWait is how long a request over a limit waits for a slot.
	ClaimWait = 10 * time.Second
	// UnixSendBuffer is the send buffer asked for on each Unix socket
	// connection (SO_SNDBUF).
	UnixSendBuffer = 4 << 20
)

// Limits are one listener's timeouts and connection limits.
type Limits struct {
	ReadHeaderTimeout, ReadTimeout, IdleTimeout time.Duration
	WriteTimeout                                time.Duration
	WriteChunk                                  int
	HandshakeTimeout                            time.Duration
	MaxConns, AdminConns, MaxConnsPerUser       int
	MaxPending                                  int
	ClaimWait                                   time.Duration
	// SendBuffer is SO_SNDBUF asked for on each unix socket connection
	// (0: the kernel's default).
	SendBuffer int
}

// DefaultLimits are Serve's.
var DefaultLimits = Limits{
	ReadHeaderTimeout: ReadHeaderTimeout, ReadTimeout: ReadTimeout, IdleTimeout: IdleTimeout,
	WriteTimeout: WriteTimeout, WriteChunk: WriteChunk, HandshakeTimeout: HandshakeTimeout,
	MaxConns: MaxConns, AdminConns: AdminConns, MaxConnsPerUser: MaxConnsPerUser,
	MaxPending: MaxPending, ClaimWait: ClaimWait, SendBuffer: UnixSendBuffer,
}

// Serve serves h on l until ctx ends, with DefaultLimits.
func Serve(ctx context.Context, l net.Listener, h http.Handler) error {
	return ServeLimits(ctx, l, h, DefaultLimits)
}

// ServeLimits serves h on l until ctx ends, with lim. A TLS listener
// (tls.NewListener) has its handshakes done here, each under
// lim.HandshakeTimeout, before the HTTP server sees the connection.
func ServeLimits(ctx context.Context, l net.Listener, h http.Handler, lim Limits) error {
	return serveTracked(ctx, newTrackedListener(l, lim), h)
}

func serveTracked(ctx context.Context, tl *trackedListener, h http.Handler) error {
	lim := tl.t.lim
	srv := &http.Server{Handler: h, ReadHeaderTimeout: lim.ReadHeaderTimeout, ReadTimeout: lim.ReadTimeout, IdleTimeout: lim.IdleTimeout,
		MaxHeaderBytes: 64 << 10,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(connContext(ctx, c), trackedKey{}, c)
		},
		ConnState: func(c net.Conn, s http.ConnState) {
			if lc, ok := c.(*limitedConn); ok {
				tl.t.setIdle(lc, s == http.StateIdle)
			}
		}}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
		tl.Close()
	}()
	defer tl.Close()
	if err := srv.Serve(tl); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

type trackedKey struct{}

// ConnLimitError is a request refused because its user, or the users who
// are not admins, hold all the connections they may.
type ConnLimitError struct {
	User  string
	Msg   string
	Waits time.Duration
}

func (e *ConnLimitError) Error() string {
	return fmt.Sprintf("too many connections: %s (waited %s for one to close)", e.Msg, e.Waits)
}

// claimConn makes the connection of the request ctx belongs to one of
// user's (admin: an admin's), waiting for a slot when the user or the
// non-admins are at their limit. It is a no-op for a connection already
// claimed and outside ServeLimits.
func claimConn(ctx context.Context, user string, admin bool) error {
	c, _ := ctx.Value(trackedKey{}).(*limitedConn)
	if c == nil {
		return nil
	}
	return c.t.claim(ctx, c, user, admin)
}

// tracker counts one listener's connections.
type tracker struct {
	lim     Limits
	mu      sync.Mutex
	pending list.List // of *limitedConn, oldest first
	claimed map[*limitedConn]struct{}
	users   map[string]int
	admins  int // claimed by admins
	changed chan struct{}
	// evicted counts pending connections closed to make room (tests).
	evicted int
}

// trackerStats is a tracker's counts (tests).
type trackerStats struct {
	Pending, Claimed, Evicted int
	Users                     map[string]int
}

func (t *tracker) stats() trackerStats {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := trackerStats{Pending: t.pending.Len(), Claimed: len(t.claimed), Evicted: t.evicted, Users: map[string]int{}}
	for u, n := range t.users {
		s.Users[u] = n
	}
	return s
}

func (t *tracker) broadcast() {
	close(t.changed)
	t.changed = make(chan struct{})
}

// add registers a new connection as pending; when the pool is full it
// returns the oldest pending one for the caller to close.
func (t *tracker) add(c *limitedConn) (evict *limitedConn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.pending.Len() >= t.lim.MaxPending {
		e := t.pending.Front()
		evict = e.Value.(*limitedConn)
		t.pending.Remove(e)
		evict.elem = nil
		t.evicted++
	}
	c.elem = t.pending.PushBack(c)
	return evict
}

func (t *tracker) release(c *limitedConn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if c.elem != nil {
		t.pending.Remove(c.elem)
		c.elem = nil
	}
	if _, ok := t.claimed[c]; ok {
		delete(t.claimed, c)
		if t.users[c.user]--; t.users[c.user] == 0 {
			delete(t.users, c.user)
		}
		if c.admin {
			t.admins--
		}
	}
	c.closed = true
	t.broadcast()
}

func (t *tracker) setIdle(c *limitedConn, idle bool) {
	t.mu.Lock()
	c.idle = idle
	t.mu.Unlock()
}

// fits says why user may not have one more connection ("": it may).
func (t *tracker) fits(user string, admin bool) string {
	switch {
	case t.users[user] >= t.lim.MaxConnsPerUser:
		return fmt.Sprintf("user %s has %d connections open, the most one user may", user, t.users[user])
	case len(t.claimed) >= t.lim.MaxConns:
		return fmt.Sprintf("%d connections are open, the most the daemon keeps", len(t.claimed))
	case !admin && len(t.claimed)-t.admins >= t.lim.MaxConns-t.lim.AdminConns:
		return fmt.Sprintf("users who are not admins hold %d connections, the most they may (%d more are kept for admins)", len(t.claimed)-t.admins, t.lim.AdminConns)
	}
	return ""
}

// idleVictim is an idle claimed connection whose closing makes room for
// user: one of user's own when user is at its limit, else any.
func (t *tracker) idleVictim(user string) *limitedConn {
	own := t.users[user] >= t.lim.MaxConnsPerUser
	for c := range t.claimed {
		if c.idle && (!own || c.user == user) {
			return c
		}
	}
	return nil
}

func (t *tracker) claim(ctx context.Context, c *limitedConn, user string, admin bool) error {
	start := time.Now()
	timer := time.NewTimer(t.lim.ClaimWait)
	defer timer.Stop()
	for {
		t.mu.Lock()
		if _, ok := t.claimed[c]; ok || c.closed {
			t.mu.Unlock()
			return nil
		}
		why := t.fits(user, admin)
		if why == "" {
			if c.elem != nil {
				t.pending.Remove(c.elem)
				c.elem = nil
			}
			t.claimed[c] = struct{}{}
			t.users[user]++
			c.user, c.admin = user, admin
			if admin {
				t.admins++
			}
			t.mu.Unlock()
			return nil
		}
		victim := t.idleVictim(user)
		if victim != nil {
			victim.idle = false // closed once
		}
		ch := t.changed
		t.mu.Unlock()
		if victim != nil {
			victim.Close()
			continue
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		case <-timer.C:
			return &ConnLimitError{User: user, Msg: why, Waits: time.Since(start).Round(time.Millisecond)}
		}
	}
}

// trackedListener accepts every connection at once (never leaving one in
// the kernel's backlog behind a slow one), registers it as pending, does
// TLS handshakes concurrently, and hands ready connections to Accept.
type trackedListener struct {
	net.Listener
	t         *tracker
	ready     chan acceptResult
	done      chan struct{}
	closeOnce sync.Once
}

type acceptResult struct {
	c   net.Conn
	err error
}

func newTrackedListener(l net.Listener, lim Limits) *trackedListener {
	tl := &trackedListener{Listener: l, ready: make(chan acceptResult), done: make(chan struct{}),
		t: &tracker{lim: lim, claimed: map[*limitedConn]struct{}{}, users: map[string]int{}, changed: make(chan struct{})}}
	go tl.loop()
	return tl
}

func (l *trackedListener) deliver(r acceptResult) bool {
	select {
	case l.ready <- r:
		return true
	case <-l.done:
		if r.c != nil {
			r.c.Close()
		}
		return false
	}
}

func (l *trackedListener) loop() {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			if !l.deliver(acceptResult{err: err}) || errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		if uc, ok := c.(*net.UnixConn); ok && l.t.lim.SendBuffer > 0 {
			// A large answer (the queue of 5,000 jobs is 6.5 MB) goes out
			// in a few writes instead of one per default buffer (208 KB),
			// each waiting for the client to be scheduled and drain it.
			// The kernel caps it at net.core.wmem_max; best effort.
			uc.SetWriteBuffer(l.t.lim.SendBuffer)
		}
		lc := &limitedConn{Conn: c, t: l.t}
		if old := l.t.add(lc); old != nil {
			go old.Close() // a TLS close may wait for a blocked write
		}
		tc, ok := c.(*tls.Conn)
		if !ok {
			if !l.deliver(acceptResult{c: lc}) {
				return
			}
			continue
		}
		go func() {
			tc.SetDeadline(time.Now().Add(l.t.lim.HandshakeTimeout))
			err := tc.Handshake()
			tc.SetDeadline(time.Time{})
			if err != nil {
				lc.Close()
				return
			}
			l.deliver(acceptResult{c: lc})
		}()
	}
}

func (l *trackedListener) Accept() (net.Conn, error) {
	select {
	case r := <-l.ready:
		return r.c, r.err
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *trackedListener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// limitedConn is one connection of a trackedListener.
type limitedConn struct {
	net.Conn
	t    *tracker
	once sync.Once
	// Guarded by t.mu:
	elem   *list.Element // in t.pending while pending
	user   string
	admin  bool
	idle   bool
	closed bool
}

// Write writes p in chunks of WriteChunk, each with a fresh deadline of
// WriteTimeout: a client that stops reading is dropped, a slow one that
// keeps reading is not.
func (c *limitedConn) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		k := min(len(p), c.t.lim.WriteChunk)
		c.Conn.SetWriteDeadline(time.Now().Add(c.t.lim.WriteTimeout))
		m, err := c.Conn.Write(p[:k])
		n += m
		if err != nil {
			return n, err
		}
		p = p[k:]
	}
	return n, nil
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.t.release(c) })
	return err
}
