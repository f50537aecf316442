// Package freeport hands tests TCP ports to give to processes they start.
//
// A port found by listening on port 0 and closing it lies in the kernel's
// ephemeral range, the range it also draws from for every outgoing
// connection and every other listen on port 0: between the test choosing it
// and the process binding it, another member's etcd peer connection or
// another test's listener may take it (CI saw a daemon's TLS listener fail
// with "address already in use" on a port handed to an etcd peer a moment
// before). Ports from here lie below the ephemeral range
// (/proc/sys/net/ipv4/ip_local_port_range), so the kernel never hands them
// out by itself, and one process never gets the same port twice.
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
)

var (
	mu     sync.Mutex
	issued = map[int]bool{}
)

// low is the lowest port handed out.
const low = 10000

// ephemeralStart is the first port of the kernel's ephemeral range
// (32768 when it cannot be read).
func ephemeralStart() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 32768
	}
	n, err := strconv.Atoi(f[0])
	if err != nil || n <= low+1000 {
		return 32768
	}
	return n
}

// Port returns a TCP port on host that was free a moment ago, lies below
// the ephemeral range, and was not returned before in this process.
func Port(t testing.TB, host string) int {
	t.Helper()
	p, err := pick(host)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Addr is Port as "host:port".
func Addr(t testing.TB, host string) string {
	t.Helper()
	return net.JoinHostPort(host, strconv.Itoa(Port(t, host)))
}

func pick(host string) (int, error) {
	hi := ephemeralStart()
	mu.Lock()
	defer mu.Unlock()
	var last error
	for range 200 {
		p := low + rand.IntN(hi-low)
		if issued[p] {
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(p)))
		if err != nil {
			last = err
			continue
		}
		l.Close()
		issued[p] = true
		return p, nil
	}
	return 0, fmt.Errorf("freeport: no free port on %s in %d-%d after 200 tries (last: %v)", host, low, hi-1, last)
}
