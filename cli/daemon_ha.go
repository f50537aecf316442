package cli

// `replan daemon` as one member of a highly available control plane
// (issue 27; docs/ha.md, "Leader election and failover"): the daemons
// elect a leader on etcd (--etcd-endpoints, or --etcd-embedded with
// --peers); the leader runs the control plane (store, rounds, observation,
// executor, API) and the others forward their API to it until one of them
// is elected.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/spf13/pflag"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/replan/replan/cluster"
	"github.com/replan/replan/control"
	"github.com/replan/replan/dataset"
	"github.com/replan/replan/perf"
	"github.com/replan/replan/sched"
)

// haOptions are the flags of a highly available daemon.
type haOptions struct {
	store                      string // sqlite or etcd
	endpoints                  string // etcd client URLs, comma-separated
	cert, key, ca              string // etcd client TLS
	prefix                     string // etcd key prefix of this control plane
	advertise, name            string
	embedded                   bool
	peers, etcdDir, etcdClient string // embedded etcd member
	ttl                        time.Duration
}

func addHAFlags(f *pflag.FlagSet, h *haOptions) {
	f.StringVar(&h.store, "store", "sqlite", "sqlite (--db, one daemon) or etcd (the etcd cluster of --etcd-endpoints or --etcd-embedded; several daemons, one leader; docs/ha.md)")
	f.StringVar(&h.endpoints, "etcd-endpoints", "", "etcd client URLs, comma-separated: elect a leader among the daemons there (docs/ha.md)")
	f.StringVar(&h.cert, "etcd-cert", "", "client certificate for etcd (TLS, with --etcd-key)")
	f.StringVar(&h.key, "etcd-key", "", "client key for etcd (TLS, with --etcd-cert)")
	f.StringVar(&h.ca, "etcd-ca", "", "CA certificates that sign etcd's server certificates (TLS)")
	f.StringVar(&h.prefix, "etcd-prefix", "/replan/", "etcd key prefix of this control plane")
	f.BoolVar(&h.embedded, "etcd-embedded", false, "run an etcd member in this daemon (with --peers; --name is its member name)")
	f.StringVar(&h.peers, "peers", "", "the embedded etcd cluster: NAME=PEER_URL,... (every daemon's member, this one's included)")
	f.StringVar(&h.name, "name", "", "this daemon's name among the members (default: the host name)")
	f.StringVar(&h.etcdDir, "etcd-dir", "", "the embedded etcd member's data directory (default: etcd-NAME beside --db)")
	f.StringVar(&h.etcdClient, "etcd-client-url", "http://127.0.0.1:2379", "where the embedded etcd member serves its clients")
	f.StringVar(&h.advertise, "advertise", "", "this daemon's API address as the other daemons reach it (https://HOST:PORT of --listen): followers forward there")
	f.DurationVar(&h.ttl, "election-ttl", control.DefaultElectionTTL, "the election's lease: a leader none of whose renewals succeeds within 3/4 of it steps down, and another is elected once it expires")
}

// on reports whether the daemon elects a leader on etcd.
func (h haOptions) on() bool { return h.store == "etcd" || h.endpoints != "" || h.embedded }

func (h *haOptions) check(o daemonOptions) error {
	switch h.store {
	case "sqlite", "etcd":
	default:
		return fmt.Errorf("daemon: --store %q: want sqlite or etcd", h.store)
	}
	if h.embedded == (h.endpoints != "") {
		return errors.New("daemon: --store etcd: give --etcd-endpoints URL,... or --etcd-embedded --peers NAME=URL,... (one of them)")
	}
	if h.embedded && h.peers == "" {
		return errors.New("daemon: --etcd-embedded needs --peers NAME=PEER_URL,... (every member, this one's included)")
	}
	if (h.cert == "") != (h.key == "") {
		return errors.New("daemon: --etcd-cert and --etcd-key go together")
	}
	if h.advertise == "" || o.listen == "" || o.tokenFile == "" {
		return errors.New("daemon: a daemon that elects a leader needs --listen, --advertise https://HOST:PORT (where the others reach that listener) and --token-file (the token every member shares: followers forward with it)")
	}
	if !strings.HasPrefix(h.advertise, "https://") {
		return fmt.Errorf("daemon: --advertise %q: want https://HOST:PORT (the --listen listener serves TLS)", h.advertise)
	}
	if h.ttl < time.Second {
		return fmt.Errorf("daemon: --election-ttl %v: want at least 1s", h.ttl)
	}
	if h.name == "" {
		h.name, _ = os.Hostname()
	}
	if !strings.HasSuffix(h.prefix, "/") {
		h.prefix += "/"
	}
	return nil
}

// swapHandler serves the handler of the daemon's current role.
type swapHandler struct{ p atomic.Pointer[http.Handler] }

func (s *swapHandler) set(h http.Handler) { s.p.Store(&h) }
func (s *swapHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	(*s.p.Load()).ServeHTTP(w, r)
}

