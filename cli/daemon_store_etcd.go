package cli

import (
	"context"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/replan/replan/control"
)

// openEtcdStore is the etcd store under prefix on cli (the election's
// client; docs/ha.md). An external etcd must accept transactions of 4096
// operations (--max-txn-ops 4096 --max-request-bytes 8388608).
func openEtcdStore(ctx context.Context, cli *clientv3.Client, prefix string) (control.Store, error) {
	return control.NewEtcdStoreFromClient(cli, prefix), nil
}
