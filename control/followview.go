package control

// A follower's view of the store (issue 27; docs/ha.md, "Followers"): the
// records the API's reads of stored data need (jobs, their history,
// owners and decisions, events), kept in memory by an etcd watch on the
// store's prefix, so that a follower answers GET /v1/jobs, GET
// /v1/jobs/{id} and GET /v1/events itself, also while no daemon leads.
//
//   - The view lists the prefix at one revision R, then watches it from
//     R+1. A watch that ends (compaction of the revisions it needs, etcd
//     cancelling it because its member lost the raft leader, a broken
//     connection) makes the view stale; it lists again and watches anew,
//     every viewRetry while that fails.
//   - The view asks etcd for a progress notification every
//     viewProgressEvery: etcd sends one once every change up to its
//     current revision was delivered, so the view knows when it was last
//     current (Confirmed). It is current while its watch runs and that was
//     within viewCurrentFor.
//   - The reads are EtcdStore's own (the same key layout, decoding and
//     order) on the view instead of etcd: FollowView.Store.
//
// The follower answers from a current view, with HeaderViewRevision and
// the other view headers (viewReads); from a stale view only when no
// leader answers, saying so; otherwise it forwards as before.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The headers of an answer a follower took from its view.
const (
	// HeaderViewRevision is the etcd revision the view held when the
	// answer was read from it: every change up to it is in the answer.
	HeaderViewRevision = "X-Replan-View-Revision"
	// HeaderView is "current" (etcd confirmed the view up to date within
	// the last viewCurrentFor) or "stale" (HeaderViewStale says why).
	HeaderView = "X-Replan-View"
	// HeaderViewConfirmed is when etcd last confirmed that the view held
	// every change (RFC 3339); HeaderViewAge how long ago, in seconds.
	HeaderViewConfirmed = "X-Replan-View-Confirmed"
	HeaderViewAge       = "X-Replan-View-Age"
	// HeaderViewStale says why a stale view is not current.
	HeaderViewStale = "X-Replan-View-Stale"
	// HeaderViewOmits lists what an answer from the view lacks that the
	// leader's would carry (a running job's live figures).
	HeaderViewOmits = "X-Replan-View-Omits"
)

var (
	// viewProgressEvery is how often the view asks etcd to confirm it.
	viewProgressEvery = time.Second
	// viewCurrentFor is how long a confirmation keeps the view current.
	viewCurrentFor = 3 * time.Second
	// viewRetry is the pause before listing again after a failed watch.
	viewRetry = 500 * time.Millisecond
	// viewCatchUp bounds how long a write forwarded by a follower waits
	// for its view to hold it (forwardWrite).
	viewCatchUp = 5 * time.Second
)

// viewSegments are the key segments (under the prefix) the view keeps:
// what GET /v1/jobs, /v1/jobs/{id} and /v1/events read.
var viewSegments = []string{"jobs", "history", "owners", "jobdecisions", "events"}

// FollowView is a follower's copy of the store's records that the API's
// reads use, fed by an etcd watch. Run feeds it; Store reads it.
type FollowView struct {
	cli *clientv3.Client
	p   string
	log *slog.Logger

	mu        sync.RWMutex
	segs      map[string]*kvSeg
	rev       int64     // every change up to rev is in segs
	synced    bool      // a list was loaded
	watching  bool      // the watch after the last list runs
	confirmed time.Time // when etcd last confirmed rev current
	why       string    // why the last watch ended
	changed   chan struct{}
}

// kvSeg is one segment's keys, in key order.
type kvSeg struct{ kvs []*mvccpb.KeyValue }

func (s *kvSeg) find(key string) (int, bool) {
	i := sort.Search(len(s.kvs), func(i int) bool { return string(s.kvs[i].Key) >= key })
	return i, i < len(s.kvs) && string(s.kvs[i].Key) == key
}

func (s *kvSeg) put(kv *mvccpb.KeyValue) {
	i, ok := s.find(string(kv.Key))
	if ok {
		s.kvs[i] = kv
		return
	}
	s.kvs = append(s.kvs, nil)
	copy(s.kvs[i+1:], s.kvs[i:])
	s.kvs[i] = kv
}

func (s *kvSeg) del(key string) {
	if i, ok := s.find(key); ok {
		s.kvs = append(s.kvs[:i], s.kvs[i+1:]...)
	}
}

// NewFollowView is the view of the store under prefix (EtcdConfig.Prefix)
// on cli; Run feeds it.
func NewFollowView(cli *clientv3.Client, prefix string, log *slog.Logger) *FollowView {
	if prefix == "" {
		prefix = DefaultEtcdPrefix
	}
	if !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &FollowView{cli: cli, p: prefix, log: log, segs: map[string]*kvSeg{}, changed: make(chan struct{}), why: "not listed yet"}
}

