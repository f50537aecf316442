package control

// Filters and accounting (issue 28), what Slurm users know from squeue -u
// -A -t, sacct and sreport:
//
//   - ReadFilter is the filter of GET /v1/jobs, /v1/queue, /v1/events,
//     /v1/history and /v1/usage: ?state=, ?tenant=, ?user= (each a comma
//     list) and, for history and usage, ?since= and ?until= (RFC 3339).
//     A job's user is who submitted it (job_owners); an event matches a
//     user when that user caused it or owns its job. Filtered reads are
//     computed per request; unfiltered ones keep their encoded path
//     (readcache.go).
//   - Attempts are derived from a job's state history and its start and
//     reconfigure decisions: each start or reconfigure is one attempt (one
//     launch), from its decision to the next reconfigure or the
//     transition out of running that ended it.
//   - Usage is GPU-hours per tenant and user: every attempt's GPUs times
//     the part of it inside [since, until).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/replan/replan/perf"
)

// ReadFilter selects what a read returns; zero fields match all.
type ReadFilter struct {
	States  []JobState
	Tenants []string
	Users   []string
	// Since and Until bound history (jobs that ended in [Since, Until))
	// and usage (the time counted); zero: unbounded.
	Since, Until time.Time
}

// knownStates are the states ?state= accepts.
var knownStates = []JobState{StateQueued, StateHeld, StateRunning, StatePreempted, StateUnschedulable, StateFinished, StateFailed, StateCancelled}

// parseReadFilter reads a filter from a request's query; a bad value is
// an error naming its parameter.
func parseReadFilter(q url.Values) (ReadFilter, error) {
	var f ReadFilter
	list := func(name string) []string {
		var out []string
		for _, s := range strings.Split(q.Get(name), ",") {
			if s = strings.TrimSpace(s); s != "" && !slices.Contains(out, s) {
				out = append(out, s)
			}
		}
		return out
	}
	for _, s := range list("state") {
		if !slices.Contains(knownStates, JobState(s)) {
			names := make([]string, len(knownStates))
			for i, k := range knownStates {
				names[i] = string(k)
			}
			return f, fmt.Errorf("state: unknown state %q (want %s)", s, strings.Join(names, ", "))
		}
		f.States = append(f.States, JobState(s))
	}
	f.Tenants, f.Users = list("tenant"), list("user")
	for _, p := range []struct {
		name string
		t    *time.Time
	}{{"since", &f.Since}, {"until", &f.Until}} {
		if s := q.Get(p.name); s != "" {
			t, err := time.Parse(time.RFC3339Nano, s)
			if err != nil {
				return f, fmt.Errorf("%s: %q is not an RFC 3339 time (like 2026-11-22T12:00:00Z)", p.name, s)
			}
			*p.t = t
		}
	}
	if !f.Since.IsZero() && !f.Until.IsZero() && !f.Until.After(f.Since) {
		return f, fmt.Errorf("until: %s is not after since (%s)", f.Until.Format(time.RFC3339), f.Since.Format(time.RFC3339))
	}
	return f, nil
}

// Query is f as URL query parameters (the client's side of
// parseReadFilter); "" when f is empty.
func (f ReadFilter) Query() string {
	v := url.Values{}
	if len(f.States) > 0 {
		s := make([]string, len(f.States))
		for i, st := range f.States {
			s[i] = string(st)
		}
		v.Set("state", strings.Join(s, ","))
	}
	if len(f.Tenants) > 0 {
		v.Set("tenant", strings.Join(f.Tenants, ","))
	}
	if len(f.Users) > 0 {
		v.Set("user", strings.Join(f.Users, ","))
	}
	if !f.Since.IsZero() {
		v.Set("since", f.Since.UTC().Format(time.RFC3339Nano))
	}
	if !f.Until.IsZero() {
		v.Set("until", f.Until.UTC().Format(time.RFC3339Nano))
	}
	return v.Encode()
}

// byJob reports whether f selects jobs by anything (state, tenant, user).
func (f ReadFilter) byJob() bool {
	return len(f.States)+len(f.Tenants)+len(f.Users) > 0
}

// ownersStore lists who submitted each job.
type ownersStore interface {
	JobOwners(ctx context.Context) (map[string]string, error)
}

// JobOwners is the submitter of every job that has one recorded.
func (s *SQLite) JobOwners(ctx context.Context) (map[string]string, error) {
	rows, err := s.rd.QueryContext(ctx, `SELECT job_id, user FROM job_owners`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var id, u string
		if err := rows.Scan(&id, &u); err != nil {
			return nil, err
		}
		out[id] = u
	}
	return out, rows.Err()
}

