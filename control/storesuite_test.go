package control

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/replan/replan/internal/etcdtest"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// storeKit opens stores of one backend for the tests of the Store
// contract, which run on every backend (forEachStore).
type storeKit struct {
	name string
	// open returns a new, empty store (closed when t ends) and reopen,
	// which closes that store and opens its data again, as a restarted
	// daemon would.
	open func(t *testing.T) (Store, func(t *testing.T) Store)
}

// forEachStore runs fn on SQLite and on a real etcd (the embedded server,
// started once for the call; each open takes a prefix of its own).
func forEachStore(t *testing.T, fn func(t *testing.T, k storeKit)) {
	t.Helper()
	t.Run("sqlite", func(t *testing.T) { fn(t, sqliteKit()) })
	t.Run("etcd", func(t *testing.T) { fn(t, etcdKit(t)) })
}

func sqliteKit() storeKit {
	return storeKit{name: "sqlite", open: func(t *testing.T) (Store, func(t *testing.T) Store) {
		t.Helper()
		s, path := openTest(t)
		return s, func(t *testing.T) Store {
			t.Helper()
			s.Close()
			s2, err := OpenSQLite(context.Background(), path)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s2.Close() })
			return s2
		}
	}}
}

var etcdPrefixes atomic.Int64

// etcdKit starts an embedded etcd for t (on first open) and opens stores
// on it under fresh prefixes.
func etcdKit(t *testing.T) storeKit {
	var once sync.Once
	var eps []string
	return storeKit{name: "etcd", open: func(t2 *testing.T) (Store, func(t *testing.T) Store) {
		t2.Helper()
		once.Do(func() { eps = etcdtest.Start(t) })
		prefix := fmt.Sprintf("/test-%d/", etcdPrefixes.Add(1))
		s := openEtcdTest(t2, eps, prefix)
		return s, func(t *testing.T) Store {
			t.Helper()
			s.Close()
			return openEtcdTest(t, eps, prefix)
		}
	}}
}

func openEtcdTest(t *testing.T, eps []string, prefix string) *EtcdStore {
	t.Helper()
	s, err := OpenEtcdStore(context.Background(), EtcdConfig{Endpoints: eps, Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// countKeys counts the keys of s under sub (etcd) or the rows of table
// (SQLite).
func countStored(t *testing.T, s Store, table, sub string) int {
	t.Helper()
	ctx := context.Background()
	switch s := s.(type) {
	case *SQLite:
		var n int
		if err := s.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM `+table).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	case *EtcdStore:
		r, err := s.cli.Get(ctx, s.k(sub), clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		return int(r.Count)
	}
	t.Fatalf("countStored: a %T", s)
	return 0
}
