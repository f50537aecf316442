package fleet

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"path"
	"strings"
	"sync"

	"github.com/replan/replan/agent"
	"github.com/replan/replan/cluster"
	"github.com/replan/replan/ssh"
)

// DefaultRemoteDir is the agent directory on a server when none is given.
const DefaultRemoteDir = "~/.replan"

// DefaultConcurrency bounds how many servers are worked on at once.
const DefaultConcurrency = 16

// Log attribute keys.
const (
	logServer = "server"
	logDir    = "dir"
	logPID    = "pid"
)

// Layout is where the agent lives on one server. Every path is absolute.
type Layout struct {
	Dir     string // the agent directory
	Bin     string // Dir/bin/replan-agent
	Socket  string // Dir/agent.sock
	State   string // Dir/agent
	Log     string // Dir/agent.log
	PIDFile string // Dir/agent.pid
}

// LayoutFor is the layout under an absolute directory.
func LayoutFor(dir string) Layout {
	dir = path.Clean(dir)
	return Layout{
		Dir:     dir,
		Bin:     path.Join(dir, "bin", "replan-agent"),
		Socket:  path.Join(dir, "agent.sock"),
		State:   path.Join(dir, "agent"),
		Log:     path.Join(dir, "agent.log"),
		PIDFile: path.Join(dir, "agent.pid"),
	}
}

// ExpandDir turns a remote directory template into a path: "{server}" is
// replaced by the server's name and a leading "~" by home (the remote
// user's $HOME). A relative result is taken relative to home, as sshd does.
func ExpandDir(tmpl, server, home string) string {
	d := strings.ReplaceAll(tmpl, "{server}", server)
	switch {
	case d == "~":
		d = home
	case strings.HasPrefix(d, "~/"):
		d = path.Join(home, d[2:])
	case !path.IsAbs(d):
		d = path.Join(home, d)
	}
	return path.Clean(d)
}

// needsHome reports whether expanding tmpl needs the remote $HOME.
func needsHome(tmpl string) bool { return !path.IsAbs(tmpl) }

// Options configure a Fleet.
type Options struct {
	// RemoteDir is the agent directory on every server; it may start with
	// "~" and contain "{server}". Default DefaultRemoteDir.
	RemoteDir string
	// Concurrency bounds how many servers are worked on at once; default
	// DefaultConcurrency.
	Concurrency int
	// Logger receives progress and failures; nil discards.
	Logger *slog.Logger
}

// Fleet operates on servers through one SSH pool.
type Fleet struct {
	pool  *ssh.Pool
	dir   string
	limit int
	log   *slog.Logger

	mu    sync.Mutex
	homes map[string]string // host name → remote $HOME
}

// New returns a Fleet using pool, which the caller keeps and closes.
func New(pool *ssh.Pool, opts Options) *Fleet {
	if opts.RemoteDir == "" {
		opts.RemoteDir = DefaultRemoteDir
	}
	if opts.Concurrency <= 0 {
		opts.Concurrency = DefaultConcurrency
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Fleet{pool: pool, dir: opts.RemoteDir, limit: opts.Concurrency, log: opts.Logger, homes: map[string]string{}}
}

// Pool is the fleet's SSH pool.
func (f *Fleet) Pool() *ssh.Pool { return f.pool }

// Layout resolves the agent's layout on server s, asking the server for
// $HOME when the directory is not absolute (once per server).
func (f *Fleet) Layout(ctx context.Context, s cluster.Server) (Layout, error) {
	home := ""
	if needsHome(f.dir) {
		var err error
		if home, err = f.home(ctx, ssh.HostFromServer(s)); err != nil {
			return Layout{}, err
		}
	}
	return LayoutFor(ExpandDir(f.dir, s.Name, home)), nil
}

func (f *Fleet) home(ctx context.Context, h ssh.Host) (string, error) {
	f.mu.Lock()
	home, ok := f.homes[h.Name]
	f.mu.Unlock()
	if ok {
		return home, nil
	}
	out, err := f.pool.Output(ctx, h, "sh", "-c", `printf '%s' "$HOME"`)
	if err != nil {
		return "", fmt.Errorf("remote $HOME: %w", err)
	}
	home = strings.TrimSpace(string(out))
	if !path.IsAbs(home) {
		return "", fmt.Errorf("remote $HOME is %q, not an absolute path", home)
	}
	f.mu.Lock()
	f.homes[h.Name] = home
	f.mu.Unlock()
	return home, nil
}

// Client is an agent API client for server s at the given layout; every
// request goes through the pool's SSH connection to the agent's socket.
func (f *Fleet) Client(s cluster.Server, l Layout) *agent.Client {
	h := ssh.HostFromServer(s)
	return agent.NewClient(func(ctx context.Context) (net.Conn, error) {
		return f.pool.DialUnix(ctx, h, l.Socket)
	})
}

// AgentClient resolves the layout of s and returns a client for its agent.
func (f *Fleet) AgentClient(ctx context.Context, s cluster.Server) (*agent.Client, error) {
	l, err := f.Layout(ctx, s)
	if err != nil {
		return nil, err
	}
	return f.Client(s, l), nil
}
