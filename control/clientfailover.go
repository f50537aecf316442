package control

import (
	"errors"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"time"
)

// A client of a highly available control plane (docs/ha.md) may name
// every member's listener: `--server https://head-1:7070,https://head-2:7070`.
// A request that cannot reach the member it is on (nothing listens there,
// no route to it, its host gone) goes to the next member at once; the
// client stays with the one that answered. A member that was reached but
// did not answer in time is not left: the request may have been carried
// out there. Before, a client pointed at a member whose host was down
// failed every command until the operator changed its --server.

// members is the client's members, in the order they were named, and the
// one it is on.
type members struct {
	mu   sync.Mutex
	urls []string
	cur  int
}

// SetOthers makes the client's further members others (base URLs, like
// Base): requests that cannot reach the current member go to the next.
func (c *Client) SetOthers(others []string) {
	if len(others) == 0 {
		c.alt = nil
		return
	}
	urls := []string{c.Base}
	for _, o := range others {
		urls = append(urls, strings.TrimSuffix(o, "/"))
	}
	c.alt = &members{urls: urls}
	// A member whose host is gone often drops the connection's first
	// packet rather than refusing it: its dial is bounded well within the
	// request's timeout, so the next member is still asked.
	dial := (&net.Dialer{Timeout: MemberDialTimeout, KeepAlive: 30 * time.Second}).DialContext
	if c.HTTP.Transport == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.DialContext = dial
		c.HTTP.Transport = tr
	} else if tr, ok := c.HTTP.Transport.(*http.Transport); ok && tr.DialContext == nil {
		tr.DialContext = dial
	}
}

// MemberDialTimeout bounds the connection to one member when the client
// names several.
const MemberDialTimeout = 5 * time.Second

// base is the base URL of the member the client is on.
func (c *Client) base() string {
	if c.alt == nil {
		return c.Base
	}
	c.alt.mu.Lock()
	defer c.alt.mu.Unlock()
	return c.alt.urls[c.alt.cur]
}

// moveOn moves the client from member from to the next one, unless
// another request moved it already; it reports the member now current.
func (c *Client) moveOn(from string) string {
	c.alt.mu.Lock()
	defer c.alt.mu.Unlock()
	if c.alt.urls[c.alt.cur] == from {
		c.alt.cur = (c.alt.cur + 1) % len(c.alt.urls)
	}
	return c.alt.urls[c.alt.cur]
}

// unreached is an error of a request that never reached the daemon: the
// connection could not be made.
func unreached(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH)
}

// eachMember runs try on the current member and, while it could not reach
// one, on the next ones, each once; when none was reached, the error
// names them all, each with why.
func (c *Client) eachMember(try func() error) error {
	at := c.base()
	err := try()
	if c.alt == nil || !unreached(err) {
		return err
	}
	c.alt.mu.Lock()
	n := len(c.alt.urls)
	c.alt.mu.Unlock()
	why := []string{at + ": " + dialCause(err)}
	for range n - 1 {
		at = c.moveOn(at)
		if err = try(); !unreached(err) {
			return err
		}
		why = append(why, at+": "+dialCause(err))
	}
	return &unreachedAll{msg: "daemon: no member of the control plane could be reached (" + strings.Join(why, "; ") + "); is `replan daemon` running on any of them?", last: err}
}

// dialCause is why a connection could not be made ("connect: connection
// refused"), or err's text.
func dialCause(err error) string {
	var op *net.OpError
	if errors.As(err, &op) && op.Err != nil {
		return op.Err.Error()
	}
	return err.Error()
}

// unreachedAll is the error of a request no member could be reached for;
// it unwraps to the last member's.
type unreachedAll struct {
	msg  string
	last error
}

func (e *unreachedAll) Error() string { return e.msg }
func (e *unreachedAll) Unwrap() error { return e.last }
