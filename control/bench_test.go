package control

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/replan/replan/internal/etcdtest"
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
// REPLAN_BENCH_POLICY and REPLAN_BENCH_DURATION change the size;
// REPLAN_BENCH_STORE=etcd runs it on the etcd store (an embedded etcd
// server on loopback, internal/etcdtest) instead of SQLite.
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
	prevGC := debug.SetGCPercent(100)
	defer debug.SetGCPercent(prevGC)
	debug.SetGCPercent(prevGC)
	gcPercent := TuneGC() // as `replan daemon` runs
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	storeKind := cmp.Or(os.Getenv("REPLAN_BENCH_STORE"), "sqlite")
	var st Store
	var err error
	switch storeKind {
	case "sqlite":
		st, err = OpenSQLite(ctx, filepath.Join(t.TempDir(), "bench.db"))
	case "etcd":
		st, err = OpenEtcdStore(ctx, EtcdConfig{Endpoints: etcdtest.Start(t)})
	default:
		t.Fatalf("REPLAN_BENCH_STORE=%s: want sqlite or etcd", storeKind)
	}
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
			if err != nil && ctx.Err() != nil {
				break // cut short by the bench's own end: neither a round nor an error
			}
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
	// The client is another process, as a real one is (the test binary
	// run again as TestDaemonBenchClient): its goroutines, its garbage
	// and its decoding do not share the daemon's runtime.
	var cr benchClientResult
	clientDone := make(chan error, 1)
	go func() {
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestDaemonBenchClient$", "-test.count=1")
		cmd.Env = append(os.Environ(), "REPLAN_BENCH_CLIENT_SOCK="+sock, "REPLAN_BENCH_DURATION="+dur.String())
		cmd.Stderr = os.Stderr
		out, err := cmd.Output()
		if err != nil {
			clientDone <- fmt.Errorf("bench client: %w", err)
			return
		}
		for _, line := range strings.Split(string(out), "\n") {
			if j, ok := strings.CutPrefix(line, benchClientPrefix); ok {
				clientDone <- json.Unmarshal([]byte(j), &cr)
				return
			}
		}
		clientDone <- fmt.Errorf("bench client printed no result: %s", out)
	}()
	if err := <-clientDone; err != nil {
		t.Fatal(err)
	}
	// The daemon's own share, after the client (rounds still back to
	// back), for a quarter of the time.
	var dsub, dread []time.Duration
	var fails []string
	end := time.Now().Add(dur / 4)
	for i := 0; time.Now().Before(end); i++ {
		a := time.Now()
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
	fails = append(fails, cr.Fails...)
	ms := func(v []float64) []time.Duration {
		out := make([]time.Duration, len(v))
		for i, x := range v {
			out[i] = time.Duration(x * float64(time.Millisecond))
		}
		return out
	}
	sub, queue, jobs, queueDec, jobsDec := ms(cr.Submit), ms(cr.Queue), ms(cr.Jobs), ms(cr.QueueDecode), ms(cr.JobsDecode)
	bytesRead := cr.Bytes
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
	fmt.Printf("daemon bench: store %s, %d servers (%d GPUs), %d queued jobs (stored in %s), policy %s, GOGC %d, %s of probes, %d rounds (%d with errors), %d jobs running at the end\n",
		storeKind, nServers, nServers*8, nJobs, fill.Round(time.Millisecond), policy, gcPercent, dur, len(rounds), roundErrs, running)
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
	fmt.Printf("daemon bench: last bodies: queue %d bytes, jobs running %d bytes; the API's client is a separate process\n", bytesRead["/v1/queue"], bytesRead["/v1/jobs?state=running"])
	if firstRoundErr != nil {
		msg := firstRoundErr.Error()
		fmt.Printf("daemon bench: first round error: %s\n", msg[:min(len(msg), 300)])
	}
	if len(fails) > 0 {
		fmt.Printf("daemon bench: %d requests failed, first: %s\n", len(fails), fails[0])
	}
}

// benchClientPrefix starts the line on which TestDaemonBenchClient
// prints its result.
const benchClientPrefix = "daemon bench client: "

// benchClientResult is what the bench's client measured (milliseconds).
type benchClientResult struct {
	Submit, Queue, Jobs, QueueDecode, JobsDecode []float64
	Bytes                                        map[string]int
	Fails                                        []string
}

// TestDaemonBenchClient is TestDaemonBench's API client, run by it as a
// separate process (REPLAN_BENCH_CLIENT_SOCK names the daemon's socket):
// for REPLAN_BENCH_DURATION it submits a job, reads the queue and the
// running jobs, and sleeps 20 ms, then decodes the bodies it kept and
// prints the latencies as one JSON line.
func TestDaemonBenchClient(t *testing.T) {
	sock := os.Getenv("REPLAN_BENCH_CLIENT_SOCK")
	if sock == "" {
		t.Skip("run by TestDaemonBench")
	}
	dur, err := time.ParseDuration(os.Getenv("REPLAN_BENCH_DURATION"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cl := NewUnixClient(sock)
	var r benchClientResult
	r.Bytes = map[string]int{}
	msSince := func(a time.Time) float64 { return float64(time.Since(a)) / float64(time.Millisecond) }
	const keepBodies = 20
	kept := map[string][][]byte{}
	recvBuf := map[string]*bytes.Buffer{"/v1/queue": {}, "/v1/jobs?state=running": {}}
	end := time.Now().Add(dur)
	for i := 0; time.Now().Before(end); i++ {
		spec := strings.Replace(specYAML, "%s", fmt.Sprintf("probe-%d", i), 1)
		a := time.Now()
		if _, err := cl.Submit(ctx, "probe.yaml", []byte(spec)); err != nil {
			r.Fails = append(r.Fails, err.Error())
		}
		r.Submit = append(r.Submit, msSince(a))
		// A read is timed until the whole body has been received.
		for _, p := range []struct {
			path string
			recv *[]float64
		}{{"/v1/queue", &r.Queue}, {"/v1/jobs?state=running", &r.Jobs}} {
			a = time.Now()
			body, err := getBodyInto(ctx, cl, p.path, recvBuf[p.path])
			if err != nil {
				r.Fails = append(r.Fails, err.Error())
				continue
			}
			*p.recv = append(*p.recv, msSince(a))
			r.Bytes[p.path] = len(body)
			if len(kept[p.path]) < keepBodies && i%5 == 0 {
				kept[p.path] = append(kept[p.path], bytes.Clone(body))
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, p := range []struct {
		path string
		dec  *[]float64
		into func() any
	}{{"/v1/queue", &r.QueueDecode, func() any { return &[]QueueEntry{} }}, {"/v1/jobs?state=running", &r.JobsDecode, func() any { return &[]JobRecord{} }}} {
		for _, body := range kept[p.path] {
			a := time.Now()
			if err := json.Unmarshal(body, p.into()); err != nil {
				r.Fails = append(r.Fails, err.Error())
			}
			*p.dec = append(*p.dec, msSince(a))
		}
	}
	out, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("%s%s\n", benchClientPrefix, out)
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