// Store is the EtcdStore whose reads (GetJob, ListJobs, History,
// Decisions, Events, JobOwner, JobOwners) come from the view. Only those:
// it writes nothing, and any other read finds nothing.
func (v *FollowView) Store() *EtcdStore { return &EtcdStore{rd: v, p: v.p} }

// ViewState is what a view knows of itself.
type ViewState struct {
	Synced    bool // a list was loaded: the view can answer
	Current   bool
	Rev       int64
	Confirmed time.Time
	// Why the view is not current ("" when it is).
	Why string
}

// State is the view's state now.
func (v *FollowView) State() ViewState {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.stateLocked(time.Now())
}

func (v *FollowView) stateLocked(now time.Time) ViewState {
	st := ViewState{Synced: v.synced, Rev: v.rev, Confirmed: v.confirmed}
	age := now.Sub(v.confirmed)
	switch {
	case !v.synced:
		st.Why = v.why
	case !v.watching:
		st.Why = fmt.Sprintf("the watch of etcd ended (%s); listing again", v.why)
	case age > viewCurrentFor:
		st.Why = fmt.Sprintf("etcd has not confirmed the view for %.1f s (a member without quorum, or out of reach)", age.Seconds())
	default:
		st.Current = true
	}
	return st
}

// WaitRev waits until the view holds revision rev (or ctx ends).
func (v *FollowView) WaitRev(ctx context.Context, rev int64) error {
	for {
		v.mu.RLock()
		ok, ch := v.rev >= rev, v.changed
		v.mu.RUnlock()
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ch:
		}
	}
}

// Run feeds the view until ctx ends: list, watch, and again when the
// watch ends.
func (v *FollowView) Run(ctx context.Context) {
	last := ""
	for ctx.Err() == nil {
		began := time.Now()
		err := v.follow(ctx)
		if ctx.Err() != nil {
			return
		}
		v.mu.Lock()
		v.watching, v.why = false, err.Error()
		if v.confirmed.After(began) {
			last = "" // it listed and watched meanwhile: a new failure
		}
		v.mu.Unlock()
		if err.Error() != last { // once per cause, not at every retry
			v.log.Warn("follower's view: the watch of the store ended; listing again", "err", err)
			last = err.Error()
		}
		select {
		case <-ctx.Done():
		case <-time.After(viewRetry):
		}
	}
}

// follow lists the prefix and watches it until the watch ends.
func (v *FollowView) follow(ctx context.Context) error {
	// WithRequireLeader: etcd cancels the watch when its member loses
	// the raft leader (no quorum) instead of leaving it silent.
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	lctx, lcancel := context.WithTimeout(wctx, 30*time.Second)
	segs, rev, err := v.list(lctx)
	lcancel()
	if err != nil {
		return fmt.Errorf("list %s: %w", v.p, err)
	}
	v.mu.Lock()
	v.segs, v.rev, v.synced, v.watching, v.confirmed, v.why = segs, rev, true, true, time.Now(), ""
	v.bumpLocked()
	v.mu.Unlock()
	if viewListedHook != nil {
		viewListedHook(rev)
	}
	wch := v.cli.Watch(wctx, v.p, clientv3.WithPrefix(), clientv3.WithRev(rev+1), clientv3.WithProgressNotify())
	tick := time.NewTicker(viewProgressEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
			if err := v.cli.RequestProgress(wctx); err != nil {
				return fmt.Errorf("progress request: %w", err)
			}
		case wr, ok := <-wch:
			if !ok {
				return errors.New("the watch channel closed")
			}
			if err := wr.Err(); err != nil {
				return err
			}
			v.apply(wr)
		}
	}
}

// viewListedHook, when set (tests), runs between a list at rev and the
// watch from rev+1.
var viewListedHook func(rev int64)

// list reads every key of the kept segments at one revision.
func (v *FollowView) list(ctx context.Context) (map[string]*kvSeg, int64, error) {
	segs := map[string]*kvSeg{}
	var rev int64
	for _, name := range viewSegments {
		seg := &kvSeg{}
		segs[name] = seg
		from := v.p + name + "/"
		key, end := from, clientv3.GetPrefixRangeEnd(from)
		for {
			opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(etcdScanPage)}
			if rev > 0 {
				opts = append(opts, clientv3.WithRev(rev))
			}
			r, err := v.cli.Get(ctx, key, opts...)
			if err != nil {
				return nil, 0, err
			}
			if rev == 0 {
				rev = r.Header.Revision
			}
			seg.kvs = append(seg.kvs, r.Kvs...)
			if !r.More || len(r.Kvs) == 0 {
				break
			}
			key = string(r.Kvs[len(r.Kvs)-1].Key) + "\x00"
		}
	}
	return segs, rev, nil
}

