package control

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLockDBIsExclusiveAndNamesTheHolder(t *testing.T) {
	db := filepath.Join(t.TempDir(), "new", "r.db")
	l, err := LockDB(db)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Dir(db)); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("directory created %v %v (want 0700)", fi.Mode().Perm(), err)
	}
	_, err = LockDB(db)
	if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), fmt.Sprintf("pid %d", os.Getpid())) {
		t.Fatalf("second lock: %v", err)
	}
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
	l2, err := LockDB(db)
	if err != nil {
		t.Fatalf("lock after release: %v", err)
	}
	l2.Release()
}

func TestListenUnixRefusesNonSocketFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "replan.db")
	os.WriteFile(p, []byte("precious"), 0o600)
	if l, err := ListenUnix(p); err == nil {
		l.Close()
		t.Fatal("listened over a regular file")
	}
	if b, err := os.ReadFile(p); err != nil || string(b) != "precious" {
		t.Fatalf("the file was removed or changed: %q %v", b, err)
	}
}
