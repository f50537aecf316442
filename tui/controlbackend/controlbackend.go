// Package controlbackend is the TUI's Backend over the daemon's API
// (a *control.Client): it converts the API's records into the TUI's rows.
//
// It is the only TUI package that imports control. control's package also
// holds the SQLite store, so this package (not tui itself or its screens)
// carries modernc.org/sqlite in its import graph; it never calls the store.
package controlbackend

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/replan/replan/cluster"
	"github.com/replan/replan/control"
	"github.com/replan/replan/internal/termtext"
	"github.com/replan/replan/jobspec"
	"github.com/replan/replan/launch"
	"github.com/replan/replan/perf"
	"github.com/replan/replan/tui"
	"github.com/replan/replan/tui/data"
	"github.com/replan/replan/tui/jobs"
)

// Backend adapts a control.Client.
type Backend struct{ c *control.Client }

// New is the TUI backend of a daemon's API client
// (control.NewUnixClient(socket) or control.NewTCPClient(url, token)).
func New(c *control.Client) tui.Backend { return &Backend{c: c} }

// Status implements tui.Backend.
func (b *Backend) Status(ctx context.Context) (data.Status, error) {
	s, err := b.c.Status(ctx)
	if err != nil {
		return data.Status{}, err
	}
	return data.Status{Version: s.Version, Policy: s.Policy, Servers: s.Servers, GPUs: s.GPUs, FreeGPUs: s.FreeGPUs,
		Jobs: s.Jobs, Waiting: s.LastRound.Waiting, RoundAt: s.LastRound.At, RoundTook: s.LastRound.Duration,
		Now: s.Now, UnusableGPUs: s.UnusableGPUs, Role: s.Role, Leader: s.Leader, Members: len(s.Members), Epoch: s.Epoch}, nil
}

// Nodes implements tui.Backend.
func (b *Backend) Nodes(ctx context.Context) ([]data.Node, error) {
	ns, err := b.c.Nodes(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]data.Node, len(ns))
	for i, n := range ns {
		out[i] = data.Node{Name: n.Name, Rack: n.Rack, GPUs: n.GPUs, Reachable: n.Reachable, Drained: n.Drained,
			Missed: n.Missed, FreeGPUs: n.FreeGPUs, Owners: n.GPUOwners, IdleHeld: n.IdleHeld, Suspect: n.Suspect, SuspectWhy: n.SuspectWhy,
			State: n.State, DownWhy: n.DownWhy}
		for _, c := range n.CordonedGPUs {
			out[i].Cordoned = append(out[i].Cordoned, data.Cordon{GPU: c.GPU, Why: c.Why})
		}
		for _, g := range n.GPUStats {
			out[i].Stats = append(out[i].Stats, data.GPUStat{Index: g.Index, UtilPct: g.UtilPct, MemUsedGB: g.MemUsedGB, MemTotalGB: g.MemTotalGB,
				TempC: g.TempC, PowerW: g.PowerW, ECC: g.ECCErrors, Xid: g.XidErrors})
			st := &out[i].Stats[len(out[i].Stats)-1]
			for _, p := range g.Processes {
				st.Processes = append(st.Processes, data.GPUProcess{PID: int(p.PID), MemGB: p.MemUsedGB})
			}
		}
	}
	return out, nil
}

// Queue implements tui.Backend. Delay timers come from network-aware
// policies: the server and rack timers are sent whole with the starvation
// time, and shown as what is left of them. Every figure is brought from
// the entry's as_of to the daemon's clock now (status), so that the
// screen counts down from the moment of the poll, not from older data.
func (b *Backend) Queue(ctx context.Context) ([]data.QueueRow, error) {
	q, err := b.c.Queue(ctx)
	if err != nil {
		return nil, err
	}
	var now time.Time
	if len(q) > 0 {
		if s, err := b.c.Status(ctx); err == nil {
			now = s.Now
		}
	}
	return QueueRows(q, now), nil
}

// QueueRows converts queue entries to rows as of now (the daemon's clock;
// zero: as of each entry's as_of).
func QueueRows(q []control.QueueEntry, now time.Time) []data.QueueRow {
	out := make([]data.QueueRow, len(q))
	sec := func(s float64) time.Duration { return time.Duration(max(s, 0) * float64(time.Second)) }
	for i, e := range q {
		age := 0.0
		if !now.IsZero() && !e.AsOf.IsZero() && now.After(e.AsOf) {
			age = now.Sub(e.AsOf).Seconds()
		}
		out[i] = data.QueueRow{ID: e.Job.ID, Name: termtext.Clean(e.Job.Name), Class: e.Job.Class, Tenant: termtext.Clean(e.Job.Tenant), State: string(e.Job.State),
			GPUs: e.GPUs, Waited: sec(e.WaitingS + age), Reason: termtext.Clean(e.Reason), ETAReason: e.ETAReason}
		if e.ETAS != nil {
			out[i].ETA, out[i].HasETA = sec(*e.ETAS-age), true
		}
		if t := e.Timers; t != nil {
			out[i].Timers = &data.DelayTimers{ServerTimer: sec(t.ServerTimer - t.Starved - age), RackTimer: sec(t.RackTimer - t.Starved - age),
				Starved: sec(t.Starved + age), AcceptTier: t.AcceptTier.String(), NwSens: min(max(t.NwSens, 0), 1), HasNwSens: true}
		}
	}
	return out
}

