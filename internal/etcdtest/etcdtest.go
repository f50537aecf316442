// Package etcdtest runs real etcd servers for tests: the embedded server
// of go.etcd.io/etcd/server/v3/embed, on loopback ports chosen free at
// start, with its data in the test's temporary directory. Start runs one
// member; StartCluster runs n members of one cluster, each of which a test
// may stop and restart (quorum loss, member failure).
//
// The servers accept transactions of up to MaxTxnOps operations and
// requests of up to MaxRequestBytes, as the etcd store needs
// (docs/ha.md); fsync is kept (a restart must find what was acknowledged).
package etcdtest

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"

	"github.com/replan/replan/internal/freeport"
)

// MaxTxnOps and MaxRequestBytes are the limits the test servers run with,
// the ones docs/ha.md asks of an etcd the store uses.
const (
	MaxTxnOps       = 4096
	MaxRequestBytes = 8 << 20
)

// startTimeout bounds how long a member (or a cluster) may take to be ready
// on a loaded machine.
const startTimeout = 2 * time.Minute

// Member is one etcd server of a cluster started by StartCluster.
type Member struct {
	Name      string
	Dir       string // its data directory
	ClientURL string // http://127.0.0.1:PORT
	peerURL   string
	cluster   string // the initial cluster, name=peerURL,...

	mu sync.Mutex
	e  *embed.Etcd
}

// Start runs a one-member etcd cluster for t and returns its client
// endpoints; it is stopped when t ends.
func Start(t testing.TB) []string {
	t.Helper()
	m := StartCluster(t, 1)
	return []string{m[0].ClientURL}
}

// StartCluster runs an n-member etcd cluster for t, all members on
// loopback, and returns them once the cluster has a leader; they are
// stopped when t ends.
func StartCluster(t testing.TB, n int) []*Member {
	t.Helper()
	if n < 1 {
		t.Fatalf("etcdtest: a cluster of %d members", n)
	}
	// The ports are free when chosen, but another process may take one
	// before etcd binds it: then again, on other ports.
	for try := 1; ; try++ {
		ms, err := startCluster(t, n, fmt.Sprintf("try%d", try))
		if err == nil {
			return ms
		}
		if try >= 3 || !strings.Contains(err.Error(), "address already in use") {
			t.Fatalf("etcdtest: %v", err)
		}
	}
}

func startCluster(t testing.TB, n int, name string) ([]*Member, error) {
	root := filepath.Join(t.TempDir(), name)
	ports := freePorts(t, 2*n)
	ms := make([]*Member, n)
	var peers []string
	for i := range ms {
		ms[i] = &Member{
			Name:      fmt.Sprintf("m%d", i),
			Dir:       filepath.Join(root, fmt.Sprintf("m%d", i)),
			ClientURL: fmt.Sprintf("http://127.0.0.1:%d", ports[2*i]),
			peerURL:   fmt.Sprintf("http://127.0.0.1:%d", ports[2*i+1]),
		}
		peers = append(peers, ms[i].Name+"="+ms[i].peerURL)
	}
	for _, m := range ms {
		m.cluster = strings.Join(peers, ",")
	}
	// Members wait for each other (quorum) before they are ready: start
	// them all, then wait.
	t.Cleanup(func() {
		for _, m := range ms {
			m.Stop()
		}
	})
	for _, m := range ms {
		if err := m.start(embed.ClusterStateFlagNew); err != nil {
			for _, m := range ms {
				m.Stop()
			}
			return nil, fmt.Errorf("start member %s: %w", m.Name, err)
		}
	}
	for _, m := range ms {
		if err := m.waitReady(); err != nil {
			return nil, fmt.Errorf("member %s: %w", m.Name, err)
		}
	}
	return ms, nil
}

// Endpoints are the client URLs of ms.
func Endpoints(ms []*Member) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.ClientURL
	}
	return out
}

func (m *Member) config(state string) (*embed.Config, error) {
	cfg := embed.NewConfig()
	cfg.Name = m.Name
	cfg.Dir = m.Dir
	cu, err := url.Parse(m.ClientURL)
	if err != nil {
		return nil, err
	}
	pu, err := url.Parse(m.peerURL)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(m.Dir), 0o700); err != nil {
		return nil, err
	}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.InitialCluster = m.cluster
	cfg.InitialClusterToken = "etcdtest"
	cfg.ClusterState = state
	cfg.MaxTxnOps = MaxTxnOps
	cfg.MaxRequestBytes = MaxRequestBytes
	cfg.Logger = "zap"
	cfg.LogLevel = "error"
	cfg.LogOutputs = []string{filepath.Join(filepath.Dir(m.Dir), m.Name+".log")}
	return cfg, nil
}

func (m *Member) start(state string) error {
	cfg, err := m.config(state)
	if err != nil {
		return err
	}
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return err
	}
	m.mu.Lock()
	m.e = e
	m.mu.Unlock()
	return nil
}

func (m *Member) waitReady() error {
	m.mu.Lock()
	e := m.e
	m.mu.Unlock()
	if e == nil {
		return fmt.Errorf("not running")
	}
	select {
	case <-e.Server.ReadyNotify():
		return nil
	case err := <-e.Err():
		return err
	case <-time.After(startTimeout):
		return fmt.Errorf("not ready after %s", startTimeout)
	}
}

// Stop stops the member (as a crash would, but its data is flushed);
// stopping a stopped member does nothing.
func (m *Member) Stop() {
	m.mu.Lock()
	e := m.e
	m.e = nil
	m.mu.Unlock()
	if e != nil {
		e.Close()
	}
}

// Running reports whether the member runs.
func (m *Member) Running() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.e != nil
}

// Restart starts a stopped member again on its data directory and ports.
// With the rest of a quorum running it returns once the member is ready;
// without (wait false) it returns once the server is started.
func (m *Member) Restart(t testing.TB, wait bool) {
	t.Helper()
	if m.Running() {
		t.Fatalf("etcdtest: restart %s: it runs", m.Name)
	}
	if _, err := os.Stat(m.Dir); err != nil {
		t.Fatalf("etcdtest: restart %s: %v", m.Name, err)
	}
	if err := m.start(embed.ClusterStateFlagExisting); err != nil {
		t.Fatalf("etcdtest: restart %s: %v", m.Name, err)
	}
	if wait {
		if err := m.waitReady(); err != nil {
			t.Fatalf("etcdtest: restart %s: %v", m.Name, err)
		}
	}
}

// freePorts returns n distinct loopback TCP ports free at the time of the
// call, below the ephemeral range (internal/freeport).
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	out := make([]int, n)
	for i := range out {
		out[i] = freeport.Port(t, "127.0.0.1")
	}
	return out
}
