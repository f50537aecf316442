package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/replan/replan/cluster"
	"github.com/replan/replan/ssh"
)

// trustJSON is the stable --json schema of `replan trust`.
type trustJSON struct {
	Server      string `json:"server"`
	Addr        string `json:"addr"`
	KeyType     string `json:"key_type"`
	Fingerprint string `json:"fingerprint"`
	Status      string `json:"status"` // known | unknown | changed
	Written     bool   `json:"written"`
	KnownHosts  string `json:"known_hosts"`
}

func newTrustCmd(stdout, stderr io.Writer) *cobra.Command {
	var (
		invFile, knownHosts string
		yes, asJSON, all    bool
		timeout             time.Duration
	)
	cmd := &cobra.Command{
		Use:   "trust SERVER... | --all",
		Short: "Fetch servers' SSH host keys, show their fingerprints and add them to known_hosts",
		Long: "Fetch the host key each SERVER offers (a name from the inventory, or host[:port];\n" +
			"--all: every server of the inventory), show its SHA256 fingerprint and, after you\n" +
			"confirm each (or with --yes), append it to the known_hosts file replan uses. A\n" +
			"changed key is never replaced: remove the old line by hand once you know why it\n" +
			"changed. One server that fails does not stop the others; the command then exits 1\n" +
			"naming each that failed. --json prints one object for one SERVER, an array otherwise.",
		RunE: func(cmd *cobra.Command, args []string) error {
			inv, ierr := cluster.LoadWith(invFile, cluster.Options{SkipIdentityCheck: true})
			if inv == nil {
				if _, statErr := os.Stat(invFile); statErr == nil {
					return ierr
				}
			}
			switch {
			case all && len(args) > 0:
				return errors.New("trust: give SERVER names or --all, not both")
			case all && inv == nil:
				return fmt.Errorf("trust --all: no inventory at %s", invFile)
			case all:
				for _, s := range inv.Servers {
					args = append(args, s.Name)
				}
			case len(args) == 0:
				return errors.New("trust: name at least one SERVER (or --all for every server of the inventory)")
			}
			kh := knownHosts
			if kh == "" && inv != nil {
				kh = inv.SSH.KnownHosts
			}
			if kh == "" {
				home, err := os.UserHomeDir()
				if err != nil {
					return fmt.Errorf("trust: known_hosts path: %w", err)
				}
				kh = home + strings.TrimPrefix(cluster.DefaultKnownHosts, "~")
			}
			in := bufio.NewReader(cmd.InOrStdin()) // one reader: answers for every server
			prompt := stdout
			if asJSON {
				prompt = stderr
			}
			outs := []trustJSON{}
			var failed []string
			var errs []error
			for _, server := range args {
				addr := server
				if inv != nil {
					if s, ok := inv.Server(server); ok {
						addr = s.Addr()
					}
				}
				out, err := trustOne(cmd.Context(), server, addr, kh, timeout, yes, asJSON, stdout, prompt, in)
				if out.Addr != "" {
					outs = append(outs, out)
				}
				if err != nil {
					failed = append(failed, server)
					errs = append(errs, err)
					if len(args) > 1 && !asJSON {
						fmt.Fprintf(stderr, "%s: %v\n", server, err)
					}
				}
			}
			if asJSON {
				var werr error
				if len(args) == 1 && len(outs) == 1 {
					werr = writeJSON(stdout, outs[0])
				} else if len(args) > 1 {
					werr = writeJSON(stdout, outs)
				}
				if werr != nil {
					return werr
				}
			}
			switch {
			case len(errs) == 1 && len(args) == 1:
				return errs[0]
			case len(errs) > 0:
				return fmt.Errorf("trust: %d of %d servers failed: %s", len(errs), len(args), strings.Join(failed, ", "))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&invFile, "inventory", "inventory.yaml", "inventory file naming servers and the known_hosts path")
	cmd.Flags().StringVar(&knownHosts, "known-hosts", "", "known_hosts file (default: the inventory's ssh.known_hosts)")
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "trust without asking")
	cmd.Flags().BoolVar(&all, "all", false, "every server of the inventory")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the result as JSON")
	cmd.Flags().DurationVar(&timeout, "timeout", 10*time.Second, "connect and handshake timeout")
	return cmd
}

// trustOne fetches one server's host key and adds it to kh when it is new
// and confirmed. Its result has no Addr when the key could not be fetched.
func trustOne(ctx context.Context, server, addr, kh string, timeout time.Duration, yes, asJSON bool, stdout, prompt io.Writer, in *bufio.Reader) (trustJSON, error) {
	if _, _, err := net.SplitHostPort(addr); err != nil {
		addr = net.JoinHostPort(addr, "22")
	}
	info, err := ssh.Trust(ctx, addr, kh, timeout)
	if err != nil {
		return trustJSON{}, err
	}
	out := trustJSON{Server: server, Addr: addr, KeyType: info.Key.Type(), Fingerprint: info.Fingerprint,
		Status: info.Status.String(), KnownHosts: kh}
	switch info.Status {
	case ssh.KeyChanged:
		return out, info.Err
	case ssh.KeyKnown:
		if !asJSON {
			fmt.Fprintf(stdout, "%s (%s) is already trusted: %s %s\n", server, addr, out.KeyType, out.Fingerprint)
		}
		return out, nil
	}
	fmt.Fprintf(prompt, "%s (%s) offers %s key %s\n", server, addr, out.KeyType, out.Fingerprint)
	if !yes {
		fmt.Fprintf(prompt, "Add it to %s? [y/N] ", kh)
		line, _ := in.ReadString('\n')
		if a := strings.ToLower(strings.TrimSpace(line)); a != "y" && a != "yes" {
			return out, fmt.Errorf("trust %s: not confirmed; nothing written", server)
		}
	}
	if err := ssh.AppendKnownHost(kh, addr, info.Key); err != nil {
		return out, err
	}
	out.Written = true
	if !asJSON {
		fmt.Fprintf(stdout, "added %s to %s\n", addr, kh)
	}
	return out, nil
}
