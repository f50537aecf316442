package agent

import (
	"net"
	"os"
	"syscall"
)

// peerFilter lets through only connections from the agent's own user (the
// daemon reaches the agent over SSH as that user) and root: a job started
// as another user (tenants[].run_as) cannot call the agent's API even when
// the socket's permissions would let it connect. The kernel tells who is
// at the other end (SO_PEERCRED), not the client.
type peerFilter struct {
	net.Listener
	uid int
}

func filterPeers(ln net.Listener) net.Listener {
	return &peerFilter{Listener: ln, uid: os.Geteuid()}
}

func (l *peerFilter) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if uid, ok := peerUID(c); ok && (uid == l.uid || uid == 0) {
			return c, nil
		}
		c.Close()
	}
}

// peerUID is the uid of the process at the other end of a unix socket.
func peerUID(c net.Conn) (int, bool) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return -1, false
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return -1, false
	}
	var cred *syscall.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil || cerr != nil {
		return -1, false
	}
	return int(cred.Uid), true
}