// owners is every job's submitter (empty when the store keeps none).
func (d *Daemon) owners(ctx context.Context) (map[string]string, error) {
	return ownersIn(ctx, d.cfg.Store)
}

// ownersIn is every job's submitter as st records them (none when st
// does not record them).
func ownersIn(ctx context.Context, st storeReads) (map[string]string, error) {
	if os, ok := st.(ownersStore); ok {
		return os.JobOwners(ctx)
	}
	return map[string]string{}, nil
}

// match reports whether job j, submitted by owner, passes f's state,
// tenant and user.
func (f ReadFilter) match(j JobRecord, owner string) bool {
	return (len(f.States) == 0 || slices.Contains(f.States, j.State)) &&
		(len(f.Tenants) == 0 || slices.Contains(f.Tenants, j.Tenant)) &&
		(len(f.Users) == 0 || slices.Contains(f.Users, owner))
}

// Attempt is one launch of a job, like a line of sacct: from the start
// or reconfigure decision that placed it to the reconfigure or the
// transition out of running that ended it.
type Attempt struct {
	JobID string `json:"job_id"`
	// N counts the job's launches from 1 (logs --attempt N).
	N     int       `json:"attempt"`
	Kind  string    `json:"kind"` // start or reconfigure
	Start time.Time `json:"start"`
	// End is zero (omitted) while the attempt runs.
	End       time.Time `json:"end,omitzero"`
	GPUs      int       `json:"gpus"`
	Placement []int     `json:"placement,omitempty"` // GPUs per server, fullest first
	Plan      string    `json:"plan,omitempty"`
	// State is how the attempt ended: the state the job went to
	// (preempted, queued, finished, failed, cancelled), "reconfigured"
	// when a new plan or placement replaced it, "running" while it runs.
	State string `json:"state"`
	// ExitCode is rank 0's exit status when known (0 for a finished job;
	// null when the attempt was stopped, not exited).
	ExitCode *int   `json:"exit_code"`
	Reason   string `json:"reason,omitempty"`
	// GPUHours is GPUs times the attempt's length (up to now while it
	// runs).
	GPUHours float64 `json:"gpu_hours"`
}

// exitRe finds the exit status in a requeue or failure reason.
var exitRe = regexp.MustCompile(`exited with code (-?\d+)`)

// attemptsOf derives job j's attempts from its state history (oldest
// first) and its decisions (any order); now ends the running one's
// GPU-hours.
func attemptsOf(j JobRecord, hist []Transition, decs []DecisionRecord, now time.Time) []Attempt {
	type seg struct {
		start, end time.Time
		to, reason string
	}
	var segs []seg
	for _, t := range hist {
		switch {
		case t.To == StateRunning && t.From != StateRunning:
			segs = append(segs, seg{start: t.At})
		case t.From == StateRunning && t.To != StateRunning && len(segs) > 0 && segs[len(segs)-1].end.IsZero():
			s := &segs[len(segs)-1]
			s.end, s.to, s.reason = t.At, string(t.To), t.Reason
		}
	}
	ds := slices.Clone(decs)
	sort.SliceStable(ds, func(a, b int) bool { return ds[a].ID < ds[b].ID })
	// groups[k]: the k-th start and the reconfigures that followed it.
	var groups [][]DecisionRecord
	for _, d := range ds {
		switch {
		case d.Kind == "start":
			groups = append(groups, []DecisionRecord{d})
		case d.Kind == "reconfigure" && len(groups) > 0:
			groups[len(groups)-1] = append(groups[len(groups)-1], d)
		}
	}
	var out []Attempt
	for k, g := range groups {
		sg := seg{start: g[0].At}
		if k < len(segs) {
			sg = segs[k]
		}
		for m, d := range g {
			var det struct {
				Plan      *perf.Plan     `json:"plan"`
				Placement perf.Placement `json:"placement"`
			}
			_ = json.Unmarshal(d.Detail, &det)
			a := Attempt{JobID: j.ID, N: len(out) + 1, Kind: d.Kind, Start: d.At, GPUs: det.Placement.GPUs(), Placement: det.Placement}
			if m == 0 {
				a.Start = sg.start
			}
			if det.Plan != nil {
				a.Plan = det.Plan.String()
			}
			switch {
			case m+1 < len(g):
				a.End, a.State, a.Reason = g[m+1].At, "reconfigured", g[m+1].Reason
			case !sg.end.IsZero():
				a.End, a.State, a.Reason = sg.end, sg.to, sg.reason
			case j.State.Final():
				// A history that lost its last transition: the job's end.
				a.End, a.State, a.Reason = j.FinishedAt, string(j.State), j.Reason
			default:
				a.State = string(StateRunning)
			}
			if m := exitRe.FindStringSubmatch(a.Reason); m != nil {
				c, _ := strconv.Atoi(m[1])
				a.ExitCode = &c
			} else if a.State == string(StateFinished) {
				c := 0
				a.ExitCode = &c
			}
			end := a.End
			if end.IsZero() {
				end = now
			}
			a.GPUHours = float64(a.GPUs) * max(end.Sub(a.Start), 0).Hours()
			out = append(out, a)
		}
	}
	return out
}

