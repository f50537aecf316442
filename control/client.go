package control

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/replan/replan/perf"
	"github.com/replan/replan/sched"
)

// Client talks to a daemon's API.
type Client struct {
	HTTP  *http.Client
	Base  string // "http://replan" for a unix socket
	Token string
	// Timeout bounds each request, answer included (0: DefaultTimeout;
	// negative: none). A long poll (Events) gets its wait on top; a
	// followed log (Logs) is bounded only until its answer starts.
	Timeout time.Duration
	// Addr names the daemon in errors ("" : Base).
	Addr string
	// Warn, when set, is told of an answer a follower took from a stale
	// view of the store, or from a view without the leader's live figures
	// (followview.go): the command shows it with the answer.
	Warn func(msg string)
	// local: the transport is a unix socket (or an SSH channel to one), so
	// a token may go over http://.
	local bool
	// alt: the members of a highly available control plane, when more
	// than Base was named (SetOthers, clientfailover.go).
	alt *members
}

// DefaultTimeout is how long a client waits for the daemon's answer.
const DefaultTimeout = 30 * time.Second

// NewUnixClient is a client of the daemon listening on socket.
func NewUnixClient(socket string) *Client {
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", socket)
	}}
	return &Client{HTTP: &http.Client{Transport: tr}, Base: "http://replan", Addr: socket, local: true}
}

// NewLocalClient is a client over hc, whose transport reaches the
// daemon's unix socket some other way (an SSH channel); addr names it in
// errors.
func NewLocalClient(hc *http.Client, addr string) *Client {
	return &Client{HTTP: hc, Base: "http://replan", Addr: addr, local: true}
}

// NewTCPClient is a client of a daemon's TCP listener with a bearer token.
// A token goes only over https: with http:// every request fails
// (ErrCleartextToken).
func NewTCPClient(base, token string) *Client {
	return &Client{HTTP: &http.Client{}, Base: strings.TrimSuffix(base, "/"), Token: token}
}

// ErrCleartextToken is a bearer token that would go over plain HTTP.
var ErrCleartextToken = errors.New("a bearer token goes only over https:// (http:// would send it in cleartext)")

// CheckServerURL refuses a daemon URL a token may not go to: with a token,
// only https://.
func CheckServerURL(base, token string) error {
	u, err := url.Parse(base)
	if err != nil || u.Host == "" {
		return fmt.Errorf("--server %q: want https://HOST:PORT", base)
	}
	if token != "" && u.Scheme != "https" {
		return fmt.Errorf("--server %s: %w; use https://%s (the daemon's --listen serves TLS)", base, ErrCleartextToken, u.Host)
	}
	return nil
}

func (c *Client) checkToken() error {
	if c.Token == "" || c.local {
		return nil
	}
	return CheckServerURL(c.base(), c.Token)
}

func (c *Client) timeout() time.Duration {
	switch {
	case c.Timeout == 0:
		return DefaultTimeout
	case c.Timeout < 0:
		return 0
	}
	return c.Timeout
}

func (c *Client) addr() string {
	if c.Addr != "" {
		return c.Addr
	}
	return c.base()
}

// TimeoutError is a daemon that did not answer in time: it accepts
// connections (the kernel does that) but its process does not answer,
// e.g. stopped (SIGSTOP) or hung.
type TimeoutError struct {
	Addr  string
	After time.Duration
}

func (e *TimeoutError) Error() string {
	return fmt.Sprintf("the daemon at %s did not answer within %s; is `replan daemon` running (and not stopped)?", e.Addr, e.After)
}

// Timeout says so to net.Error-style checks.
func (e *TimeoutError) Timeout() bool { return true }

// withTimeout is ctx bounded by the client's timeout plus extra, and the
// error that names the daemon when that bound is what ended a request.
func (c *Client) withTimeout(ctx context.Context, extra time.Duration) (context.Context, context.CancelFunc) {
	to := c.timeout()
	if to <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeoutCause(ctx, to+extra, &TimeoutError{Addr: c.addr(), After: to + extra})
}

// failed is the error of a request that got no answer: the timeout named,
// or a daemon that is not there.
func (c *Client) failed(ctx context.Context, err error) error {
	var te *TimeoutError
	if cause := context.Cause(ctx); errors.As(cause, &te) && ctx.Err() != nil {
		return te
	}
	if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOENT) {
		return fmt.Errorf("daemon: no daemon listens at %s: is `replan daemon` running? (%w)", c.addr(), err)
	}
	return fmt.Errorf("daemon: %w", err)
}

