package control

// Encoded reads: GET /v1/queue and GET /v1/jobs?state=... (waiting and
// running states only) answer with JSON encoded once per published view,
// not once per request. The queue is every waiting job with its spec
// (5,000 jobs are about 5.4 MB of JSON): encoding it took most of a
// read's time.
//
//   - Each read key (the queue; each jobs filter) keeps its newest fully
//     encoded body with the view (its sequence number) and the start
//     estimates' generation it was encoded from.
//   - A read shows every client operation (submit, cancel, hold,
//     release, drain, undrain), every change that carried an event and
//     the start estimates published before it began; what changed without
//     an event (progress figures, wait reasons, the time) may lag
//     (lagsLittle). It answers with the kept body when that
//     body's view has every such operation; when the view lacks only
//     submits, with the kept body and the submitted jobs appended as
//     submitted (encSubmitsLocked); otherwise it waits for an encoding
//     that has them (extending the kept body along the views' chain of
//     submits, joining an encoding in progress that covers its view, or
//     encoding the newest view). Whatever it answers with, a newer view
//     is then encoded in the background (stale while revalidate). With
//     rounds back to back, a 5,000-job queue read that waited for each
//     round's encoding had a p99 of 30-50 ms.
//   - Every publish starts, in the background, the re-encode of each key
//     read since its last encoding began (within EncodeKeepWarm), so the
//     encoding a read needs is usually done or under way when it comes;
//     nobody reading costs nothing. The queue is encoded ahead at the
//     first publish.
//   - Every entry's as_of (and the X-Replan-As-Of header) is the time of
//     the view the body was encoded from.
//   - Job records are encoded once per content: the bytes of each record
//     (with its spec) are kept, keyed by job id, and reused while the
//     record is unchanged (sameRecord); a re-encode splices them.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/replan/replan/sched"
)

// EncodeKeepWarm is how long after its last read a key is re-encoded at
// every publish (in the background).
var EncodeKeepWarm = 10 * time.Second

// maxEncKeys bounds the cached keys (jobs filters come from clients).
const maxEncKeys = 32

type encCache struct {
	mu      sync.Mutex // guards entries and their fields
	entries map[string]*encEntry
	// buildMu serialises full encodings (extensions run beside them).
	buildMu sync.Mutex
	recsMu  sync.Mutex // guards recs
	recs    map[string]encRec
	// redact hides env values in the encoded records.
	redact redactor
	// extended counts encodings made by extending the one before (tests).
	extended atomic.Int64
}

// encRec is a job record and its JSON.
type encRec struct {
	rec JobRecord
	b   []byte
}

// encEntry is one read key's newest encoding.
type encEntry struct {
	build func(v *readView) ([]byte, error)
	// extend makes v's body from prev, the body of the view v was made
	// from by appending its last n jobs (publishAdded: a submit).
	extend func(prev []byte, v *readView, n int) ([]byte, error)
	// subs makes, from prev (base's body, or one made by subs from it),
	// that body with the jobs submitted since (Daemon.subLog); an error
	// when they cannot be appended in order.
	subs func(prev []byte, base *readView, s []submitted) ([]byte, error)
	// hyb is the newest body subs made from view's body, and the client
	// operations it has (valid while hyb.base is view).
	hyb struct {
		base *readView
		ops  uint64
		body []byte
	}
	view *readView // the view body was encoded from
	gen  uint64    // the start estimates' generation it had
	body []byte
	err  error
	done bool // body (or err) is set
	// read: a read came since the last encoding began; only then does a
	// publish re-encode (at most one encoding per read).
	read     bool
	building bool // a background re-encode runs
	dirty    bool // another one was asked for meanwhile
	lastRead time.Time
}

// etaGen grows whenever the start estimates (withETA) may have changed.
func (d *Daemon) etaGen() uint64 {
	d.eta.mu.Lock()
	defer d.eta.mu.Unlock()
	g := uint64(d.eta.runs) * 2
	if d.eta.newPolicy != nil {
		g++
	}
	return g
}