// connectEtcd is the client of --etcd-endpoints, or of the embedded
// member it starts; the function it returns closes both.
func connectEtcd(ctx context.Context, h haOptions, db string, log *slog.Logger) (*clientv3.Client, func(), error) {
	endpoints := splitList(h.endpoints)
	stop := func() {}
	if h.embedded {
		dir := h.etcdDir
		if dir == "" {
			dir = filepath.Join(filepath.Dir(db), "etcd-"+h.name)
		}
		e, err := startEmbeddedEtcd(ctx, h.name, dir, h.etcdClient, h.peers, log) // daemon_etcd.go
		if err != nil {
			return nil, nil, err
		}
		stop = e
		endpoints = []string{h.etcdClient}
	}
	cfg := clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop(), Context: ctx}
	if h.cert != "" || h.ca != "" {
		tc := &tls.Config{MinVersion: tls.VersionTLS12}
		if h.cert != "" {
			c, err := tls.LoadX509KeyPair(h.cert, h.key)
			if err != nil {
				stop()
				return nil, nil, fmt.Errorf("daemon: --etcd-cert %s, --etcd-key %s: %w", h.cert, h.key, err)
			}
			tc.Certificates = []tls.Certificate{c}
		}
		if h.ca != "" {
			b, err := os.ReadFile(h.ca)
			if err != nil {
				stop()
				return nil, nil, fmt.Errorf("daemon: --etcd-ca: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(b) {
				stop()
				return nil, nil, fmt.Errorf("daemon: --etcd-ca %s: no PEM certificate in it", h.ca)
			}
			tc.RootCAs = pool
		}
		cfg.TLS = tc
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		stop()
		return nil, nil, fmt.Errorf("daemon: etcd %s: %w", strings.Join(endpoints, ","), err)
	}
	return cli, func() { cli.Close(); stop() }, nil
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// runHADaemon runs the daemon as a member of a highly available control
// plane: a follower until elected, then the leader until its term ends
// (then a follower again), until ctx ends.
func runHADaemon(ctx context.Context, o daemonOptions, log *slog.Logger, stderr io.Writer) error {
	h := o.ha
	if err := h.check(o); err != nil {
		return err
	}
	if err := checkProfileFlags(&o); err != nil {
		return err
	}
	if _, err := o.newPolicy(); err != nil {
		return err
	}
	inv, err := cluster.Load(o.inventory)
	if err != nil {
		return err
	}
	if o.data == "" {
		o.data = defaultDataDir()
	}
	if err := control.RefuseNonSocket(o.socket); err != nil {
		return fmt.Errorf("daemon: %w", err)
	}
	acc := control.AccessFromInventory(inv)
	if o.auth.tokens != "" {
		if acc.Tokens, err = control.LoadTokens(o.auth.tokens); err != nil {
			return err
		}
	}
	b, err := os.ReadFile(o.tokenFile)
	if err != nil {
		return err
	}
	token := strings.TrimSpace(string(b))
	if token == "" {
		return fmt.Errorf("daemon: %s is empty", o.tokenFile)
	}
	cli, closeEtcd, err := connectEtcd(ctx, h, o.db, log)
	if err != nil {
		return err
	}
	defer closeEtcd()

	// The listeners first: a member that cannot serve takes no part.
	l, err := control.ListenUnix(o.socket)
	if err != nil {
		return err
	}
	defer l.Close()
	if acc.MultiUser() {
		if err := os.Chmod(o.socket, 0o666); err != nil {
			return err
		}
	}
	certF, keyF := o.auth.tlsCert, o.auth.tlsKey
	if (certF == "") != (keyF == "") {
		return fmt.Errorf("daemon: --tls-cert and --tls-key go together")
	}
	if certF == "" {
		dir := filepath.Join(filepath.Dir(o.db), "tls-"+h.name)
		certF, keyF = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	}
	host, _ := os.Hostname()
	cert, _, err := control.LoadOrCreateCert(certF, keyF, []string{host})
	if err != nil {
		return err
	}
	fp := control.Fingerprint(cert.Certificate[0])
	fmt.Fprintf(stderr, "replan daemon: TLS listener %s (advertised %s), certificate SHA-256 fingerprint %s (clients: --tls-fingerprint)\n", o.listen, h.advertise, fp)
	tl, err := netListen(o.listen)
	if err != nil {
		return err
	}
	el, err := control.NewElection(control.ElectionConfig{Client: cli, Prefix: h.prefix + "election/", TTL: h.ttl,
		Self: control.Member{Name: h.name, Addr: h.advertise, Fingerprint: fp}, Logger: log})
	if err != nil {
		tl.Close()
		return fmt.Errorf("daemon: %w", err)
	}
	var sockH, tcpH swapHandler
	fsock := &control.Follower{API: &control.API{Access: acc}, El: el, Token: token, Version: version}
	ftcp := &control.Follower{API: &control.API{Access: acc, Token: token}, El: el, Token: token, Version: version}
	if h.store == "etcd" {
		// Reads of stored records are answered from a view of the store
		// fed by a watch (docs/ha.md, "Followers"), kept while leading
		// too: it is current the moment this daemon follows again.
		view := control.NewFollowView(cli, h.prefix, log)
		go view.Run(ctx)
		fsock.View, ftcp.View = view, view
	}
	follow := func() { sockH.set(fsock.Handler()); tcpH.set(ftcp.Handler()) }
	follow()
	errc := make(chan error, 2)
	go func() { errc <- control.Serve(ctx, l, &sockH) }()
	go func() {
		errc <- control.Serve(ctx, tls.NewListener(tl, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}), &tcpH)
	}()
	log.Info("replan daemon: member of a highly available control plane", "name", h.name, "advertise", h.advertise, "store", h.store, "socket", o.socket, "election_ttl", h.ttl)

	m := &member{o: o, inv: inv, acc: acc, token: token, cli: cli, el: el, log: log, sockH: &sockH, tcpH: &tcpH, follow: follow}
	go func() { errc <- m.run(ctx) }()
	select {
	case <-ctx.Done():
		return nil
	case err := <-errc:
		return err
	}
}

