package control

// Leader election on etcd (issue 27; docs/ha.md, "Leader election and
// failover").
//
// Every daemon of a highly available control plane campaigns under one
// etcd prefix with a session (a lease of ElectionConfig.TTL, kept alive by
// the client). The candidate whose key was created first leads; the
// others wait behind it. The leader's key's create revision is its epoch:
// etcd's revisions only grow, so a later leader always has a higher epoch
// than every earlier one, and the agents refuse the commands of a deposed
// leader that still runs (fence.go).
//
// A leader's term ends (Term.Done closes, and the caller stops the loop
// and the executor at once) 3/4 of a TTL after it sent the last renewal of
// its lease that succeeded (election_renew.go), when its session ends, or
// when its key is gone or its watch of it lost etcd's leader. Etcd can
// elect another leader only once the lease expired on its side, one TTL
// after it received that renewal, which was after the leader sent it: so
// a leader that runs has stepped down before another is elected (the
// session alone gave up later than etcd, counting from the answer). A
// leader paused past its term notices only when it runs again; the epoch
// fences what it might still send.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// DefaultElectionTTL is the election session's lease when
// ElectionConfig.TTL is 0: a dead leader is replaced within about this
// long.
const DefaultElectionTTL = 5 * time.Second

// DefaultElectionPrefix is the key prefix of the election when
// ElectionConfig.Prefix is empty.
const DefaultElectionPrefix = "/replan/election/"

// ElectionConfig configures a daemon's part in the election.
type ElectionConfig struct {
	Client *clientv3.Client
	// Prefix is the election's key prefix (DefaultElectionPrefix).
	Prefix string
	// TTL is the session's lease (DefaultElectionTTL); whole seconds.
	TTL time.Duration
	// Self is this daemon as the others see it: its name, its API
	// address (where followers forward) and its TLS certificate's
	// fingerprint (how they check they reach it).
	Self   Member
	Logger *slog.Logger
}

// Member is a daemon of the control plane, as it campaigns.
type Member struct {
	Name string `json:"name"`
	// Addr is its API (https://HOST:PORT), where followers forward.
	Addr string `json:"addr"`
	// Fingerprint is the SHA-256 fingerprint of its TLS certificate.
	Fingerprint string `json:"fingerprint,omitempty"`
	// Rev is the create revision of its key: the leader's is its epoch.
	Rev int64 `json:"rev"`
}

// Election is a daemon's part in the election.
type Election struct {
	cfg ElectionConfig
	log *slog.Logger
	val string

	mu   sync.Mutex
	term *Term // the current term while this daemon leads
}