// encoded returns key's encoding of a view at least as new as the one
// published when it was called, and that view's time; it waits only when
// the kept encoding is older.
func (d *Daemon) encoded(key string, build func(v *readView) ([]byte, error), extend func(prev []byte, v *readView, n int) ([]byte, error),
	subs func(prev []byte, base *readView, s []submitted) ([]byte, error)) ([]byte, time.Time, error) {
	var seq, ops, otherOps, evs uint64
	if v := d.published.Load(); v != nil {
		seq, ops, otherOps, evs = v.seq, v.ops, v.otherOps, v.evs
	}
	gen := d.etaGen()
	c := &d.enc
	c.mu.Lock()
	if c.entries == nil {
		c.entries = map[string]*encEntry{}
	}
	e := c.entries[key]
	if e == nil {
		if len(c.entries) >= maxEncKeys {
			for k, old := range c.entries {
				if !old.building {
					delete(c.entries, k)
					break
				}
			}
		}
		e = &encEntry{build: build, extend: extend, subs: subs}
		c.entries[key] = e
	}
	e.lastRead, e.read = time.Now(), true
	if e.done && e.view.seq >= seq && e.gen >= gen {
		body, at, err := e.body, e.view.at, e.err
		if !d.encFresh(e) {
			d.encRefreshLocked(e) // the view is stale: newer data comes
		}
		c.mu.Unlock()
		return body, at, err
	}
	if e.done && e.err == nil && e.view.ops >= ops && lagsLittle(e, evs, gen) {
		// Every client operation and every change with an event
		// published before this read is in the kept body; what it lacks
		// changed without an event (progress, wait reasons, the time).
		// It answers now, as of its view's time, and the newest view is
		// encoded in the background.
		body, at := e.body, e.view.at
		d.encRefreshLocked(e)
		c.mu.Unlock()
		return body, at, nil
	}
	if body, at, ok := d.encExtendLocked(e); ok {
		c.mu.Unlock()
		return body, at, nil
	}
	if body, at, ok := d.encSubmitsLocked(e, ops, otherOps, evs, gen); ok {
		c.mu.Unlock()
		return body, at, nil
	}
	c.mu.Unlock()
	d.encBuild(e, false, seq, gen)
	c.mu.Lock()
	defer c.mu.Unlock()
	return e.body, e.view.at, e.err
}

// encFresh reports whether e was encoded from the newest view; the
// caller holds d.enc.mu.
func (d *Daemon) encFresh(e *encEntry) bool {
	return e.done && e.view == d.published.Load() && !d.stale.Load() && e.gen == d.etaGen()
}

// encKickLocked starts a background re-encode of e (or asks the running
// one for another); the caller holds d.enc.mu.
func (d *Daemon) encKickLocked(e *encEntry) {
	if e.building {
		e.dirty = true
		return
	}
	e.building = true
	go func() {
		for {
			d.encBuild(e, true, 0, 0)
			d.enc.mu.Lock()
			if !e.dirty {
				e.building = false
				d.enc.mu.Unlock()
				return
			}
			e.dirty = false
			d.enc.mu.Unlock()
		}
	}()
}

// encKickWarm re-encodes, in the background, every key read since its
// last encoding began and within EncodeKeepWarm; called at every publish
// (the caller may hold d.mu).
func (d *Daemon) encKickWarm() {
	c := &d.enc
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries == nil {
		// The queue is encoded once ahead, so that even the first read
		// finds it encoded.
		e := &encEntry{build: d.encodeQueue, extend: d.extendQueue, subs: d.submitsQueue}
		c.entries = map[string]*encEntry{"queue": e}
		d.encKickLocked(e)
		return
	}
	for _, e := range c.entries {
		if e.done && e.read && time.Since(e.lastRead) < EncodeKeepWarm {
			d.encKickLocked(e)
		}
	}
}

// encExtendLocked brings e up to the published view by extending its
// body when that view was made from e's by submits (a copy and the new
// jobs: no full encoding, and no wait for one under way). It is called
// with d.enc.mu held and returns with it held (it lets it go while it
// encodes).
func (d *Daemon) encExtendLocked(e *encEntry) ([]byte, time.Time, bool) {
	c := &d.enc
	v := d.published.Load()
	if !e.done || e.err != nil || e.extend == nil || v == nil || e.view.seq < v.chain || e.view.seq >= v.seq {
		return nil, time.Time{}, false
	}
	prev, pv, pgen := e.body, e.view, e.gen
	c.mu.Unlock()
	g := d.etaGen()
	var body []byte
	err := errors.New("estimates changed")
	if g == pgen {
		body, err = e.extend(prev, v, int(v.seq-pv.seq))
	}
	c.mu.Lock()
	if err != nil {
		return nil, time.Time{}, false
	}
	c.extended.Add(1)
	if e.view.seq < v.seq {
		e.view, e.body = v, body
	}
	return body, v.at, true
}

