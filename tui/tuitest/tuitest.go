// Package tuitest is a fake TUI backend and fixed cluster snapshots for the
// TUI's tests and benchmarks: a 64-GPU cluster (2 racks × 4 servers × 8
// A800s) with a handful of jobs, and a generated one of any size.
package tuitest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/x/ansi"

	"github.com/replan/replan/perf"
	"github.com/replan/replan/tui/data"
)

// T0 is the fixed "now" of every snapshot.
var T0 = time.Date(2026, 11, 22, 16, 0, 0, 0, time.UTC)

// Snapshot is what a fake backend serves.
type Snapshot struct {
	Status  data.Status
	Nodes   []data.Node
	Queue   []data.QueueRow
	Jobs    []data.Job
	Details map[string]data.JobDetail
	Events  []data.Event
}

func mustPlan(s string) perf.Plan {
	p, err := perf.ParsePlanSpec(s)
	if err != nil {
		panic(err)
	}
	return p
}

func arch(name string, batch int) perf.Arch {
	a, ok := perf.Builtin(name)
	if !ok {
		panic("no builtin " + name)
	}
	a.GlobalBatch = batch
	return a
}

func gpus(from, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = from + i
	}
	return out
}

// Small is the 64-GPU cluster: 8 servers in racks r1 and r2, five jobs
// running, one server drained, one unreachable, three jobs waiting (one
// with delay timers).
func Small() Snapshot {
	job := func(id, name, tenant, class, a string, batch int, plan string, place []data.Server, it, total, rst int) data.Job {
		p := mustPlan(plan)
		return data.Job{ID: id, Name: name, Tenant: tenant, Class: class, State: "running",
			Arch: arch(a, batch), HasArch: true, Plan: p, PlanString: p.String(), Placement: place,
			RequestGPUs: p.GPUs(), Iterations: it, TotalIterations: total, Restarts: rst,
			SubmittedAt: T0.Add(-time.Hour), StartedAt: T0.Add(-50 * time.Minute)}
	}
	jobs := []data.Job{
		job("j-000001", "gpt2-a", "vision", "guaranteed", "gpt2", 16, "dp=2,tp=4,pp=1,mb=2,ga=4,zero=1,ckpt=true", []data.Server{{Name: "srv-01", GPUs: gpus(0, 8)}}, 1200, 5000, 0),
		job("j-000002", "bert-b", "nlp", "best-effort", "bert", 64, "dp=4,tp=1,pp=1,mb=16,ga=1,zero=2", []data.Server{{Name: "srv-02", GPUs: gpus(0, 4)}}, 800, 2000, 1),
		job("j-000003", "t5-c", "nlp", "guaranteed", "t5", 32, "dp=8,tp=2,pp=1,mb=2,ga=2,zero=1", []data.Server{{Name: "srv-03", GPUs: gpus(0, 8)}, {Name: "srv-05", GPUs: gpus(0, 8)}}, 300, 4000, 2),
		job("j-000004", "vit-d", "vision", "best-effort", "vit", 128, "dp=2,tp=1,pp=1,mb=64,ga=1,zero=1", []data.Server{{Name: "srv-02", GPUs: gpus(4, 2)}}, 50, 1000, 0),
		job("j-000005", "roberta-e", "ads", "guaranteed", "roberta", 64, "dp=4,tp=1,pp=1,mb=8,ga=2,zero=2,ckpt=true", []data.Server{{Name: "srv-06", GPUs: gpus(0, 4)}}, 4100, 4500, 0),
	}
	// what the daemon reports of their speed: guaranteed jobs with their
	// promise and SLA, a cross-rack job with a time-shift
	jobs[0].PredictedSPS, jobs[0].MeasuredSPS, jobs[0].PromisedSPS, jobs[0].SLA = 18.2, 17.9, 15.0, "ok"
	jobs[1].PredictedSPS, jobs[1].RestartLeft = 95.3, 3*time.Minute // just restarted
	jobs[2].PredictedSPS, jobs[2].MeasuredSPS, jobs[2].PromisedSPS, jobs[2].SLA, jobs[2].Shift = 21.0, 14.2, 19.5, "below", 1800*time.Millisecond
	jobs[4].PredictedSPS, jobs[4].MeasuredSPS, jobs[4].PromisedSPS, jobs[4].SLA = 61.0, 63.4, 55.0, "ok"
	nodes := make([]data.Node, 8)
	for i := range nodes {
		nodes[i] = data.Node{Name: fmt.Sprintf("srv-%02d", i+1), Rack: fmt.Sprintf("r%d", i/4+1), GPUs: 8, Reachable: true, Owners: make([]string, 8)}
	}
	for _, j := range jobs {
		for _, s := range j.Placement {
			for i := range nodes {
				if nodes[i].Name == s.Name {
					for _, g := range s.GPUs {
						nodes[i].Owners[g] = j.ID
					}
				}
			}
		}
	}
	for i := range nodes {
		for g, o := range nodes[i].Owners {
			st := data.GPUStat{Index: g, UtilPct: 0, MemUsedGB: 0.5, MemTotalGB: 80, TempC: 34, PowerW: 60}
			if o != "" && o != "j-000002" {
				st.UtilPct, st.MemUsedGB, st.TempC, st.PowerW = 92, 61, 71, 360
				// one rank per GPU (and a profiler beside it on GPU 0)
				st.Processes = []data.GPUProcess{{PID: 1000*(i+1) + g, MemGB: 60.5}}
				if g == 0 {
					st.Processes = append(st.Processes, data.GPUProcess{PID: 1000*(i+1) + 99, MemGB: 0.5})
				}
			}
			if o == "j-000002" { // restarting: held but idle
				nodes[i].IdleHeld = append(nodes[i].IdleHeld, g)
			}
			nodes[i].Stats = append(nodes[i].Stats, st)
		}
	}
	nodes[3].Drained = true
	nodes[7].Reachable, nodes[7].Missed = false, 4
	busy := 0
	for i := range nodes {
		for _, o := range nodes[i].Owners {
			if o == "" {
				nodes[i].FreeGPUs++
			}
		}
		busy += 8 - nodes[i].FreeGPUs
	}
	queue := []data.QueueRow{
		{ID: "j-000006", Name: "llama7b-f", Class: "guaranteed", Tenant: "nlp", State: "queued", GPUs: 16, Waited: 95 * time.Second,
			Reason: "waits for a rack-local offer: rack timer 2m00s",
			Timers: &data.DelayTimers{ServerTimer: 30 * time.Second, RackTimer: 120 * time.Second, Starved: 95 * time.Second, AcceptTier: "server", NwSens: 0.82, HasNwSens: true},
			ETA:    (11*60 + 5) * time.Minute, HasETA: true},
		{ID: "j-000007", Name: "gpt2-g", Class: "best-effort", Tenant: "ads", State: "preempted", GPUs: 8, Waited: 12 * time.Minute, Reason: "preempted for j-000003 (higher slope)",
			Timers: &data.DelayTimers{AcceptTier: "cross-rack", NwSens: 1, HasNwSens: true}, ETA: 25 * time.Minute, HasETA: true},
		{ID: "j-000008", Name: "bert-h", Class: "best-effort", Tenant: "vision", State: "held", GPUs: 4, Waited: 3 * time.Hour, Reason: "held by the operator",
			ETAReason: "held by the operator: no start until released"},
	}
	ev := func(id int64, kind, job, node, msg string, min int) data.Event {
		return data.Event{ID: id, Kind: kind, JobID: job, Node: node, Msg: msg, At: T0.Add(time.Duration(min-60) * time.Minute)}
	}
	events := []data.Event{
		ev(1, "submit", "j-000001", "", "gpt2-a submitted by tenant vision (guaranteed, 8 GPUs)", 0),
		ev(2, "start", "j-000001", "", "gpt2-a on 1 server × 8 GPUs: srv-01 [0-7] with DP2·TP4·PP1 mb2 ga4 ZeRO-1 ckpt (14.20 samples/s predicted); 8 GPUs as asked", 1),
		ev(3, "submit", "j-000003", "", "t5-c submitted by tenant nlp (guaranteed, 16 GPUs)", 5),
		ev(4, "preempt", "j-000007", "", "preempted for j-000003 (higher slope)", 6),
		ev(5, "reconfigure", "j-000003", "", "t5-c on 2 servers × 8 GPUs: srv-03 [0-7], srv-05 [0-7] with DP8·TP2·PP1 mb2 ga2 ZeRO-1 (30.10 samples/s predicted); grown from 8 to 16 GPUs", 7),
		ev(6, "drain", "", "srv-04", "srv-04 drained", 20),
		ev(7, "node-down", "", "srv-08", "srv-08 missed 4 heartbeats: dial tcp 10.0.0.8:22: i/o timeout", 40),
		ev(8, "refit", "j-000005", "", "model roberta refitted (measured 51.30 samples/s)", 55),
	}
	events[1].Plan = jobs[0].PlanString
	events[4].Plan = jobs[2].PlanString
	details := map[string]data.JobDetail{
		"j-000003": {Job: jobs[2],
			History: []data.Transition{
				{From: "", To: "queued", Reason: "submit", At: T0.Add(-55 * time.Minute)},
				{From: "queued", To: "running", Reason: "start: best plan on 8 GPUs", At: T0.Add(-54 * time.Minute)},
			},
			Decisions: []data.Decision{
				{ID: 1, Kind: "wait", Reason: "waits for 16 GPUs in one rack", At: T0.Add(-55 * time.Minute)},
				{ID: 2, Kind: "start", Plan: "DP4·TP2·PP1 mb2 ga4 ZeRO-1", Placement: "1 server × 8 GPUs", Throughput: 17.2, Reason: "asked for 16 GPUs, given 8", At: T0.Add(-54 * time.Minute)},
				{ID: 3, Kind: "reconfigure", Plan: jobs[2].PlanString, Placement: "2 servers × 8 GPUs", Throughput: 30.1, Reason: "grown from 8 to 16 GPUs", At: T0.Add(-53 * time.Minute)},
			},
			Attempts: []data.Attempt{
				{N: 1, Kind: "start", Start: T0.Add(-54 * time.Minute), End: T0.Add(-53 * time.Minute), GPUs: 8, Placement: "1 server × 8 GPUs",
					Plan: "DP4·TP2·PP1 mb2 ga4 ZeRO-1", State: "reconfigured", Reason: "grown from 8 to 16 GPUs"},
				{N: 2, Kind: "reconfigure", Start: T0.Add(-53 * time.Minute), GPUs: 16, Placement: "2 servers × 8 GPUs", Plan: jobs[2].PlanString, State: "running"},
			},
			Spec: []string{"{", `  "name": "t5-c",`, `  "tenant": "nlp",`, `  "env": {`, `    "WANDB_API_KEY": "<redacted>"`, "  },", `  "iterations": 4000`, "}"},
			Log:  logLines(40),
		},
	}
	return Snapshot{
		Status: data.Status{Version: "dev", Policy: "replan", Servers: 8, GPUs: 64, FreeGPUs: 64 - busy - 16, UnusableGPUs: 16, Now: T0, Jobs: 8, Waiting: 3, RoundAt: T0.Add(-2 * time.Second), RoundTook: 3 * time.Millisecond},
		Nodes:  nodes, Queue: queue, Jobs: jobs, Details: details, Events: events,
	}
}

