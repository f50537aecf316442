package control

// Copying a SQLite store into an etcd store (`replan store copy`): every
// record with its IDs, versions and times, and the counters, so that a
// daemon on etcd goes on where the one on SQLite stopped.

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// CopyCounts is how many records of each kind a copy wrote.
type CopyCounts struct {
	Jobs           int `json:"jobs"`
	Transitions    int `json:"transitions"`
	Decisions      int `json:"decisions"`
	Events         int `json:"events"`
	Nodes          int `json:"nodes"`
	Drains         int `json:"drains"`
	GPUHealth      int `json:"gpu_health"`
	SlowServers    int `json:"slow_servers"`
	Models         int `json:"models"`
	TimerWaits     int `json:"timer_waits"`
	ProfileSamples int `json:"profile_samples"`
	Owners         int `json:"owners"`
	IdempotencyKey int `json:"idempotency_keys"`
	Counters       int `json:"counters"`
}

// copyTxnOps and copyTxnBytes keep each transaction of a copy within
// etcd's default limits (--max-txn-ops 128, --max-request-bytes 1.5 MiB).
const (
	copyTxnOps   = 100
	copyTxnBytes = 1 << 20
)

// etcdBatcher writes puts in transactions of bounded size.
type etcdBatcher struct {
	cli  *clientv3.Client
	ops  []clientv3.Op
	size int
}

func (b *etcdBatcher) put(ctx context.Context, key string, v any) error {
	raw, err := encodeJSON(v)
	if err != nil {
		return fmt.Errorf("%s: %w", key, err)
	}
	return b.putRaw(ctx, key, string(raw))
}

func (b *etcdBatcher) putRaw(ctx context.Context, key, val string) error {
	if len(val) > MaxEtcdValue {
		return fmt.Errorf("%s: a record of %d bytes is over the etcd store's limit of %d", key, len(val), MaxEtcdValue)
	}
	if len(b.ops) >= copyTxnOps || b.size+len(key)+len(val) > copyTxnBytes {
		if err := b.flush(ctx); err != nil {
			return err
		}
	}
	b.ops = append(b.ops, clientv3.OpPut(key, val))
	b.size += len(key) + len(val)
	return nil
}

func (b *etcdBatcher) flush(ctx context.Context) error {
	if len(b.ops) == 0 {
		return nil
	}
	if _, err := b.cli.Txn(ctx).Then(b.ops...).Commit(); err != nil {
		return etcdErr(err)
	}
	b.ops, b.size = b.ops[:0], 0
	return nil
}