// NewElection prepares a daemon's part in the election (nothing is
// written until Campaign).
func NewElection(cfg ElectionConfig) (*Election, error) {
	if cfg.Client == nil {
		return nil, errors.New("election: no etcd client")
	}
	if cfg.Prefix == "" {
		cfg.Prefix = DefaultElectionPrefix
	}
	if !strings.HasSuffix(cfg.Prefix, "/") {
		cfg.Prefix += "/"
	}
	if cfg.TTL <= 0 {
		cfg.TTL = DefaultElectionTTL
	}
	if cfg.TTL < time.Second {
		return nil, fmt.Errorf("election: TTL %v: want at least 1s (etcd leases count whole seconds)", cfg.TTL)
	}
	if cfg.Self.Name == "" || cfg.Self.Addr == "" {
		return nil, errors.New("election: this daemon needs a name and an address (--advertise)")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	self := cfg.Self
	self.Rev = 0
	b, err := json.Marshal(self)
	if err != nil {
		return nil, err
	}
	return &Election{cfg: cfg, log: cfg.Logger, val: string(b)}, nil
}

// Term is one leadership of this daemon.
type Term struct {
	// Epoch is the election revision: the leader key's create revision.
	Epoch uint64
	// Key is the leader key: a store on the same etcd can make each write
	// conditional on it (CreateRevision(Key) == Epoch), so that a deposed
	// leader writes nothing.
	Key  string
	done chan struct{}
	why  error
	once sync.Once
	stop func()
}

// Done is closed when the term ends (the leader steps down).
func (t *Term) Done() <-chan struct{} { return t.done }

// Err says why the term ended (nil while it lasts).
func (t *Term) Err() error {
	select {
	case <-t.done:
		return t.why
	default:
		return nil
	}
}

func (t *Term) end(why error) {
	t.once.Do(func() {
		t.why = why
		close(t.done)
	})
}

// Resign ends the term and gives the leadership up at once (its key is
// deleted, so another daemon leads without waiting for the lease).
func (t *Term) Resign() {
	t.end(errors.New("resigned"))
	t.stop()
}

// Leading is the current term while this daemon leads, else nil.
func (e *Election) Leading() *Term {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.term != nil && e.term.Err() == nil {
		return e.term
	}
	return nil
}

// Campaign blocks until this daemon leads (or ctx ends) and returns its
// term. Meanwhile the daemon is a member: its key, with its address, is
// under the election's prefix.
func (e *Election) Campaign(ctx context.Context) (*Term, error) {
	ttl := int((e.cfg.TTL + time.Second - 1) / time.Second)
	s, err := concurrency.NewSession(e.cfg.Client, concurrency.WithTTL(ttl), concurrency.WithContext(ctx))
	if err != nil {
		return nil, fmt.Errorf("election: session: %w", err)
	}
	el := concurrency.NewElection(s, strings.TrimSuffix(e.cfg.Prefix, "/"))
	if err := el.Campaign(ctx, e.val); err != nil {
		s.Close()
		return nil, fmt.Errorf("election: campaign: %w", err)
	}
	// The term's first bound: a renewal of our lease, sent now, must
	// succeed within 3/4 of a TTL (election_renew.go).
	sent := time.Now()
	rctx, cancel := context.WithDeadline(ctx, sent.Add(e.termBound()))
	_, err = e.cfg.Client.KeepAliveOnce(rctx, s.Lease())
	cancel()
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("election: campaign: elected, but the renewal of our lease sent then did not succeed within %v (3/4 of the TTL): %w", e.termBound(), err)
	}
	// Campaign returns once every earlier key is gone; ours may have gone
	// with them (our lease expired while we waited): check it is there.
	key := el.Key()
	rev := el.Rev()
	gctx, cancel := context.WithTimeout(ctx, e.cfg.TTL)
	resp, err := e.cfg.Client.Get(gctx, key)
	cancel()
	if err != nil || len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != rev {
		s.Close()
		if err == nil {
			err = errors.New("our key expired while we waited")
		}
		return nil, fmt.Errorf("election: campaign: %w", err)
	}
	select {
	case <-s.Done():
		s.Close()
		return nil, errors.New("election: campaign: the session ended as we were elected")
	default:
	}
	wctx, wcancel := context.WithCancel(context.WithoutCancel(ctx))
	t := &Term{Epoch: uint64(rev), Key: key, done: make(chan struct{})}
	t.stop = func() {
		wcancel()
		rctx, cancel := context.WithTimeout(context.Background(), e.cfg.TTL)
		defer cancel()
		el.Resign(rctx)
		s.Close()
	}
	// The term ends 3/4 of a TTL after the last renewal of our lease that
	// succeeded was sent (renew.go), when the session ends (its lease
	// could not be kept alive within the TTL) or when our key is deleted
	// or replaced.
	go e.renew(wctx, t, s.Lease(), sent)
	go func() {
		wch := e.cfg.Client.Watch(clientv3.WithRequireLeader(wctx), key, clientv3.WithRev(resp.Header.Revision+1))
		for {
			select {
			case <-s.Done():
				t.end(fmt.Errorf("the election session (lease %ds) expired: etcd did not answer for a whole lease", ttl))
				return
			case <-ctx.Done():
				t.end(fmt.Errorf("stopping: %w", ctx.Err()))
				return
			case wr, ok := <-wch:
				if !ok || wr.Canceled {
					if wctx.Err() != nil {
						return
					}
					why := "the watch of our key ended"
					if err := wr.Err(); err != nil {
						why += ": " + err.Error()
					}
					// No etcd leader (a lost quorum) cancels a watch that
					// requires one: step down rather than lead blind.
					t.end(errors.New(why))
					return
				}
				for _, ev := range wr.Events {
					if ev.Type == clientv3.EventTypeDelete || ev.Kv.CreateRevision != rev {
						t.end(errors.New("our leader key was deleted"))
						return
					}
				}
			}
		}
	}()
	e.mu.Lock()
	e.term = t
	e.mu.Unlock()
	e.log.Info("election: leading", "epoch", t.Epoch, "key", key)
	return t, nil
}

// Members lists the daemons campaigning, the leader first (it has the
// lowest create revision).
func (e *Election) Members(ctx context.Context) ([]Member, error) {
	resp, err := e.cfg.Client.Get(ctx, e.cfg.Prefix, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		return nil, fmt.Errorf("election: members: %w", err)
	}
	out := make([]Member, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		var m Member
		if err := json.Unmarshal(kv.Value, &m); err != nil {
			m = Member{Name: string(kv.Key), Addr: string(kv.Value)}
		}
		m.Rev = kv.CreateRevision
		out = append(out, m)
	}
	return out, nil
}

// ErrNoLeader is a control plane without a leader (an election under way,
// or etcd without quorum).
var ErrNoLeader = errors.New("no leader")

// Leader is the current leader.
func (e *Election) Leader(ctx context.Context) (Member, error) {
	ms, err := e.Members(ctx)
	if err != nil {
		return Member{}, fmt.Errorf("%w: etcd does not answer (%v): without a majority of its members up and connected no daemon leads, and none schedules; jobs keep running", ErrNoLeader, err)
	}
	if len(ms) == 0 {
		return Member{}, fmt.Errorf("%w: no daemon campaigns under %s", ErrNoLeader, e.cfg.Prefix)
	}
	return ms[0], nil
}

// Self is this daemon as it campaigns.
func (e *Election) Self() Member { return e.cfg.Self }