// logLines are n lines of a training log, "iter 10 loss …" every ten
// iterations.
func logLines(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("iter %d loss %.3f", 10*(i+1), 4-float64(i)/20)
	}
	return out
}

// Large is a cluster of n servers of 8 GPUs in racks of 16, with jobs of
// 1 to 16 GPUs filling about three quarters of it.
func Large(n int) []data.Node {
	nodes := make([]data.Node, n)
	job, left := 0, 0
	for i := range nodes {
		nd := data.Node{Name: fmt.Sprintf("srv-%04d", i+1), Rack: fmt.Sprintf("r%02d", i/16+1), GPUs: 8, Reachable: true, Owners: make([]string, 8)}
		for g := range 8 {
			if left == 0 {
				job++
				left = job%16 + 1
				if job%4 == 0 { // a gap of free GPUs
					left = 0
					nd.FreeGPUs++
					continue
				}
			}
			nd.Owners[g] = fmt.Sprintf("j-%06d", job)
			left--
		}
		if i%97 == 5 {
			nd.Drained = true
		}
		if i%251 == 7 {
			nd.Reachable = false
		}
		nodes[i] = nd
	}
	return nodes
}

// ErrDown is what a Fake answers while Down.
var ErrDown = errors.New("dial unix /run/replan.sock: connect: connection refused")

