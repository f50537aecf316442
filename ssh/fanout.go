package ssh

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
)

// Result is the outcome on one server of a fan-out.
type Result struct {
	Host   Host
	Stdout []byte
	Stderr []byte
	Err    error // nil on success
}

// Progress is called once per finished server, in completion order, with
// the count done so far; calls never overlap.
type Progress func(done, total int, r Result)

// ForEach runs fn for every host with at most limit running at once (limit
// <= 0 means all at once) and returns one error per host, in the order of
// hosts. progress, if not nil, sees every completion.
func ForEach(ctx context.Context, hosts []Host, limit int, progress Progress, fn func(ctx context.Context, h Host) error) []error {
	res := fanOut(ctx, hosts, limit, progress, func(ctx context.Context, h Host) Result {
		return Result{Host: h, Err: fn(ctx, h)}
	})
	errs := make([]error, len(res))
	for i, r := range res {
		errs[i] = r.Err
	}
	return errs
}

// FanOut runs cmd on every host with at most limit at once, collecting each
// server's stdout and stderr (cmd's own Stdout/Stderr are ignored). Results
// are in the order of hosts; one server's failure does not stop the others.
func (p *Pool) FanOut(ctx context.Context, hosts []Host, cmd Cmd, limit int, progress Progress) []Result {
	return fanOut(ctx, hosts, limit, progress, func(ctx context.Context, h Host) Result {
		var out, errb bytes.Buffer
		c := cmd
		c.Stdout, c.Stderr = &out, &errb
		if cmd.Stdin != nil {
			c.Stdin = nil // one reader cannot feed several servers
		}
		err := p.Run(ctx, h, c)
		return Result{Host: h, Stdout: out.Bytes(), Stderr: errb.Bytes(), Err: err}
	})
}

func fanOut(ctx context.Context, hosts []Host, limit int, progress Progress, fn func(context.Context, Host) Result) []Result {
	if limit <= 0 || limit > len(hosts) {
		limit = len(hosts)
	}
	results := make([]Result, len(hosts))
	sem := make(chan struct{}, max(limit, 1))
	var wg sync.WaitGroup
	var mu sync.Mutex
	done := 0
	for i, h := range hosts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				results[i] = Result{Host: h, Err: fmt.Errorf("%s: %w", h, ctx.Err())}
				report(&mu, &done, len(hosts), progress, results[i])
				return
			}
			r := fn(ctx, h)
			<-sem
			r.Host = h
			results[i] = r
			report(&mu, &done, len(hosts), progress, r)
		}()
	}
	wg.Wait()
	return results
}

func report(mu *sync.Mutex, done *int, total int, progress Progress, r Result) {
	mu.Lock()
	defer mu.Unlock()
	*done++
	if progress != nil {
		progress(*done, total, r)
	}
}

// ProgressBar draws a one-line terminal progress bar for a fan-out:
//
//	[##########----------] 4/8  a800-04 ok
//
// Use its Update method as the Progress callback.
type ProgressBar struct {
	W     io.Writer
	Width int // bar width in cells; default 20
	Label string
}

// Update redraws the bar (carriage return, no newline until the last).
func (b *ProgressBar) Update(done, total int, r Result) {
	w := b.Width
	if w <= 0 {
		w = 20
	}
	filled := 0
	if total > 0 {
		filled = done * w / total
	}
	status := "ok"
	if r.Err != nil {
		status = "FAILED"
	}
	label := b.Label
	if label != "" {
		label += " "
	}
	fmt.Fprintf(b.W, "\r%s[%s%s] %d/%d  %s %s\x1b[K", label, strings.Repeat("#", filled), strings.Repeat("-", w-filled), done, total, r.Host, status)
	if done == total {
		fmt.Fprintln(b.W)
	}
}