// Jobs implements tui.Backend.
func (b *Backend) Jobs(ctx context.Context) ([]data.Job, error) {
	run, err := b.c.Running(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]data.Job, len(run))
	for i, r := range run {
		out[i] = Job(r.Job)
		out[i].PredictedSPS, out[i].MeasuredSPS = r.Throughput.PredictedSPS, r.Throughput.MeasuredSPS
		out[i].PromisedSPS, out[i].SLA = r.PromisedSPS, r.SLA
		out[i].Shift = time.Duration(r.ShiftS * float64(time.Second))
		out[i].RestartLeft = time.Duration(r.RestartLeftS * float64(time.Second))
	}
	return out, nil
}

// LogTail is how many of the log's last lines the job detail reads on
// each poll (its log pane scrolls through them; the main view shows the
// last few).
const LogTail = 200

// Job converts a job record: its spec gives the architecture, its plan and
// placement are decoded from JSON (a record that does not decode keeps
// those fields empty rather than failing the whole list).
func Job(j control.JobRecord) data.Job {
	d := data.Job{ID: j.ID, Name: termtext.Clean(j.Name), Tenant: termtext.Clean(j.Tenant), Class: j.Class, State: string(j.State), Reason: termtext.Clean(j.Reason),
		Iterations: j.Iterations, Restarts: j.Restarts, SubmittedAt: j.SubmittedAt, StartedAt: j.StartedAt}
	var spec jobspec.Spec
	if len(j.Spec) > 0 && json.Unmarshal(j.Spec, &spec) == nil {
		spec.Arch.Name = termtext.Clean(spec.Arch.Name) // the spec's model.name, stored before it was checked
		d.Arch, d.HasArch = spec.Arch, spec.Arch.Name != ""
		d.TotalIterations, d.RequestGPUs = spec.Iterations, spec.Request.GPUs
	}
	var p perf.Plan
	if len(j.Plan) > 0 && json.Unmarshal(j.Plan, &p) == nil && p.GPUs() > 0 {
		d.Plan, d.PlanString = p, p.String()
	}
	var servers []launch.Server
	if len(j.Placement) > 0 && json.Unmarshal(j.Placement, &servers) == nil {
		for _, s := range servers {
			d.Placement = append(d.Placement, data.Server{Name: s.Name, GPUs: s.GPUs})
		}
		d.PlacementString = jobs.PlacementSummary(d.Placement)
	}
	return d
}

// Job implements tui.Backend.
func (b *Backend) Job(ctx context.Context, id string) (data.JobDetail, error) {
	jd, err := b.c.Job(ctx, id)
	if err != nil {
		return data.JobDetail{Job: data.Job{ID: id}}, err
	}
	out := data.JobDetail{Job: Job(jd.Job)}
	out.Job.PredictedSPS, out.Job.MeasuredSPS = jd.Throughput.PredictedSPS, jd.Throughput.MeasuredSPS
	if pts, err := b.c.Curve(ctx, id, 64); err == nil {
		out.Curve = pts
	}
	if !jd.Job.StartedAt.IsZero() {
		// the newest attempt's log, running or ended (an ended job's log
		// may be gone: then there is none to show)
		if rc, err := b.c.Logs(ctx, id, LogTail, false); err == nil {
			text, _ := io.ReadAll(io.LimitReader(rc, 256<<10))
			rc.Close()
			out.Log = LogLines(string(text))
		}
	}
	out.Spec = SpecLines(jd.Job.Spec)
	for _, a := range control.AttemptsOf(jd, time.Now()) {
		out.Attempts = append(out.Attempts, data.Attempt{N: a.N, Kind: a.Kind, Start: a.Start, End: a.End, GPUs: a.GPUs,
			Placement: placementText(a.Placement), Plan: a.Plan, State: a.State, ExitCode: a.ExitCode, Reason: termtext.Clean(a.Reason)})
	}
	for _, t := range jd.History {
		out.History = append(out.History, data.Transition{From: string(t.From), To: string(t.To), Reason: termtext.Clean(t.Reason), At: t.At})
	}
	for _, d := range jd.Decisions {
		out.Decisions = append(out.Decisions, decision(d))
	}
	// oldest first, whatever order the API used
	sort.SliceStable(out.Decisions, func(a, b int) bool { return out.Decisions[a].At.Before(out.Decisions[b].At) })
	return out, nil
}

// LogLines are a log's lines as the TUI shows them: terminal control
// sequences stripped (termtext.CleanLine, as `replan logs` does), tabs
// expanded, empty lines dropped.
func LogLines(text string) []string {
	var out []string
	for _, l := range strings.Split(strings.TrimRight(text, "\n"), "\n") {
		l = strings.ReplaceAll(strings.TrimRight(termtext.CleanLine(l), "\r\n"), "\t", "    ")
		if strings.TrimSpace(l) != "" {
			out = append(out, l)
		}
	}
	return out
}

