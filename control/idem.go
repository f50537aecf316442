package control

// Idempotent submissions: `replan submit` sends a key of its own making in
// the Idempotency-Key header; the first submission with a key stores the
// key with the job it creates, in the job's own transaction, and every
// retry with that key gets that job back instead of a second one. A key
// is kept for Config.IdempotencyRetention (24 h by default) of the
// daemon's clock: after that it is forgotten (a retry creates a new job)
// and the daemon's loop deletes it.

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"
)

// MaxIdempotencyKey bounds the header's length.
const MaxIdempotencyKey = 200

// DefaultIdempotencyRetention is how long an Idempotency-Key is kept when
// Config.IdempotencyRetention is 0.
const DefaultIdempotencyRetention = 24 * time.Hour

// ErrIdempotencyReuse is a key sent again with another spec.
var ErrIdempotencyReuse = errors.New("this Idempotency-Key was sent before with a different spec")

type idemKey struct{}

type idemVal struct {
	key, specHash string
	// expired: a key stored before this has expired (it is replaced).
	expired time.Time
}

// withIdempotencyKey makes the CreateJob called with ctx store key (scoped
// by the caller's user) with the job, atomically; the same key stored
// before expired is replaced.
func withIdempotencyKey(ctx context.Context, key, spec string, expired time.Time) context.Context {
	return context.WithValue(ctx, idemKey{}, idemVal{key, specHash(spec), expired})
}

// idemRetention is how long keys are kept.
func (d *Daemon) idemRetention() time.Duration {
	if d.cfg.IdempotencyRetention > 0 {
		return d.cfg.IdempotencyRetention
	}
	return DefaultIdempotencyRetention
}

// idemExpired is the time before which a stored key has expired.
func (d *Daemon) idemExpired() time.Time { return d.now().Add(-d.idemRetention()) }

// expireIdempotencyKeys deletes the expired keys, at most once per
// twenty-fourth of the retention (an hour by default); the loop calls it.
func (d *Daemon) expireIdempotencyKeys(ctx context.Context) {
	is, ok := d.cfg.Store.(idempotencyStore)
	if !ok {
		return
	}
	now := d.now()
	if last := d.idemPurged; !last.IsZero() && now.Sub(last) < d.idemRetention()/24 && !now.Before(last) {
		return
	}
	d.idemPurged = now
	n, err := is.ExpireIdempotencyKeys(ctx, d.idemExpired())
	if err != nil {
		d.log.Warn("expire idempotency keys", "err", err)
	} else if n > 0 {
		d.log.Info("expired idempotency keys", "keys", n, "retention", d.idemRetention())
	}
}

func specHash(spec string) string {
	h := sha256.Sum256([]byte(spec))
	return hex.EncodeToString(h[:])
}

// validIdempotencyKey reports what is wrong with a key ("" when nothing).
func validIdempotencyKey(k string) string {
	if len(k) > MaxIdempotencyKey {
		return fmt.Sprintf("longer than %d bytes", MaxIdempotencyKey)
	}
	if strings.IndexFunc(k, func(r rune) bool { return r < 0x21 || r > 0x7e }) >= 0 {
		return "want printable ASCII without spaces"
	}
	return ""
}

// createJobExtras stores, inside CreateJob's transaction, who submitted
// job j (the caller in ctx) and ctx's idempotency key; a key already
// stored fails the whole transaction.
func createJobExtras(ctx context.Context, tx execer, j JobRecord) error {
	if u := callerOf(ctx).User; u != "" {
		if _, err := tx.ExecContext(ctx, `INSERT INTO job_owners(job_id, user) VALUES (?,?)`, j.ID, u); err != nil {
			return fmt.Errorf("job owner: %w", err)
		}
	}
	v, ok := ctx.Value(idemKey{}).(idemVal)
	if !ok || v.key == "" {
		return nil
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM idempotency WHERE key = ? AND at < ?`, v.key, ns(v.expired)); err != nil {
		return fmt.Errorf("idempotency key: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO idempotency(key, job_id, spec_sha256, at) VALUES (?,?,?,?)`, v.key, j.ID, v.specHash, ns(j.SubmittedAt)); err != nil {
		if strings.Contains(err.Error(), "UNIQUE") || strings.Contains(err.Error(), "PRIMARY KEY") {
			return fmt.Errorf("idempotency key: %w", ErrExists)
		}
		return fmt.Errorf("idempotency key: %w", err)
	}
	return nil
}

// idempotencyStore finds the job a key created and forgets expired keys.
type idempotencyStore interface {
	JobByIdempotencyKey(ctx context.Context, key string, expired time.Time) (jobID, specSHA256 string, err error)
	ExpireIdempotencyKeys(ctx context.Context, expired time.Time) (int64, error)
}

// JobByIdempotencyKey returns the job the key created and the hash of its
// spec; ErrNotFound when the key is new or was stored before expired.
func (s *SQLite) JobByIdempotencyKey(ctx context.Context, key string, expired time.Time) (string, string, error) {
	var id, h string
	err := s.db.QueryRowContext(ctx, `SELECT job_id, spec_sha256 FROM idempotency WHERE key = ? AND at >= ?`, key, ns(expired)).Scan(&id, &h)
	if errors.Is(err, sql.ErrNoRows) {
		return "", "", fmt.Errorf("idempotency key: %w", ErrNotFound)
	}
	return id, h, err
}

// ExpireIdempotencyKeys deletes the keys stored before expired and says
// how many there were.
func (s *SQLite) ExpireIdempotencyKeys(ctx context.Context, expired time.Time) (int64, error) {
	r, err := s.db.ExecContext(ctx, `DELETE FROM idempotency WHERE at < ?`, ns(expired))
	if err != nil {
		return 0, fmt.Errorf("expire idempotency keys: %w", err)
	}
	return r.RowsAffected()
}

// replay returns the job an earlier submission with the same key created
// (ok), ErrIdempotencyReuse when that one had another spec, or ok=false
// when the key is new.
func (a *API) replay(ctx context.Context, key, spec string) (JobRecord, bool, error) {
	is, can := a.D.cfg.Store.(idempotencyStore)
	if !can || key == "" {
		return JobRecord{}, false, nil
	}
	id, h, err := is.JobByIdempotencyKey(ctx, key, a.D.idemExpired())
	if errors.Is(err, ErrNotFound) {
		return JobRecord{}, false, nil
	}
	if err != nil {
		return JobRecord{}, false, err
	}
	if h != specHash(spec) {
		return JobRecord{}, false, fmt.Errorf("%w (it created job %s)", ErrIdempotencyReuse, id)
	}
	rec, err := a.D.cfg.Store.GetJob(ctx, id)
	return rec, err == nil, err
}