// lagsLittle reports whether e's body may answer, without waiting, a
// read that began when evs changes with events had been published and
// the start estimates were at generation gen: it has every change a user
// can have seen in the event stream (starts, stops, finishes, requeues,
// drains, cancels, retuned timers…) and the newest estimates; what it
// may miss is what changed without an event (progress figures, wait
// reasons, the time), and its view is less than MaxReadLag old. The
// caller holds d.enc.mu.
func lagsLittle(e *encEntry, evs, gen uint64) bool {
	return e.view.evs >= evs && e.gen >= gen && time.Since(e.view.built) < MaxReadLag
}

// MaxReadLag bounds how old a kept encoding's view may be to answer a
// read that newer views exist for (lagsLittle): a key read now and then
// is encoded afresh, so its wait reasons and progress are of now.
var MaxReadLag = time.Second

// encSubmitsLocked answers a read that needs client operations up to ops
// when the kept body lacks only submits (no other client operation came
// after its view, otherOps): the kept body with the submitted jobs
// appended, as submitted — what publishAdded would have made from that
// view. A round's changes since are not waited for, as in encoded, and
// the newest view is encoded in the background. It is called with
// d.enc.mu held and returns with it held (it lets it go while it
// appends).
func (d *Daemon) encSubmitsLocked(e *encEntry, ops, otherOps, evs, gen uint64) ([]byte, time.Time, bool) {
	c := &d.enc
	if !e.done || e.err != nil || e.subs == nil || e.view == nil || otherOps > e.view.ops || !lagsLittle(e, evs, gen) {
		return nil, time.Time{}, false
	}
	base, prev, have := e.view, e.body, e.view.ops
	if e.hyb.base == base && e.hyb.ops > have {
		prev, have = e.hyb.body, e.hyb.ops
	}
	if have >= ops {
		d.encRefreshLocked(e)
		return prev, base.at, true
	}
	s, ok := d.submitsIn(have, ops)
	if !ok {
		return nil, time.Time{}, false
	}
	c.mu.Unlock()
	body, err := e.subs(prev, base, s)
	c.mu.Lock()
	if err != nil {
		return nil, time.Time{}, false
	}
	c.extended.Add(1)
	if e.view == base && (e.hyb.base != base || e.hyb.ops < ops) {
		e.hyb.base, e.hyb.ops, e.hyb.body = base, ops, body
	}
	d.encRefreshLocked(e)
	return body, base.at, true
}

// encRefreshLocked has e, answered from an older view, re-encoded from
// the newest: by the next publish when one came within the last 100 ms
// (rounds are running; e was just read, so that publish re-encodes it),
// else now, in the background. Kicking it at each read put its encoding
// in the middle of the client's next read. The caller holds d.enc.mu.
func (d *Daemon) encRefreshLocked(e *encEntry) {
	if time.Since(time.Unix(0, d.lastPublish.Load())) < 100*time.Millisecond {
		return
	}
	d.encKickLocked(e)
}

// encBuild encodes the published view for e unless e already has it;
// with refresh, a view marked stale is rebuilt first (the background
// re-encodes; a waiting read takes the published view as it is). A view
// made from e's by appending jobs (submits) is encoded by extending e's
// body. A read passes the view sequence and estimate generation it needs
// (those published when it began): when the encoding it waited for (a
// background one under way) has them, it is done, even if a round
// published a newer view meanwhile. It must not be called with d.mu or
// d.enc.mu held.
func (d *Daemon) encBuild(e *encEntry, refresh bool, needSeq, needGen uint64) {
	c := &d.enc
	c.buildMu.Lock()
	defer c.buildMu.Unlock()
	if !refresh {
		c.mu.Lock()
		ok := e.done && e.view != nil && e.view.seq >= needSeq && e.gen >= needGen
		c.mu.Unlock()
		if ok {
			return
		}
	}
	v := d.published.Load()
	if refresh || v == nil {
		v = d.view()
	}
	g := d.etaGen() // before encoding: a newer estimate makes it stale, never the reverse
	c.mu.Lock()
	if e.done && e.view == v && e.gen == g {
		c.mu.Unlock()
		return
	}
	e.read = false
	prev, pv, pgen, perr, pdone := e.body, e.view, e.gen, e.err, e.done
	c.mu.Unlock()
	var body []byte
	var err error
	if pdone && perr == nil && pgen == g && e.extend != nil && pv.seq >= v.chain && pv.seq < v.seq {
		body, err = e.extend(prev, v, int(v.seq-pv.seq))
		c.extended.Add(1)
	} else {
		body, err = e.build(v)
	}
	c.evictRecs(v)
	c.mu.Lock()
	e.view, e.gen, e.body, e.err, e.done = v, g, body, err, true
	c.mu.Unlock()
}

