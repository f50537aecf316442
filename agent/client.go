package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Client talks to an agent's API. The manager builds it with a dial
// function that opens an SSH direct-streamlocal channel to the agent's
// socket; tests and local tools use NewSocketClient.
type Client struct {
	hc   *http.Client
	base string
	// before, when set, adds headers to every request (the daemon's
	// epoch and lease, lease.go) right before it is sent.
	before func(http.Header)
}

// SetHeaders has fn add headers to every later request, right before it
// is sent (the daemon's epoch and lease: HeaderEpoch, HeaderLease). Call
// it before the client is shared.
func (c *Client) SetHeaders(fn func(http.Header)) { c.before = fn }

// NewClient returns a client whose every connection comes from dial.
func NewClient(dial func(ctx context.Context) (net.Conn, error)) *Client {
	tr := &http.Transport{
		DialContext:        func(ctx context.Context, _, _ string) (net.Conn, error) { return dial(ctx) },
		MaxIdleConns:       2,
		IdleConnTimeout:    30 * time.Second,
		DisableCompression: true,
	}
	return &Client{hc: &http.Client{Transport: tr}, base: "http://agent"}
}

// NewSocketClient returns a client for the agent listening on a local unix
// socket.
func NewSocketClient(path string) *Client {
	return NewClient(func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", path)
	})
}

// NewHTTPClient returns a client over hc, whose transport must reach the
// agent whatever the URL host ("http://agent").
func NewHTTPClient(hc *http.Client) *Client { return &Client{hc: hc, base: "http://agent"} }

// APIError is an error the agent answered with.
type APIError struct {
	StatusCode int
	// Field names the request field at fault (HTTP 400), if any.
	Field   string
	Message string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("agent: %s (HTTP %d)", e.Message, e.StatusCode)
}

// Unwrap maps 404 to ErrNotFound, 409 to ErrConflict and 412 to
// ErrStaleEpoch for errors.Is.
func (e *APIError) Unwrap() error {
	switch e.StatusCode {
	case http.StatusNotFound:
		return ErrNotFound
	case http.StatusConflict:
		return ErrConflict
	case http.StatusPreconditionFailed:
		return ErrStaleEpoch
	}
	return nil
}

func (c *Client) do(ctx context.Context, method, path string, in, out any) error {
	resp, err := c.send(ctx, method, path, in)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		io.Copy(io.Discard, resp.Body)
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("agent %s %s: decode response: %w", method, path, err)
	}
	return nil
}

// send performs a request and turns non-2xx answers into *APIError.
func (c *Client) send(ctx context.Context, method, path string, in any) (*http.Response, error) {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, fmt.Errorf("agent %s %s: %w", method, path, err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return nil, fmt.Errorf("agent %s %s: %w", method, path, err)
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.before != nil {
		c.before(req.Header)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("agent %s %s: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		var eb ErrorBody
		if json.Unmarshal(b, &eb) != nil || eb.Error == "" {
			eb.Error = string(bytes.TrimSpace(b))
		}
		return nil, &APIError{StatusCode: resp.StatusCode, Field: eb.Field, Message: eb.Error}
	}
	return resp, nil
}

// Status returns the agent's status.
func (c *Client) Status(ctx context.Context) (Status, error) {
	var s Status
	err := c.do(ctx, http.MethodGet, "/v1/status", nil, &s)
	return s, err
}

// GPUs returns the latest GPU sample and recent health events.
func (c *Client) GPUs(ctx context.Context) (GPUSnapshot, error) {
	var s GPUSnapshot
	err := c.do(ctx, http.MethodGet, "/v1/gpus", nil, &s)
	return s, err
}

// Processes lists every supervised process.
func (c *Client) Processes(ctx context.Context) ([]ProcessInfo, error) {
	var l ProcessList
	err := c.do(ctx, http.MethodGet, "/v1/processes", nil, &l)
	return l.Processes, err
}

// Process returns one process.
func (c *Client) Process(ctx context.Context, id string) (ProcessInfo, error) {
	var p ProcessInfo
	err := c.do(ctx, http.MethodGet, "/v1/processes/"+url.PathEscape(id), nil, &p)
	return p, err
}

// Start starts a process.
func (c *Client) Start(ctx context.Context, spec ProcessSpec) (ProcessInfo, error) {
	var p ProcessInfo
	err := c.do(ctx, http.MethodPost, "/v1/processes", spec, &p)
	return p, err
}

// Stop sends SIGTERM, SIGKILL after grace, and returns the exited process.
// If ctx ends first the agent still completes the stop.
func (c *Client) Stop(ctx context.Context, id string, grace time.Duration) (ProcessInfo, error) {
	g := grace.Seconds()
	var p ProcessInfo
	err := c.do(ctx, http.MethodPost, "/v1/processes/"+url.PathEscape(id)+"/stop", StopRequest{GraceSeconds: &g}, &p)
	return p, err
}

// Delete forgets an exited process and removes its logs on the server.
func (c *Client) Delete(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, "/v1/processes/"+url.PathEscape(id), nil, nil)
}

// Samples returns the throughput samples parsed from the process's log,
// oldest first; with a non-zero since, only those stamped after it (pass the
// last sample's Time to poll for new ones).
func (c *Client) Samples(ctx context.Context, id string, since time.Time) ([]Sample, error) {
	path := "/v1/processes/" + url.PathEscape(id) + "/samples"
	if !since.IsZero() {
		path += "?since=" + url.QueryEscape(since.Format(time.RFC3339Nano))
	}
	var l SampleList
	err := c.do(ctx, http.MethodGet, path, nil, &l)
	return l.Samples, err
}

// Logs returns the last tail lines of the process's output (tail < 0: the
// whole current log file).
func (c *Client) Logs(ctx context.Context, id string, tail int) ([]byte, error) {
	rc, err := c.logs(ctx, id, tail, false)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return io.ReadAll(rc)
}

// FollowLogs streams the last tail lines and then new output until ctx ends,
// the reader is closed, or the process has exited and its log is drained.
func (c *Client) FollowLogs(ctx context.Context, id string, tail int) (io.ReadCloser, error) {
	return c.logs(ctx, id, tail, true)
}

func (c *Client) logs(ctx context.Context, id string, tail int, follow bool) (io.ReadCloser, error) {
	q := url.Values{}
	if tail < 0 {
		q.Set("tail", "all")
	} else {
		q.Set("tail", strconv.Itoa(tail))
	}
	if follow {
		q.Set("follow", "1")
	}
	resp, err := c.send(ctx, http.MethodGet, "/v1/processes/"+url.PathEscape(id)+"/logs?"+q.Encode(), nil)
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// AsAPIError returns the *APIError in err, if any.
func AsAPIError(err error) (*APIError, bool) {
	var e *APIError
	ok := errors.As(err, &e)
	return e, ok
}
