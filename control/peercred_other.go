//go:build !linux

package control

import (
	"errors"
	"net"
)

// peerUID needs SO_PEERCRED, which only Linux has here.
func peerUID(c *net.UnixConn) (int, error) {
	return -1, errors.New("peer credentials are read on Linux only")
}