// record returns rec's JSON, encoding it only when it changed since it
// was last encoded. The caller holds c.buildMu.
func (c *encCache) record(rec *JobRecord) ([]byte, error) {
	c.recsMu.Lock()
	defer c.recsMu.Unlock()
	if c.recs == nil {
		c.recs = map[string]encRec{}
	}
	if r, ok := c.recs[rec.ID]; ok && sameRecord(&r.rec, rec) {
		return r.b, nil
	}
	pub := *rec // lists carry env keys only and no log lines (redact.go)
	pub.Spec = c.redact.spec(rec.ID, rec.Spec)
	hideRecordLogs(&pub)
	b, err := json.Marshal(&pub)
	if err != nil {
		return nil, fmt.Errorf("encode job %s: %w", rec.ID, err)
	}
	c.recs[rec.ID] = encRec{rec: *rec, b: b}
	return b, nil
}

// evictRecs forgets the encoded records of jobs no longer in v (ended
// jobs) once there are many. The caller holds c.buildMu.
func (c *encCache) evictRecs(v *readView) {
	c.recsMu.Lock()
	defer c.recsMu.Unlock()
	if len(c.recs) <= len(v.jobs)+1024 {
		return
	}
	for id := range c.recs {
		if _, ok := slices.BinarySearch(v.jobs, id); !ok {
			delete(c.recs, id)
		}
	}
}

// sameRecord reports whether a and b encode the same (every field of
// JobRecord; TestSameRecordSeesEveryField keeps it complete).
func sameRecord(a, b *JobRecord) bool {
	return a.ID == b.ID && a.Name == b.Name && a.Tenant == b.Tenant && a.Class == b.Class &&
		sameBytes(a.Spec, b.Spec) && a.State == b.State && a.Reason == b.Reason &&
		sameBytes(a.Plan, b.Plan) && sameBytes(a.Placement, b.Placement) &&
		sameTime(a.SubmittedAt, b.SubmittedAt) && sameTime(a.StartedAt, b.StartedAt) && sameTime(a.FinishedAt, b.FinishedAt) &&
		a.Iterations == b.Iterations && a.Checkpoint == b.Checkpoint && a.Restarts == b.Restarts &&
		a.Failures == b.Failures && a.Attempt == b.Attempt && a.Version == b.Version
}

func sameBytes(a, b []byte) bool {
	if len(a) != len(b) || (a == nil) != (b == nil) {
		return false
	}
	if len(a) == 0 || &a[0] == &b[0] {
		return true
	}
	return bytes.Equal(a, b)
}

// sameTime: equal instants in the same location (they encode the same).
func sameTime(a, b time.Time) bool { return a.Equal(b) && a.Location() == b.Location() }

// encodeQueue is GET /v1/queue's body for view v: the same bytes as
// encoding d.withETA(v) with json.Encoder (TestEncodedReadsEqualFreshEncoding),
// made from each job record's cached JSON and the rest of its entry
// written by appendQueueRest. The caller holds d.enc.buildMu.
func (d *Daemon) encodeQueue(v *readView) ([]byte, error) {
	return d.enc.encodeQueue(d.withETA(v))
}

// extendQueue is encodeQueue for a view v made by appending its last n
// entries to the view whose body is prev. The caller holds
// d.enc.buildMu.
func (d *Daemon) extendQueue(prev []byte, v *readView, n int) ([]byte, error) {
	tail := d.withETA(&readView{queue: v.queue[len(v.queue)-n:], at: v.at})
	buf, err := d.enc.appendQueue(reopen(prev, n*1400), tail)
	if err != nil {
		return nil, err
	}
	return append(buf, "]\n"...), nil
}