// Fake is a Backend over a Snapshot. It records the operations asked.
type Fake struct {
	mu    sync.Mutex
	Snap  Snapshot
	Down  bool     // every call fails with ErrDown
	Ops   []string // "cancel j-1", "drain srv-01", "submit job.yaml", "speed 2"
	Speed float64
}

func (f *Fake) err() error {
	if f.Down {
		return ErrDown
	}
	return nil
}

// Status implements tui.Backend.
func (f *Fake) Status(context.Context) (data.Status, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.Snap.Status, f.err()
}

// Nodes implements tui.Backend.
func (f *Fake) Nodes(context.Context) ([]data.Node, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.Snap.Nodes, f.err()
}

// Queue implements tui.Backend.
func (f *Fake) Queue(context.Context) ([]data.QueueRow, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.Snap.Queue, f.err()
}

// Jobs implements tui.Backend.
func (f *Fake) Jobs(context.Context) ([]data.Job, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.Snap.Jobs, f.err()
}

// Job implements tui.Backend.
func (f *Fake) Job(_ context.Context, id string) (data.JobDetail, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if d, ok := f.Snap.Details[id]; ok {
		return d, f.err()
	}
	for _, j := range f.Snap.Jobs {
		if j.ID == id {
			return data.JobDetail{Job: j}, f.err()
		}
	}
	return data.JobDetail{Job: data.Job{ID: id}}, fmt.Errorf("job %s: not found", id)
}

