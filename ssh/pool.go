package ssh

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/melbahja/goph"
	xssh "golang.org/x/crypto/ssh"

	"github.com/replan/replan/cluster"
)

// Host is one server to reach.
type Host struct {
	Name         string // pool key and the name in messages; Addr when empty
	Addr         string // host:port
	User         string
	IdentityFile string // private key file; empty with SSHAgent
	SSHAgent     bool   // use the keys of $SSH_AUTH_SOCK
}

// HostFromServer is the Host for an inventory server.
func HostFromServer(s cluster.Server) Host {
	return Host{Name: s.Name, Addr: s.Addr(), User: s.User, IdentityFile: s.IdentityFile, SSHAgent: s.SSHAgent}
}

func (h Host) key() string {
	if h.Name != "" {
		return h.Name
	}
	return h.Addr
}

func (h Host) String() string { return h.key() }

// Config configures a Pool. Zero fields take the defaults noted.
type Config struct {
	// HostKeys verifies servers; required.
	HostKeys *HostKeys
	// ConnectTimeout bounds TCP connect plus SSH handshake; default 10s.
	ConnectTimeout time.Duration
	// Keepalive is the interval of keepalive@openssh.com requests; a
	// connection that misses a reply for two intervals is closed and
	// redialled on next use. Default 30s; negative disables.
	Keepalive time.Duration
	// MaxSessions caps concurrent sessions per server; default 8, under
	// sshd's default MaxSessions of 10 so that a cancellation's kill
	// session always finds room.
	MaxSessions int
	// DialAttempts is how many times one call dials before giving up;
	// attempts are spaced by exponential backoff from BackoffInitial up to
	// BackoffMax. Defaults 3, 200ms, 5s.
	DialAttempts   int
	BackoffInitial time.Duration
	BackoffMax     time.Duration
	// KillGrace is how long a cancelled command has between SIGTERM and
	// SIGKILL; default 2s.
	KillGrace time.Duration
	// JumpHost, when set, is dialled first and every server is reached
	// through it (like ssh -J).
	JumpHost *Host
	// Logger receives connection events; nil discards.
	Logger *slog.Logger
}

// FromInventory fills a Config from an inventory's ssh block: known_hosts
// (not accepting new keys), timeouts, session cap and jump host. The jump
// host ("[user@]host[:port]") authenticates like the defaults block (its
// user, identity file or agent).
func FromInventory(inv *cluster.Inventory, logger *slog.Logger) Config {
	o := inv.SSH
	cfg := Config{
		HostKeys:       NewHostKeys(o.KnownHosts, false, logger),
		ConnectTimeout: o.ConnectTimeout,
		Keepalive:      o.Keepalive,
		MaxSessions:    o.MaxSessions,
		Logger:         logger,
	}
	if o.JumpHost != "" {
		user, addr := inv.Defaults.User, o.JumpHost
		if i := strings.LastIndex(addr, "@"); i >= 0 {
			user, addr = addr[:i], addr[i+1:]
		}
		if _, _, err := net.SplitHostPort(addr); err != nil {
			addr = net.JoinHostPort(addr, "22")
		}
		cfg.JumpHost = &Host{Name: "jump:" + addr, Addr: addr, User: user,
			IdentityFile: inv.Defaults.IdentityFile, SSHAgent: inv.Defaults.SSHAgent || inv.Defaults.IdentityFile == ""}
	}
	return cfg
}

// Pool keeps one SSH connection per server and shares it between callers.
// Connections are dialled on first use, kept alive, and redialled with
// backoff when they die. Safe for concurrent use.
type Pool struct {
	cfg    Config
	log    *slog.Logger
	mu     sync.Mutex
	conns  map[string]*conn
	closed bool
}

