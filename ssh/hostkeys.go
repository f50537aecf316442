package ssh

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/skeema/knownhosts"
	xssh "golang.org/x/crypto/ssh"
	xknownhosts "golang.org/x/crypto/ssh/knownhosts"
)

// ErrUnknownHost means the server's host key is not in known_hosts and
// accepting new keys was not asked for. Run `replan trust SERVER`.
var ErrUnknownHost = errors.New("unknown host key")

// ErrHostKeyMismatch means known_hosts holds a different key for the
// server: a reinstalled server or a man in the middle. It is always refused;
// the operator must remove the old line by hand.
var ErrHostKeyMismatch = errors.New("host key mismatch")

// Fingerprint is the OpenSSH SHA256 fingerprint of a key ("SHA256:...").
func Fingerprint(key xssh.PublicKey) string { return xssh.FingerprintSHA256(key) }

// HostKeys verifies server host keys against one known_hosts file. It
// re-reads the file on every handshake, so keys trusted by another process
// take effect without a restart. Safe for concurrent use.
type HostKeys struct {
	path      string
	acceptNew bool
	logger    *slog.Logger
	mu        sync.Mutex // serialises appends
}

// NewHostKeys verifies against the known_hosts file at path (which need not
// exist yet). With acceptNew, keys of hosts the file does not mention are
// appended to it and accepted (trust on first use); changed keys are still
// refused.
func NewHostKeys(path string, acceptNew bool, logger *slog.Logger) *HostKeys {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &HostKeys{path: path, acceptNew: acceptNew, logger: logger}
}

// Path is the known_hosts file.
func (h *HostKeys) Path() string { return h.path }

func (h *HostKeys) db() (*knownhosts.HostKeyDB, error) {
	if _, err := os.Stat(h.path); errors.Is(err, os.ErrNotExist) {
		return knownhosts.NewDB()
	}
	db, err := knownhosts.NewDB(h.path)
	if err != nil {
		return nil, fmt.Errorf("read known_hosts %s: %w", h.path, err)
	}
	return db, nil
}

// clientConfig returns the host key callback and the host key algorithms
// to offer for addr: only the types known_hosts has for the host, so a
// server that prefers another type is not mistaken for a changed key.
func (h *HostKeys) clientConfig(addr string) (xssh.HostKeyCallback, []string, error) {
	db, err := h.db()
	if err != nil {
		return nil, nil, err
	}
	check := db.HostKeyCallback()
	cb := func(hostname string, remote net.Addr, key xssh.PublicKey) error {
		return h.check(check, hostname, remote, key)
	}
	return cb, db.HostKeyAlgorithms(addr), nil
}

func (h *HostKeys) check(check xssh.HostKeyCallback, hostname string, remote net.Addr, key xssh.PublicKey) error {
	err := check(hostname, remote, key)
	if err == nil {
		return nil
	}
	var kerr *xknownhosts.KeyError
	if !errors.As(err, &kerr) {
		return err
	}
	if len(kerr.Want) > 0 {
		var want []string
		for _, w := range kerr.Want {
			want = append(want, fmt.Sprintf("%s %s (%s:%d)", w.Key.Type(), Fingerprint(w.Key), w.Filename, w.Line))
		}
		return fmt.Errorf("%w: %s offered %s %s but known_hosts has %s; refusing (if the server was reinstalled, remove the old line and run `replan trust`)",
			ErrHostKeyMismatch, hostname, key.Type(), Fingerprint(key), strings.Join(want, ", "))
	}
	if !h.acceptNew {
		return fmt.Errorf("%w: %s offered %s %s, which is not in %s (run `replan trust` to accept it)",
			ErrUnknownHost, hostname, key.Type(), Fingerprint(key), h.path)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	// Another handshake may have added it meanwhile.
	if db, err := h.db(); err == nil {
		if err := db.HostKeyCallback()(hostname, remote, key); err == nil {
			return nil
		} else if errors.As(err, &kerr) && len(kerr.Want) > 0 {
			return h.check(db.HostKeyCallback(), hostname, remote, key)
		}
	}
	if err := AppendKnownHost(h.path, hostname, key); err != nil {
		return err
	}
	h.logger.Warn("accepted new host key", "host", hostname, "type", key.Type(), "fingerprint", Fingerprint(key), "known_hosts", h.path)
	return nil
}

// AppendKnownHost appends a known_hosts line for addr (host:port) and key,
// creating the file and its directory if needed.
func AppendKnownHost(path, addr string, key xssh.PublicKey) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("append to known_hosts: %w", err)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("append to known_hosts: %w", err)
	}
	line := knownhosts.Line([]string{knownhosts.Normalize(addr)}, key) + "\n"
	if _, err := f.WriteString(line); err != nil {
		f.Close()
		return fmt.Errorf("append to known_hosts %s: %w", path, err)
	}
	return f.Close()
}

