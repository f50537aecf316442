package control

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"
)

// LogReader is implemented by executors that can show a job's training
// log: the last tail lines, and with follow every new line until ctx ends.
type LogReader interface {
	Logs(ctx context.Context, jobID string, tail int, follow bool) (io.ReadCloser, error)
}

// AttemptLogReader is implemented by executors that keep the logs of a
// job's earlier launches too: attempt is the launch's Launch.Attempt (the
// job record's attempt less one: the first launch is 0).
type AttemptLogReader interface {
	AttemptLogs(ctx context.Context, jobID string, attempt, tail int, follow bool) (io.ReadCloser, error)
}

// ErrNoLogs is returned when the executor keeps no logs.
var ErrNoLogs = errors.New("the executor keeps no logs")

// Logs streams a job's log through the executor: its current (newest)
// launch's, or with attempt ≥ 1 that launch's (the job record's attempt
// when it ran: 1 is the first; 0 or less: the newest).
func (d *Daemon) Logs(ctx context.Context, id string, attempt, tail int, follow bool) (io.ReadCloser, error) {
	lr, ok := d.cfg.Exec.(LogReader)
	if !ok {
		return nil, ErrNoLogs
	}
	rec, err := d.cfg.Store.GetJob(ctx, id)
	if err != nil {
		return nil, err
	}
	if attempt >= 1 {
		if attempt > rec.Attempt {
			return nil, fmt.Errorf("job %s has had attempts 1 to %d, not %d: %w", id, rec.Attempt, attempt, ErrNotFound)
		}
		if ar, ok := d.cfg.Exec.(AttemptLogReader); ok {
			return ar.AttemptLogs(ctx, id, attempt-1, tail, follow)
		}
		if attempt != rec.Attempt {
			return nil, fmt.Errorf("%w of earlier attempts (job %s is at attempt %d)", ErrNoLogs, id, rec.Attempt)
		}
	}
	return lr.Logs(ctx, id, tail, follow)
}

// logs is GET /v1/jobs/{id}/logs?tail=N&follow=1: text, streamed.
func (a *API) logs(w http.ResponseWriter, r *http.Request) {
	tail := 100
	if s := r.URL.Query().Get("tail"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			writeErr(w, http.StatusBadRequest, fmt.Errorf("tail: want an integer, got %q", s))
			return
		}
		tail = n
	}
	follow := r.URL.Query().Get("follow") == "1" || r.URL.Query().Get("follow") == "true"
	attempt := -1
	if s := r.URL.Query().Get("attempt"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			writeErr(w, http.StatusBadRequest, fmt.Errorf("attempt: want a launch number (1 is the first), got %q", s))
			return
		}
		attempt = n
	}
	if a.Access.MultiUser() {
		// Logs print what a job's env holds: its owner's, like the env.
		j, err := a.D.cfg.Store.GetJob(r.Context(), r.PathValue("id"))
		if err == nil {
			err = a.jobRule(r.Context(), "read the logs of", j)
		}
		if err != nil {
			writeErr(w, statusOf(err), err)
			return
		}
	}
	rc, err := a.D.Logs(r.Context(), r.PathValue("id"), attempt, tail, follow)
	if errors.Is(err, ErrNoLogs) {
		writeErr(w, http.StatusNotImplemented, err)
		return
	}
	if err != nil {
		writeErr(w, statusOf(err), err)
		return
	}
	defer rc.Close()
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	fl, _ := w.(http.Flusher)
	if fl != nil {
		fl.Flush() // the answer starts (a client's timeout ends) before the first line
	}
	buf := make([]byte, 32<<10)
	for {
		n, err := rc.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return
			}
			if fl != nil {
				fl.Flush()
			}
		}
		if err != nil {
			return
		}
	}
}

// Logs reads a job's log from the daemon (follow streams until ctx ends).
// The client's timeout bounds the wait for the answer to start, and
// without follow the whole read.
func (c *Client) Logs(ctx context.Context, id string, tail int, follow bool) (io.ReadCloser, error) {
	return c.AttemptLogs(ctx, id, -1, tail, follow)
}

