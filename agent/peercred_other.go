//go:build !linux

package agent

import "net"

// filterPeers is a no-op where SO_PEERCRED is missing: the socket's mode
// (0600 in a 0700 directory) keeps other users out.
func filterPeers(ln net.Listener) net.Listener { return ln }
