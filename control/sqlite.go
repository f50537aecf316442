package control

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	_ "modernc.org/sqlite" // the pure-Go SQLite driver, registered as "sqlite"
)

// migrations are applied in order, each once, in a transaction; their index
// + 1 is the schema version. Never edit one that has shipped: append.
var migrations = []string{
	// 1: jobs, their history, decisions, events, nodes, models, timer waits
	`CREATE TABLE jobs (
		id TEXT PRIMARY KEY,
		name TEXT NOT NULL,
		tenant TEXT NOT NULL,
		class TEXT NOT NULL,
		spec TEXT NOT NULL,
		state TEXT NOT NULL,
		reason TEXT NOT NULL DEFAULT '',
		plan TEXT,
		placement TEXT,
		submitted_at INTEGER NOT NULL,
		started_at INTEGER NOT NULL DEFAULT 0,
		finished_at INTEGER NOT NULL DEFAULT 0,
		iterations INTEGER NOT NULL DEFAULT 0,
		checkpoint INTEGER NOT NULL DEFAULT 0,
		restarts INTEGER NOT NULL DEFAULT 0,
		attempt INTEGER NOT NULL DEFAULT 0,
		version INTEGER NOT NULL DEFAULT 1
	);
	CREATE INDEX jobs_state ON jobs(state);
	CREATE TABLE job_history (
		seq INTEGER PRIMARY KEY AUTOINCREMENT,
		job_id TEXT NOT NULL REFERENCES jobs(id),
		from_state TEXT NOT NULL,
		to_state TEXT NOT NULL,
		reason TEXT NOT NULL,
		at INTEGER NOT NULL
	);
	CREATE INDEX job_history_job ON job_history(job_id, seq);
	CREATE TABLE decisions (
		id INTEGER PRIMARY KEY AUTOINCREMENT,
		job_id TEXT NOT NULL,
		kind TEXT NOT NULL,
		detail TEXT,
		reason TEXT NOT NULL,
		at INTEGER NOT NULL
	);
	CREATE INDEX decisions_job ON decisions(job_id, id);
	CREATE TABLE events (
		id INTEGER PRIMARY KEY AUTOINCREMENT,
		kind TEXT NOT NULL,
		job_id TEXT NOT NULL DEFAULT '',
		node TEXT NOT NULL DEFAULT '',
		msg TEXT NOT NULL,
		data TEXT,
		at INTEGER NOT NULL
	);
	CREATE TABLE nodes (
		name TEXT PRIMARY KEY,
		reachable INTEGER NOT NULL,
		drained INTEGER NOT NULL,
		missed INTEGER NOT NULL,
		status TEXT,
		updated_at INTEGER NOT NULL
	);
	CREATE TABLE models (
		model_type TEXT PRIMARY KEY,
		data TEXT NOT NULL,
		updated_at INTEGER NOT NULL
	);
	CREATE TABLE timer_waits (
		seq INTEGER PRIMARY KEY AUTOINCREMENT,
		tier TEXT NOT NULL,
		gpus INTEGER NOT NULL,
		wait_ns INTEGER NOT NULL,
		at INTEGER NOT NULL
	);
	CREATE INDEX timer_waits_at ON timer_waits(at);
	CREATE TABLE counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL);`,
	// 2: failures (non-zero exits) counted apart from restarts
	`ALTER TABLE jobs ADD COLUMN failures INTEGER NOT NULL DEFAULT 0;`,
	// 3: suspect servers (launches of several jobs failed there)
	`ALTER TABLE nodes ADD COLUMN suspect INTEGER NOT NULL DEFAULT 0;
	ALTER TABLE nodes ADD COLUMN suspect_why TEXT NOT NULL DEFAULT '';`,
	// 4 (idem.go, auth.go): Idempotency-Key of a submission → the
	// job it created; who submitted each job; who caused each event
	`CREATE TABLE idempotency (
		key TEXT PRIMARY KEY,
		job_id TEXT NOT NULL REFERENCES jobs(id),
		spec_sha256 TEXT NOT NULL,
		at INTEGER NOT NULL
	);
	CREATE TABLE job_owners (
		job_id TEXT PRIMARY KEY REFERENCES jobs(id),
		user TEXT NOT NULL
	);
	ALTER TABLE events ADD COLUMN user TEXT NOT NULL DEFAULT '';`,
	// 5 (health.go): each GPU's health: cordoned with a cause, and the
	// newest critical event acted on
	`CREATE TABLE gpu_health (
		server TEXT NOT NULL,
		gpu INTEGER NOT NULL,
		cordoned INTEGER NOT NULL,
		cause TEXT NOT NULL,
		why TEXT NOT NULL,
		at INTEGER NOT NULL,
		seen INTEGER NOT NULL,
		PRIMARY KEY (server, gpu)
	);`,
	// 6 (drain.go): why a server was drained, by whom, when, and how
	// (now: its jobs moved off; after-jobs: its jobs left to finish)
	`CREATE TABLE node_drains (
		name TEXT PRIMARY KEY,
		reason TEXT NOT NULL,
		by_user TEXT NOT NULL,
		mode TEXT NOT NULL,
		at INTEGER NOT NULL
	);`,
	// 7 (profile.go): the runs of profiling phases, one row each
	`CREATE TABLE profile_samples (
		seq INTEGER PRIMARY KEY AUTOINCREMENT,
		model_type TEXT NOT NULL,
		job_id TEXT NOT NULL DEFAULT '',
		data TEXT NOT NULL,
		at INTEGER NOT NULL
	);
	CREATE INDEX profile_samples_type ON profile_samples(model_type, seq);`,
	// 8 (failslow.go): servers made suspect for slowness, with why (a
	// passing launch health check does not clear them)
	`CREATE TABLE slow_servers (
		server TEXT PRIMARY KEY,
		why TEXT NOT NULL,
		at INTEGER NOT NULL
	);`,
}

