package control

// The Store on etcd (go.etcd.io/etcd/client/v3), for a highly available
// control plane: several daemons share one etcd cluster (docs/ha.md).
//
// Key layout, under a prefix ("/replan/" by default), every value JSON:
//
//	jobs/<id>                      a JobRecord (its Version inside)
//	history/<id>/<version>         a Transition: the job's state change that made <version>
//	owners/<id>                    who submitted job <id>
//	idem/<key>                     an Idempotency-Key: {job_id, spec_sha256, at}
//	decisions/<id>                 a DecisionRecord
//	jobdecisions/<job>/<id>        the same decision, found by job
//	events/<id>                    an Event
//	nodes/<name>                   a NodeRecord
//	drains/<name>                  a NodeDrain
//	gpus/<server>/<gpu>            a GPUHealthRecord
//	slow/<server>                  a SlowServerRecord (failslow.go)
//	models/<type>                  a fitted model: {data, at}
//	timerwaits/<seq>               a TimerWait
//	profiles/<seq>                 a ProfileSample
//	counters/<name>                the last number given out: job, event, decision, timerwait, profile, epoch
//
// Numbers in keys are zero-padded to 20 digits, so that key order is
// number order.
//
// One Commit is one etcd transaction. It first reads (at one revision) the
// job records it updates and the counters it draws IDs from, checks the
// versions as SQLite does (ErrConflict, ErrExists, ErrNotFound), then
// writes everything in a Txn whose compares are the ModRevision of every
// key it read: if any changed in between (another writer), nothing is
// written and the commit starts again from the reads, which then find the
// conflict, or draw new IDs. IDs are therefore never reused and grow
// monotonically.

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// DefaultEtcdPrefix is the key prefix of EtcdConfig.Prefix "".
const DefaultEtcdPrefix = "/replan/"

// DefaultEventRetention is how long the etcd store keeps an event when
// EtcdConfig.EventRetention is 0.
const DefaultEventRetention = 30 * 24 * time.Hour

// DefaultEtcdDialTimeout is EtcdConfig.DialTimeout when 0.
const DefaultEtcdDialTimeout = 5 * time.Second

// MaxEtcdValue bounds one stored record: etcd refuses requests over its
// --max-request-bytes (1.5 MiB by default). A record over it (a job spec
// of a megabyte) is refused with an error that names it.
const MaxEtcdValue = 1 << 20

// etcdScanPage is how many keys one read of a range returns.
const etcdScanPage = 1000

// etcdCommitTries bounds the reads-then-Txn rounds of one commit lost to
// concurrent writers.
const etcdCommitTries = 50

// EtcdConfig is where the etcd store keeps its data.
type EtcdConfig struct {
	Endpoints []string
	// TLS is the client's TLS configuration (nil: plain connections).
	TLS *tls.Config
	// Prefix is put before every key (default DefaultEtcdPrefix).
	Prefix string
	// DialTimeout bounds the first connection (default
	// DefaultEtcdDialTimeout).
	DialTimeout time.Duration
	// EventRetention is how long events are kept (default
	// DefaultEventRetention; negative: forever).
	EventRetention time.Duration
}

// EtcdStore is the Store on etcd. It implements every optional store
// interface the daemon uses (owners, idempotency keys, drains, epochs,
// launch history), as SQLite does.
type EtcdStore struct {
	cli *clientv3.Client
	// rd is where the read methods read: etcd through cli, or a
	// follower's view of it (followview.go).
	rd        etcdReader
	own       bool // Close closes cli
	p         string
	retention time.Duration

	ctrMu sync.Mutex
	ctr   map[string]etcdCounter // incr's counters as last seen

	stopOnce sync.Once
	stop     chan struct{}
	done     chan struct{}
}

// OpenEtcdStore connects to the etcd cluster of cfg and returns its store;
// it fails when no endpoint answers within the dial timeout.
func OpenEtcdStore(ctx context.Context, cfg EtcdConfig) (*EtcdStore, error) {
	if len(cfg.Endpoints) == 0 {
		return nil, errors.New("open etcd store: no endpoints")
	}
	dt := cfg.DialTimeout
	if dt <= 0 {
		dt = DefaultEtcdDialTimeout
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   cfg.Endpoints,
		TLS:         cfg.TLS,
		DialTimeout: dt,
		Context:     context.WithoutCancel(ctx),
		// A commit of a round (32 jobs, their history, decisions and
		// events) is larger than gRPC's default 4 MiB at most with
		// very large specs; allow what etcd allows.
		MaxCallSendMsgSize: 16 << 20,
	})
	if err != nil {
		return nil, fmt.Errorf("open etcd store %s: %w", strings.Join(cfg.Endpoints, ","), err)
	}
	// Check that the cluster answers now rather than at the first write.
	cctx, cancel := context.WithTimeout(ctx, dt)
	defer cancel()
	if _, err := cli.Get(cctx, "health-check", clientv3.WithCountOnly()); err != nil {
		cli.Close()
		return nil, fmt.Errorf("open etcd store %s: %w", strings.Join(cfg.Endpoints, ","), err)
	}
	s := newEtcdStore(cli, cfg.Prefix, cfg.EventRetention)
	s.own = true
	return s, nil
}

// NewEtcdStoreFromClient is the store on an etcd client the caller owns
// (Close leaves it open), with the default event retention.
func NewEtcdStoreFromClient(cli *clientv3.Client, prefix string) *EtcdStore {
	return newEtcdStore(cli, prefix, 0)
}

