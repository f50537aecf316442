package control

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/replan/replan/sched"
)

// startUsersAPI is a daemon with the test recorder on a virtual clock
// (servers a and b, 8 GPUs each; tenants research and small, 4 GPUs)
// served over TLS to two token users, alice (research) and bob (small).
func startUsersAPI(t *testing.T) (alice, bob *Client, d *Daemon, ex *recorder, c *clock, st *SQLite) {
	t.Helper()
	st, _ = openTest(t)
	c = &clock{t: time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)}
	ex = &recorder{}
	d = newUsersDaemon(t, st, ex, c)
	toks := map[string][sha256.Size]byte{"alice": sha256.Sum256([]byte("alice-token")), "bob": sha256.Sum256([]byte("bob-token"))}
	acc := &Access{DaemonUID: os.Getuid(), Tokens: toks, Admins: []string{"alice"}, Tenants: []TenantAccess{
		{Name: "research", Users: []string{"alice"}},
		{Name: "small", Users: []string{"bob"}},
	}}
	dir := t.TempDir()
	cert, _, err := LoadOrCreateCert(filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem"), []string{"head.example"})
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go Serve(ctx, tls.NewListener(l, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}), (&API{D: d, Version: "test", Access: acc}).Handler())
	fp := strings.ToLower(strings.ReplaceAll(Fingerprint(cert.Certificate[0]), ":", ""))
	alice, _ = NewTLSClient("https://"+l.Addr().String(), "alice-token", fp)
	bob, _ = NewTLSClient("https://"+l.Addr().String(), "bob-token", fp)
	return alice, bob, d, ex, c, st
}