// NewPool returns a pool; it dials nothing until first use.
func NewPool(cfg Config) (*Pool, error) {
	if cfg.HostKeys == nil {
		return nil, errors.New("ssh pool: Config.HostKeys is required")
	}
	if cfg.ConnectTimeout <= 0 {
		cfg.ConnectTimeout = 10 * time.Second
	}
	if cfg.Keepalive == 0 {
		cfg.Keepalive = 30 * time.Second
	}
	if cfg.MaxSessions <= 0 {
		cfg.MaxSessions = 8
	}
	if cfg.DialAttempts <= 0 {
		cfg.DialAttempts = 3
	}
	if cfg.BackoffInitial <= 0 {
		cfg.BackoffInitial = 200 * time.Millisecond
	}
	if cfg.BackoffMax <= 0 {
		cfg.BackoffMax = 5 * time.Second
	}
	if cfg.KillGrace <= 0 {
		cfg.KillGrace = 2 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Pool{cfg: cfg, log: cfg.Logger, conns: map[string]*conn{}}, nil
}

// conn is the pooled state of one server.
type conn struct {
	host Host
	sem  chan struct{} // session slots

	mu       sync.Mutex // held while dialling
	client   *xssh.Client
	dials    int       // successful dials
	failures int       // consecutive failed dials
	retryAt  time.Time // no dial before this after failures
}

// Stats are counters of one server's pooled connection.
type Stats struct {
	Dials     int  // successful dials so far (1 = never redialled)
	Connected bool // a live connection is held now
	Sessions  int  // sessions in use now
}

// Stats reports the pool's counters for h.
func (p *Pool) Stats(h Host) Stats {
	c := p.conn(h)
	if c == nil {
		return Stats{}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return Stats{Dials: c.dials, Connected: c.client != nil, Sessions: len(c.sem)}
}

func (p *Pool) conn(h Host) *conn {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	c, ok := p.conns[h.key()]
	if !ok {
		c = &conn{host: h, sem: make(chan struct{}, p.cfg.MaxSessions)}
		p.conns[h.key()] = c
	}
	return c
}

// ErrClosed is returned by a closed pool.
var ErrClosed = errors.New("ssh pool closed")

// Client returns the live connection to h, dialling (with backoff) if
// there is none. Callers must not Close it.
func (p *Pool) Client(ctx context.Context, h Host) (*xssh.Client, error) {
	c := p.conn(h)
	if c == nil {
		return nil, ErrClosed
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.client != nil {
		return c.client, nil
	}
	var err error
	for attempt := 0; attempt < p.cfg.DialAttempts; attempt++ {
		if wait := time.Until(c.retryAt); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil, fmt.Errorf("connect %s: %w (last error: %v)", h, ctx.Err(), err)
			case <-t.C:
			}
		}
		var client *xssh.Client
		client, err = p.dial(ctx, h)
		if err == nil {
			c.client = client
			c.dials++
			c.failures = 0
			c.retryAt = time.Time{}
			p.log.Debug("ssh connected", "host", h.key(), "addr", h.Addr, "dials", c.dials)
			go p.watch(c, client)
			return client, nil
		}
		c.failures++
		backoff := p.cfg.BackoffInitial << min(c.failures-1, 20)
		if backoff > p.cfg.BackoffMax || backoff <= 0 {
			backoff = p.cfg.BackoffMax
		}
		c.retryAt = time.Now().Add(backoff)
		p.log.Warn("ssh dial failed", "host", h.key(), "addr", h.Addr, "err", err, "retry_in", backoff)
		if !retryable(err) || ctx.Err() != nil {
			break
		}
	}
	return nil, fmt.Errorf("connect %s (%s): %w", h, h.Addr, err)
}

// retryable reports whether a dial error may go away by itself.
func retryable(err error) bool {
	if errors.Is(err, ErrUnknownHost) || errors.Is(err, ErrHostKeyMismatch) || errors.Is(err, context.Canceled) {
		return false
	}
	return !strings.Contains(err.Error(), "unable to authenticate")
}

// watch drops the pooled client when its connection ends and sends
// keepalives while it lives.
func (p *Pool) watch(c *conn, client *xssh.Client) {
	dead := make(chan struct{})
	go func() {
		client.Wait()
		close(dead)
	}()
	if p.cfg.Keepalive > 0 {
		go p.keepalive(c, client, dead)
	}
	<-dead
	c.mu.Lock()
	if c.client == client {
		c.client = nil
	}
	c.mu.Unlock()
	p.log.Debug("ssh connection closed", "host", c.host.key())
}

func (p *Pool) keepalive(c *conn, client *xssh.Client, dead <-chan struct{}) {
	t := time.NewTicker(p.cfg.Keepalive)
	defer t.Stop()
	for {
		select {
		case <-dead:
			return
		case <-t.C:
		}
		reply := make(chan error, 1)
		go func() {
			_, _, err := client.SendRequest("keepalive@openssh.com", true, nil)
			reply <- err
		}()
		timeout := time.NewTimer(2 * p.cfg.Keepalive)
		select {
		case err := <-reply:
			timeout.Stop()
			if err == nil {
				continue
			}
			p.log.Warn("ssh keepalive failed", "host", c.host.key(), "err", err)
		case <-timeout.C:
			p.log.Warn("ssh keepalive unanswered", "host", c.host.key(), "after", 2*p.cfg.Keepalive)
		case <-dead:
			timeout.Stop()
			return
		}
		client.Close()
		return
	}
}

// auth returns the authentication methods for h.
func auth(h Host) ([]xssh.AuthMethod, error) {
	var methods goph.Auth
	if h.SSHAgent {
		a, err := goph.UseAgent()
		if err != nil {
			return nil, fmt.Errorf("ssh agent: %w", err)
		}
		methods = append(methods, a...)
	}
	if h.IdentityFile != "" {
		a, err := goph.Key(h.IdentityFile, "")
		if err != nil {
			return nil, fmt.Errorf("identity file %s: %w", h.IdentityFile, err)
		}
		methods = append(methods, a...)
	}
	if len(methods) == 0 {
		return nil, fmt.Errorf("%s: no identity file and no ssh agent", h)
	}
	return methods, nil
}

// dial makes one connection attempt, through the jump host if configured.
func (p *Pool) dial(ctx context.Context, h Host) (*xssh.Client, error) {
	methods, err := auth(h)
	if err != nil {
		return nil, err
	}
	check, algos, err := p.cfg.HostKeys.clientConfig(h.Addr)
	if err != nil {
		return nil, err
	}
	cfg := &xssh.ClientConfig{
		User:              h.User,
		Auth:              methods,
		HostKeyCallback:   check,
		HostKeyAlgorithms: algos,
		Timeout:           p.cfg.ConnectTimeout,
	}
	var nc net.Conn
	if j := p.cfg.JumpHost; j != nil && j.key() != h.key() {
		jump, err := p.Client(ctx, *p.cfg.JumpHost)
		if err != nil {
			return nil, fmt.Errorf("via jump host: %w", err)
		}
		dctx, cancel := context.WithTimeout(ctx, p.cfg.ConnectTimeout)
		nc, err = jump.DialContext(dctx, "tcp", h.Addr)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("via jump host %s: %w", p.cfg.JumpHost, err)
		}
	} else {
		nc, err = dialTCP(ctx, h.Addr, p.cfg.ConnectTimeout)
		if err != nil {
			return nil, err
		}
	}
	// The handshake ends at the connection's deadline or when ctx ends.
	deadline := time.Now().Add(p.cfg.ConnectTimeout)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	_ = nc.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { nc.Close() })
	cc, chans, reqs, err := xssh.NewClientConn(nc, h.Addr, cfg)
	stopped := stop()
	if err != nil {
		nc.Close()
		if !stopped {
			return nil, ctx.Err()
		}
		return nil, err
	}
	if !stopped { // ctx ended just as the handshake finished
		cc.Close()
		return nil, ctx.Err()
	}
	_ = nc.SetDeadline(time.Time{})
	return xssh.NewClient(cc, chans, reqs), nil
}