// NewEtcdStoreWith is NewEtcdStoreFromClient with cfg's Prefix and
// EventRetention (its Endpoints, TLS and DialTimeout are the client's).
func NewEtcdStoreWith(cli *clientv3.Client, cfg EtcdConfig) *EtcdStore {
	return newEtcdStore(cli, cfg.Prefix, cfg.EventRetention)
}

func newEtcdStore(cli *clientv3.Client, prefix string, retention time.Duration) *EtcdStore {
	if prefix == "" {
		prefix = DefaultEtcdPrefix
	}
	if !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	if retention == 0 {
		retention = DefaultEventRetention
	}
	s := &EtcdStore{cli: cli, rd: etcdKV{cli}, p: prefix, retention: retention, ctr: map[string]etcdCounter{}, stop: make(chan struct{}), done: make(chan struct{})}
	go s.compactLoop()
	return s
}

// Client is the store's etcd client.
func (s *EtcdStore) Client() *clientv3.Client { return s.cli }

// Prefix is the prefix of the store's keys.
func (s *EtcdStore) Prefix() string { return s.p }

// Close stops the event compaction and closes the client when the store
// opened it.
func (s *EtcdStore) Close() error {
	s.stopOnce.Do(func() { close(s.stop) })
	<-s.done
	if s.own {
		return s.cli.Close()
	}
	return nil
}

// compactLoop deletes expired events at start and then every
// twenty-fourth of the retention (at most hourly, at least each minute).
func (s *EtcdStore) compactLoop() {
	defer close(s.done)
	if s.retention < 0 {
		return
	}
	every := min(max(s.retention/24, time.Minute), time.Hour)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		s.CompactEvents(ctx, time.Now().Add(-s.retention))
		cancel()
		select {
		case <-s.stop:
			return
		case <-time.After(every):
		}
	}
}

// CompactEvents deletes the events stored before before, oldest first up
// to the first that is not (events are stored in time order), in one
// range delete. It returns how many it deleted.
func (s *EtcdStore) CompactEvents(ctx context.Context, before time.Time) (int64, error) {
	var first, last string
	err := s.scan(ctx, s.k("events/"), func(kv *mvccpb.KeyValue) (bool, error) {
		var e Event
		if err := json.Unmarshal(kv.Value, &e); err != nil {
			return false, fmt.Errorf("event %s: %w", kv.Key, err)
		}
		if !e.At.Before(before) {
			return false, nil
		}
		if first == "" {
			first = string(kv.Key)
		}
		last = string(kv.Key)
		return true, nil
	})
	if err != nil {
		return 0, fmt.Errorf("compact events: %w", err)
	}
	if first == "" {
		return 0, nil
	}
	if compactHook != nil {
		compactHook()
	}
	// Up to the last old event read: events stored meanwhile are newer.
	r, err := s.cli.Delete(ctx, first, clientv3.WithRange(last+"\x00"))
	if err != nil {
		return 0, fmt.Errorf("compact events: %w", err)
	}
	return r.Deleted, nil
}

// compactHook, when set (tests), runs between CompactEvents' read and its
// delete.
var compactHook func()

func (s *EtcdStore) k(parts ...string) string { return s.p + strings.Join(parts, "/") }

func seqKey(n int64) string { return fmt.Sprintf("%020d", n) }

// encodeJSON is json.Marshal without HTML escaping: raw JSON fields are
// stored as given (compacted).
func encodeJSON(v any) ([]byte, error) {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return []byte(strings.TrimSuffix(b.String(), "\n")), nil
}

// normTime is t as the store gives it back (UTC, nanoseconds, zero kept).
func normTime(t time.Time) time.Time { return fromNS(ns(t)) }

func normJob(j *JobRecord) {
	j.SubmittedAt, j.StartedAt, j.FinishedAt = normTime(j.SubmittedAt), normTime(j.StartedAt), normTime(j.FinishedAt)
	j.Spec, j.Plan, j.Placement = nilIfEmpty(j.Spec), nilIfEmpty(j.Plan), nilIfEmpty(j.Placement)
}

func nilIfEmpty(r json.RawMessage) json.RawMessage {
	if len(r) == 0 || string(r) == "null" {
		return nil
	}
	return r
}

// scan calls fn with every key under prefix in key order, in pages read at
// one revision, until fn returns false.
func (s *EtcdStore) scan(ctx context.Context, prefix string, fn func(*mvccpb.KeyValue) (bool, error)) error {
	return s.scanRange(ctx, prefix, clientv3.GetPrefixRangeEnd(prefix), fn)
}

func (s *EtcdStore) scanRange(ctx context.Context, from, end string, fn func(*mvccpb.KeyValue) (bool, error)) error {
	return s.rd.scan(ctx, from, end, fn)
}

// etcdReader reads the store's keys: etcd itself (etcdKV), or a
// follower's view of it fed by a watch (followView).
type etcdReader interface {
	// get returns the keys of [key, end) (key alone when end is ""), in
	// key order (descending with desc), at most limit of them (0: all).
	get(ctx context.Context, key, end string, limit int64, desc bool) ([]*mvccpb.KeyValue, error)
	// scan calls fn with every key of [from, end) in key order, as of one
	// revision, until fn returns false.
	scan(ctx context.Context, from, end string, fn func(*mvccpb.KeyValue) (bool, error)) error
}

