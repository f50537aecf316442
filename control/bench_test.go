package control

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/replan/replan/jobspec"
	"github.com/replan/replan/sched"
)

// TestDaemonBench is `make bench`'s control-plane table, not a timed
// test (it runs only with REPLAN_DAEMON_BENCH=1): a simulated-executor
// daemon on a generated inventory of 1,024 servers (8 GPUs each, 32 per
// rack) with 5,000 queued jobs, rounds back to back, while a client
// submits and reads through the API. It prints submit and read (queue,
// jobs) latency p50/p99 and the round times. Targets: submit p99 <= 50 ms,
// read p99 <= 20 ms. REPLAN_BENCH_SERVERS, REPLAN_BENCH_JOBS,
// REPLAN_BENCH_POLICY and REPLAN_BENCH_DURATION change the size.
func TestDaemonBench(t *testing.T) {
	if os.Getenv("REPLAN_DAEMON_BENCH") == "" {
		t.Skip("REPLAN_DAEMON_BENCH=1 runs the control-plane benchmark (make bench)")
	}
	envInt := func(k string, def int) int {
		if v, err := strconv.Atoi(os.Getenv(k)); err == nil && v > 0 {
			return v
		}
		return def
	}
	nServers, nJobs := envInt("REPLAN_BENCH_SERVERS", 1024), envInt("REPLAN_BENCH_JOBS", 5000)
	policy := os.Getenv("REPLAN_BENCH_POLICY")
	if policy == "" {
		policy = "replan"
	}
	dur := 20 * time.Second
	if v, err := time.ParseDuration(os.Getenv("REPLAN_BENCH_DURATION")); err == nil {
		dur = v
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := OpenSQLite(ctx, filepath.Join(t.TempDir(), "bench.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var servers []ServerInfo
	var names []string
	for i := 0; i < nServers; i++ {
		n := fmt.Sprintf("s%04d", i)
		names = append(names, n)
		servers = append(servers, ServerInfo{Name: n, Address: "10.1.0.1", Rack: fmt.Sprintf("r%02d", i/32), GPUs: 8, CPUs: 96, MemGB: 1600})
	}
	models := []string{"gpt2", "bert"}
	gpus := []int{1, 2, 4, 8, 16}
	mk := func(i int) *jobspec.Spec {
		g := gpus[i%len(gpus)]
		data := fmt.Sprintf("version: 1\nname: b%d\ntenant: research\nclass: best-effort\nmodel: %s\nframework: deepspeed\nworkdir: /w\nentrypoint: train.py\nglobal_batch: 32\niterations: 100000\ncheckpoint_dir: /ckpt/b%d\nrequest: {gpus: %d}\n", i, models[i%2], i, g)
		s, err := jobspec.Parse("bench.yaml", []byte(data), nil)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	// The queue is stored up front (one transaction per 500 jobs) and the
	// daemon recovers it, as after a restart.
	t0 := time.Now()
	for lo := 0; lo < nJobs; lo += 500 {
		var b Batch
		for i := lo; i < min(lo+500, nJobs); i++ {
			id, err := st.NextJobID(ctx)
			if err != nil {
				t.Fatal(err)
			}
			s := mk(i)
			raw, _ := json.Marshal(s)
			b.Jobs = append(b.Jobs, JobWrite{Create: true, Rec: JobRecord{ID: id, Name: s.Name, Tenant: s.Tenant, Class: string(s.Class), Spec: raw, State: StateQueued, SubmittedAt: time.Now().UTC(), Version: 1}})
		}
		if _, err := st.Commit(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	ex := NewSimExecutor(time.Now, names, nil, nil, 30*time.Second)
	p, err := sched.New(policy)
	if err != nil {
		t.Fatal(err)
	}
	d, err := New(ctx, Config{Store: st, Exec: ex, Policy: p, Servers: servers, Tenants: []TenantInfo{{Name: "research", QuotaGPUs: nServers * 4}}})
	if err != nil {
		t.Fatal(err)
	}
	fill := time.Since(t0)
	sock := filepath.Join(t.TempDir(), "bench.sock")
	l, err := ListenUnix(sock)
	if err != nil {
		t.Fatal(err)
	}
	go Serve(ctx, l, (&API{D: d, Version: "bench"}).Handler())
	cl := NewUnixClient(sock)
	// The same read on an idle daemon (no rounds yet): what a read costs
	// without contention (the first one may encode).
	var idle []time.Duration
	for i := 0; i < 30; i++ {
		a := time.Now()
		if _, err := getBody(ctx, cl, "/v1/queue"); err != nil {
			t.Fatal(err)
		}
		idle = append(idle, time.Since(a))
	}
	var mu sync.Mutex
	var rounds, plans []time.Duration
	var roundErrs int
	var firstRoundErr error
	loopDone := make(chan struct{})
	go func() {
		defer close(loopDone)
		for ctx.Err() == nil {
			d.Observe(ctx)
			st, err := d.Round(ctx)
			mu.Lock()
			rounds = append(rounds, st.Total)
			plans = append(plans, st.Duration)
			if err != nil {
				roundErrs++
				if firstRoundErr == nil {
					firstRoundErr = err
				}
			}
			mu.Unlock()
		}
	}()
	var sub, queue, jobs, queueDec, jobsDec, dsub, dread []time.Duration
	bytesRead := map[string]int{}
	const keepBodies = 20
	kept := map[string][][]byte{}
	// A client is another process: its receive buffers are reused, so
	// that its garbage does not load the daemon's collector here.
	recvBuf := map[string]*bytes.Buffer{"/v1/queue": {}, "/v1/jobs?state=running": {}}
	var fails []string
	end := time.Now().Add(dur)
	for i := 0; time.Now().Before(end); i++ {
		spec := strings.Replace(specYAML, "%s", fmt.Sprintf("probe-%d", i), 1)
		a := time.Now()
		if _, err := cl.Submit(ctx, "probe.yaml", []byte(spec)); err != nil {
			fails = append(fails, err.Error())
		}
		sub = append(sub, time.Since(a))
		// A read is timed until the whole body has been received; the
		// client's decoding of it is timed on its own.
		for _, r := range []struct {
			path string
			recv *[]time.Duration
		}{{"/v1/queue", &queue}, {"/v1/jobs?state=running", &jobs}} {
			a = time.Now()
			body, err := getBodyInto(ctx, cl, r.path, recvBuf[r.path])
			if err != nil {
				fails = append(fails, err.Error())
				continue
			}
			*r.recv = append(*r.recv, time.Since(a))
			bytesRead[r.path] = len(body)
			// A client decodes in its own process: the bodies are
			// decoded after the run, so the garbage of decoding does
			// not load the daemon's collector here.
			if len(kept[r.path]) < keepBodies {
				kept[r.path] = append(kept[r.path], bytes.Clone(body))
			}
		}
		// The daemon's own share, without HTTP and JSON.
		a = time.Now()
		if _, err := d.Submit(ctx, mk(i)); err != nil {
			fails = append(fails, err.Error())
		}
		dsub = append(dsub, time.Since(a))
		a = time.Now()
		_ = d.Queue()
		_ = d.Nodes()
		dread = append(dread, time.Since(a))
		time.Sleep(20 * time.Millisecond)
	}
	// Let the round in progress finish so it is counted.
	deadline := time.Now().Add(5 * time.Minute)
	for {
		mu.Lock()
		n := len(rounds)
		mu.Unlock()
		if n > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	cancel()
	<-loopDone
	for _, r := range []struct {
		path string
		dec  *[]time.Duration
		into func() any
	}{{"/v1/queue", &queueDec, func() any { return &[]QueueEntry{} }}, {"/v1/jobs?state=running", &jobsDec, func() any { return &[]JobRecord{} }}} {
		for _, body := range kept[r.path] {
			a := time.Now()
			if err := json.Unmarshal(body, r.into()); err != nil {
				fails = append(fails, err.Error())
			}
			*r.dec = append(*r.dec, time.Since(a))
		}
	}
	pct := func(v []time.Duration, q float64) string {
		if len(v) == 0 {
			return "-"
		}
		s := append([]time.Duration(nil), v...)
		sort.Slice(s, func(a, b int) bool { return s[a] < s[b] })
		return s[min(len(s)-1, int(q*float64(len(s))))].Round(10 * time.Microsecond).String()
	}
	mark := func(v []time.Duration, target time.Duration) string {
		if len(v) == 0 {
			return ""
		}
		s := append([]time.Duration(nil), v...)
		sort.Slice(s, func(a, b int) bool { return s[a] < s[b] })
		if s[min(len(s)-1, int(0.99*float64(len(s))))] <= target {
			return "meets"
		}
		return "MISSES"
	}
	running := len(d.Running())
	fmt.Printf("daemon bench: %d servers (%d GPUs), %d queued jobs (stored in %s), policy %s, %s of probes, %d rounds (%d with errors), %d jobs running at the end\n",
		nServers, nServers*8, nJobs, fill.Round(time.Millisecond), policy, dur, len(rounds), roundErrs, running)
	fmt.Printf("| %-22s | %6s | %10s | %10s | %10s | %-14s |\n", "operation", "n", "p50", "p99", "max", "target (p99)")
	fmt.Printf("|%s|%s|%s|%s|%s|%s|\n", strings.Repeat("-", 24), strings.Repeat("-", 8), strings.Repeat("-", 12), strings.Repeat("-", 12), strings.Repeat("-", 12), strings.Repeat("-", 16))
	row := func(name string, v []time.Duration, target string) {
		fmt.Printf("| %-22s | %6d | %10s | %10s | %10s | %-14s |\n", name, len(v), pct(v, 0.5), pct(v, 0.99), pct(v, 1), target)
	}
	row("submit (API)", sub, "50ms "+mark(sub, 50*time.Millisecond))
	row("read: queue (API)", queue, "20ms "+mark(queue, 20*time.Millisecond))
	row("read: jobs running", jobs, "20ms "+mark(jobs, 20*time.Millisecond))
	row("queue, idle daemon", idle, "-")
	row("client decode: queue", queueDec, "-")
	row("client decode: jobs", jobsDec, "-")
	row("Daemon.Submit", dsub, "-")
	row("Daemon.Queue+Nodes", dread, "-")
	row("round (whole)", rounds, "-")
	row("round: policy only", plans, "-")
	fmt.Printf("daemon bench: last bodies: queue %d bytes, jobs running %d bytes\n", bytesRead["/v1/queue"], bytesRead["/v1/jobs?state=running"])
	if firstRoundErr != nil {
		msg := firstRoundErr.Error()
		fmt.Printf("daemon bench: first round error: %s\n", msg[:min(len(msg), 300)])
	}
	if len(fails) > 0 {
		fmt.Printf("daemon bench: %d requests failed, first: %s\n", len(fails), fails[0])
	}
}

// getBody GETs path and reads the whole body (a status other than 200 is
// an error).
func getBody(ctx context.Context, cl *Client, path string) ([]byte, error) {
	return getBodyInto(ctx, cl, path, &bytes.Buffer{})
}

// getBodyInto is getBody reading into buf (reset first); the body returned
// is buf's and valid until its next use.
func getBodyInto(ctx context.Context, cl *Client, path string, buf *bytes.Buffer) ([]byte, error) {
	buf.Reset()
	req, err := http.NewRequestWithContext(ctx, "GET", cl.Base+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := cl.HTTP.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.ContentLength > 0 {
		buf.Grow(int(resp.ContentLength))
	}
	if _, err := buf.ReadFrom(resp.Body); err != nil {
		return nil, err
	}
	body := buf.Bytes()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s: %s", path, resp.Status, body)
	}
	return body, nil
}