// submitsQueue is prev, the queue's body of base (or one made by
// submitsQueue from it), with the jobs of s appended as submitted: their
// entries as of their submission ("not scheduled yet", waiting 0).
func (d *Daemon) submitsQueue(prev []byte, base *readView, s []submitted) ([]byte, error) {
	last := ""
	if n := len(base.queue); n > 0 {
		last = base.queue[n-1].Job.ID
	}
	entries := make([]QueueEntry, len(s))
	for i := range s {
		if s[i].rec.ID <= last {
			return nil, errors.New("submitted jobs out of id order")
		}
		last = s[i].rec.ID
		at := s[i].rec.SubmittedAt
		entries[i] = d.withETA(&readView{queue: []QueueEntry{{Job: s[i].rec, GPUs: s[i].gpus, Reason: "not scheduled yet"}}, at: at})[0]
	}
	buf, err := d.enc.appendQueue(reopen(prev, len(s)*1400), entries)
	if err != nil {
		return nil, err
	}
	return append(buf, "]\n"...), nil
}

// submitsJobs is submitsQueue for a GET /v1/jobs filter: the submitted
// records f selects, appended in the store's order (prev itself when f
// selects none of them).
func (d *Daemon) submitsJobs(prev []byte, base *readView, s []submitted, f JobFilter) ([]byte, error) {
	var recs []JobRecord
	for i := range s {
		if slices.Contains(f.States, s[i].rec.State) && (f.Tenant == "" || s[i].rec.Tenant == f.Tenant) {
			recs = append(recs, s[i].rec)
		}
	}
	if len(recs) == 0 {
		return prev, nil
	}
	prevRec := (*JobRecord)(nil)
	if n := len(base.recs); n > 0 {
		prevRec = &base.recs[n-1]
	}
	for i := range recs {
		if prevRec != nil && !recLess(prevRec, &recs[i]) {
			return nil, errors.New("submitted jobs out of the store's order")
		}
		prevRec = &recs[i]
	}
	buf, err := d.enc.appendJobs(reopen(prev, len(recs)*1400), recs, f)
	if err != nil {
		return nil, err
	}
	return append(buf, "]\n"...), nil
}

// reopen copies a JSON array body ("[...]\n") without its end, with room
// for extra bytes more.
func reopen(body []byte, extra int) []byte {
	n := len(body) - 2
	// An append of a make: one allocation, the body copied and only the
	// extra room cleared. make then copy cleared all of it first (a 6 MB
	// queue: 3.9 ms against 1.8 ms here).
	return append(body[:n:n], make([]byte, extra)...)[:n]
}

// encodeQueue encodes q; the caller holds c.buildMu.
func (c *encCache) encodeQueue(q []QueueEntry) ([]byte, error) {
	buf := make([]byte, 0, len(q)*1400+16)
	buf, err := c.appendQueue(append(buf, '['), q)
	if err != nil {
		return nil, err
	}
	return append(buf, "]\n"...), nil
}

// appendQueue appends q's entries to an open JSON array; the caller holds
// c.buildMu.
func (c *encCache) appendQueue(buf []byte, q []QueueEntry) ([]byte, error) {
	strs := map[string][]byte{} // reasons repeat: each encoded once
	var asOf timeMemo           // so does the view's time
	for i := range q {
		if buf[len(buf)-1] != '[' {
			buf = append(buf, ',')
		}
		jb, err := c.record(&q[i].Job)
		if err != nil {
			return nil, err
		}
		buf = append(buf, `{"job":`...)
		buf = append(buf, jb...)
		if buf, err = appendQueueRest(buf, &q[i], strs, &asOf); err != nil {
			return nil, fmt.Errorf("encode queue entry %s: %w", q[i].Job.ID, err)
		}
	}
	return buf, nil
}

