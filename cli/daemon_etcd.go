package cli

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

// startEmbeddedEtcd starts this daemon's etcd member (--etcd-embedded):
// name among peers ("NAME=PEER_URL,..."), its data in dir, its clients
// served at clientURL. A member whose data directory exists rejoins with
// its data (the peers then only name the others). The function it returns
// stops the member.
func startEmbeddedEtcd(ctx context.Context, name, dir, clientURL, peers string, log *slog.Logger) (func(), error) {
	cfg := embed.NewConfig()
	cfg.Name = name
	cfg.Dir = dir
	cfg.LogLevel = "error"
	cfg.InitialClusterToken = "replan"
	// One daemon write is one transaction: etcd's default of 128
	// operations per transaction is too few (docs/ha.md "Transactions").
	cfg.MaxTxnOps = 4096
	cfg.MaxRequestBytes = 8 << 20
	var self *url.URL
	var cluster []string
	for _, p := range splitList(peers) {
		n, u, ok := strings.Cut(p, "=")
		if !ok || n == "" {
			return nil, fmt.Errorf("daemon: --peers %q: %q: want NAME=PEER_URL", peers, p)
		}
		pu, err := url.Parse(u)
		if err != nil || pu.Host == "" {
			return nil, fmt.Errorf("daemon: --peers: %s: %q is not a URL", n, u)
		}
		if n == name {
			self = pu
		}
		cluster = append(cluster, n+"="+u)
	}
	if self == nil {
		return nil, fmt.Errorf("daemon: --peers %q names no member %q (--name)", peers, name)
	}
	cu, err := url.Parse(clientURL)
	if err != nil || cu.Host == "" {
		return nil, fmt.Errorf("daemon: --etcd-client-url %q is not a URL", clientURL)
	}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*self}, []url.URL{*self}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.InitialCluster = strings.Join(cluster, ",")
	cfg.ClusterState = embed.ClusterStateFlagNew
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("daemon: etcd data directory: %w", err)
	}
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("daemon: embedded etcd member %s: %w", name, err)
	}
	go func() {
		select {
		case <-e.Server.ReadyNotify():
			log.Info("embedded etcd member ready", "name", name, "client", clientURL, "peer", self.String())
		case <-ctx.Done():
		case <-time.After(time.Minute):
			log.Warn("embedded etcd member not ready after a minute: is a majority of --peers up?", "name", name)
		}
	}()
	go func() {
		if err, ok := <-e.Err(); ok && err != nil {
			log.Error("embedded etcd member failed", "name", name, "err", err)
		}
	}()
	return e.Close, nil
}