// RemoteError is an error the daemon answered with.
type RemoteError struct {
	Status int
	APIError
	// noLeader: a follower's 503 for want of a leader (ha.go).
	noLeader bool
}

func (e *RemoteError) Error() string {
	if len(e.Problems) > 0 {
		lines := make([]string, len(e.Problems))
		for i, p := range e.Problems {
			lines[i] = fmt.Sprintf("%s:%d: %s: %s", p.File, p.Line, p.Field, p.Msg)
			if p.Field == "" {
				lines[i] = fmt.Sprintf("%s:%d: %s", p.File, p.Line, p.Msg)
			}
		}
		return strings.Join(lines, "\n")
	}
	return e.APIError.Error
}

func (c *Client) do(ctx context.Context, method, path string, body, out any) error {
	return c.doH(ctx, method, path, nil, body, out)
}

func (c *Client) doH(ctx context.Context, method, path string, hdr http.Header, body, out any) error {
	return c.doWait(ctx, method, path, hdr, body, out, 0)
}

// doWait is doH for a request the daemon may hold for wait (a long poll).
func (c *Client) doWait(ctx context.Context, method, path string, hdr http.Header, body, out any, wait time.Duration) error {
	if err := c.checkToken(); err != nil {
		return err
	}
	// A follower without a leader changed nothing: retry while a new
	// leader is elected (ha.go), within the client's timeout.
	var deadline time.Time
	if to := c.timeout(); to > 0 {
		deadline = time.Now().Add(to)
	}
	for {
		err := c.eachMember(func() error { return c.doOnce(ctx, method, path, hdr, body, out, wait) })
		if !IsNoLeader(err) || ctx.Err() != nil || (!deadline.IsZero() && time.Now().After(deadline)) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func (c *Client) doOnce(ctx context.Context, method, path string, hdr http.Header, body, out any, wait time.Duration) error {
	ctx, cancel := c.withTimeout(ctx, wait)
	defer cancel()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base()+path, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return c.failed(ctx, err)
	}
	defer resp.Body.Close()
	if c.Warn != nil {
		if msg := viewWarning(resp.Header); msg != "" {
			c.Warn(msg)
		}
	}
	if resp.StatusCode >= 300 {
		re := &RemoteError{Status: resp.StatusCode, noLeader: resp.Header.Get(HeaderNoLeader) != ""}
		if err := json.NewDecoder(resp.Body).Decode(&re.APIError); err != nil || re.APIError.Error == "" {
			re.APIError.Error = resp.Status
		}
		return re
	}
	if out == nil {
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		if ctx.Err() != nil {
			return c.failed(ctx, err)
		}
		return err
	}
	return nil
}

// Status is GET /v1/status.
func (c *Client) Status(ctx context.Context) (Status, error) {
	var s Status
	return s, c.do(ctx, "GET", "/v1/status", nil, &s)
}

// Submit sends a job spec (YAML text; file names it in errors) with a new
// Idempotency-Key, retrying with that key when the connection fails (a
// retry returns the job the first attempt created, never a second one).
func (c *Client) Submit(ctx context.Context, file string, spec []byte) (JobRecord, error) {
	key, err := NewIdempotencyKey()
	if err != nil {
		return JobRecord{}, err
	}
	var r JobRecord
	var deadline time.Time
	if to := c.timeout(); to > 0 {
		deadline = time.Now().Add(to)
	}
	for attempt := 0; ; attempt++ {
		r, err = c.SubmitWithKey(ctx, file, spec, key)
		var re *RemoteError
		// A follower whose leader died under the request (502): the
		// retry with the same key gets the job if it was created, once
		// another leader is elected (retried within the client's
		// timeout, as a follower's 503 for want of a leader is).
		gone := errors.As(err, &re) && re.Status == http.StatusBadGateway
		if err == nil || (errors.As(err, &re) && !gone) || (!gone && attempt >= 3) || ctx.Err() != nil ||
			(gone && !deadline.IsZero() && time.Now().After(deadline)) {
			return r, err
		}
		select {
		case <-ctx.Done():
			return r, err
		case <-time.After(time.Duration(250<<min(attempt, 2)) * time.Millisecond):
		}
	}
}

// SubmitWithKey sends a job spec with the given Idempotency-Key: the
// daemon creates the job once per key and returns that job to every
// later submission with the key ("" sends none).
func (c *Client) SubmitWithKey(ctx context.Context, file string, spec []byte, key string) (JobRecord, error) {
	var r JobRecord
	var hdr http.Header
	if key != "" {
		hdr = http.Header{"Idempotency-Key": {key}}
	}
	return r, c.doH(ctx, "POST", "/v1/jobs", hdr, SubmitRequest{File: file, Spec: string(spec)}, &r)
}

// NewIdempotencyKey is a random key for SubmitWithKey.
func NewIdempotencyKey() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return hex.EncodeToString(b[:]), nil
}

