package cli

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/replan/replan/control"
)

// storeCopyJSON is the stable --json schema of `replan store copy`.
type storeCopyJSON struct {
	From    string             `json:"from"`
	To      string             `json:"to"`
	Prefix  string             `json:"prefix"`
	Cleared int64              `json:"cleared"` // keys deleted first (--force)
	Copied  control.CopyCounts `json:"copied"`
}

func newStoreCmd(stdout, stderr io.Writer) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "store",
		Short: "Operate on the daemon's store (copy a SQLite store into etcd)",
	}
	cmd.AddCommand(newStoreCopyCmd(stdout, stderr))
	return cmd
}

func newStoreCopyCmd(stdout, stderr io.Writer) *cobra.Command {
	var (
		from, to, prefix     string
		cacert, cert, key    string
		force, asJSON        bool
		dialTimeout, timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "copy --from sqlite:PATH --to etcd://HOST:PORT[,HOST:PORT...]",
		Short: "Copy every record of a SQLite store into etcd (migrate to an HA control plane)",
		Long: "Copy jobs, their history, decisions, events, servers, drains, GPU health, models,\n" +
			"profile samples, timer waits, owners, idempotency keys and the ID counters from the\n" +
			"SQLite database PATH into etcd under --prefix, keeping IDs and versions: a daemon on\n" +
			"etcd goes on where the one on SQLite stopped. Stop the daemon first (it holds the\n" +
			"database). The destination prefix must be empty; --force deletes what it holds first.\n" +
			"etcds:// connects with TLS (--cacert, --cert, --key). See docs/ha.md.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			path, err := storeCopySource(from)
			if err != nil {
				return err
			}
			eps, useTLS, err := storeCopyEndpoints(to)
			if err != nil {
				return err
			}
			var tc *tls.Config
			if useTLS || cacert != "" || cert != "" {
				if tc, err = storeCopyTLS(cacert, cert, key); err != nil {
					return err
				}
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			src, err := control.OpenSQLite(ctx, path)
			if err != nil {
				return fmt.Errorf("store copy: --from %s: %w (is a daemon running on it? stop it first)", from, err)
			}
			defer src.Close()
			dst, err := control.OpenEtcdStore(ctx, control.EtcdConfig{Endpoints: eps, TLS: tc, Prefix: prefix, DialTimeout: dialTimeout, EventRetention: -1})
			if err != nil {
				return fmt.Errorf("store copy: --to %s: %w", to, err)
			}
			defer dst.Close()
			out := storeCopyJSON{From: from, To: to, Prefix: dst.Prefix()}
			empty, held, err := dst.Empty(ctx)
			if err != nil {
				return fmt.Errorf("store copy: --to %s: %w", to, err)
			}
			if !empty {
				if !force {
					return fmt.Errorf("store copy: --to %s: prefix %s is not empty (it holds %s): copy into an empty prefix (--prefix), or pass --force to delete what it holds first", to, dst.Prefix(), held)
				}
				if out.Cleared, err = dst.Clear(ctx); err != nil {
					return fmt.Errorf("store copy: --to %s: clear %s: %w", to, dst.Prefix(), err)
				}
			}
			if out.Copied, err = control.CopyToEtcd(ctx, src, dst); err != nil {
				return fmt.Errorf("store copy: %w (the destination holds part of the records: run again with --force)", err)
			}
			if asJSON {
				return writeJSON(stdout, out)
			}
			c := out.Copied
			if out.Cleared > 0 {
				fmt.Fprintf(stdout, "deleted %d keys under %s first (--force)\n", out.Cleared, out.Prefix)
			}
			fmt.Fprintf(stdout, "copied %s to %s (prefix %s): %d jobs, %d transitions, %d decisions, %d events, %d servers, %d drains, %d GPU health records, %d models, %d profile samples, %d timer waits, %d owners, %d idempotency keys, %d counters\n",
				from, to, out.Prefix, c.Jobs, c.Transitions, c.Decisions, c.Events, c.Nodes, c.Drains, c.GPUHealth, c.Models, c.ProfileSamples, c.TimerWaits, c.Owners, c.IdempotencyKey, c.Counters)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&from, "from", "", "the source: sqlite:PATH (the daemon's --db)")
	f.StringVar(&to, "to", "", "the destination: etcd://HOST:PORT[,HOST:PORT...] (etcds:// for TLS)")
	f.StringVar(&prefix, "prefix", control.DefaultEtcdPrefix, "the key prefix of the store in etcd")
	f.BoolVar(&force, "force", false, "delete what the destination prefix holds before copying")
	f.StringVar(&cacert, "cacert", "", "PEM file of the CA that signed the etcd servers' certificates (TLS)")
	f.StringVar(&cert, "cert", "", "PEM file of this client's certificate (TLS client authentication)")
	f.StringVar(&key, "key", "", "PEM file of this client's private key (with --cert)")
	f.DurationVar(&dialTimeout, "dial-timeout", control.DefaultEtcdDialTimeout, "how long to wait for etcd to answer")
	f.DurationVar(&timeout, "timeout", 30*time.Minute, "how long the whole copy may take")
	f.BoolVar(&asJSON, "json", false, "print what was copied as JSON")
	return cmd
}

// storeCopySource is the path of --from sqlite:PATH, which must exist (the
// copy must not create an empty database).
func storeCopySource(from string) (string, error) {
	path, ok := strings.CutPrefix(from, "sqlite:")
	switch {
	case from == "":
		return "", errors.New("store copy: --from is required: sqlite:PATH")
	case !ok || path == "":
		return "", fmt.Errorf("store copy: --from %q: want sqlite:PATH", from)
	}
	fi, err := os.Stat(path)
	if err != nil {
		return "", fmt.Errorf("store copy: --from %s: %w", from, err)
	}
	if fi.IsDir() {
		return "", fmt.Errorf("store copy: --from %s: a directory, not a database file", from)
	}
	return path, nil
}

// storeCopyEndpoints are the client URLs of --to etcd://HOST:PORT,...
// (etcds://: TLS).
func storeCopyEndpoints(to string) ([]string, bool, error) {
	if to == "" {
		return nil, false, errors.New("store copy: --to is required: etcd://HOST:PORT[,HOST:PORT...]")
	}
	scheme, rest, ok := strings.Cut(to, "://")
	if !ok || (scheme != "etcd" && scheme != "etcds") {
		return nil, false, fmt.Errorf("store copy: --to %q: want etcd://HOST:PORT[,HOST:PORT...] or etcds://HOST:PORT[,HOST:PORT...]", to)
	}
	web := "http://"
	if scheme == "etcds" {
		web = "https://"
	}
	var eps []string
	for i, hp := range strings.Split(rest, ",") {
		hp = strings.TrimSuffix(strings.TrimSpace(hp), "/")
		host, port, ok := strings.Cut(hp, ":")
		if !ok || host == "" || port == "" || strings.ContainsAny(hp, "/@?#") {
			return nil, false, fmt.Errorf("store copy: --to %q: endpoint %d %q: want HOST:PORT", to, i+1, hp)
		}
		eps = append(eps, web+hp)
	}
	return eps, scheme == "etcds", nil
}

// storeCopyTLS is the client TLS configuration of the flags.
func storeCopyTLS(cacert, cert, key string) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if cacert != "" {
		pem, err := os.ReadFile(cacert)
		if err != nil {
			return nil, fmt.Errorf("store copy: --cacert: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("store copy: --cacert %s: no PEM certificate in it", cacert)
		}
		tc.RootCAs = pool
	}
	if (cert == "") != (key == "") {
		return nil, errors.New("store copy: --cert and --key go together")
	}
	if cert != "" {
		kp, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, fmt.Errorf("store copy: --cert %s --key %s: %w", cert, key, err)
		}
		tc.Certificates = []tls.Certificate{kp}
	}
	return tc, nil
}
