package cli

import (
	"context"
	"errors"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/replan/replan/control"
)

// openEtcdStore is the etcd store under prefix on cli.
//
// MERGE: this branch has no etcd store; once control.EtcdStore is merged
// the body becomes `return control.NewEtcdStoreFromClient(cli, prefix), nil`.
func openEtcdStore(ctx context.Context, cli *clientv3.Client, prefix string) (control.Store, error) {
	return nil, errors.New("daemon: --store etcd: this build has no etcd store; use --store sqlite (the default)")
}
