package freeport

import (
	"net"
	"strconv"
	"testing"
)

func TestPortsAreDistinctBindableAndBelowTheEphemeralRange(t *testing.T) {
	hi := ephemeralStart()
	seen := map[int]bool{}
	for range 300 {
		p := Port(t, "127.0.0.1")
		if seen[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		seen[p] = true
		if p < low || p >= hi {
			t.Fatalf("port %d outside [%d, %d)", p, low, hi)
		}
	}
	// A port handed out can be bound.
	p := Port(t, "127.0.0.1")
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
}