// etcdKV reads from etcd.
type etcdKV struct{ cli *clientv3.Client }

func (e etcdKV) get(ctx context.Context, key, end string, limit int64, desc bool) ([]*mvccpb.KeyValue, error) {
	var opts []clientv3.OpOption
	if end != "" {
		opts = append(opts, clientv3.WithRange(end))
	}
	if limit > 0 {
		opts = append(opts, clientv3.WithLimit(limit))
	}
	if desc {
		opts = append(opts, clientv3.WithSort(clientv3.SortByKey, clientv3.SortDescend))
	}
	r, err := e.cli.Get(ctx, key, opts...)
	if err != nil {
		return nil, err
	}
	return r.Kvs, nil
}

// scan reads in pages of etcdScanPage keys, all at the first page's
// revision.
func (e etcdKV) scan(ctx context.Context, from, end string, fn func(*mvccpb.KeyValue) (bool, error)) error {
	key := from
	var rev int64
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(etcdScanPage)}
		if rev > 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		r, err := e.cli.Get(ctx, key, opts...)
		if err != nil {
			return err
		}
		rev = r.Header.Revision
		for _, kv := range r.Kvs {
			more, err := fn(kv)
			if err != nil || !more {
				return err
			}
		}
		if !r.More || len(r.Kvs) == 0 {
			return nil
		}
		key = string(r.Kvs[len(r.Kvs)-1].Key) + "\x00"
	}
}

// scanJSON decodes every value under prefix into a T.
func scanJSON[T any](ctx context.Context, s *EtcdStore, prefix string, add func(T)) error {
	return s.scan(ctx, prefix, func(kv *mvccpb.KeyValue) (bool, error) {
		var v T
		if err := json.Unmarshal(kv.Value, &v); err != nil {
			return false, fmt.Errorf("%s: %w", kv.Key, err)
		}
		add(v)
		return true, nil
	})
}

// idemVal is a stored Idempotency-Key.
type etcdIdem struct {
	JobID      string    `json:"job_id"`
	SpecSHA256 string    `json:"spec_sha256"`
	At         time.Time `json:"at"`
}

// etcdModel is a stored fitted model.
type etcdModel struct {
	Data json.RawMessage `json:"data"`
	At   time.Time       `json:"at"`
}

// etcdWrite is what one commit writes: its puts and deletes by key (a key
// written twice keeps its last value: a Txn may touch a key once), and
// its compares by key.
type etcdWrite struct {
	order []string
	ops   map[string]clientv3.Op
	cmps  map[string]int64 // key → ModRevision read (0: absent)
	size  int
}

func (w *etcdWrite) put(key string, v any) error {
	raw, err := encodeJSON(v)
	if err != nil {
		return fmt.Errorf("%s: %w", key, err)
	}
	if len(raw) > MaxEtcdValue {
		return fmt.Errorf("%s: a record of %d bytes is over the etcd store's limit of %d: %w", key, len(raw), MaxEtcdValue, ErrStore)
	}
	w.set(key, clientv3.OpPut(key, string(raw)), len(key)+len(raw))
	return nil
}

func (w *etcdWrite) del(key string) { w.set(key, clientv3.OpDelete(key), len(key)) }

func (w *etcdWrite) set(key string, op clientv3.Op, size int) {
	if _, ok := w.ops[key]; !ok {
		w.order = append(w.order, key)
	}
	w.ops[key] = op
	w.size += size
}

func (w *etcdWrite) expect(key string, modRev int64) {
	if _, ok := w.cmps[key]; !ok {
		w.cmps[key] = modRev
	}
}

// etcdIDs are the IDs a commit drew.
type etcdIDs struct {
	decisions, events []int64
}

// Commit implements Store: one etcd transaction for the whole batch.
func (s *EtcdStore) Commit(ctx context.Context, b Batch) ([]int64, error) {
	vers, _, err := s.commit(ctx, b)
	return vers, err
}

func (s *EtcdStore) commit(ctx context.Context, b Batch) ([]int64, etcdIDs, error) {
	for try := 0; ; try++ {
		vers, ids, done, err := s.commitOnce(ctx, b)
		if err != nil || done {
			return vers, ids, err
		}
		if try+1 >= etcdCommitTries {
			return nil, etcdIDs{}, fmt.Errorf("commit: %d tries lost to concurrent writers: %w", etcdCommitTries, ErrStore)
		}
	}
}