// launchStore reads, in two queries, what attempts are derived from:
// every job's state history and its start and reconfigure decisions.
type launchStore interface {
	AllTransitions(ctx context.Context) (map[string][]Transition, error)
	LaunchDecisions(ctx context.Context) (map[string][]DecisionRecord, error)
}

// AllTransitions is every job's state history, oldest first.
func (s *SQLite) AllTransitions(ctx context.Context) (map[string][]Transition, error) {
	rows, err := s.rd.QueryContext(ctx, `SELECT job_id, from_state, to_state, reason, at FROM job_history ORDER BY seq`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string][]Transition{}
	for rows.Next() {
		var t Transition
		var at int64
		if err := rows.Scan(&t.JobID, &t.From, &t.To, &t.Reason, &at); err != nil {
			return nil, err
		}
		t.At = fromNS(at)
		out[t.JobID] = append(out[t.JobID], t)
	}
	return out, rows.Err()
}

// LaunchDecisions is every job's start and reconfigure decisions,
// oldest first.
func (s *SQLite) LaunchDecisions(ctx context.Context) (map[string][]DecisionRecord, error) {
	rows, err := s.rd.QueryContext(ctx, `SELECT id, job_id, kind, detail, reason, at FROM decisions WHERE kind IN ('start', 'reconfigure') ORDER BY id`)
	if err != nil {
		return nil, err
	}
	out := map[string][]DecisionRecord{}
	err = scanDecisions(rows, func(d DecisionRecord) { out[d.JobID] = append(out[d.JobID], d) })
	return out, err
}

// launches gives each job's state history and launch decisions: read
// at once from a launchStore, else per job.
type launches struct {
	d     *Daemon
	hist  map[string][]Transition
	decs  map[string][]DecisionRecord
	whole bool
}

func (d *Daemon) launches(ctx context.Context) (*launches, error) {
	l := &launches{d: d}
	if ls, ok := d.cfg.Store.(launchStore); ok {
		var err error
		if l.hist, err = ls.AllTransitions(ctx); err != nil {
			return nil, err
		}
		if l.decs, err = ls.LaunchDecisions(ctx); err != nil {
			return nil, err
		}
		l.whole = true
	}
	return l, nil
}

// of is job id's history and decisions.
func (l *launches) of(ctx context.Context, id string) ([]Transition, []DecisionRecord, error) {
	if l.whole {
		return l.hist[id], l.decs[id], nil
	}
	h, err := l.d.cfg.Store.History(ctx, id)
	if err != nil {
		return nil, nil, err
	}
	ds, err := l.d.cfg.Store.Decisions(ctx, id, 1<<20)
	return h, ds, err
}

// History lists the finished, failed and cancelled jobs that f selects
// (those that ended in [f.Since, f.Until)), each with its attempts.
func (d *Daemon) History(ctx context.Context, f ReadFilter) ([]HistoryEntry, error) {
	states := []JobState{StateFinished, StateFailed, StateCancelled}
	for _, s := range f.States {
		if !s.Final() {
			return nil, fmt.Errorf("state: history lists ended jobs, %q is not one (want finished, failed or cancelled): %w", s, ErrBadRequest)
		}
	}
	if len(f.States) > 0 {
		states = f.States
	}
	jobs, err := d.cfg.Store.ListJobs(ctx, JobFilter{States: states})
	if err != nil {
		return nil, err
	}
	owners, err := d.owners(ctx)
	if err != nil {
		return nil, err
	}
	ls, err := d.launches(ctx)
	if err != nil {
		return nil, err
	}
	out := []HistoryEntry{}
	for _, j := range d.enc.redact.records(jobs) {
		if !f.match(j, owners[j.ID]) || (!f.Since.IsZero() && j.FinishedAt.Before(f.Since)) || (!f.Until.IsZero() && !j.FinishedAt.Before(f.Until)) {
			continue
		}
		e := HistoryEntry{Job: j, User: owners[j.ID], JCTS: j.FinishedAt.Sub(j.SubmittedAt).Seconds()}
		h, ds, err := ls.of(ctx, j.ID)
		if err != nil {
			return nil, err
		}
		if !j.StartedAt.IsZero() {
			e.QueueS = j.StartedAt.Sub(j.SubmittedAt).Seconds()
			if len(h) > 0 {
				e.QueueS = waitedInAll(j, h)
			}
		}
		e.JCTS, e.QueueS = max(e.JCTS, 0), max(e.QueueS, 0) // the clock may have stepped back
		e.Attempts = attemptsOf(j, h, ds, d.now())
		if e.Attempts == nil {
			e.Attempts = []Attempt{}
		}
		for i, a := range e.Attempts {
			e.GPUHours += a.GPUHours
			e.Attempts[i].Reason = hideLogLines(a.Reason) // a list: no job's logs (redact.go)
		}
		out = append(out, e)
	}
	return out, nil
}

