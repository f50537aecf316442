package cli

// The store a leader of a highly available control plane opens when it is
// elected (daemon_ha.go).

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/replan/replan/control"
)

// openHAStore opens --store's store for a newly elected leader; the
// function it returns closes it (and releases what it holds).
//
// --store sqlite with an election (daemons on one host sharing --db, for
// tests and trials): the leader takes the database's lock once elected,
// waiting while a deposed leader still holds it (the lock fences it), so
// never two daemons write the file. --store etcd: the etcd store under
// --etcd-prefix, on the election's own client.
func openHAStore(ctx context.Context, o daemonOptions, cli *clientv3.Client, log *slog.Logger) (control.Store, func(), error) {
	if o.ha.store == "etcd" {
		st, err := openEtcdStore(ctx, cli, o.ha.prefix) // daemon_store_etcd.go
		if err != nil {
			return nil, nil, err
		}
		return st, func() {
			if c, ok := st.(io.Closer); ok {
				c.Close()
			}
		}, nil
	}
	db := o.db
	if db == "" {
		home, _ := os.UserHomeDir()
		db = filepath.Join(home, ".replan", "replan.db")
	}
	var lock *control.DBLock
	for waited := false; ; waited = true {
		var err error
		if lock, err = control.LockDB(db); err == nil {
			break
		}
		if !errors.Is(err, control.ErrLocked) {
			return nil, nil, fmt.Errorf("daemon: %w", err)
		}
		if !waited {
			log.Warn("elected, but another daemon still holds the database: waiting for it to let go", "db", db)
		}
		select {
		case <-ctx.Done():
			return nil, nil, fmt.Errorf("daemon: %s: %w while another daemon held it", db, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	st, err := control.OpenSQLite(ctx, db)
	if err != nil {
		lock.Release()
		return nil, nil, err
	}
	return st, func() { st.Close(); lock.Release() }, nil
}