// commitOnce reads what b depends on and writes b if none of it changed
// since (done); !done: another writer came in between.
func (s *EtcdStore) commitOnce(ctx context.Context, b Batch) ([]int64, etcdIDs, bool, error) {
	var ids etcdIDs
	// Reads: the jobs, the idempotency key, the counters.
	var reads []clientv3.Op
	for _, jw := range b.Jobs {
		reads = append(reads, clientv3.OpGet(s.k("jobs", jw.Rec.ID)))
	}
	idem, hasIdem := ctx.Value(idemKey{}).(idemVal)
	hasIdem = hasIdem && idem.key != "" && slices.ContainsFunc(b.Jobs, func(w JobWrite) bool { return w.Create })
	if hasIdem {
		reads = append(reads, clientv3.OpGet(s.k("idem", idem.key)))
	}
	reads = append(reads, clientv3.OpGet(s.k("counters/"), clientv3.WithPrefix()))
	r, err := s.cli.Txn(ctx).Then(reads...).Commit()
	if err != nil {
		return nil, ids, false, fmt.Errorf("commit: read: %w", etcdErr(err))
	}
	got := map[string]*mvccpb.KeyValue{}
	for _, rr := range r.Responses {
		for _, kv := range rr.GetResponseRange().Kvs {
			got[string(kv.Key)] = kv
		}
	}
	modRev := func(key string) int64 {
		if kv := got[key]; kv != nil {
			return kv.ModRevision
		}
		return 0
	}
	w := &etcdWrite{ops: map[string]clientv3.Op{}, cmps: map[string]int64{}}
	counters := map[string]int64{}
	next := func(name string) int64 {
		key := s.k("counters", name)
		if _, ok := counters[name]; !ok {
			if kv := got[key]; kv != nil {
				counters[name], _ = strconv.ParseInt(string(kv.Value), 10, 64)
			}
			w.expect(key, modRev(key))
		}
		counters[name]++
		return counters[name]
	}
	// Jobs, with SQLite's checks; a job written twice in b sees its
	// first write.
	cur := map[string]JobRecord{}
	vers := make([]int64, 0, len(b.Jobs))
	for _, jw := range b.Jobs {
		j := jw.Rec
		key := s.k("jobs", j.ID)
		old, seen := cur[j.ID]
		if !seen {
			w.expect(key, modRev(key))
			if kv := got[key]; kv != nil {
				if err := json.Unmarshal(kv.Value, &old); err != nil {
					return nil, ids, false, fmt.Errorf("commit: job %s: stored record: %w", j.ID, err)
				}
				seen = true
			}
		}
		if jw.Create {
			if seen {
				return nil, ids, false, fmt.Errorf("create job %s: %w", j.ID, ErrExists)
			}
			j.Version = 1
			normJob(&j)
			if err := w.put(key, j); err != nil {
				return nil, ids, false, fmt.Errorf("create job %s: %w", j.ID, err)
			}
			if err := w.put(s.k("history", j.ID, seqKey(1)), Transition{JobID: j.ID, To: j.State, Reason: "submitted", At: normTime(j.SubmittedAt)}); err != nil {
				return nil, ids, false, err
			}
			if u := callerOf(ctx).User; u != "" {
				if err := w.put(s.k("owners", j.ID), u); err != nil {
					return nil, ids, false, err
				}
			}
			if hasIdem {
				ik := s.k("idem", idem.key)
				if kv := got[ik]; kv != nil {
					var iv etcdIdem
					if err := json.Unmarshal(kv.Value, &iv); err == nil && !iv.At.Before(idem.expired) {
						return nil, ids, false, fmt.Errorf("idempotency key: %w", ErrExists)
					}
				}
				w.expect(ik, modRev(ik))
				if err := w.put(ik, etcdIdem{JobID: j.ID, SpecSHA256: idem.specHash, At: normTime(j.SubmittedAt)}); err != nil {
					return nil, ids, false, err
				}
				hasIdem = false // one key per submission
			}
			cur[j.ID] = j
			vers = append(vers, 1)
			continue
		}
		if !seen {
			return nil, ids, false, fmt.Errorf("update job %s: %w", j.ID, ErrNotFound)
		}
		if old.Version != j.Version {
			return nil, ids, false, fmt.Errorf("update job %s (version %d, stored %d): %w", j.ID, j.Version, old.Version, ErrConflict)
		}
		if old.State.Final() && old.State != j.State {
			return nil, ids, false, fmt.Errorf("update job %s: it is %s: %w", j.ID, old.State, ErrConflict)
		}
		// What SQLite's UPDATE sets; the rest stays as created.
		n := old
		n.State, n.Reason, n.Plan, n.Placement = j.State, j.Reason, j.Plan, j.Placement
		n.StartedAt, n.FinishedAt = j.StartedAt, j.FinishedAt
		n.Iterations, n.Checkpoint, n.Restarts, n.Attempt, n.Failures = j.Iterations, j.Checkpoint, j.Restarts, j.Attempt, j.Failures
		n.Version = old.Version + 1
		normJob(&n)
		if err := w.put(key, n); err != nil {
			return nil, ids, false, fmt.Errorf("update job %s: %w", j.ID, err)
		}
		if old.State != n.State {
			if err := w.put(s.k("history", j.ID, seqKey(n.Version)), Transition{JobID: j.ID, From: old.State, To: n.State, Reason: jw.Reason, At: normTime(jw.At)}); err != nil {
				return nil, ids, false, err
			}
		}
		cur[j.ID] = n
		vers = append(vers, n.Version)
	}
	for _, n := range b.Nodes {
		n.UpdatedAt = normTime(n.UpdatedAt)
		n.Status = nilIfEmpty(n.Status)
		if err := w.put(s.k("nodes", n.Name), n); err != nil {
			return nil, ids, false, fmt.Errorf("commit: node %s: %w", n.Name, err)
		}
	}
	for _, dr := range b.Drains {
		if dr.Mode == "" {
			w.del(s.k("drains", dr.Name))
			continue
		}
		dr.At = normTime(dr.At)
		if err := w.put(s.k("drains", dr.Name), dr); err != nil {
			return nil, ids, false, fmt.Errorf("commit: drain of %s: %w", dr.Name, err)
		}
	}
	for _, d := range b.Decisions {
		d.ID = next("decision")
		d.At, d.Detail = normTime(d.At), nilIfEmpty(d.Detail)
		ids.decisions = append(ids.decisions, d.ID)
		if err := w.put(s.k("decisions", seqKey(d.ID)), d); err != nil {
			return nil, ids, false, fmt.Errorf("commit: decision of %s: %w", d.JobID, err)
		}
		if err := w.put(s.k("jobdecisions", d.JobID, seqKey(d.ID)), d); err != nil {
			return nil, ids, false, fmt.Errorf("commit: decision of %s: %w", d.JobID, err)
		}
	}
	for _, e := range b.Events {
		if e.User == "" {
			e.User = callerOf(ctx).User // auth.go: who made the request that caused it
		}
		e.ID = next("event")
		e.At, e.Data = normTime(e.At), nilIfEmpty(e.Data)
		ids.events = append(ids.events, e.ID)
		if err := w.put(s.k("events", seqKey(e.ID)), e); err != nil {
			return nil, ids, false, fmt.Errorf("commit: event %s: %w", e.Kind, err)
		}
	}
	for _, tw := range b.TimerWaits {
		tw.At = normTime(tw.At)
		if err := w.put(s.k("timerwaits", seqKey(next("timerwait"))), tw); err != nil {
			return nil, ids, false, fmt.Errorf("commit: timer wait: %w", err)
		}
	}
	for _, m := range b.Models {
		if err := w.put(s.k("models", m.Type), etcdModel{Data: m.Data, At: normTime(m.At)}); err != nil {
			return nil, ids, false, fmt.Errorf("commit: model %s: %w", m.Type, err)
		}
	}
	for _, g := range b.GPUHealth {
		g.At, g.Seen = normTime(g.At), normTime(g.Seen)
		if err := w.put(s.k("gpus", g.Server, fmt.Sprintf("%06d", g.GPU)), g); err != nil {
			return nil, ids, false, fmt.Errorf("commit: health of %s GPU %d: %w", g.Server, g.GPU, err)
		}
	}
	for _, r := range b.SlowServers {
		if r.Cleared {
			w.del(s.k("slow", r.Server))
			continue
		}
		r.At = normTime(r.At)
		if err := w.put(s.k("slow", r.Server), r); err != nil {
			return nil, ids, false, fmt.Errorf("commit: slow server %s: %w", r.Server, err)
		}
	}
	for _, p := range b.ProfileSamples {
		p.At = normTime(p.At)
		if err := w.put(s.k("profiles", seqKey(next("profile"))), p); err != nil {
			return nil, ids, false, fmt.Errorf("commit: profile sample of %s: %w", p.Type, err)
		}
	}
	for name, v := range counters {
		w.set(s.k("counters", name), clientv3.OpPut(s.k("counters", name), strconv.FormatInt(v, 10)), 0)
	}
	cmps := make([]clientv3.Cmp, 0, len(w.cmps))
	for key, rev := range w.cmps {
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(key), "=", rev))
	}
	ops := make([]clientv3.Op, 0, len(w.order))
	for _, key := range w.order {
		ops = append(ops, w.ops[key])
	}
	tr, err := s.cli.Txn(ctx).If(cmps...).Then(ops...).Commit()
	if err != nil {
		return nil, ids, false, fmt.Errorf("commit (%d writes, %d bytes): %w", len(ops), w.size, etcdErr(err))
	}
	if !tr.Succeeded {
		return nil, ids, false, nil
	}
	return vers, ids, true, nil
}