// apply applies a watch response: its changes, or a progress
// notification (every change up to its revision was delivered).
func (v *FollowView) apply(wr clientv3.WatchResponse) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if wr.IsProgressNotify() {
		v.rev = max(v.rev, wr.Header.Revision)
		v.confirmed = time.Now()
		v.bumpLocked()
		return
	}
	for _, ev := range wr.Events {
		seg := v.segs[v.segment(string(ev.Kv.Key))]
		if seg != nil {
			if ev.Type == clientv3.EventTypeDelete {
				seg.del(string(ev.Kv.Key))
			} else {
				seg.put(ev.Kv)
			}
		}
		v.rev = max(v.rev, ev.Kv.ModRevision)
	}
	v.bumpLocked()
}

func (v *FollowView) bumpLocked() {
	close(v.changed)
	v.changed = make(chan struct{})
}

// segment is key's first segment under the prefix.
func (v *FollowView) segment(key string) string {
	s, _, _ := strings.Cut(strings.TrimPrefix(key, v.p), "/")
	return s
}

// get implements etcdReader on the view.
func (v *FollowView) get(ctx context.Context, key, end string, limit int64, desc bool) ([]*mvccpb.KeyValue, error) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	seg, err := v.segFor(key)
	if err != nil {
		return nil, err
	}
	if end == "" {
		if i, ok := seg.find(key); ok {
			return []*mvccpb.KeyValue{seg.kvs[i]}, nil
		}
		return nil, nil
	}
	i, _ := seg.find(key)
	j, _ := seg.find(end)
	out := make([]*mvccpb.KeyValue, 0, j-i)
	if desc {
		for k := j - 1; k >= i && (limit <= 0 || int64(len(out)) < limit); k-- {
			out = append(out, seg.kvs[k])
		}
		return out, nil
	}
	for k := i; k < j && (limit <= 0 || int64(len(out)) < limit); k++ {
		out = append(out, seg.kvs[k])
	}
	return out, nil
}

// scan implements etcdReader on the view: every key at one revision of
// the view.
func (v *FollowView) scan(ctx context.Context, from, end string, fn func(*mvccpb.KeyValue) (bool, error)) error {
	v.mu.RLock()
	defer v.mu.RUnlock()
	seg, err := v.segFor(from)
	if err != nil {
		return err
	}
	i, _ := seg.find(from)
	j, _ := seg.find(end)
	for k := i; k < j; k++ {
		more, err := fn(seg.kvs[k])
		if err != nil || !more {
			return err
		}
	}
	return nil
}

// segFor is key's segment; the caller holds v.mu.
func (v *FollowView) segFor(key string) (*kvSeg, error) {
	if !v.synced {
		return nil, fmt.Errorf("%w: the follower's view of the store is not loaded yet", ErrStore)
	}
	name := v.segment(key)
	if seg, ok := v.segs[name]; ok {
		return seg, nil
	}
	return nil, fmt.Errorf("%w: the follower's view does not hold %s (it keeps %s)", ErrStore, key, strings.Join(viewSegments, ", "))
}

// viewReads answers r from the follower's view: read gives the answer
// and what it lacks that the leader's would carry (live figures). A
// current, complete answer is the view's. Otherwise the leader's answer
// is better (fresher, or complete): r is forwarded, and answered from the
// view only when no leader answers it (HeaderViewStale, HeaderViewOmits
// say what it is).
func (f *Follower) viewReads(w http.ResponseWriter, r *http.Request, read func(st *EtcdStore) (any, []string, error)) {
	vs := f.View.State()
	if !vs.Synced {
		f.serve(w, r)
		return
	}
	if vs.Current {
		body, lacks, err := read(f.View.Store())
		if err != nil || len(lacks) == 0 {
			writeView(w, vs, body, lacks, err)
			return
		}
	}
	if f.forwardRead(w, r) {
		return
	}
	vs = f.View.State()
	body, lacks, err := read(f.View.Store())
	writeView(w, vs, body, lacks, err)
}

// forwardRead forwards the read r to the leader and reports whether it
// answered: false, with nothing written, when there is no leader or it
// did not answer (a read may be answered elsewhere).
func (f *Follower) forwardRead(w http.ResponseWriter, r *http.Request) bool {
	leader, err := f.leader(r.Context())
	if err != nil {
		return false
	}
	rec := &bufferedResponse{header: http.Header{}}
	f.forwardTo(rec, r, leader)
	if (rec.code == http.StatusServiceUnavailable && rec.header.Get(HeaderNoLeader) != "") || rec.code == http.StatusBadGateway {
		return false
	}
	for k, v := range rec.header {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.code)
	w.Write(rec.body)
	return true
}