// member is a daemon of a highly available control plane.
type member struct {
	o           daemonOptions
	inv         *cluster.Inventory
	acc         *control.Access
	token       string
	cli         *clientv3.Client
	el          *control.Election
	log         *slog.Logger
	sockH, tcpH *swapHandler
	follow      func()
}

// run campaigns, leads while elected, and campaigns again, until ctx ends.
// A daemon that fails to take over maxTakeoverFailures times in a row,
// its term intact each time (a store it cannot open, an executor it
// cannot build), stops with the error rather than flap.
func (m *member) run(ctx context.Context) error {
	const maxTakeoverFailures = 3
	failures := 0
	for ctx.Err() == nil {
		m.follow()
		term, err := m.el.Campaign(ctx)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			m.log.Warn("election: not elected; campaigning again", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
			continue
		}
		err = m.lead(ctx, term)
		m.follow() // before anything else: no request reaches the old daemon
		if ctx.Err() != nil {
			term.Resign()
			break
		}
		if err != nil && term.Err() == nil {
			if failures++; failures >= maxTakeoverFailures {
				term.Resign()
				return fmt.Errorf("%w (elected %d times in a row, could not take over)", err, failures)
			}
		} else {
			failures = 0
		}
		m.log.Warn("stepped down: no longer the leader, not scheduling; following", "epoch", term.Epoch, "why", term.Err(), "err", err)
		term.Resign()
	}
	return nil
}

// lead runs the control plane for one term: it returns once the term
// ends (the loop and the executor's calls stop with it) or the daemon
// cannot run.
func (m *member) lead(ctx context.Context, term *control.Term) error {
	o := m.o
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-term.Done():
			cancel()
		case <-lctx.Done():
		}
	}()
	st, closeStore, err := openHAStore(lctx, o, m.cli, m.log) // daemon_store.go
	if err != nil {
		return err
	}
	defer closeStore()
	// Logged when the loop and the executor have stopped, before the store
	// is let go (a SQLite store's lock: the next leader waits for it).
	defer m.log.Info("stopped leading: the loop and the executor are stopped", "epoch", term.Epoch)
	servers, tenants := serversFromInventory(m.inv)
	models := dataset.ModelSource(lctx, o.data, perf.A800)
	exec, closeExec, err := newExecutor(lctx, o, m.inv, servers, models, m.log)
	if err != nil {
		return err
	}
	defer closeExec()
	policy, err := o.newPolicy()
	if err != nil {
		return err
	}
	d, err := control.New(lctx, control.Config{Store: st, Exec: exec, Policy: policy, Servers: servers, Tenants: tenants, Model: models, Logger: m.log, SpineGBps: spineOf(m.inv), IdempotencyRetention: o.idemRetention,
		HangFactor: o.hangFactor, HangFloor: o.hangFloor, GPUReadFailures: o.gpuReadFailures, Profile: o.profile, Epoch: term.Epoch,
		Redeploy:     control.RedeployOptions{Tries: o.redeployTries, Backoff: o.redeployBackoff},
		SlowFraction: o.slowFraction, SlowObservations: o.slowObservations, Background: true})
	if err != nil {
		return fmt.Errorf("daemon: taking over as leader (epoch %d): %w", term.Epoch, err)
	}
	defer d.WaitBackground() // the term's executor calls end with lctx before it follows
	d.EnableETA(func() sched.Policy { p, _ := o.newPolicy(); return p }, o.restartCost, o.tick)
	api := &control.API{D: d, Version: version, Access: m.acc, Self: m.o.ha.advertise, HA: m.el}
	tapi := &control.API{D: d, Version: version, Token: m.token, Access: m.acc, Self: m.o.ha.advertise, HA: m.el}
	defer m.follow() // first of the defers: no request reaches a daemon stepping down
	m.sockH.set(api.Handler())
	m.tcpH.set(tapi.Handler())
	m.log.Info("leading: running rounds, observation and the executor", "epoch", term.Epoch, "servers", len(servers))
	return d.Run(lctx, o.tick)
}