// etcdErr adds what to do to etcd's limits errors.
func etcdErr(err error) error {
	switch {
	case errors.Is(err, rpctypes.ErrTooManyOps):
		return fmt.Errorf("%w (run etcd with --max-txn-ops 4096 or more: docs/ha.md)", err)
	case errors.Is(err, rpctypes.ErrRequestTooLarge):
		return fmt.Errorf("%w (run etcd with --max-request-bytes 8388608 or more: docs/ha.md)", err)
	}
	return err
}

// incr draws the next number of counter name: one Txn that writes the
// next value if the counter is still as this store last saw it, else
// reads it (another writer drew meanwhile) and tries again.
func (s *EtcdStore) incr(ctx context.Context, name string) (int64, error) {
	key := s.k("counters", name)
	s.ctrMu.Lock()
	defer s.ctrMu.Unlock()
	c, known := s.ctr[name]
	if !known {
		r, err := s.cli.Get(ctx, key)
		if err != nil {
			return 0, err
		}
		if len(r.Kvs) > 0 {
			c.value, _ = strconv.ParseInt(string(r.Kvs[0].Value), 10, 64)
			c.rev = r.Kvs[0].ModRevision
		}
	}
	for try := 0; try < etcdCommitTries; try++ {
		tr, err := s.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", c.rev)).
			Then(clientv3.OpPut(key, strconv.FormatInt(c.value+1, 10))).
			Else(clientv3.OpGet(key)).Commit()
		if err != nil {
			delete(s.ctr, name)
			return 0, err
		}
		if tr.Succeeded {
			c = etcdCounter{value: c.value + 1, rev: tr.Header.Revision}
			s.ctr[name] = c
			return c.value, nil
		}
		c = etcdCounter{}
		if kvs := tr.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
			c.value, _ = strconv.ParseInt(string(kvs[0].Value), 10, 64)
			c.rev = kvs[0].ModRevision
		}
	}
	delete(s.ctr, name)
	return 0, fmt.Errorf("counter %s: %d tries lost to concurrent writers: %w", name, etcdCommitTries, ErrStore)
}