// AttemptLogs is Logs of the job's launch number attempt (the job record's
// attempt when it ran, 1 the first; 0 or less: the newest).
func (c *Client) AttemptLogs(ctx context.Context, id string, attempt, tail int, follow bool) (io.ReadCloser, error) {
	if err := c.checkToken(); err != nil {
		return nil, err
	}
	var rc io.ReadCloser
	err := c.eachMember(func() error {
		var err error
		rc, err = c.attemptLogsOnce(ctx, id, attempt, tail, follow)
		return err
	})
	return rc, err
}

func (c *Client) attemptLogsOnce(ctx context.Context, id string, attempt, tail int, follow bool) (io.ReadCloser, error) {
	q := "?tail=" + strconv.Itoa(tail)
	if attempt >= 1 {
		q += "&attempt=" + strconv.Itoa(attempt)
	}
	if follow {
		q += "&follow=1"
	}
	ctx, cancel := context.WithCancelCause(ctx)
	var timer *time.Timer
	if to := c.timeout(); to > 0 {
		timer = time.AfterFunc(to, func() { cancel(&TimeoutError{Addr: c.addr(), After: to}) })
	}
	req, err := http.NewRequestWithContext(ctx, "GET", c.base()+"/v1/jobs/"+id+"/logs"+q, nil)
	if err != nil {
		cancel(nil)
		return nil, err
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		err = c.failed(ctx, err)
		cancel(nil)
		return nil, err
	}
	if follow && timer != nil {
		timer.Stop() // the stream lasts as long as the caller reads
	}
	if resp.StatusCode != http.StatusOK {
		defer cancel(nil)
		defer resp.Body.Close()
		re := &RemoteError{Status: resp.StatusCode}
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
		re.APIError.Error = string(b)
		var ae APIError
		if jsonErr := decodeJSON(b, &ae); jsonErr == nil && ae.Error != "" {
			re.APIError = ae
		}
		return nil, re
	}
	return &logBody{ReadCloser: resp.Body, ctx: ctx, c: c, cancel: cancel}, nil
}

// logBody is a log's answer: closing it ends its request, and a read cut
// by the client's timeout says so.
type logBody struct {
	io.ReadCloser
	ctx    context.Context
	c      *Client
	cancel context.CancelCauseFunc
}

func (b *logBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && err != io.EOF && b.ctx.Err() != nil {
		err = b.c.failed(b.ctx, err)
	}
	return n, err
}

func (b *logBody) Close() error {
	err := b.ReadCloser.Close()
	b.cancel(nil)
	return err
}

// simLog renders the DeepSpeed ThroughputTimer lines a simulated job
// would have printed between iterations from and to.
func simLog(w io.Writer, from, to int, sps float64) {
	for it := from; it <= to; it++ {
		fmt.Fprintf(w, "[Rank 0] epoch=0/micro_step=%d/global_step=%d, RunningAvgSamplesPerSec=%.3f, CurrSamplesPerSec=%.3f, MemAllocated=31.2GB, MaxMemAllocated=58.7GB\n", it, it, sps, sps)
	}
}

// Logs implements LogReader for the simulated cluster: the lines the job
// would have printed (one per iteration), following its virtual progress.
func (e *SimExecutor) Logs(ctx context.Context, id string, tail int, follow bool) (io.ReadCloser, error) {
	pr, pw := io.Pipe()
	go func() {
		last := -1
		for {
			e.mu.Lock()
			j := e.running[id]
			var cur int
			var sps float64
			if j != nil {
				cur = int(e.progress(j))
				sps = float64(j.l.Spec.GlobalBatch) / j.iterTime
			}
			e.mu.Unlock()
			if j == nil {
				if last < 0 {
					fmt.Fprintf(pw, "(%s is not running on the simulated cluster)\n", id)
				}
				pw.Close()
				return
			}
			from := last + 1
			if last < 0 {
				from = max(cur-tail+1, 1)
			}
			if cur >= from {
				simLog(pw, from, cur, sps)
				last = cur
			} else if last < 0 {
				last = cur
			}
			if !follow {
				pw.Close()
				return
			}
			select {
			case <-ctx.Done():
				pw.Close()
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	return pr, nil
}