// SQLite is the Store on a SQLite database in WAL mode (modernc.org/sqlite,
// no cgo). Writes are serialised through one connection; every write is
// durable (synchronous=FULL) before the call returns. Reads go through a
// small pool of read-only connections, so they never wait for a write
// (WAL readers see the last committed state).
//
// The database is opened with SQLite's unix-excl VFS: this process holds
// an exclusive lock on the database file while it is open (no other
// process can read or write it), and the WAL index lives in this
// process's heap instead of a mmapped -shm file. A page fault on a mapped
// file of a stalled disk (fsfreeze) blocks its thread where Go's
// garbage collector cannot stop it, which froze the whole daemon; reads
// and writes are system calls, which block only the goroutine that makes
// them. Memory-mapped I/O of the database is off (mmap_size 0) for the
// same reason.
type SQLite struct {
	db *sql.DB // writes (and the reads of a write's transaction)
	rd *sql.DB // reads
	// path and id are the database file as opened (zero id: in memory):
	// a write is acknowledged only while path still names that file
	// (CheckFile, lock.go).
	path string
	id   fileID
}

// OpenSQLite opens (creating if needed) the database at path and brings its
// schema up to date. The database files are the owner's only (0600; a
// missing directory is created 0700).
func OpenSQLite(ctx context.Context, path string) (*SQLite, error) {
	if !strings.HasPrefix(path, ":memory:") && !strings.HasPrefix(path, "file:") {
		if err := privateFiles(path); err != nil {
			return nil, fmt.Errorf("open store %s: %w", path, err)
		}
	}
	q := url.Values{}
	for _, p := range []string{"journal_mode(WAL)", "synchronous(FULL)", "busy_timeout(10000)", "foreign_keys(1)", "mmap_size(0)"} {
		q.Add("_pragma", p)
	}
	q.Set("vfs", storeVFS)
	db, err := sql.Open("sqlite", "file:"+path+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	db.SetMaxOpenConns(1)
	s := &SQLite{db: db, rd: db, path: path}
	if err := s.migrate(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	if !strings.HasPrefix(path, ":memory:") && !strings.HasPrefix(path, "file:") {
		// The file SQLite has open (it holds it from the first
		// statement on; the migration above was one).
		fi, err := os.Stat(path)
		if err != nil {
			db.Close()
			return nil, fmt.Errorf("open store %s: %w", path, err)
		}
		s.id = idOf(fi)
	}
	if !strings.HasPrefix(path, ":memory:") {
		rq := url.Values{}
		for _, p := range []string{"busy_timeout(10000)", "query_only(1)", "mmap_size(0)"} {
			rq.Add("_pragma", p)
		}
		rq.Set("vfs", storeVFS)
		rd, err := sql.Open("sqlite", "file:"+path+"?"+rq.Encode())
		if err != nil {
			db.Close()
			return nil, fmt.Errorf("open store %s: readers: %w", path, err)
		}
		rd.SetMaxOpenConns(4)
		s.rd = rd
	}
	return s, nil
}

// storeVFS is the SQLite VFS of the store: an exclusive lock on the
// database for this process and a WAL index in heap memory (see SQLite).
const storeVFS = "unix-excl"

// CheckFile reports whether the store's path still names the database
// file it has open: an error wrapping ErrStoreReplaced when the file (or
// its directory) was deleted, moved or replaced, since every write would
// then be lost at restart. Every write checks it before it is
// acknowledged.
func (s *SQLite) CheckFile() error {
	if s == nil || s.id == (fileID{}) {
		return nil
	}
	return samePath("database", s.path, s.id, "writes to it would be lost at restart; nothing more is acknowledged")
}

// SchemaVersion is the number of migrations this build knows.
func SchemaVersion() int { return len(migrations) }

func (s *SQLite) migrate(ctx context.Context) error {
	if _, err := s.db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL)`); err != nil {
		return err
	}
	var have int
	if err := s.db.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&have); err != nil {
		return err
	}
	if have > len(migrations) {
		return fmt.Errorf("schema version %d is newer than this replan knows (%d): upgrade replan", have, len(migrations))
	}
	for v := have + 1; v <= len(migrations); v++ {
		tx, err := s.db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, migrations[v-1]); err != nil {
			tx.Rollback()
			return fmt.Errorf("migration %d: %w", v, err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations(version, applied_at) VALUES (?, ?)`, v, time.Now().UnixNano()); err != nil {
			tx.Rollback()
			return err
		}
		if err := tx.Commit(); err != nil {
			return fmt.Errorf("migration %d: %w", v, err)
		}
	}
	return nil
}