// etcdCounter is a counter as this store last saw it.
type etcdCounter struct{ value, rev int64 }

// CreateJob implements Store.
func (s *EtcdStore) CreateJob(ctx context.Context, j JobRecord) error {
	_, err := s.Commit(ctx, Batch{Jobs: []JobWrite{{Rec: j, Create: true}}})
	return err
}

// GetJob implements Store.
func (s *EtcdStore) GetJob(ctx context.Context, id string) (JobRecord, error) {
	var j JobRecord
	kvs, err := s.rd.get(ctx, s.k("jobs", id), "", 0, false)
	if err != nil {
		return j, fmt.Errorf("job %s: %w", id, err)
	}
	if len(kvs) == 0 {
		return j, fmt.Errorf("job %s: %w", id, ErrNotFound)
	}
	if err := json.Unmarshal(kvs[0].Value, &j); err != nil {
		return j, fmt.Errorf("job %s: %w", id, err)
	}
	normJob(&j)
	return j, nil
}

// ListJobs implements Store; jobs come in submission order.
func (s *EtcdStore) ListJobs(ctx context.Context, f JobFilter) ([]JobRecord, error) {
	var out []JobRecord
	err := scanJSON(ctx, s, s.k("jobs/"), func(j JobRecord) {
		if len(f.States) > 0 && !slices.Contains(f.States, j.State) {
			return
		}
		if f.Tenant != "" && j.Tenant != f.Tenant {
			return
		}
		normJob(&j)
		out = append(out, j)
	})
	if err != nil {
		return nil, fmt.Errorf("list jobs: %w", err)
	}
	slices.SortStableFunc(out, func(a, b JobRecord) int {
		if c := a.SubmittedAt.Compare(b.SubmittedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out, nil
}

// UpdateJob implements Store.
func (s *EtcdStore) UpdateJob(ctx context.Context, j JobRecord, reason string, at time.Time) (int64, error) {
	v, err := s.Commit(ctx, Batch{Jobs: []JobWrite{{Rec: j, Reason: reason, At: at}}})
	if err != nil {
		return 0, err
	}
	return v[0], nil
}

// History implements Store.
func (s *EtcdStore) History(ctx context.Context, jobID string) ([]Transition, error) {
	var out []Transition
	err := scanJSON(ctx, s, s.k("history", jobID)+"/", func(t Transition) {
		t.At = normTime(t.At)
		out = append(out, t)
	})
	if err != nil {
		return nil, fmt.Errorf("history of %s: %w", jobID, err)
	}
	return out, nil
}

// AllTransitions is every job's state history, oldest first.
func (s *EtcdStore) AllTransitions(ctx context.Context) (map[string][]Transition, error) {
	out := map[string][]Transition{}
	err := scanJSON(ctx, s, s.k("history/"), func(t Transition) {
		t.At = normTime(t.At)
		out[t.JobID] = append(out[t.JobID], t)
	})
	if err != nil {
		return nil, fmt.Errorf("transitions: %w", err)
	}
	return out, nil
}

// NextJobID implements Store: j-000001, j-000002, ... never reused.
func (s *EtcdStore) NextJobID(ctx context.Context) (string, error) {
	v, err := s.incr(ctx, "job")
	if err != nil {
		return "", fmt.Errorf("next job id: %w", err)
	}
	return fmt.Sprintf("j-%06d", v), nil
}

// NextEpoch implements EpochStore: 1, 2, ... one per daemon start.
func (s *EtcdStore) NextEpoch(ctx context.Context) (uint64, error) {
	v, err := s.incr(ctx, "epoch")
	if err != nil {
		return 0, fmt.Errorf("next epoch: %w", err)
	}
	return uint64(v), nil
}

// AddDecision implements Store.
func (s *EtcdStore) AddDecision(ctx context.Context, d DecisionRecord) (int64, error) {
	_, ids, err := s.commit(ctx, Batch{Decisions: []DecisionRecord{d}})
	if err != nil {
		return 0, err
	}
	return ids.decisions[0], nil
}

// Decisions implements Store: newest first; jobID "" for all jobs.
func (s *EtcdStore) Decisions(ctx context.Context, jobID string, limit int) ([]DecisionRecord, error) {
	if limit <= 0 {
		limit = 100
	}
	prefix := s.k("decisions/")
	if jobID != "" {
		prefix = s.k("jobdecisions", jobID) + "/"
	}
	kvs, err := s.rd.get(ctx, prefix, clientv3.GetPrefixRangeEnd(prefix), int64(limit), true)
	if err != nil {
		return nil, fmt.Errorf("decisions: %w", err)
	}
	var out []DecisionRecord
	for _, kv := range kvs {
		var d DecisionRecord
		if err := json.Unmarshal(kv.Value, &d); err != nil {
			return nil, fmt.Errorf("decision %s: %w", kv.Key, err)
		}
		d.At, d.Detail = normTime(d.At), nilIfEmpty(d.Detail)
		out = append(out, d)
	}
	return out, nil
}

// LaunchDecisions is every job's start and reconfigure decisions,
// oldest first.
func (s *EtcdStore) LaunchDecisions(ctx context.Context) (map[string][]DecisionRecord, error) {
	out := map[string][]DecisionRecord{}
	err := scanJSON(ctx, s, s.k("decisions/"), func(d DecisionRecord) {
		if d.Kind == "start" || d.Kind == "reconfigure" {
			d.At, d.Detail = normTime(d.At), nilIfEmpty(d.Detail)
			out[d.JobID] = append(out[d.JobID], d)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("launch decisions: %w", err)
	}
	return out, nil
}

// AddEvent implements Store.
func (s *EtcdStore) AddEvent(ctx context.Context, e Event) (int64, error) {
	_, ids, err := s.commit(ctx, Batch{Events: []Event{e}})
	if err != nil {
		return 0, err
	}
	return ids.events[0], nil
}

// Events implements Store.
func (s *EtcdStore) Events(ctx context.Context, after int64, limit int) ([]Event, error) {
	if limit <= 0 {
		limit = 1000
	}
	kvs, err := s.rd.get(ctx, s.k("events", seqKey(max(after, 0)+1)), clientv3.GetPrefixRangeEnd(s.k("events/")), int64(limit), false)
	if err != nil {
		return nil, fmt.Errorf("events: %w", err)
	}
	var out []Event
	for _, kv := range kvs {
		var e Event
		if err := json.Unmarshal(kv.Value, &e); err != nil {
			return nil, fmt.Errorf("event %s: %w", kv.Key, err)
		}
		e.At, e.Data = normTime(e.At), nilIfEmpty(e.Data)
		out = append(out, e)
	}
	return out, nil
}

// PutNode implements Store.
func (s *EtcdStore) PutNode(ctx context.Context, n NodeRecord) error {
	_, err := s.Commit(ctx, Batch{Nodes: []NodeRecord{n}})
	return err
}

// Nodes implements Store.
func (s *EtcdStore) Nodes(ctx context.Context) ([]NodeRecord, error) {
	var out []NodeRecord
	err := scanJSON(ctx, s, s.k("nodes/"), func(n NodeRecord) {
		n.UpdatedAt, n.Status = normTime(n.UpdatedAt), nilIfEmpty(n.Status)
		out = append(out, n)
	})
	if err != nil {
		return nil, fmt.Errorf("nodes: %w", err)
	}
	return out, nil
}

// NodeDrains is every stored drain record, by server name.
func (s *EtcdStore) NodeDrains(ctx context.Context) ([]NodeDrain, error) {
	var out []NodeDrain
	err := scanJSON(ctx, s, s.k("drains/"), func(d NodeDrain) {
		d.At = normTime(d.At)
		out = append(out, d)
	})
	if err != nil {
		return nil, fmt.Errorf("drains: %w", err)
	}
	return out, nil
}

// SlowServers implements Store: the servers suspect for slowness
// (failslow.go), by name.
func (s *EtcdStore) SlowServers(ctx context.Context) ([]SlowServerRecord, error) {
	var out []SlowServerRecord
	err := scanJSON(ctx, s, s.k("slow/"), func(r SlowServerRecord) {
		r.At = normTime(r.At)
		out = append(out, r)
	})
	if err != nil {
		return nil, fmt.Errorf("slow servers: %w", err)
	}
	slices.SortFunc(out, func(a, b SlowServerRecord) int { return strings.Compare(a.Server, b.Server) })
	return out, nil
}

// GPUHealth implements Store.
func (s *EtcdStore) GPUHealth(ctx context.Context) ([]GPUHealthRecord, error) {
	var out []GPUHealthRecord
	err := scanJSON(ctx, s, s.k("gpus/"), func(g GPUHealthRecord) {
		g.At, g.Seen = normTime(g.At), normTime(g.Seen)
		out = append(out, g)
	})
	if err != nil {
		return nil, fmt.Errorf("GPU health: %w", err)
	}
	slices.SortFunc(out, func(a, b GPUHealthRecord) int {
		if c := strings.Compare(a.Server, b.Server); c != 0 {
			return c
		}
		return a.GPU - b.GPU
	})
	return out, nil
}

// SaveModel implements Store.
func (s *EtcdStore) SaveModel(ctx context.Context, modelType string, data json.RawMessage, at time.Time) error {
	_, err := s.Commit(ctx, Batch{Models: []ModelWrite{{Type: modelType, Data: data, At: at}}})
	return err
}

// Models implements Store.
func (s *EtcdStore) Models(ctx context.Context) (map[string]json.RawMessage, error) {
	out := map[string]json.RawMessage{}
	prefix := s.k("models/")
	err := s.scan(ctx, prefix, func(kv *mvccpb.KeyValue) (bool, error) {
		var m etcdModel
		if err := json.Unmarshal(kv.Value, &m); err != nil {
			return false, fmt.Errorf("%s: %w", kv.Key, err)
		}
		out[strings.TrimPrefix(string(kv.Key), prefix)] = m.Data
		return true, nil
	})
	if err != nil {
		return nil, fmt.Errorf("models: %w", err)
	}
	return out, nil
}

// AddTimerWait implements Store.
func (s *EtcdStore) AddTimerWait(ctx context.Context, w TimerWait) error {
	_, err := s.Commit(ctx, Batch{TimerWaits: []TimerWait{w}})
	return err
}

// TimerWaits implements Store.
func (s *EtcdStore) TimerWaits(ctx context.Context, since time.Time) ([]TimerWait, error) {
	var out []TimerWait
	err := scanJSON(ctx, s, s.k("timerwaits/"), func(w TimerWait) {
		if ns(w.At) >= ns(since) {
			w.At = normTime(w.At)
			out = append(out, w)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("timer waits: %w", err)
	}
	return out, nil
}

// ProfileSamples returns the stored runs of profiling phases, oldest
// first: of model type typ, or of every type when typ is "".
func (s *EtcdStore) ProfileSamples(ctx context.Context, typ string) ([]ProfileSample, error) {
	var out []ProfileSample
	err := scanJSON(ctx, s, s.k("profiles/"), func(p ProfileSample) {
		if typ == "" || p.Type == typ {
			p.At = normTime(p.At)
			out = append(out, p)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("profile samples: %w", err)
	}
	return out, nil
}

// JobOwners is the submitter of every job that has one recorded.
func (s *EtcdStore) JobOwners(ctx context.Context) (map[string]string, error) {
	out := map[string]string{}
	prefix := s.k("owners/")
	err := s.scan(ctx, prefix, func(kv *mvccpb.KeyValue) (bool, error) {
		var u string
		if err := json.Unmarshal(kv.Value, &u); err != nil {
			return false, fmt.Errorf("%s: %w", kv.Key, err)
		}
		out[strings.TrimPrefix(string(kv.Key), prefix)] = u
		return true, nil
	})
	if err != nil {
		return nil, fmt.Errorf("job owners: %w", err)
	}
	return out, nil
}

// JobOwner is the user who submitted job id ("" when not recorded).
func (s *EtcdStore) JobOwner(ctx context.Context, id string) (string, error) {
	kvs, err := s.rd.get(ctx, s.k("owners", id), "", 0, false)
	if err != nil || len(kvs) == 0 {
		return "", err
	}
	var u string
	if err := json.Unmarshal(kvs[0].Value, &u); err != nil {
		return "", fmt.Errorf("owner of %s: %w", id, err)
	}
	return u, nil
}

// JobByIdempotencyKey returns the job the key created and the hash of its
// spec; ErrNotFound when the key is new or was stored before expired.
func (s *EtcdStore) JobByIdempotencyKey(ctx context.Context, key string, expired time.Time) (string, string, error) {
	r, err := s.cli.Get(ctx, s.k("idem", key))
	if err != nil {
		return "", "", fmt.Errorf("idempotency key: %w", err)
	}
	if len(r.Kvs) == 0 {
		return "", "", fmt.Errorf("idempotency key: %w", ErrNotFound)
	}
	var v etcdIdem
	if err := json.Unmarshal(r.Kvs[0].Value, &v); err != nil {
		return "", "", fmt.Errorf("idempotency key: %w", err)
	}
	if v.At.Before(expired) {
		return "", "", fmt.Errorf("idempotency key: %w", ErrNotFound)
	}
	return v.JobID, v.SpecSHA256, nil
}

// ExpireIdempotencyKeys deletes the keys stored before expired and says
// how many there were; a key replaced meanwhile is kept.
func (s *EtcdStore) ExpireIdempotencyKeys(ctx context.Context, expired time.Time) (int64, error) {
	type old struct {
		key string
		rev int64
	}
	var olds []old
	err := s.scan(ctx, s.k("idem/"), func(kv *mvccpb.KeyValue) (bool, error) {
		var v etcdIdem
		if err := json.Unmarshal(kv.Value, &v); err != nil {
			return false, fmt.Errorf("%s: %w", kv.Key, err)
		}
		if v.At.Before(expired) {
			olds = append(olds, old{string(kv.Key), kv.ModRevision})
		}
		return true, nil
	})
	if err != nil {
		return 0, fmt.Errorf("expire idempotency keys: %w", err)
	}
	var n int64
	for _, o := range olds {
		tr, err := s.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(o.key), "=", o.rev)).Then(clientv3.OpDelete(o.key)).Commit()
		if err != nil {
			return n, fmt.Errorf("expire idempotency keys: %w", err)
		}
		if tr.Succeeded {
			n++
		}
	}
	return n, nil
}

// Empty reports whether the store holds nothing under its prefix (what
// `replan store copy` checks of its destination); otherwise it names a
// key found.
func (s *EtcdStore) Empty(ctx context.Context) (bool, string, error) {
	r, err := s.cli.Get(ctx, s.p, clientv3.WithPrefix(), clientv3.WithLimit(1), clientv3.WithKeysOnly())
	if err != nil {
		return false, "", err
	}
	if len(r.Kvs) == 0 {
		return true, "", nil
	}
	return false, string(r.Kvs[0].Key), nil
}

// Clear deletes everything under the store's prefix.
func (s *EtcdStore) Clear(ctx context.Context) (int64, error) {
	r, err := s.cli.Delete(ctx, s.p, clientv3.WithPrefix())
	if err != nil {
		return 0, err
	}
	return r.Deleted, nil
}

var (
	_ Store            = (*EtcdStore)(nil)
	_ EpochStore       = (*EtcdStore)(nil)
	_ ownersStore      = (*EtcdStore)(nil)
	_ launchStore      = (*EtcdStore)(nil)
	_ jobOwnerStore    = (*EtcdStore)(nil)
	_ drainStore       = (*EtcdStore)(nil)
	_ idempotencyStore = (*EtcdStore)(nil)
)