// SpecLines is a job's stored spec (JSON) indented, one line per element,
// each cleaned of control sequences; nil when there is none.
func SpecLines(spec json.RawMessage) []string {
	if len(spec) == 0 || string(spec) == "null" {
		return nil
	}
	var buf bytes.Buffer
	if json.Indent(&buf, spec, "", "  ") != nil {
		buf.Reset()
		buf.Write(spec)
	}
	var out []string
	for _, l := range strings.Split(buf.String(), "\n") {
		out = append(out, termtext.Clean(l))
	}
	return out
}

func placementText(p perf.Placement) string {
	if len(p) == 0 {
		return ""
	}
	return cluster.PlacementText(p)
}

func decision(d control.DecisionRecord) data.Decision {
	out := data.Decision{ID: d.ID, Kind: d.Kind, Reason: termtext.Clean(d.Reason), At: d.At}
	var det struct {
		Plan       perf.Plan      `json:"plan"`
		Placement  perf.Placement `json:"placement"`
		Throughput float64        `json:"throughput"`
	}
	if len(d.Detail) > 0 && json.Unmarshal(d.Detail, &det) == nil {
		if det.Plan.GPUs() > 0 {
			out.Plan = det.Plan.String()
		}
		if len(det.Placement) > 0 {
			out.Placement = cluster.PlacementText(det.Placement)
		}
		out.Throughput = det.Throughput
	}
	return out
}

// Events implements tui.Backend.
func (b *Backend) Events(ctx context.Context, after int64, wait time.Duration) ([]data.Event, error) {
	evs, err := b.c.Events(ctx, after, wait)
	if err != nil {
		return nil, err
	}
	out := make([]data.Event, len(evs))
	for i, e := range evs {
		out[i] = data.Event{ID: e.ID, Kind: e.Kind, JobID: e.JobID, Node: e.Node, Msg: termtext.Clean(e.Msg), At: e.At}
		var d struct {
			Plan string `json:"plan"`
		}
		if len(e.Data) > 0 && json.Unmarshal(e.Data, &d) == nil {
			out[i].Plan = d.Plan
		}
	}
	return out, nil
}

// Cancel implements tui.Backend.
func (b *Backend) Cancel(ctx context.Context, id string) error {
	_, err := b.c.JobOp(ctx, id, "cancel")
	return err
}

// Drain implements tui.Backend.
func (b *Backend) Drain(ctx context.Context, server string) error {
	_, err := b.c.NodeOp(ctx, server, "drain")
	return err
}

// History implements tui.Historian: the jobs that ended, newest first.
func (b *Backend) History(ctx context.Context) ([]data.HistoryRow, error) {
	h, err := b.c.History(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]data.HistoryRow, 0, len(h))
	for i := len(h) - 1; i >= 0; i-- {
		e := h[i]
		out = append(out, data.HistoryRow{ID: e.Job.ID, Name: termtext.Clean(e.Job.Name), Tenant: termtext.Clean(e.Job.Tenant), Class: e.Job.Class, State: string(e.Job.State),
			JCT: time.Duration(e.JCTS * float64(time.Second)), Queued: time.Duration(e.QueueS * float64(time.Second)),
			Restarts: e.Job.Restarts, Iterations: e.Job.Iterations, Ended: e.Job.FinishedAt})
	}
	sort.SliceStable(out, func(a, b int) bool { return out[a].Ended.After(out[b].Ended) })
	return out, nil
}

// Undrain implements tui.Operator.
func (b *Backend) Undrain(ctx context.Context, server string) error {
	_, err := b.c.NodeOp(ctx, server, "undrain")
	return err
}

// Hold implements tui.Operator.
func (b *Backend) Hold(ctx context.Context, id string) error {
	_, err := b.c.JobOp(ctx, id, "hold")
	return err
}

// Release implements tui.Operator.
func (b *Backend) Release(ctx context.Context, id string) error {
	_, err := b.c.JobOp(ctx, id, "release")
	return err
}

// Submit implements tui.Backend.
func (b *Backend) Submit(ctx context.Context, file string, spec []byte) (string, error) {
	r, err := b.c.Submit(ctx, file, spec)
	return r.ID, err
}

// Links implements tui.LinksBackend.
func (b *Backend) Links(ctx context.Context) (data.Links, error) {
	lr, err := b.c.Links(ctx)
	if err != nil {
		return data.Links{}, err
	}
	out := data.Links{Shared: lr.Shared, Score: lr.Score, Dropped: lr.Dropped}
	for _, l := range lr.Links {
		row := data.LinkRow{Name: l.Name, Score: l.Score, Jobs: l.Jobs}
		for _, o := range l.Offsets {
			row.Shifts = append(row.Shifts, time.Duration(o*float64(time.Second)))
		}
		out.Links = append(out.Links, row)
	}
	return out, nil
}