// appendQueueRest appends the fields of q after "job", in QueueEntry's
// order and exactly as encoding/json writes them, and the closing brace.
func appendQueueRest(b []byte, q *QueueEntry, strs map[string][]byte, asOf *timeMemo) ([]byte, error) {
	var err error
	b = append(b, `,"gpus":`...)
	b = strconv.AppendInt(b, int64(q.GPUs), 10)
	b = append(b, `,"reason":`...)
	if b, err = appendJSONString(b, q.Reason, strs); err != nil {
		return nil, err
	}
	b = append(b, `,"waiting_s":`...)
	if b, err = appendJSONFloat(b, q.WaitingS); err != nil {
		return nil, err
	}
	if q.Timers != nil {
		b = append(b, `,"timers":`...)
		if b, err = appendTimers(b, q.Timers, strs); err != nil {
			return nil, err
		}
	}
	b = append(b, `,"eta_s":`...)
	if q.ETAS == nil {
		b = append(b, "null"...)
	} else if b, err = appendJSONFloat(b, *q.ETAS); err != nil {
		return nil, err
	}
	b = append(b, `,"eta_at":`...)
	if q.ETAAt == nil {
		b = append(b, "null"...)
	} else if b, err = appendJSONTime(b, *q.ETAAt); err != nil {
		return nil, err
	}
	if q.ETAReason != "" {
		b = append(b, `,"eta_reason":`...)
		if b, err = appendJSONString(b, q.ETAReason, strs); err != nil {
			return nil, err
		}
	}
	b = append(b, `,"as_of":`...)
	if b, err = asOf.append(b, q.AsOf); err != nil {
		return nil, err
	}
	return append(b, '}'), nil
}

// appendTimers appends t as encoding/json writes a sched.JobTimers (its
// fields in order; ServerFrom and RackFrom are not written). Reflection
// cost more than the rest of a queue entry: a queue read re-encodes every
// waiting job's timers after each round.
func appendTimers(b []byte, t *sched.JobTimers, strs map[string][]byte) ([]byte, error) {
	var err error
	b = append(b, `{"job":`...)
	if b, err = appendJSONString(b, t.Job, strs); err != nil {
		return nil, err
	}
	b = append(b, `,"index":`...)
	b = strconv.AppendInt(b, int64(t.Index), 10)
	b = append(b, `,"gpus":`...)
	b = strconv.AppendInt(b, int64(t.GPUs), 10)
	for _, f := range [...]struct {
		key string
		v   float64
	}{{`,"server_timer_s":`, t.ServerTimer}, {`,"rack_timer_s":`, t.RackTimer}, {`,"starved_s":`, t.Starved}} {
		b = append(b, f.key...)
		if b, err = appendJSONFloat(b, f.v); err != nil {
			return nil, err
		}
	}
	b = append(b, `,"accept_tier":`...)
	if b, err = appendJSONString(b, t.AcceptTier.String(), strs); err != nil {
		return nil, err
	}
	b = append(b, `,"why":`...)
	if b, err = appendJSONString(b, t.Why, strs); err != nil {
		return nil, err
	}
	for _, f := range [...]struct {
		key string
		v   float64
	}{{`,"nw_sens":`, t.NwSens}, {`,"loss_rack":`, t.LossRack}, {`,"loss_cross":`, t.LossCross}} {
		b = append(b, f.key...)
		if b, err = appendJSONFloat(b, f.v); err != nil {
			return nil, err
		}
	}
	return append(b, '}'), nil
}

// timeMemo appends a time as appendJSONTime does, remembering the last
// one's encoding (every entry of a view has the view's as_of).
type timeMemo struct {
	t   time.Time
	enc []byte
}

func (m *timeMemo) append(b []byte, t time.Time) ([]byte, error) {
	if m.enc != nil && sameTime(m.t, t) {
		return append(b, m.enc...), nil
	}
	n := len(b)
	b, err := appendJSONTime(b, t)
	if err != nil {
		return nil, err
	}
	m.t, m.enc = t, append([]byte(nil), b[n:]...)
	return b, nil
}

// appendJSONString appends s as encoding/json writes it (HTML-safe
// escapes), remembering each string's encoding in strs.
func appendJSONString(b []byte, s string, strs map[string][]byte) ([]byte, error) {
	if plainJSON(s) {
		b = append(b, '"')
		b = append(b, s...)
		return append(b, '"'), nil
	}
	e, ok := strs[s]
	if !ok {
		var err error
		if e, err = json.Marshal(s); err != nil {
			return nil, err
		}
		strs[s] = e
	}
	return append(b, e...), nil
}

// plainJSON reports whether encoding/json writes s as it is between
// quotes: printable ASCII without '"', '\\' and the HTML-escaped '<', '>'
// and '&'. Most strings of a queue (job IDs, reasons) are.
func plainJSON(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}

