package cli

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/replan/replan/cluster"
	"github.com/replan/replan/control"
)

// authOptions are the daemon's identity and listener flags (issue 12).
type authOptions struct {
	tokens, tlsCert, tlsKey, metricsListen string
}

// flagSet is the part of cobra's flag set addAuthFlags uses.
type flagSet interface {
	StringVar(p *string, name, value, usage string)
}

func addAuthFlags(f flagSet, a *authOptions) {
	f.StringVar(&a.tokens, "tokens", "", "per-user tokens of the --listen listener: lines \"USER SHA256HEX\" (the SHA-256 of each user's token)")
	f.StringVar(&a.tlsCert, "tls-cert", "", "TLS certificate of the --listen listener (default: a self-signed one generated at first start next to --db)")
	f.StringVar(&a.tlsKey, "tls-key", "", "TLS private key of --tls-cert")
	f.StringVar(&a.metricsListen, "metrics-listen", "", "serve /metrics alone, without authentication, on this TCP address")
}

// runAsOf maps each tenant with run_as to its Unix user (ssh executor).
func runAsOf(inv *cluster.Inventory) map[string]string {
	m := map[string]string{}
	for _, t := range inv.Tenants {
		if t.RunAs != "" {
			m[t.Name] = t.RunAs
		}
	}
	return m
}

// setupAuth gives the API the inventory's users and admins (a multi-user
// daemon opens its socket to every local user and authorizes each request
// by the caller's uid; without users it stays single-user and says so),
// and starts the TLS listener (--listen) and the metrics listener.
func setupAuth(ctx context.Context, o daemonOptions, inv *cluster.Inventory, api *control.API, log *slog.Logger, stderr interface{ Write([]byte) (int, error) }, errc chan<- error) error {
	acc := control.AccessFromInventory(inv)
	api.Access = acc
	if acc.MultiUser() {
		if err := os.Chmod(o.socket, 0o666); err != nil {
			return err
		}
		log.Info("multi-user: the socket is open to local users; each request is authorized by its caller's uid (inventory tenants[].users, admins)", "socket", o.socket)
	} else {
		log.Info("single-user: the inventory lists no tenants[].users or admins, so everyone who can open the socket may do everything (socket mode 0600)", "socket", o.socket)
	}
	if o.auth.tokens != "" {
		toks, err := control.LoadTokens(o.auth.tokens)
		if err != nil {
			return err
		}
		acc.Tokens = toks
	}
	if o.listen != "" {
		legacy := ""
		if o.tokenFile != "" {
			b, err := os.ReadFile(o.tokenFile)
			if err != nil {
				return err
			}
			if legacy = strings.TrimSpace(string(b)); legacy == "" {
				return fmt.Errorf("daemon: %s is empty", o.tokenFile)
			}
		}
		if legacy == "" && acc.Tokens == nil {
			return fmt.Errorf("daemon: --listen needs --tokens (per-user) or --token-file")
		}
		certF, keyF := o.auth.tlsCert, o.auth.tlsKey
		if (certF == "") != (keyF == "") {
			return fmt.Errorf("daemon: --tls-cert and --tls-key go together")
		}
		if certF == "" {
			dir := filepath.Join(filepath.Dir(o.db), "tls")
			certF, keyF = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
		}
		host, _ := os.Hostname()
		cert, created, err := control.LoadOrCreateCert(certF, keyF, []string{host})
		if err != nil {
			return err
		}
		fp := control.Fingerprint(cert.Certificate[0])
		if created {
			fmt.Fprintf(stderr, "replan daemon: generated a self-signed TLS certificate %s\n", certF)
		}
		fmt.Fprintf(stderr, "replan daemon: TLS listener %s, certificate SHA-256 fingerprint %s (clients: --tls-fingerprint)\n", o.listen, fp)
		tl, err := netListen(o.listen)
		if err != nil {
			return err
		}
		tapi := &control.API{D: api.D, Version: version, Token: legacy, Access: acc, Self: api.Self}
		go func() {
			errc <- control.Serve(ctx, tls.NewListener(tl, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}), tapi.Handler())
		}()
	}
	if o.auth.metricsListen != "" {
		ml, err := netListen(o.auth.metricsListen)
		if err != nil {
			return err
		}
		go func() { errc <- control.Serve(ctx, ml, api.MetricsHandler()) }()
	}
	return nil
}