// forwardWrite forwards the write r with p and, once the leader answered
// it, waits (at most viewCatchUp) until the view holds etcd's revision of
// that moment, which has the write: a read through this follower after a
// write through it sees the write.
func (f *Follower) forwardWrite(w http.ResponseWriter, r *http.Request, p http.Handler) {
	rec := &bufferedResponse{header: http.Header{}}
	p.ServeHTTP(rec, r)
	if rec.code < 300 {
		ctx, cancel := context.WithTimeout(r.Context(), viewCatchUp)
		if resp, err := f.View.cli.Get(ctx, f.View.p+"counters/", clientv3.WithPrefix(), clientv3.WithCountOnly()); err == nil {
			f.View.WaitRev(ctx, resp.Header.Revision)
		}
		cancel()
	}
	for k, v := range rec.header {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.code)
	w.Write(rec.body)
}

// writeView answers with body (or err) read from a view in state vs.
func writeView(w http.ResponseWriter, vs ViewState, body any, lacks []string, err error) {
	setViewHeaders(w.Header(), vs, time.Now())
	if len(lacks) > 0 {
		w.Header().Set(HeaderViewOmits, strings.Join(lacks, ", "))
	}
	if err != nil {
		writeErr(w, statusOf(err), err)
		return
	}
	writeJSON(w, http.StatusOK, body)
}

func setViewHeaders(h http.Header, vs ViewState, now time.Time) {
	h.Set(HeaderViewRevision, strconv.FormatInt(vs.Rev, 10))
	h.Set(HeaderViewConfirmed, vs.Confirmed.UTC().Format(time.RFC3339Nano))
	h.Set(HeaderViewAge, strconv.FormatFloat(now.Sub(vs.Confirmed).Seconds(), 'f', 3, 64))
	if vs.Current {
		h.Set(HeaderView, "current")
		return
	}
	h.Set(HeaderView, "stale")
	h.Set(HeaderViewStale, vs.Why)
}

// viewJobs is GET /v1/jobs from the view: listJobs, as the leader reads
// the store (running jobs' progress as last stored).
func (f *Follower) viewJobs(w http.ResponseWriter, r *http.Request) {
	rf, err := parseReadFilter(r.URL.Query())
	if err != nil {
		writeErr(w, http.StatusBadRequest, err)
		return
	}
	f.viewReads(w, r, func(st *EtcdStore) (any, []string, error) {
		jobs, err := listJobs(r.Context(), st, rf, &f.red, nil)
		return jobs, nil, err
	})
}

// viewJob is GET /v1/jobs/{id} from the view: jobDetail, as the leader
// reads the store. A running job's throughput, checkpointing and latest
// progress live in the leader's memory: its detail is the leader's; with
// no leader it is the view's without them (HeaderViewOmits).
func (f *Follower) viewJob(w http.ResponseWriter, r *http.Request) {
	f.viewReads(w, r, func(st *EtcdStore) (any, []string, error) {
		jd, err := jobDetail(r.Context(), st, f.API.Access, nil, r.PathValue("id"))
		if err == nil && jd.Job.State == StateRunning {
			return jd, []string{"throughput", "checkpointing", "memory", "progress since last stored"}, nil
		}
		return jd, nil, err
	})
}

// viewEvents is GET /v1/events from the view, without ?wait (a long poll
// is forwarded).
func (f *Follower) viewEvents(w http.ResponseWriter, r *http.Request) {
	if wait, _ := time.ParseDuration(r.URL.Query().Get("wait")); wait > 0 {
		f.serve(w, r)
		return
	}
	after, _ := strconv.ParseInt(r.URL.Query().Get("after"), 10, 64)
	rf, err := parseReadFilter(r.URL.Query())
	if err != nil {
		writeErr(w, http.StatusBadRequest, err)
		return
	}
	f.viewReads(w, r, func(st *EtcdStore) (any, []string, error) {
		evs, _, err := filteredEvents(r.Context(), st, after, 1000, rf)
		evs = eventsFor(r.Context(), f.API.Access, st, evs) // redact.go
		if evs == nil {
			evs = []Event{}
		}
		return evs, nil, err
	})
}

// viewWarning is what a client says of an answer with header h taken
// from a follower's view that is stale or lacks live figures ("" for any
// other answer).
func viewWarning(h http.Header) string {
	var out []string
	if h.Get(HeaderView) == "stale" {
		out = append(out, fmt.Sprintf("this answer comes from a follower's view of the store that is not current: %s; it holds every change up to etcd revision %s, last confirmed current %s s ago (%s)",
			h.Get(HeaderViewStale), h.Get(HeaderViewRevision), h.Get(HeaderViewAge), h.Get(HeaderViewConfirmed)))
	}
	if o := h.Get(HeaderViewOmits); o != "" {
		out = append(out, "this answer comes from a follower's view of the store, with no leader to ask: it lacks what only the leader knows ("+o+")")
	}
	return strings.Join(out, "; ")
}