// Usage is GET /v1/usage: GPU-hours per tenant and user in [Since, Until).
type Usage struct {
	Since time.Time `json:"since,omitzero"` // zero: from the first job
	Until time.Time `json:"until"`          // the daemon's clock when not given
	// GPUHours is the total.
	GPUHours float64 `json:"gpu_hours"`
	// Tenants are the per-tenant totals; Users each (tenant, user)
	// pair's. Both are sorted by GPU-hours, most first.
	Tenants []UsageRow `json:"tenants"`
	Users   []UsageRow `json:"users"`
}

// UsageRow is one tenant's (User empty) or one user's GPU-hours.
type UsageRow struct {
	Tenant   string  `json:"tenant"`
	User     string  `json:"user,omitempty"`
	GPUHours float64 `json:"gpu_hours"`
	// Jobs ran at least one attempt in the range; Attempts counts them.
	Jobs     int `json:"jobs"`
	Attempts int `json:"attempts"`
}

// Usage sums the GPU-hours of every attempt inside [f.Since, f.Until) of
// the jobs f's tenants and users select (f.States is not used).
func (d *Daemon) Usage(ctx context.Context, f ReadFilter) (Usage, error) {
	u := Usage{Since: f.Since, Until: f.Until, Tenants: []UsageRow{}, Users: []UsageRow{}}
	if u.Until.IsZero() {
		u.Until = d.now()
	}
	jobs, err := d.cfg.Store.ListJobs(ctx, JobFilter{})
	if err != nil {
		return u, err
	}
	owners, err := d.owners(ctx)
	if err != nil {
		return u, err
	}
	ls, err := d.launches(ctx)
	if err != nil {
		return u, err
	}
	f.States = nil
	tenants, users := map[string]*UsageRow{}, map[[2]string]*UsageRow{}
	for _, j := range jobs {
		if !f.match(j, owners[j.ID]) || !j.SubmittedAt.Before(u.Until) || (j.State.Final() && !f.Since.IsZero() && j.FinishedAt.Before(f.Since)) {
			continue
		}
		h, ds, err := ls.of(ctx, j.ID)
		if err != nil {
			return u, err
		}
		as := attemptsOf(j, h, ds, u.Until)
		var hours float64
		n := 0
		for _, a := range as {
			start, end := a.Start, a.End
			if end.IsZero() || end.After(u.Until) {
				end = u.Until
			}
			if start.Before(f.Since) {
				start = f.Since
			}
			if !end.After(start) {
				continue
			}
			hours += float64(a.GPUs) * end.Sub(start).Hours()
			n++
		}
		if n == 0 {
			continue
		}
		owner := owners[j.ID]
		t := tenants[j.Tenant]
		if t == nil {
			t = &UsageRow{Tenant: j.Tenant}
			tenants[j.Tenant] = t
		}
		us := users[[2]string{j.Tenant, owner}]
		if us == nil {
			us = &UsageRow{Tenant: j.Tenant, User: owner}
			users[[2]string{j.Tenant, owner}] = us
		}
		for _, r := range []*UsageRow{t, us} {
			r.GPUHours += hours
			r.Jobs++
			r.Attempts += n
		}
		u.GPUHours += hours
	}
	for _, t := range tenants {
		u.Tenants = append(u.Tenants, *t)
	}
	for _, r := range users {
		u.Users = append(u.Users, *r)
	}
	for _, rows := range [][]UsageRow{u.Tenants, u.Users} {
		sort.Slice(rows, func(a, b int) bool {
			if rows[a].GPUHours != rows[b].GPUHours {
				return rows[a].GPUHours > rows[b].GPUHours
			}
			return rows[a].Tenant+"\x00"+rows[a].User < rows[b].Tenant+"\x00"+rows[b].User
		})
	}
	return u, nil
}

