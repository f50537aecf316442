package control

import (
	"context"
	"net/url"
	"strconv"
	"time"
)

// withQuery appends f's query parameters to path ("?..." or "&...").
func withQuery(path string, f ReadFilter) string {
	q := f.Query()
	if q == "" {
		return path
	}
	for i := range len(path) {
		if path[i] == '?' {
			return path + "&" + q
		}
	}
	return path + "?" + q
}

// JobsWhere lists the jobs f selects (its state, tenant and user).
func (c *Client) JobsWhere(ctx context.Context, f ReadFilter) ([]JobRecord, error) {
	var r []JobRecord
	return r, c.do(ctx, "GET", withQuery("/v1/jobs", f), nil, &r)
}

// QueueWhere lists the waiting jobs f selects.
func (c *Client) QueueWhere(ctx context.Context, f ReadFilter) ([]QueueEntry, error) {
	var r []QueueEntry
	return r, c.do(ctx, "GET", withQuery("/v1/queue", f), nil, &r)
}

// HistoryWhere lists the ended jobs f selects, with their attempts.
func (c *Client) HistoryWhere(ctx context.Context, f ReadFilter) ([]HistoryEntry, error) {
	var r []HistoryEntry
	return r, c.do(ctx, "GET", withQuery("/v1/history", f), nil, &r)
}

// EventsWhere returns the events after id that f selects, waiting up to
// wait for the first.
func (c *Client) EventsWhere(ctx context.Context, after int64, wait time.Duration, f ReadFilter) ([]Event, error) {
	var r []Event
	p := withQuery("/v1/events?after="+strconv.FormatInt(after, 10)+"&wait="+wait.String(), f)
	return r, c.doWait(ctx, "GET", p, nil, nil, &r, min(wait, 60*time.Second))
}

// Usage is the GPU-hours per tenant and user that f selects.
func (c *Client) Usage(ctx context.Context, f ReadFilter) (Usage, error) {
	var r Usage
	return r, c.do(ctx, "GET", withQuery("/v1/usage", f), nil, &r)
}

// DrainRequest is the optional body of POST /v1/nodes/{name}/drain.
type DrainRequest struct {
	Reason string `json:"reason,omitempty"`
	// AfterJobs lets the server's running jobs finish (no new work goes
	// there) instead of moving them off now.
	AfterJobs bool `json:"after_jobs,omitempty"`
}

// Drain drains server name as req says; it returns the jobs moved off.
func (c *Client) Drain(ctx context.Context, name string, req DrainRequest) ([]string, error) {
	var r struct {
		Moved []string `json:"moved"`
	}
	return r.Moved, c.do(ctx, "POST", "/v1/nodes/"+url.PathEscape(name)+"/drain", req, &r)
}