// Jobs lists jobs, optionally in the given states.
func (c *Client) Jobs(ctx context.Context, states ...JobState) ([]JobRecord, error) {
	q := ""
	if len(states) > 0 {
		s := make([]string, len(states))
		for i, st := range states {
			s[i] = string(st)
		}
		q = "?state=" + url.QueryEscape(strings.Join(s, ","))
	}
	var r []JobRecord
	return r, c.do(ctx, "GET", "/v1/jobs"+q, nil, &r)
}

// Job is one job with its history and decisions.
func (c *Client) Job(ctx context.Context, id string) (JobDetail, error) {
	var r JobDetail
	return r, c.do(ctx, "GET", "/v1/jobs/"+url.PathEscape(id), nil, &r)
}

// JobOp is cancel, hold or release.
func (c *Client) JobOp(ctx context.Context, id, op string) (JobRecord, error) {
	var r JobRecord
	return r, c.do(ctx, "POST", "/v1/jobs/"+url.PathEscape(id)+"/"+op, nil, &r)
}

// WhoAmI is the caller as the daemon sees it: user, role, tenants.
func (c *Client) WhoAmI(ctx context.Context) (WhoAmI, error) {
	var r WhoAmI
	return r, c.do(ctx, "GET", "/v1/whoami", nil, &r)
}

// Queue lists waiting jobs with their reasons.
func (c *Client) Queue(ctx context.Context) ([]QueueEntry, error) {
	var r []QueueEntry
	return r, c.do(ctx, "GET", "/v1/queue", nil, &r)
}

// Nodes lists servers.
func (c *Client) Nodes(ctx context.Context) ([]NodeView, error) {
	var r []NodeView
	return r, c.do(ctx, "GET", "/v1/nodes", nil, &r)
}

// NodeOp is drain or undrain; it returns the jobs moved.
func (c *Client) NodeOp(ctx context.Context, name, op string) ([]string, error) {
	var r struct {
		Moved []string `json:"moved"`
	}
	return r.Moved, c.do(ctx, "POST", "/v1/nodes/"+url.PathEscape(name)+"/"+op, nil, &r)
}

// History lists finished jobs.
func (c *Client) History(ctx context.Context) ([]HistoryEntry, error) {
	var r []HistoryEntry
	return r, c.do(ctx, "GET", "/v1/history", nil, &r)
}

// Events returns events after id, waiting up to wait for the first.
func (c *Client) Events(ctx context.Context, after int64, wait time.Duration) ([]Event, error) {
	var r []Event
	return r, c.doWait(ctx, "GET", "/v1/events?after="+strconv.FormatInt(after, 10)+"&wait="+wait.String(), nil, nil, &r, min(wait, 60*time.Second))
}

// Running lists the running jobs with their throughput, promise and shift.
func (c *Client) Running(ctx context.Context) ([]RunningJob, error) {
	var r []RunningJob
	return r, c.do(ctx, "GET", "/v1/running", nil, &r)
}

// Curve is a job's sensitivity curve (1..gpus GPUs) from the daemon's
// fitted model.
func (c *Client) Curve(ctx context.Context, id string, gpus int) ([]perf.CurvePoint, error) {
	var r []perf.CurvePoint
	return r, c.do(ctx, "GET", "/v1/jobs/"+url.PathEscape(id)+"/curve?gpus="+strconv.Itoa(gpus), nil, &r)
}

// Links reports the links jobs share and their time-shifts.
func (c *Client) Links(ctx context.Context) (sched.LinkReport, error) {
	var r sched.LinkReport
	return r, c.do(ctx, "GET", "/v1/links", nil, &r)
}

// IsNotFound reports whether err is the daemon's 404.
func IsNotFound(err error) bool {
	var re *RemoteError
	return errors.As(err, &re) && re.Status == http.StatusNotFound
}

func decodeJSON(b []byte, v any) error { return json.Unmarshal(b, v) }