// ErrBadRequest marks an error of the request's parameters (400).
var ErrBadRequest = errorString("bad request")

type errorString string

func (e errorString) Error() string { return string(e) }

// filterJobs keeps the jobs f selects.
func filterJobs(ctx context.Context, st storeReads, jobs []JobRecord, f ReadFilter) ([]JobRecord, error) {
	owners, err := ownersIn(ctx, st)
	if err != nil {
		return nil, err
	}
	out := []JobRecord{}
	for _, j := range jobs {
		if f.match(j, owners[j.ID]) {
			out = append(out, j)
		}
	}
	return out, nil
}

// filteredQueue is GET /v1/queue with a filter: the published view's
// queue, the entries f selects, computed for this request.
func (a *API) filteredQueue(w http.ResponseWriter, r *http.Request) {
	f, err := parseReadFilter(r.URL.Query())
	if err != nil {
		writeErr(w, http.StatusBadRequest, err)
		return
	}
	var owners map[string]string
	if len(f.Users) > 0 {
		if owners, err = a.D.owners(r.Context()); err != nil {
			writeErr(w, statusOf(err), err)
			return
		}
	}
	out := []QueueEntry{}
	for _, e := range a.D.Queue() {
		if f.match(e.Job, owners[e.Job.ID]) {
			e.Job = a.D.enc.redact.records([]JobRecord{e.Job})[0]
			out = append(out, e)
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// filteredEvents is the events after id after that f selects, oldest
// first, at most limit, and the id of the last event looked at (the next
// call's after). An event matches a user who caused it or owns its job;
// a tenant or state, that of its job (now): events of no job match no
// tenant or state.
func (d *Daemon) filteredEvents(ctx context.Context, after int64, limit int, f ReadFilter) ([]Event, int64, error) {
	return filteredEvents(ctx, d.cfg.Store, after, limit, f)
}

// filteredEvents is Daemon.filteredEvents on st: the daemon's store, or a
// follower's view of it (followview.go).
func filteredEvents(ctx context.Context, st storeReads, after int64, limit int, f ReadFilter) ([]Event, int64, error) {
	if !f.byJob() {
		evs, err := st.Events(ctx, after, limit)
		if len(evs) > 0 {
			after = evs[len(evs)-1].ID
		}
		return evs, after, err
	}
	owners, err := ownersIn(ctx, st)
	if err != nil {
		return nil, after, err
	}
	jobs := map[string]*JobRecord{}
	jobOf := func(id string) (*JobRecord, error) {
		if j, ok := jobs[id]; ok {
			return j, nil
		}
		j, err := st.GetJob(ctx, id)
		if errors.Is(err, ErrNotFound) {
			jobs[id] = nil
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		jobs[id] = &j
		return &j, nil
	}
	var out []Event
	for len(out) < limit {
		page, err := st.Events(ctx, after, 1000)
		if err != nil {
			return nil, after, err
		}
		for _, e := range page {
			after = e.ID
			ok := len(f.Users) == 0 || slices.Contains(f.Users, e.User)
			if e.JobID != "" {
				j, err := jobOf(e.JobID)
				if err != nil {
					return nil, after, err
				}
				if j != nil {
					ok = (len(f.Users) == 0 || slices.Contains(f.Users, e.User) || slices.Contains(f.Users, owners[j.ID])) &&
						(len(f.States) == 0 || slices.Contains(f.States, j.State)) &&
						(len(f.Tenants) == 0 || slices.Contains(f.Tenants, j.Tenant))
				} else {
					ok = ok && len(f.States)+len(f.Tenants) == 0
				}
			} else {
				ok = ok && len(f.States)+len(f.Tenants) == 0
			}
			if ok {
				out = append(out, e)
				if len(out) == limit {
					return out, after, nil
				}
			}
		}
		if len(page) < 1000 {
			break
		}
	}
	return out, after, nil
}

// usage is GET /v1/usage.
func (a *API) usage(w http.ResponseWriter, r *http.Request) {
	f, err := parseReadFilter(r.URL.Query())
	if err != nil {
		writeErr(w, http.StatusBadRequest, err)
		return
	}
	if len(f.States) > 0 {
		writeErr(w, http.StatusBadRequest, errors.New("state: usage counts every attempt in the range; filter by tenant, user, since and until"))
		return
	}
	u, err := a.D.Usage(r.Context(), f)
	if err != nil {
		writeErr(w, statusOf(err), err)
		return
	}
	writeJSON(w, http.StatusOK, u)
}