// Events implements tui.Backend; it does not wait.
func (f *Fake) Events(_ context.Context, after int64, _ time.Duration) ([]data.Event, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []data.Event
	for _, e := range f.Snap.Events {
		if e.ID > after {
			out = append(out, e)
		}
	}
	return out, f.err()
}

// Cancel implements tui.Backend.
func (f *Fake) Cancel(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.Ops = append(f.Ops, "cancel "+id)
	return f.err()
}

// Drain implements tui.Backend.
func (f *Fake) Drain(_ context.Context, server string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.Ops = append(f.Ops, "drain "+server)
	return f.err()
}

// History implements tui.Historian.
func (f *Fake) History(context.Context) ([]data.HistoryRow, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return []data.HistoryRow{
		{ID: "j-000010", Name: "gpt2-x", Tenant: "vision", Class: "best-effort", State: "finished", JCT: 95 * time.Minute, Queued: 4 * time.Minute, Restarts: 1, Iterations: 5000, Ended: T0.Add(-5 * time.Minute)},
		{ID: "j-000009", Name: "bert-y", Tenant: "nlp", Class: "guaranteed", State: "failed", JCT: 20 * time.Minute, Queued: 30 * time.Second, Restarts: 4, Iterations: 310, Ended: T0.Add(-30 * time.Minute)},
	}, f.err()
}

// Undrain implements tui.Operator.
func (f *Fake) Undrain(_ context.Context, server string) error { return f.op("undrain " + server) }

// Hold implements tui.Operator.
func (f *Fake) Hold(_ context.Context, id string) error { return f.op("hold " + id) }

// Release implements tui.Operator.
func (f *Fake) Release(_ context.Context, id string) error { return f.op("release " + id) }

func (f *Fake) op(s string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.Ops = append(f.Ops, s)
	return f.err()
}

// Submit implements tui.Backend.
func (f *Fake) Submit(_ context.Context, file string, _ []byte) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.Ops = append(f.Ops, "submit "+file)
	return "j-000099", f.err()
}

// SetSpeed implements tui.Speeder.
func (f *Fake) SetSpeed(_ context.Context, factor float64) (float64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.Speed == 0 {
		f.Speed = 1
	}
	f.Speed *= factor
	f.Ops = append(f.Ops, fmt.Sprintf("speed %g", factor))
	return f.Speed, f.err()
}

// Golden compares got with testdata/name.golden, rewriting the file when
// update is set (go test ./tui/... -update). Colours must be off: a golden
// file never holds escape codes.
func Golden(t testing.TB, name, got string, update bool) {
	t.Helper()
	if strings.Contains(got, "\x1b") {
		t.Fatalf("%s: the view has escape codes; build the styles for colorprofile.NoTTY", name)
	}
	path := filepath.Join("testdata", name+".golden")
	if update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./tui/... -update to create it)", err)
	}
	if string(want) != got {
		t.Errorf("%s differs from %s (go test ./tui/... -update rewrites it)\n--- got\n%s\n--- want\n%s", name, path, got, want)
	}
}

// CheckSize fails when view is taller than h lines or a line is wider than
// w cells.
func CheckSize(t testing.TB, view string, w, h int) {
	t.Helper()
	lines := strings.Split(view, "\n")
	if len(lines) > h {
		t.Errorf("view has %d lines, room for %d", len(lines), h)
	}
	for i, l := range lines {
		if n := ansi.StringWidth(l); n > w {
			t.Errorf("line %d is %d cells wide, room for %d: %q", i+1, n, w, l)
		}
	}
}

// Key is the key press that k names: "j", "enter", "esc", "tab",
// "shift+tab", "ctrl+c", "up", "down", "pgdown", "end", "space", or a
// single character.
func Key(k string) tea.KeyPressMsg {
	codes := map[string]rune{"enter": tea.KeyEnter, "esc": tea.KeyEscape, "tab": tea.KeyTab, "up": tea.KeyUp,
		"down": tea.KeyDown, "pgdown": tea.KeyPgDown, "pgup": tea.KeyPgUp, "end": tea.KeyEnd, "home": tea.KeyHome,
		"backspace": tea.KeyBackspace, "space": tea.KeySpace}
	switch {
	case k == "shift+tab":
		return tea.KeyPressMsg{Code: tea.KeyTab, Mod: tea.ModShift}
	case strings.HasPrefix(k, "ctrl+"):
		return tea.KeyPressMsg{Code: rune(k[5]), Mod: tea.ModCtrl}
	}
	if c, ok := codes[k]; ok {
		return tea.KeyPressMsg{Code: c}
	}
	r := []rune(k)[0]
	return tea.KeyPressMsg{Code: r, Text: k}
}