// HostKeyStatus says how a server's key relates to known_hosts.
type HostKeyStatus int

// Host key states.
const (
	KeyUnknown HostKeyStatus = iota // not in known_hosts
	KeyKnown                        // in known_hosts, matching
	KeyChanged                      // known_hosts has a different key
)

func (s HostKeyStatus) String() string {
	switch s {
	case KeyKnown:
		return "known"
	case KeyChanged:
		return "changed"
	}
	return "unknown"
}

// TrustInfo is what Trust learned about a server's host key.
type TrustInfo struct {
	Addr        string
	Key         xssh.PublicKey
	Fingerprint string
	Status      HostKeyStatus
	// Err is the ErrHostKeyMismatch error (with both fingerprints) when
	// Status is KeyChanged.
	Err error
}

var errGotKey = errors.New("host key captured")

// Trust connects to addr (host:port), fetches the host key the server
// offers (no authentication is attempted) and reports its fingerprint and
// whether known_hosts at knownHostsPath already has it. It writes nothing;
// call AppendKnownHost to trust a KeyUnknown key.
func Trust(ctx context.Context, addr, knownHostsPath string, timeout time.Duration) (*TrustInfo, error) {
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	hk := NewHostKeys(knownHostsPath, false, nil)
	check, algos, err := hk.clientConfig(addr)
	if err != nil {
		return nil, err
	}
	info := &TrustInfo{Addr: addr}
	cfg := &xssh.ClientConfig{
		User:              "replan-trust",
		HostKeyAlgorithms: algos,
		HostKeyCallback: func(hostname string, remote net.Addr, key xssh.PublicKey) error {
			info.Key = key
			info.Fingerprint = Fingerprint(key)
			switch err := check(hostname, remote, key); {
			case err == nil:
				info.Status = KeyKnown
			case errors.Is(err, ErrHostKeyMismatch):
				info.Status, info.Err = KeyChanged, err
			case errors.Is(err, ErrUnknownHost):
				info.Status = KeyUnknown
			default:
				return err
			}
			return errGotKey
		},
		Timeout: timeout,
	}
	nc, err := dialTCP(ctx, addr, timeout)
	if err != nil {
		return nil, fmt.Errorf("trust %s: %w", addr, err)
	}
	defer nc.Close()
	c, _, _, err := xssh.NewClientConn(nc, addr, cfg)
	if c != nil {
		c.Close()
	}
	if info.Key == nil {
		if err == nil {
			err = errors.New("server sent no host key")
		}
		return nil, fmt.Errorf("trust %s: %w", addr, err)
	}
	return info, nil
}

// dialTCP connects with a deadline for the whole handshake that follows:
// the connection's deadline is set to now+timeout (or the context's
// deadline if earlier) and the context cancels it.
func dialTCP(ctx context.Context, addr string, timeout time.Duration) (net.Conn, error) {
	d := net.Dialer{Timeout: timeout}
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(timeout)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	_ = nc.SetDeadline(deadline)
	return nc, nil
}