// CopyToEtcd copies every record of src into dst, which the caller has
// checked is empty (EtcdStore.Empty). The copy is not one transaction: a
// copy that fails half-way leaves part of the records (copy again after
// EtcdStore.Clear). The source is read in one SQLite read transaction, so
// it is a consistent snapshot.
func CopyToEtcd(ctx context.Context, src *SQLite, dst *EtcdStore) (CopyCounts, error) {
	var n CopyCounts
	tx, err := src.rd.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return n, fmt.Errorf("copy: read %s: %w", src.path, err)
	}
	defer tx.Rollback()
	b := &etcdBatcher{cli: dst.cli}
	each := func(what, q string, scan func(*sql.Rows) error) error {
		rows, err := tx.QueryContext(ctx, q)
		if err != nil {
			return fmt.Errorf("copy %s: %w", what, err)
		}
		defer rows.Close()
		for rows.Next() {
			if err := scan(rows); err != nil {
				return fmt.Errorf("copy %s: %w", what, err)
			}
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("copy %s: %w", what, err)
		}
		return nil
	}
	// Jobs, with their versions.
	versions := map[string]int64{}
	if err := each("jobs", `SELECT `+jobCols+` FROM jobs ORDER BY id`, func(r *sql.Rows) error {
		j, err := scanJob(r)
		if err != nil {
			return err
		}
		normJob(&j)
		versions[j.ID] = j.Version
		n.Jobs++
		return b.put(ctx, dst.k("jobs", j.ID), j)
	}); err != nil {
		return n, err
	}
	// Transitions: the etcd store keys a job's transition by the version
	// the change made; the copied ones take the versions up to the job's
	// own, in order, so later ones sort after them.
	hist := map[string][]Transition{}
	if err := each("history", `SELECT job_id, from_state, to_state, reason, at FROM job_history ORDER BY seq`, func(r *sql.Rows) error {
		var t Transition
		var at int64
		if err := r.Scan(&t.JobID, &t.From, &t.To, &t.Reason, &at); err != nil {
			return err
		}
		t.At = fromNS(at)
		hist[t.JobID] = append(hist[t.JobID], t)
		return nil
	}); err != nil {
		return n, err
	}
	for id, ts := range hist {
		base := versions[id] - int64(len(ts))
		if base < 0 {
			return n, fmt.Errorf("copy history: job %s has %d transitions but version %d", id, len(ts), versions[id])
		}
		for i, t := range ts {
			if err := b.put(ctx, dst.k("history", id, seqKey(base+int64(i)+1)), t); err != nil {
				return n, err
			}
			n.Transitions++
		}
	}
	if err := each("decisions", `SELECT id, job_id, kind, detail, reason, at FROM decisions ORDER BY id`, func(r *sql.Rows) error {
		var d DecisionRecord
		var detail sql.NullString
		var at int64
		if err := r.Scan(&d.ID, &d.JobID, &d.Kind, &detail, &d.Reason, &at); err != nil {
			return err
		}
		d.Detail, d.At = nilIfEmpty(json.RawMessage(detail.String)), fromNS(at)
		n.Decisions++
		if err := b.put(ctx, dst.k("decisions", seqKey(d.ID)), d); err != nil {
			return err
		}
		return b.put(ctx, dst.k("jobdecisions", d.JobID, seqKey(d.ID)), d)
	}); err != nil {
		return n, err
	}
	if err := each("events", `SELECT id, kind, job_id, node, msg, data, at, user FROM events ORDER BY id`, func(r *sql.Rows) error {
		var e Event
		var data sql.NullString
		var at int64
		if err := r.Scan(&e.ID, &e.Kind, &e.JobID, &e.Node, &e.Msg, &data, &at, &e.User); err != nil {
			return err
		}
		e.Data, e.At = nilIfEmpty(json.RawMessage(data.String)), fromNS(at)
		n.Events++
		return b.put(ctx, dst.k("events", seqKey(e.ID)), e)
	}); err != nil {
		return n, err
	}
	if err := each("nodes", `SELECT name, reachable, drained, missed, suspect, suspect_why, status, updated_at FROM nodes`, func(r *sql.Rows) error {
		var nr NodeRecord
		var status sql.NullString
		var at int64
		if err := r.Scan(&nr.Name, &nr.Reachable, &nr.Drained, &nr.Missed, &nr.Suspect, &nr.SuspectWhy, &status, &at); err != nil {
			return err
		}
		nr.Status, nr.UpdatedAt = nilIfEmpty(json.RawMessage(status.String)), fromNS(at)
		n.Nodes++
		return b.put(ctx, dst.k("nodes", nr.Name), nr)
	}); err != nil {
		return n, err
	}
	if err := each("drains", `SELECT name, reason, by_user, mode, at FROM node_drains`, func(r *sql.Rows) error {
		var d NodeDrain
		var at int64
		if err := r.Scan(&d.Name, &d.Reason, &d.By, &d.Mode, &at); err != nil {
			return err
		}
		d.At = fromNS(at)
		n.Drains++
		return b.put(ctx, dst.k("drains", d.Name), d)
	}); err != nil {
		return n, err
	}
	if err := each("GPU health", `SELECT server, gpu, cordoned, cause, why, at, seen FROM gpu_health`, func(r *sql.Rows) error {
		var g GPUHealthRecord
		var at, seen sql.NullInt64
		if err := r.Scan(&g.Server, &g.GPU, &g.Cordoned, &g.Cause, &g.Why, &at, &seen); err != nil {
			return err
		}
		g.At, g.Seen = fromNS(at.Int64), fromNS(seen.Int64)
		n.GPUHealth++
		return b.put(ctx, dst.k("gpus", g.Server, fmt.Sprintf("%06d", g.GPU)), g)
	}); err != nil {
		return n, err
	}
	if err := each("slow servers", `SELECT server, why, at FROM slow_servers`, func(r *sql.Rows) error {
		var rec SlowServerRecord
		var at sql.NullInt64
		if err := r.Scan(&rec.Server, &rec.Why, &at); err != nil {
			return err
		}
		rec.At = fromNS(at.Int64)
		n.SlowServers++
		return b.put(ctx, dst.k("slow", rec.Server), rec)
	}); err != nil {
		return n, err
	}
	if err := each("models", `SELECT model_type, data, updated_at FROM models`, func(r *sql.Rows) error {
		var typ, data string
		var at int64
		if err := r.Scan(&typ, &data, &at); err != nil {
			return err
		}
		n.Models++
		return b.put(ctx, dst.k("models", typ), etcdModel{Data: json.RawMessage(data), At: fromNS(at)})
	}); err != nil {
		return n, err
	}
	if err := each("timer waits", `SELECT tier, gpus, wait_ns, at FROM timer_waits ORDER BY seq`, func(r *sql.Rows) error {
		var w TimerWait
		var wait, at int64
		if err := r.Scan(&w.Tier, &w.GPUs, &wait, &at); err != nil {
			return err
		}
		w.Wait, w.At = time.Duration(wait), fromNS(at)
		n.TimerWaits++
		return b.put(ctx, dst.k("timerwaits", seqKey(int64(n.TimerWaits))), w)
	}); err != nil {
		return n, err
	}
	if err := each("profile samples", `SELECT data FROM profile_samples ORDER BY seq`, func(r *sql.Rows) error {
		var raw string
		if err := r.Scan(&raw); err != nil {
			return err
		}
		var p ProfileSample
		if err := json.Unmarshal([]byte(raw), &p); err != nil {
			return err
		}
		p.At = normTime(p.At)
		n.ProfileSamples++
		return b.put(ctx, dst.k("profiles", seqKey(int64(n.ProfileSamples))), p)
	}); err != nil {
		return n, err
	}
	if err := each("job owners", `SELECT job_id, user FROM job_owners`, func(r *sql.Rows) error {
		var id, u string
		if err := r.Scan(&id, &u); err != nil {
			return err
		}
		n.Owners++
		return b.put(ctx, dst.k("owners", id), u)
	}); err != nil {
		return n, err
	}
	if err := each("idempotency keys", `SELECT key, job_id, spec_sha256, at FROM idempotency`, func(r *sql.Rows) error {
		var key string
		var v etcdIdem
		var at int64
		if err := r.Scan(&key, &v.JobID, &v.SpecSHA256, &at); err != nil {
			return err
		}
		v.At = fromNS(at)
		n.IdempotencyKey++
		return b.put(ctx, dst.k("idem", key), v)
	}); err != nil {
		return n, err
	}
	// Counters: the job and epoch counters as they are; event and
	// decision IDs past the highest SQLite ever gave (deleted ones too).
	counters := map[string]int64{"timerwait": int64(n.TimerWaits), "profile": int64(n.ProfileSamples)}
	if err := each("counters", `SELECT name, value FROM counters`, func(r *sql.Rows) error {
		var name string
		var v int64
		if err := r.Scan(&name, &v); err != nil {
			return err
		}
		counters[name] = v
		return nil
	}); err != nil {
		return n, err
	}
	for table, name := range map[string]string{"events": "event", "decisions": "decision"} {
		var hi sql.NullInt64
		if err := tx.QueryRowContext(ctx, `SELECT MAX(seq) FROM (SELECT seq FROM sqlite_sequence WHERE name = ? UNION ALL SELECT MAX(id) FROM `+table+`)`, table).Scan(&hi); err != nil {
			return n, fmt.Errorf("copy counters: %s: %w", table, err)
		}
		counters[name] = hi.Int64
	}
	for name, v := range counters {
		if v == 0 {
			continue
		}
		n.Counters++
		if err := b.putRaw(ctx, dst.k("counters", name), strconv.FormatInt(v, 10)); err != nil {
			return n, err
		}
	}
	if err := b.flush(ctx); err != nil {
		return n, fmt.Errorf("copy: %w", err)
	}
	return n, nil
}