// appendJSONFloat appends f as encoding/json writes a float64 (the
// shortest representation; exponent form below 1e-6 and from 1e21).
func appendJSONFloat(b []byte, f float64) ([]byte, error) {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return nil, fmt.Errorf("json: unsupported value: %v", f)
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		// clean up e-09 to e-9, as encoding/json does
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b, nil
}

// appendJSONTime appends t as time.Time's MarshalJSON does.
func appendJSONTime(b []byte, t time.Time) ([]byte, error) {
	if y := t.Year(); y < 0 || y >= 10000 {
		return nil, fmt.Errorf("json: time %v: year outside of range [0,9999]", t)
	}
	b = append(b, '"')
	b = t.AppendFormat(b, time.RFC3339Nano)
	return append(b, '"'), nil
}

// viewJobFilter reports whether f can be answered from the published
// view: it names states and none of them is final (ended jobs are only in
// the store).
func viewJobFilter(f JobFilter) bool {
	if len(f.States) == 0 {
		return false
	}
	for _, s := range f.States {
		if s.Final() {
			return false
		}
	}
	return true
}

// jobsKey names a jobs filter as a read key (states sorted, once each).
func jobsKey(f JobFilter) string {
	st := make([]string, 0, len(f.States))
	for _, s := range f.States {
		st = append(st, string(s))
	}
	sort.Strings(st)
	st = slices.Compact(st)
	return "jobs?state=" + strings.Join(st, ",") + "&tenant=" + f.Tenant
}

// encodeJobs is GET /v1/jobs's body for filter f (viewJobFilter) from view
// v: the records as stored, in the store's order (submission time, id).
// The caller holds d.enc.buildMu.
func (d *Daemon) encodeJobs(v *readView, f JobFilter) ([]byte, error) {
	buf, err := d.enc.appendJobs([]byte{'['}, v.recs, f)
	if err != nil {
		return nil, err
	}
	return append(buf, "]\n"...), nil
}

// extendJobs is encodeJobs for a view v made by appending its last n
// records to the view whose body is prev. The caller holds
// d.enc.buildMu.
func (d *Daemon) extendJobs(prev []byte, v *readView, n int, f JobFilter) ([]byte, error) {
	buf, err := d.enc.appendJobs(reopen(prev, n*1400), v.recs[len(v.recs)-n:], f)
	if err != nil {
		return nil, err
	}
	return append(buf, "]\n"...), nil
}

// appendJobs appends the records of recs that f selects to an open JSON
// array; the caller holds c.buildMu.
func (c *encCache) appendJobs(buf []byte, recs []JobRecord, f JobFilter) ([]byte, error) {
	for i := range recs {
		r := &recs[i]
		if !slices.Contains(f.States, r.State) || (f.Tenant != "" && r.Tenant != f.Tenant) {
			continue
		}
		b, err := c.record(r)
		if err != nil {
			return nil, err
		}
		if buf[len(buf)-1] != '[' {
			buf = append(buf, ',')
		}
		buf = append(buf, b...)
	}
	return buf, nil
}

// queueJSON is GET /v1/queue's body (see encoded).
func (d *Daemon) queueJSON() ([]byte, time.Time, error) {
	return d.encoded("queue", d.encodeQueue, d.extendQueue, d.submitsQueue)
}

// jobsJSON is GET /v1/jobs's body for a filter viewJobFilter accepts.
func (d *Daemon) jobsJSON(f JobFilter) ([]byte, time.Time, error) {
	return d.encoded(jobsKey(f), func(v *readView) ([]byte, error) { return d.encodeJobs(v, f) },
		func(prev []byte, v *readView, n int) ([]byte, error) { return d.extendJobs(prev, v, n, f) },
		func(prev []byte, base *readView, s []submitted) ([]byte, error) {
			return d.submitsJobs(prev, base, s, f)
		})
}

// sortRecs orders records as the store lists them: by submission time,
// then id. Records in id order usually are in that order already: then
// it only checks.
func sortRecs(recs []JobRecord) {
	less := func(a, b int) bool { return recLess(&recs[a], &recs[b]) }
	if !sort.SliceIsSorted(recs, less) {
		sort.Slice(recs, less)
	}
}

// recLess is the store's order of job records: submission time, then id.
func recLess(a, b *JobRecord) bool {
	if !a.SubmittedAt.Equal(b.SubmittedAt) {
		return a.SubmittedAt.Before(b.SubmittedAt)
	}
	return a.ID < b.ID
}
