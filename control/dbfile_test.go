package control

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Issue 24: the lock is a flock on a file, so after the database's
// directory was deleted the daemon kept acknowledging writes (lost at
// restart) and a second daemon could lock a new file at the same path.
// Now the store refuses to acknowledge a write once its path no longer
// names the file it has open, the lock notices the same, and WatchDB
// returns the error that stops the daemon.
func TestDeletedDatabaseDirectoryStopsWrites(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "state")
	db := filepath.Join(dir, "replan.db")
	lock, err := LockDB(db)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Release()
	st, err := OpenSQLite(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.NextJobID(ctx); err != nil {
		t.Fatal(err)
	}
	if err := lock.Check(); err != nil {
		t.Fatalf("lock check before: %v", err)
	}
	if err := st.CheckFile(); err != nil {
		t.Fatalf("store check before: %v", err)
	}
	wctx, cancel := context.WithCancel(ctx)
	watch := make(chan error, 1)
	go func() { watch <- WatchDB(wctx, 20*time.Millisecond, lock, st) }()

	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := st.NextJobID(ctx); !errors.Is(err, ErrStoreReplaced) {
		t.Errorf("job id after the directory was deleted: %v, want %v", err, ErrStoreReplaced)
	}
	if _, err := st.Commit(ctx, Batch{Events: []Event{{Kind: "x", Msg: "lost", At: t0}}}); !errors.Is(err, ErrStoreReplaced) {
		t.Errorf("commit after the directory was deleted: %v, want %v", err, ErrStoreReplaced)
	}
	if err := lock.Check(); !errors.Is(err, ErrStoreReplaced) {
		t.Errorf("lock check: %v", err)
	}
	select {
	case err := <-watch:
		if !errors.Is(err, ErrStoreReplaced) {
			t.Errorf("WatchDB: %v", err)
		}
		t.Logf("WatchDB: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("WatchDB did not notice the deleted directory in a minute")
	}
	cancel()

	// A new database at the same path is another file: still refused.
	other, err := OpenSQLite(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := other.NextJobID(ctx); err != nil {
		t.Fatalf("the new database: %v", err)
	}
	if _, err := st.NextJobID(ctx); !errors.Is(err, ErrStoreReplaced) {
		t.Errorf("old store once another database is at its path: %v", err)
	}
}
