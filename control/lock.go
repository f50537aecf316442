package control

// One daemon per database: an exclusive flock on <db>.lock, held for the
// daemon's life, taken before the database is opened or read. A flock is
// on a file, not a path: when the database's directory is deleted or its
// files replaced, the lock and the open database are files nobody can
// reach by their paths any more (another daemon could start there, and
// every write is lost at restart). So the daemon checks that each path
// still names the file it holds (device and inode): the store before
// acknowledging each write, WatchDB periodically, and it stops with
// ErrStoreReplaced when they differ.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ErrStoreReplaced is returned when the database or its lock file is no
// longer the file at its path (deleted, moved or replaced while open).
var ErrStoreReplaced = errors.New("deleted or replaced while the daemon had it open")

// fileID identifies a file: its device and inode.
type fileID struct{ dev, ino uint64 }

func (f fileID) String() string { return fmt.Sprintf("device %d inode %d", f.dev, f.ino) }

func idOf(fi os.FileInfo) fileID {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return fileID{uint64(st.Dev), uint64(st.Ino)}
	}
	return fileID{}
}

// samePath reports nil when path still names the file held (identified
// by held), or an error wrapping ErrStoreReplaced that names what it
// finds and why it matters.
func samePath(what, path string, held fileID, why string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("%s %s: %w (held: %s; the path: %v): %s", what, path, ErrStoreReplaced, held, err, why)
	}
	if now := idOf(fi); now != held {
		return fmt.Errorf("%s %s: %w (held: %s; the path now: %s): %s", what, path, ErrStoreReplaced, held, now, why)
	}
	return nil
}

// ErrLocked is returned by LockDB when another process holds the lock.
var ErrLocked = errors.New("database in use by another daemon")

// DBLock is the held lock of a database; Release gives it back (the
// kernel also releases it when the process dies, even by SIGKILL).
type DBLock struct {
	f    *os.File
	path string
	id   fileID // the lock file held
}

// LockPath is the lock file of the database at db.
func LockPath(db string) string { return db + ".lock" }

// PrepareDBDir creates the database's directory 0700 when it is missing.
func PrepareDBDir(db string) error {
	dir := filepath.Dir(db)
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("create database directory %s: %w", dir, err)
		}
		return os.Chmod(dir, 0o700)
	}
	return nil
}

// LockDB takes the exclusive lock of the database at db without waiting.
// When another process holds it the error wraps ErrLocked and names that
// process's PID (which the holder writes into the lock file).
func LockDB(db string) (*DBLock, error) {
	if err := PrepareDBDir(db); err != nil {
		return nil, err
	}
	p := LockPath(db)
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", p, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		defer f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			b, _ := os.ReadFile(p)
			holder := strings.TrimSpace(string(b))
			if _, perr := strconv.Atoi(holder); perr != nil || holder == "" {
				holder = "unknown"
			}
			return nil, fmt.Errorf("lock %s: held by pid %s: %w", p, holder, ErrLocked)
		}
		return nil, fmt.Errorf("lock %s: %w", p, err)
	}
	if err := f.Truncate(0); err == nil {
		f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
		f.Sync()
	}
	l := &DBLock{f: f, path: p}
	if fi, err := f.Stat(); err == nil {
		l.id = idOf(fi)
	}
	return l, nil
}

// Check reports whether the lock file's path still names the file this
// lock holds: an error wrapping ErrStoreReplaced when it was deleted (with
// the database's directory) or replaced, since another daemon could then
// take a lock of its own there.
func (l *DBLock) Check() error {
	if l == nil || l.f == nil || l.id == (fileID{}) {
		return nil
	}
	return samePath("lock", l.path, l.id, "another daemon could lock the database; stopping")
}

// WatchDB checks every interval that the lock's and the store's paths
// still name the files the daemon holds; it returns the first error (the
// daemon stops with it) or nil when ctx ends.
func WatchDB(ctx context.Context, every time.Duration, l *DBLock, s *SQLite) error {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if err := l.Check(); err != nil {
			return err
		}
		if err := s.CheckFile(); err != nil {
			return err
		}
	}
}

// Release gives the lock back.
func (l *DBLock) Release() error {
	if l == nil || l.f == nil {
		return nil
	}
	syscall.Flock(int(l.f.Fd()), syscall.LOCK_UN)
	err := l.f.Close()
	l.f = nil
	return err
}

// privateFiles creates the database file 0600 when it is missing (SQLite
// gives its -wal and -shm files the database file's mode) and tightens
// the mode of those that exist.
func privateFiles(db string) error {
	if err := PrepareDBDir(db); err != nil {
		return err
	}
	f, err := os.OpenFile(db, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("create database %s: %w", db, err)
	}
	f.Close()
	for _, p := range []string{db, db + "-wal", db + "-shm"} {
		if err := os.Chmod(p, 0o600); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("make %s private: %w", p, err)
		}
	}
	return nil
}

// RefuseNonSocket returns an error when path exists and is not a unix
// socket: a --socket pointing at a regular file is refused, never deleted.
func RefuseNonSocket(path string) error {
	fi, err := os.Lstat(path)
	if err != nil {
		return nil
	}
	if fi.Mode().Type() != os.ModeSocket {
		return fmt.Errorf("listen %s: it exists and is not a socket (%s); refusing to replace it", path, fi.Mode().Type())
	}
	return nil
}
