package cli

import (
	"fmt"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/replan/replan/control"
	"github.com/replan/replan/ssh"
)

// DefaultRemoteSocket is the daemon socket `--remote` dials on the head
// node unless --socket names another: where a shared (multi-user) daemon
// listens.
const DefaultRemoteSocket = "/run/replan/replan.sock"

// remoteOf is the global --remote flag of cmd's root ("" when unset).
func remoteOf(cmd *cobra.Command) string {
	if cmd == nil {
		return ""
	}
	v, _ := cmd.Root().PersistentFlags().GetString("remote")
	return v
}

// remoteClient is a client of the daemon socket on the head node
// ([user@]host[:port]) through SSH: the connection is a
// direct-streamlocal channel, so the daemon sees the user sshd
// authenticated. The head's host key must be in replan's known_hosts
// (~/.config/replan/known_hosts, `replan trust HOST[:PORT]` adds it);
// the key is $SSH_AUTH_SOCK's, else ~/.ssh/id_ed25519, id_ecdsa or id_rsa.
func remoteClient(remote, socket string) (*control.Client, func(), error) {
	u, addr := "", remote
	if i := strings.LastIndex(addr, "@"); i >= 0 {
		u, addr = addr[:i], addr[i+1:]
	}
	if u == "" {
		cur, err := user.Current()
		if err != nil {
			return nil, nil, fmt.Errorf("--remote %s: who am I: %v", remote, err)
		}
		u = cur.Username
	}
	if addr == "" {
		return nil, nil, fmt.Errorf("--remote %q: want [user@]host[:port]", remote)
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		addr = net.JoinHostPort(addr, "22")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return nil, nil, err
	}
	h := ssh.Host{Name: "head " + addr, Addr: addr, User: u}
	if os.Getenv("SSH_AUTH_SOCK") != "" {
		h.SSHAgent = true
	} else {
		for _, k := range []string{"id_ed25519", "id_ecdsa", "id_rsa"} {
			if p := filepath.Join(home, ".ssh", k); fileExists(p) {
				h.IdentityFile = p
				break
			}
		}
		if h.IdentityFile == "" {
			return nil, nil, fmt.Errorf("--remote %s: no SSH key: start ssh-agent or create ~/.ssh/id_ed25519", remote)
		}
	}
	kh := filepath.Join(home, ".config", "replan", "known_hosts")
	pool, err := ssh.NewPool(ssh.Config{HostKeys: ssh.NewHostKeys(kh, false, nil), ConnectTimeout: 10 * time.Second, DialAttempts: 1})
	if err != nil {
		return nil, nil, err
	}
	if socket == "" {
		socket = DefaultRemoteSocket
	}
	return control.NewLocalClient(pool.HTTPClient(h, socket), socket+" on "+remote+" (--remote)"), func() { pool.Close() }, nil
}

func fileExists(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && !fi.IsDir()
}
