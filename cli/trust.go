package cli

import (
	"bufio"
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
		yes, asJSON         bool
		timeout             time.Duration
	)
	cmd := &cobra.Command{
		Use:   "trust SERVER",
		Short: "Fetch a server's SSH host key, show its fingerprint and add it to known_hosts",
		Long: "Fetch the host key SERVER offers (a name from the inventory, or host[:port]),\n" +
			"show its SHA256 fingerprint and, after you confirm (or with --yes), append it\n" +
			"to the known_hosts file replan uses. A changed key is never replaced: remove\n" +
			"the old line by hand once you know why it changed.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			server, addr := args[0], args[0]
			kh := knownHosts
			inv, ierr := cluster.LoadWith(invFile, cluster.Options{SkipIdentityCheck: true})
			if inv != nil {
				if s, ok := inv.Server(server); ok {
					addr = s.Addr()
				}
				if kh == "" {
					kh = inv.SSH.KnownHosts
				}
			} else if _, statErr := os.Stat(invFile); statErr == nil {
				return ierr
			}
			if kh == "" {
				home, err := os.UserHomeDir()
				if err != nil {
					return fmt.Errorf("trust: known_hosts path: %w", err)
				}
				kh = home + strings.TrimPrefix(cluster.DefaultKnownHosts, "~")
			}
			if _, _, err := net.SplitHostPort(addr); err != nil {
				addr = net.JoinHostPort(addr, "22")
			}
			info, err := ssh.Trust(cmd.Context(), addr, kh, timeout)
			if err != nil {
				return err
			}
			out := trustJSON{Server: server, Addr: addr, KeyType: info.Key.Type(), Fingerprint: info.Fingerprint,
				Status: info.Status.String(), KnownHosts: kh}
			switch info.Status {
			case ssh.KeyChanged:
				if asJSON {
					_ = writeJSON(stdout, out)
				}
				return info.Err
			case ssh.KeyKnown:
				if asJSON {
					return writeJSON(stdout, out)
				}
				fmt.Fprintf(stdout, "%s (%s) is already trusted: %s %s\n", server, addr, out.KeyType, out.Fingerprint)
				return nil
			}
			prompt := stdout
			if asJSON {
				prompt = stderr
			}
			fmt.Fprintf(prompt, "%s (%s) offers %s key %s\n", server, addr, out.KeyType, out.Fingerprint)
			if !yes {
				fmt.Fprintf(prompt, "Add it to %s? [y/N] ", kh)
				line, _ := bufio.NewReader(cmd.InOrStdin()).ReadString('\n')
				if a := strings.ToLower(strings.TrimSpace(line)); a != "y" && a != "yes" {
					return errors.New("trust: not confirmed; nothing written")
				}
			}
			if err := ssh.AppendKnownHost(kh, addr, info.Key); err != nil {
				return err
			}
			out.Written = true
			if asJSON {
				return writeJSON(stdout, out)
			}
			fmt.Fprintf(stdout, "added %s to %s\n", addr, kh)
			return nil
		},
	}
	cmd.Flags().StringVar(&invFile, "inventory", "inventory.yaml", "inventory file naming servers and the known_hosts path")
	cmd.Flags().StringVar(&knownHosts, "known-hosts", "", "known_hosts file (default: the inventory's ssh.known_hosts)")
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "trust without asking")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the result as JSON")
	cmd.Flags().DurationVar(&timeout, "timeout", 10*time.Second, "connect and handshake timeout")
	return cmd
}