// Close closes the database.
func (s *SQLite) Close() error {
	if s.rd != s.db {
		s.rd.Close()
	}
	return s.db.Close()
}

func ns(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromNS(v int64) time.Time {
	if v == 0 {
		return time.Time{}
	}
	return time.Unix(0, v).UTC()
}

func nullJSON(b json.RawMessage) any {
	if len(b) == 0 {
		return nil
	}
	return string(b)
}

const jobCols = `id, name, tenant, class, spec, state, reason, plan, placement, submitted_at, started_at, finished_at, iterations, checkpoint, restarts, attempt, failures, version`

func scanJob(sc interface{ Scan(...any) error }) (JobRecord, error) {
	var j JobRecord
	var spec string
	var plan, placement sql.NullString
	var sub, start, fin int64
	err := sc.Scan(&j.ID, &j.Name, &j.Tenant, &j.Class, &spec, &j.State, &j.Reason, &plan, &placement, &sub, &start, &fin, &j.Iterations, &j.Checkpoint, &j.Restarts, &j.Attempt, &j.Failures, &j.Version)
	if err != nil {
		return j, err
	}
	j.Spec = json.RawMessage(spec)
	if plan.Valid {
		j.Plan = json.RawMessage(plan.String)
	}
	if placement.Valid {
		j.Placement = json.RawMessage(placement.String)
	}
	j.SubmittedAt, j.StartedAt, j.FinishedAt = fromNS(sub), fromNS(start), fromNS(fin)
	return j, nil
}

// CreateJob implements Store.
func (s *SQLite) CreateJob(ctx context.Context, j JobRecord) error {
	_, err := s.Commit(ctx, Batch{Jobs: []JobWrite{{Rec: j, Create: true}}})
	return err
}

// execer is what a write needs of a transaction.
type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

func createJob(ctx context.Context, tx execer, j JobRecord) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO jobs(`+jobCols+`) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,1)`,
		j.ID, j.Name, j.Tenant, j.Class, string(j.Spec), j.State, j.Reason, nullJSON(j.Plan), nullJSON(j.Placement),
		ns(j.SubmittedAt), ns(j.StartedAt), ns(j.FinishedAt), j.Iterations, j.Checkpoint, j.Restarts, j.Attempt, j.Failures)
	if err != nil {
		if strings.Contains(err.Error(), "UNIQUE") || strings.Contains(err.Error(), "PRIMARY KEY") {
			return fmt.Errorf("create job %s: %w", j.ID, ErrExists)
		}
		return fmt.Errorf("create job %s: %w", j.ID, err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO job_history(job_id, from_state, to_state, reason, at) VALUES (?,?,?,?,?)`,
		j.ID, "", j.State, "submitted", ns(j.SubmittedAt)); err != nil {
		return fmt.Errorf("create job %s: history: %w", j.ID, err)
	}
	if err := createJobExtras(ctx, tx, j); err != nil { // idem.go: idempotency key, owner
		return err
	}
	return nil
}

