package control

// One daemon per database: an exclusive flock on <db>.lock, held for the
// daemon's life, taken before the database is opened or read.

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// ErrLocked is returned by LockDB when another process holds the lock.
var ErrLocked = errors.New("database in use by another daemon")

// DBLock is the held lock of a database; Release gives it back (the
// kernel also releases it when the process dies, even by SIGKILL).
type DBLock struct {
	f    *os.File
	path string
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
	return &DBLock{f: f, path: p}, nil
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