// acquire takes one session slot of h's connection.
func (p *Pool) acquire(ctx context.Context, h Host) (*conn, error) {
	c := p.conn(h)
	if c == nil {
		return nil, ErrClosed
	}
	select {
	case c.sem <- struct{}{}:
		return c, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("wait for a session slot on %s: %w", h, ctx.Err())
	}
}

func (c *conn) release() { <-c.sem }

// session opens a session on h's pooled connection. If the pooled
// connection turns out dead it is dropped and redialled once.
func (p *Pool) session(ctx context.Context, h Host) (*xssh.Session, *xssh.Client, error) {
	for try := 0; ; try++ {
		client, err := p.Client(ctx, h)
		if err != nil {
			return nil, nil, err
		}
		s, err := client.NewSession()
		if err == nil {
			return s, client, nil
		}
		if try > 0 {
			return nil, nil, fmt.Errorf("open session on %s: %w", h, err)
		}
		p.log.Warn("ssh session failed, redialling", "host", h.key(), "err", err)
		p.drop(h, client)
	}
}

// drop closes client if it is still h's pooled connection.
func (p *Pool) drop(h Host, client *xssh.Client) {
	c := p.conn(h)
	if c == nil {
		return
	}
	c.mu.Lock()
	if c.client == client {
		c.client = nil
	}
	c.mu.Unlock()
	client.Close()
}

// DialUnix connects to a unix socket on h through the SSH connection
// (direct-streamlocal@openssh.com); sshd must allow stream-local
// forwarding. The returned net.Conn works as an http.Transport connection.
func (p *Pool) DialUnix(ctx context.Context, h Host, path string) (net.Conn, error) {
	for try := 0; ; try++ {
		client, err := p.Client(ctx, h)
		if err != nil {
			return nil, err
		}
		nc, err := client.DialContext(ctx, "unix", path)
		if err == nil {
			return nc, nil
		}
		var oc *xssh.OpenChannelError
		if try > 0 || errors.As(err, &oc) || ctx.Err() != nil {
			return nil, fmt.Errorf("dial unix %s on %s: %w", path, h, err)
		}
		p.drop(h, client)
	}
}

// HTTPClient returns an http.Client whose every request goes to the unix
// socket path on h through SSH, whatever the URL's host (use
// "http://agent/...").
func (p *Pool) HTTPClient(h Host, path string) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return p.DialUnix(ctx, h, path)
		},
		MaxIdleConns:    4,
		IdleConnTimeout: 90 * time.Second,
	}}
}

// Close closes every connection. Commands still running see their
// sessions end.
func (p *Pool) Close() error {
	p.mu.Lock()
	conns := p.conns
	p.conns = map[string]*conn{}
	p.closed = true
	p.mu.Unlock()
	for _, c := range conns {
		c.mu.Lock()
		if c.client != nil {
			c.client.Close()
			c.client = nil
		}
		c.mu.Unlock()
	}
	return nil
}