// Commit implements Store: one transaction for the whole batch.
func (s *SQLite) Commit(ctx context.Context, b Batch) ([]int64, error) {
	if err := s.CheckFile(); err != nil {
		return nil, fmt.Errorf("commit: %w", err)
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("commit: begin: %w", err)
	}
	defer tx.Rollback()
	vers := make([]int64, 0, len(b.Jobs))
	for _, w := range b.Jobs {
		if w.Create {
			if err := createJob(ctx, tx, w.Rec); err != nil {
				return nil, err
			}
			vers = append(vers, 1)
			continue
		}
		v, err := updateJob(ctx, tx, w.Rec, w.Reason, w.At)
		if err != nil {
			return nil, err
		}
		vers = append(vers, v)
	}
	for _, n := range b.Nodes {
		if err := putNode(ctx, tx, n); err != nil {
			return nil, err
		}
	}
	for _, dr := range b.Drains {
		if err := putDrain(ctx, tx, dr); err != nil { // drain.go
			return nil, err
		}
	}
	for _, d := range b.Decisions {
		if _, err := tx.ExecContext(ctx, `INSERT INTO decisions(job_id, kind, detail, reason, at) VALUES (?,?,?,?,?)`, d.JobID, d.Kind, nullJSON(d.Detail), d.Reason, ns(d.At)); err != nil {
			return nil, fmt.Errorf("commit: decision of %s: %w", d.JobID, err)
		}
	}
	for _, e := range b.Events {
		if e.User == "" {
			e.User = callerOf(ctx).User // auth.go: who made the request that caused it
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO events(kind, job_id, node, msg, data, at, user) VALUES (?,?,?,?,?,?,?)`, e.Kind, e.JobID, e.Node, e.Msg, nullJSON(e.Data), ns(e.At), e.User); err != nil {
			return nil, fmt.Errorf("commit: event %s: %w", e.Kind, err)
		}
	}
	for _, w := range b.TimerWaits {
		if _, err := tx.ExecContext(ctx, `INSERT INTO timer_waits(tier, gpus, wait_ns, at) VALUES (?,?,?,?)`, w.Tier, w.GPUs, int64(w.Wait), ns(w.At)); err != nil {
			return nil, fmt.Errorf("commit: timer wait: %w", err)
		}
	}
	for _, m := range b.Models {
		if _, err := tx.ExecContext(ctx, `INSERT INTO models(model_type, data, updated_at) VALUES (?,?,?)
		ON CONFLICT(model_type) DO UPDATE SET data=excluded.data, updated_at=excluded.updated_at`, m.Type, string(m.Data), ns(m.At)); err != nil {
			return nil, fmt.Errorf("commit: model %s: %w", m.Type, err)
		}
	}
	if err := putGPUHealth(ctx, tx, b.GPUHealth); err != nil { // health.go
		return nil, err
	}
	if err := putSlowServers(ctx, tx, b.SlowServers); err != nil { // failslow.go
		return nil, err
	}
	for _, p := range b.ProfileSamples {
		raw, err := json.Marshal(p)
		if err != nil {
			return nil, fmt.Errorf("commit: profile sample of %s: %w", p.Type, err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO profile_samples(model_type, job_id, data, at) VALUES (?,?,?,?)`, p.Type, p.JobID, string(raw), ns(p.At)); err != nil {
			return nil, fmt.Errorf("commit: profile sample of %s: %w", p.Type, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("commit: %w", err)
	}
	if err := s.CheckFile(); err != nil {
		// Stored in a file the path no longer names: lost at restart.
		return nil, fmt.Errorf("commit: %w", err)
	}
	return vers, nil
}

// GetJob implements Store.
func (s *SQLite) GetJob(ctx context.Context, id string) (JobRecord, error) {
	j, err := scanJob(s.rd.QueryRowContext(ctx, `SELECT `+jobCols+` FROM jobs WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return j, fmt.Errorf("job %s: %w", id, ErrNotFound)
	}
	return j, err
}

// ListJobs implements Store; jobs come in submission order.
func (s *SQLite) ListJobs(ctx context.Context, f JobFilter) ([]JobRecord, error) {
	q := `SELECT ` + jobCols + ` FROM jobs WHERE 1=1`
	var args []any
	if len(f.States) > 0 {
		q += ` AND state IN (` + strings.TrimSuffix(strings.Repeat("?,", len(f.States)), ",") + `)`
		for _, st := range f.States {
			args = append(args, st)
		}
	}
	if f.Tenant != "" {
		q += ` AND tenant = ?`
		args = append(args, f.Tenant)
	}
	q += ` ORDER BY submitted_at, id`
	rows, err := s.rd.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []JobRecord
	for rows.Next() {
		j, err := scanJob(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, j)
	}
	return out, rows.Err()
}

// UpdateJob implements Store.
func (s *SQLite) UpdateJob(ctx context.Context, j JobRecord, reason string, at time.Time) (int64, error) {
	v, err := s.Commit(ctx, Batch{Jobs: []JobWrite{{Rec: j, Reason: reason, At: at}}})
	if err != nil {
		return 0, err
	}
	return v[0], nil
}

func updateJob(ctx context.Context, tx execer, j JobRecord, reason string, at time.Time) (int64, error) {
	var cur JobState
	var ver int64
	if err := tx.QueryRowContext(ctx, `SELECT state, version FROM jobs WHERE id = ?`, j.ID).Scan(&cur, &ver); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return 0, fmt.Errorf("update job %s: %w", j.ID, ErrNotFound)
		}
		return 0, fmt.Errorf("update job %s: %w", j.ID, err)
	}
	if ver != j.Version {
		return 0, fmt.Errorf("update job %s (version %d, stored %d): %w", j.ID, j.Version, ver, ErrConflict)
	}
	if cur.Final() && cur != j.State {
		return 0, fmt.Errorf("update job %s: it is %s: %w", j.ID, cur, ErrConflict)
	}
	_, err := tx.ExecContext(ctx, `UPDATE jobs SET state=?, reason=?, plan=?, placement=?, started_at=?, finished_at=?, iterations=?, checkpoint=?, restarts=?, attempt=?, failures=?, version=version+1 WHERE id=?`,
		j.State, j.Reason, nullJSON(j.Plan), nullJSON(j.Placement), ns(j.StartedAt), ns(j.FinishedAt), j.Iterations, j.Checkpoint, j.Restarts, j.Attempt, j.Failures, j.ID)
	if err != nil {
		return 0, fmt.Errorf("update job %s: %w", j.ID, err)
	}
	if cur != j.State {
		if _, err := tx.ExecContext(ctx, `INSERT INTO job_history(job_id, from_state, to_state, reason, at) VALUES (?,?,?,?,?)`, j.ID, cur, j.State, reason, ns(at)); err != nil {
			return 0, fmt.Errorf("update job %s: history: %w", j.ID, err)
		}
	}
	return ver + 1, nil
}

// History implements Store.
func (s *SQLite) History(ctx context.Context, jobID string) ([]Transition, error) {
	rows, err := s.rd.QueryContext(ctx, `SELECT job_id, from_state, to_state, reason, at FROM job_history WHERE job_id = ? ORDER BY seq`, jobID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Transition
	for rows.Next() {
		var t Transition
		var at int64
		if err := rows.Scan(&t.JobID, &t.From, &t.To, &t.Reason, &at); err != nil {
			return nil, err
		}
		t.At = fromNS(at)
		out = append(out, t)
	}
	return out, rows.Err()
}

// NextJobID implements Store: j-000001, j-000002, ... never reused.
func (s *SQLite) NextJobID(ctx context.Context) (string, error) {
	var v int64
	err := s.db.QueryRowContext(ctx, `INSERT INTO counters(name, value) VALUES ('job', 1)
		ON CONFLICT(name) DO UPDATE SET value = value + 1 RETURNING value`).Scan(&v)
	if err != nil {
		return "", err
	}
	if err := s.CheckFile(); err != nil {
		return "", fmt.Errorf("next job id: %w", err)
	}
	return fmt.Sprintf("j-%06d", v), nil
}

// AddDecision implements Store.
func (s *SQLite) AddDecision(ctx context.Context, d DecisionRecord) (int64, error) {
	r, err := s.db.ExecContext(ctx, `INSERT INTO decisions(job_id, kind, detail, reason, at) VALUES (?,?,?,?,?)`, d.JobID, d.Kind, nullJSON(d.Detail), d.Reason, ns(d.At))
	if err != nil {
		return 0, err
	}
	return r.LastInsertId()
}

// Decisions implements Store: newest first; jobID "" for all jobs.
func (s *SQLite) Decisions(ctx context.Context, jobID string, limit int) ([]DecisionRecord, error) {
	if limit <= 0 {
		limit = 100
	}
	q := `SELECT id, job_id, kind, detail, reason, at FROM decisions`
	args := []any{}
	if jobID != "" {
		q += ` WHERE job_id = ?`
		args = append(args, jobID)
	}
	q += ` ORDER BY id DESC LIMIT ?`
	args = append(args, limit)
	rows, err := s.rd.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	var out []DecisionRecord
	err = scanDecisions(rows, func(d DecisionRecord) { out = append(out, d) })
	return out, err
}

// scanDecisions reads rows of (id, job_id, kind, detail, reason, at)
// into decision records, handing each to add, and closes rows.
func scanDecisions(rows *sql.Rows, add func(DecisionRecord)) error {
	defer rows.Close()
	for rows.Next() {
		var d DecisionRecord
		var detail sql.NullString
		var at int64
		if err := rows.Scan(&d.ID, &d.JobID, &d.Kind, &detail, &d.Reason, &at); err != nil {
			return err
		}
		if detail.Valid {
			d.Detail = json.RawMessage(detail.String)
		}
		d.At = fromNS(at)
		add(d)
	}
	return rows.Err()
}

// AddEvent implements Store.
func (s *SQLite) AddEvent(ctx context.Context, e Event) (int64, error) {
	if e.User == "" {
		e.User = callerOf(ctx).User // auth.go: who made the request that caused it
	}
	r, err := s.db.ExecContext(ctx, `INSERT INTO events(kind, job_id, node, msg, data, at, user) VALUES (?,?,?,?,?,?,?)`, e.Kind, e.JobID, e.Node, e.Msg, nullJSON(e.Data), ns(e.At), e.User)
	if err != nil {
		return 0, err
	}
	return r.LastInsertId()
}

// Events implements Store.
func (s *SQLite) Events(ctx context.Context, after int64, limit int) ([]Event, error) {
	if limit <= 0 {
		limit = 1000
	}
	rows, err := s.rd.QueryContext(ctx, `SELECT id, kind, job_id, node, msg, data, at, user FROM events WHERE id > ? ORDER BY id LIMIT ?`, after, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Event
	for rows.Next() {
		var e Event
		var data sql.NullString
		var at int64
		if err := rows.Scan(&e.ID, &e.Kind, &e.JobID, &e.Node, &e.Msg, &data, &at, &e.User); err != nil {
			return nil, err
		}
		if data.Valid {
			e.Data = json.RawMessage(data.String)
		}
		e.At = fromNS(at)
		out = append(out, e)
	}
	return out, rows.Err()
}

// PutNode implements Store.
func (s *SQLite) PutNode(ctx context.Context, n NodeRecord) error {
	_, err := s.Commit(ctx, Batch{Nodes: []NodeRecord{n}})
	return err
}

func putNode(ctx context.Context, tx execer, n NodeRecord) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO nodes(name, reachable, drained, missed, suspect, suspect_why, status, updated_at) VALUES (?,?,?,?,?,?,?,?)
		ON CONFLICT(name) DO UPDATE SET reachable=excluded.reachable, drained=excluded.drained, missed=excluded.missed, suspect=excluded.suspect, suspect_why=excluded.suspect_why, status=excluded.status, updated_at=excluded.updated_at`,
		n.Name, n.Reachable, n.Drained, n.Missed, n.Suspect, n.SuspectWhy, nullJSON(n.Status), ns(n.UpdatedAt))
	if err != nil {
		return fmt.Errorf("put node %s: %w", n.Name, err)
	}
	return nil
}

// Nodes implements Store.
func (s *SQLite) Nodes(ctx context.Context) ([]NodeRecord, error) {
	rows, err := s.rd.QueryContext(ctx, `SELECT name, reachable, drained, missed, suspect, suspect_why, status, updated_at FROM nodes ORDER BY name`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []NodeRecord
	for rows.Next() {
		var n NodeRecord
		var status sql.NullString
		var at int64
		if err := rows.Scan(&n.Name, &n.Reachable, &n.Drained, &n.Missed, &n.Suspect, &n.SuspectWhy, &status, &at); err != nil {
			return nil, err
		}
		if status.Valid {
			n.Status = json.RawMessage(status.String)
		}
		n.UpdatedAt = fromNS(at)
		out = append(out, n)
	}
	return out, rows.Err()
}

// SaveModel implements Store.
func (s *SQLite) SaveModel(ctx context.Context, modelType string, data json.RawMessage, at time.Time) error {
	_, err := s.db.ExecContext(ctx, `INSERT INTO models(model_type, data, updated_at) VALUES (?,?,?)
		ON CONFLICT(model_type) DO UPDATE SET data=excluded.data, updated_at=excluded.updated_at`, modelType, string(data), ns(at))
	return err
}

// Models implements Store.
func (s *SQLite) Models(ctx context.Context) (map[string]json.RawMessage, error) {
	rows, err := s.rd.QueryContext(ctx, `SELECT model_type, data FROM models`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]json.RawMessage{}
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			return nil, err
		}
		out[k] = json.RawMessage(v)
	}
	return out, rows.Err()
}

// AddTimerWait implements Store.
func (s *SQLite) AddTimerWait(ctx context.Context, w TimerWait) error {
	_, err := s.db.ExecContext(ctx, `INSERT INTO timer_waits(tier, gpus, wait_ns, at) VALUES (?,?,?,?)`, w.Tier, w.GPUs, int64(w.Wait), ns(w.At))
	return err
}

// TimerWaits implements Store.
func (s *SQLite) TimerWaits(ctx context.Context, since time.Time) ([]TimerWait, error) {
	rows, err := s.rd.QueryContext(ctx, `SELECT tier, gpus, wait_ns, at FROM timer_waits WHERE at >= ? ORDER BY seq`, ns(since))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []TimerWait
	for rows.Next() {
		var w TimerWait
		var wait, at int64
		if err := rows.Scan(&w.Tier, &w.GPUs, &wait, &at); err != nil {
			return nil, err
		}
		w.Wait, w.At = time.Duration(wait), fromNS(at)
		out = append(out, w)
	}
	return out, rows.Err()
}

var _ Store = (*SQLite)(nil)

// ProfileSamples returns the stored runs of profiling phases, oldest
// first: of model type typ, or of every type when typ is "".
func (s *SQLite) ProfileSamples(ctx context.Context, typ string) ([]ProfileSample, error) {
	rows, err := s.rd.QueryContext(ctx, `SELECT data FROM profile_samples WHERE ? = '' OR model_type = ? ORDER BY seq`, typ, typ)
	if err != nil {
		return nil, fmt.Errorf("profile samples: %w", err)
	}
	defer rows.Close()
	var out []ProfileSample
	for rows.Next() {
		var raw string
		if err := rows.Scan(&raw); err != nil {
			return nil, fmt.Errorf("profile samples: %w", err)
		}
		var p ProfileSample
		if err := json.Unmarshal([]byte(raw), &p); err != nil {
			return nil, fmt.Errorf("profile samples: %w", err)
		}
		out = append(out, p)
	}
	return out, rows.Err()
}