func newUsersDaemon(t *testing.T, st Store, ex Executor, c *clock) *Daemon {
	t.Helper()
	p, _ := sched.New("morphling")
	d, err := New(context.Background(), Config{
		Store: st, Exec: ex, Policy: p, Clock: c.now,
		Servers: []ServerInfo{{Name: "a", Address: "10.0.0.1", Rack: "r1", GPUs: 8, CPUs: 64, MemGB: 1000}, {Name: "b", Address: "10.0.0.2", Rack: "r1", GPUs: 8, CPUs: 64, MemGB: 1000}},
		Tenants: []TenantInfo{{Name: "research", QuotaGPUs: 16}, {Name: "small", QuotaGPUs: 4}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func ids[T any](xs []T, id func(T) string) []string {
	out := []string{}
	for _, x := range xs {
		out = append(out, id(x))
	}
	slices.Sort(out)
	return out
}

func recID(j JobRecord) string { return j.ID }

// Issue 28: jobs, queue, events and history took no --user, and events
// and history no --tenant or --state: an operator could not ask for
// one user's or one tenant's jobs. The daemon now filters by query
// parameters.
func TestAPIFiltersByUserTenantState(t *testing.T) {
	ctx := context.Background()
	alice, bob, d, ex, _, _ := startUsersAPI(t)
	a, err := alice.Submit(ctx, "a.yaml", []byte(admitSpec(map[string]string{"request": "{gpus: 4}"})))
	if err != nil {
		t.Fatal(err)
	}
	b1, err := bob.Submit(ctx, "b1.yaml", []byte(admitSpec(map[string]string{"tenant": "small", "request": "{gpus: 4}"})))
	if err != nil {
		t.Fatal(err)
	}
	b2, err := bob.Submit(ctx, "b2.yaml", []byte(admitSpec(map[string]string{"tenant": "small", "request": "{gpus: 4}"})))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Round(ctx); err != nil {
		t.Fatal(err)
	}
	// small's quota (4 GPUs) holds one of bob's jobs; the other waits.
	running, err := alice.JobsWhere(ctx, ReadFilter{States: []JobState{StateRunning}})
	if err != nil || !slices.Equal(ids(running, recID), []string{a.ID, b1.ID}) {
		t.Fatalf("running: %v %v (want %s and %s)", ids(running, recID), err, a.ID, b1.ID)
	}
	for _, c := range []struct {
		f    ReadFilter
		want []string
	}{
		{ReadFilter{Users: []string{"alice"}}, []string{a.ID}},
		{ReadFilter{Users: []string{"bob"}}, []string{b1.ID, b2.ID}},
		{ReadFilter{Users: []string{"alice", "bob"}}, []string{a.ID, b1.ID, b2.ID}},
		{ReadFilter{Tenants: []string{"small"}, States: []JobState{StateQueued}}, []string{b2.ID}},
		{ReadFilter{Users: []string{"bob"}, States: []JobState{StateRunning}}, []string{b1.ID}},
		{ReadFilter{Tenants: []string{"research", "small"}, States: []JobState{StateRunning}}, []string{a.ID, b1.ID}},
		{ReadFilter{Users: []string{"carol"}}, []string{}},
	} {
		js, err := alice.JobsWhere(ctx, c.f)
		if err != nil || !slices.Equal(ids(js, recID), c.want) {
			t.Errorf("jobs?%s: %v %v, want %v", c.f.Query(), ids(js, recID), err, c.want)
		}
	}
	q, err := alice.QueueWhere(ctx, ReadFilter{Users: []string{"bob"}})
	if err != nil || len(q) != 1 || q[0].Job.ID != b2.ID || q[0].Reason == "" {
		t.Errorf("queue?user=bob: %+v %v", q, err)
	}
	if q, err := alice.QueueWhere(ctx, ReadFilter{Users: []string{"alice"}}); err != nil || len(q) != 0 {
		t.Errorf("queue?user=alice: %+v %v (alice's job runs)", q, err)
	}
	if q, err := alice.QueueWhere(ctx, ReadFilter{Tenants: []string{"research"}}); err != nil || len(q) != 0 {
		t.Errorf("queue?tenant=research: %+v %v", q, err)
	}
	// Events: alice's are those she caused and her job's; small's are
	// those of bob's jobs.
	evs, err := alice.EventsWhere(ctx, 0, 0, ReadFilter{Users: []string{"alice"}})
	if err != nil || len(evs) == 0 {
		t.Fatalf("events?user=alice: %v %v", evs, err)
	}
	kinds := map[string]bool{}
	for _, e := range evs {
		if e.JobID != a.ID && e.User != "alice" {
			t.Errorf("events?user=alice has %+v", e)
		}
		kinds[e.Kind] = true
	}
	if !kinds["submit"] || !kinds["start"] {
		t.Errorf("events?user=alice: kinds %v, want submit and start", kinds)
	}
	evs, err = alice.EventsWhere(ctx, 0, 0, ReadFilter{Tenants: []string{"small"}})
	if err != nil || len(evs) < 3 {
		t.Fatalf("events?tenant=small: %v %v", evs, err)
	}
	for _, e := range evs {
		if e.JobID != b1.ID && e.JobID != b2.ID {
			t.Errorf("events?tenant=small has %+v", e)
		}
	}
	// Finish alice's job, cancel bob's waiting one: history filters.
	ex.next = Observation{Jobs: []JobObservation{{JobID: a.ID, Iterations: 50, Exited: true}}}
	if err := d.Observe(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := bob.JobOp(ctx, b2.ID, "cancel"); err != nil {
		t.Fatal(err)
	}
	hid := func(e HistoryEntry) string { return e.Job.ID }
	for _, c := range []struct {
		f    ReadFilter
		want []string
	}{
		{ReadFilter{}, []string{a.ID, b2.ID}},
		{ReadFilter{Users: []string{"alice"}}, []string{a.ID}},
		{ReadFilter{Tenants: []string{"small"}}, []string{b2.ID}},
		{ReadFilter{States: []JobState{StateCancelled}}, []string{b2.ID}},
		{ReadFilter{States: []JobState{StateFinished}, Users: []string{"bob"}}, []string{}},
	} {
		h, err := bob.HistoryWhere(ctx, c.f)
		if err != nil || !slices.Equal(ids(h, hid), c.want) {
			t.Errorf("history?%s: %v %v, want %v", c.f.Query(), ids(h, hid), err, c.want)
		}
	}
	if h, _ := bob.HistoryWhere(ctx, ReadFilter{Users: []string{"alice"}}); len(h) == 1 && h[0].User != "alice" {
		t.Errorf("history entry's user %q, want alice", h[0].User)
	}
	// Bad values are refused naming the parameter.
	var re *RemoteError
	for _, c := range []struct{ path, want string }{
		{"/v1/jobs?state=runing", "state: unknown state \"runing\""},
		{"/v1/queue?state=bogus", "state: unknown state"},
		{"/v1/events?state=bogus", "state: unknown state"},
		{"/v1/history?state=running", "state: history lists ended jobs"},
		{"/v1/history?since=yesterday", "since: \"yesterday\" is not an RFC 3339 time"},
		{"/v1/usage?since=2026-11-23T00:00:00Z&until=2026-11-22T00:00:00Z", "until: "},
	} {
		err := alice.do(ctx, "GET", c.path, nil, &[]any{})
		if !errors.As(err, &re) || re.Status != http.StatusBadRequest || !strings.Contains(err.Error(), c.want) {
			t.Errorf("GET %s: %v, want 400 naming %q", c.path, err, c.want)
		}
	}
}

// Issue 28: no sacct or sreport: history had one line per job, with no
// attempts, GPUs, plan or exit code, and nothing summed GPU-hours. Now
// each job's attempts come from its state history and decisions, and
// usage sums GPUs × time per tenant and user over a range.
func TestAPIHistoryAttemptsAndUsage(t *testing.T) {
	ctx := context.Background()
	alice, bob, d, ex, c, _ := startUsersAPI(t)
	t0 := c.now()
	a, err := alice.Submit(ctx, "a.yaml", []byte(admitSpec(map[string]string{"request": "{gpus: 4}"})))
	if err != nil {
		t.Fatal(err)
	}
	b, err := bob.Submit(ctx, "b.yaml", []byte(admitSpec(map[string]string{"tenant": "small", "request": "{gpus: 4}"})))
	if err != nil {
		t.Fatal(err)
	}
	gpusOf := func(id string) int {
		t.Helper()
		det, err := alice.Job(ctx, id)
		if err != nil || det.Job.State != StateRunning {
			t.Fatalf("%s: %+v %v (want running)", id, det.Job, err)
		}
		n := 0
		for _, s := range serversOfRecord(t, det.Job) {
			n += s
		}
		return n
	}
	if _, err := d.Round(ctx); err != nil {
		t.Fatal(err)
	}
	g1, gb := gpusOf(a.ID), gpusOf(b.ID)
	// Alice's job crashes after an hour, waits 30 minutes, runs 2 hours
	// more and finishes.
	c.advance(time.Hour)
	ex.next = Observation{Jobs: []JobObservation{{JobID: a.ID, Iterations: 10, Checkpoint: 5, Exited: true, ExitCode: 3}}}
	if err := d.Observe(ctx); err != nil {
		t.Fatal(err)
	}
	c.advance(30 * time.Minute)
	if _, err := d.Round(ctx); err != nil {
		t.Fatal(err)
	}
	g2 := gpusOf(a.ID)
	c.advance(2 * time.Hour)
	ex.next = Observation{Jobs: []JobObservation{{JobID: a.ID, Iterations: 50, Exited: true}}}
	if err := d.Observe(ctx); err != nil {
		t.Fatal(err)
	}
	h, err := alice.HistoryWhere(ctx, ReadFilter{})
	if err != nil || len(h) != 1 || h[0].Job.ID != a.ID {
		t.Fatalf("history: %+v %v", h, err)
	}
	as := h[0].Attempts
	if len(as) != 2 {
		t.Fatalf("attempts: %+v, want 2", as)
	}
	x, y := as[0], as[1]
	if x.N != 1 || !x.Start.Equal(t0) || !x.End.Equal(t0.Add(time.Hour)) || x.GPUs != g1 || x.Plan == "" || x.ExitCode == nil || *x.ExitCode != 3 || !strings.Contains(x.Reason, "exited with code 3") {
		t.Errorf("attempt 1: %+v (exit %v), want %d GPUs from %s to +1h, exit 3", x, x.ExitCode, g1, t0)
	}
	if y.N != 2 || !y.Start.Equal(t0.Add(90*time.Minute)) || !y.End.Equal(t0.Add(210*time.Minute)) || y.GPUs != g2 || y.State != "finished" || y.ExitCode == nil || *y.ExitCode != 0 {
		t.Errorf("attempt 2: %+v, want %d GPUs from +1h30 to +3h30, finished, exit 0", y, g2)
	}
	if want := float64(g1) + 2*float64(g2); math.Abs(h[0].GPUHours-want) > 1e-9 || math.Abs(x.GPUHours-float64(g1)) > 1e-9 {
		t.Errorf("GPU-hours %v (attempt 1: %v), want %v", h[0].GPUHours, x.GPUHours, want)
	}
	// History's range: ended in [since, until).
	if h, _ := alice.HistoryWhere(ctx, ReadFilter{Since: t0.Add(4 * time.Hour)}); len(h) != 0 {
		t.Errorf("history since after its end: %d entries", len(h))
	}
	if h, _ := alice.HistoryWhere(ctx, ReadFilter{Since: t0, Until: t0.Add(4 * time.Hour)}); len(h) != 1 {
		t.Errorf("history over its end: %d entries", len(h))
	}
	// Usage from +30m to +2h: alice's 30 minutes of attempt 1 and 30 of
	// attempt 2; bob's running job 1h30.
	u, err := bob.Usage(ctx, ReadFilter{Since: t0.Add(30 * time.Minute), Until: t0.Add(2 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	wantA, wantB := 0.5*float64(g1)+0.5*float64(g2), 1.5*float64(gb)
	row := func(rows []UsageRow, tenant, user string) UsageRow {
		for _, r := range rows {
			if r.Tenant == tenant && r.User == user {
				return r
			}
		}
		t.Errorf("usage has no row %s/%s: %+v", tenant, user, rows)
		return UsageRow{}
	}
	if r := row(u.Users, "research", "alice"); math.Abs(r.GPUHours-wantA) > 1e-9 || r.Jobs != 1 || r.Attempts != 2 {
		t.Errorf("alice: %+v, want %.2f GPU-hours over 2 attempts", r, wantA)
	}
	if r := row(u.Tenants, "small", ""); math.Abs(r.GPUHours-wantB) > 1e-9 || r.Jobs != 1 {
		t.Errorf("small: %+v, want %.2f GPU-hours", r, wantB)
	}
	if math.Abs(u.GPUHours-wantA-wantB) > 1e-9 || len(u.Tenants) != 2 {
		t.Errorf("total %v over %d tenants, want %v over 2", u.GPUHours, len(u.Tenants), wantA+wantB)
	}
	if u, err := bob.Usage(ctx, ReadFilter{Users: []string{"bob"}, Since: t0.Add(30 * time.Minute), Until: t0.Add(2 * time.Hour)}); err != nil || len(u.Users) != 1 || math.Abs(u.GPUHours-wantB) > 1e-9 {
		t.Errorf("usage?user=bob: %+v %v", u, err)
	}
}

// serversOfRecord is the GPUs per server of a job record's placement.
func serversOfRecord(t *testing.T, j JobRecord) []int {
	t.Helper()
	var servers []struct {
		GPUs []int `json:"gpus"`
	}
	if err := jsonUnmarshal(j.Placement, &servers); err != nil {
		t.Fatal(err)
	}
	out := []int{}
	for _, s := range servers {
		out = append(out, len(s.GPUs))
	}
	return out
}

var jsonUnmarshal = func(b []byte, v any) error { return decodeJSON(b, v) }
