package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/replan/replan/jobspec"
	"github.com/replan/replan/launch"
	"github.com/replan/replan/perf"
)

// MaxSpecBytes bounds a submitted job spec.
const MaxSpecBytes = 1 << 20

// SubmitRequest is the body of POST /v1/jobs.
type SubmitRequest struct {
	File string `json:"file"` // the spec's file name, for error messages
	Spec string `json:"spec"` // the YAML text
}

// APIError is every error body: a message and, for bad input, the problems
// with file, line and field.
type APIError struct {
	Error    string        `json:"error"`
	Problems []ProblemJSON `json:"problems,omitempty"`
}

// ProblemJSON is one problem of a rejected spec.
type ProblemJSON struct {
	File  string `json:"file"`
	Line  int    `json:"line"`
	Field string `json:"field,omitempty"`
	Msg   string `json:"message"`
}

// JobDetail is GET /v1/jobs/{id}.
type JobDetail struct {
	Job        JobRecord  `json:"job"`
	Throughput Throughput `json:"throughput"`
	// Checkpointing is how often the job checkpoints while it runs.
	Checkpointing *CheckpointInfo  `json:"checkpointing,omitempty"`
	History       []Transition     `json:"history"`
	Decisions     []DecisionRecord `json:"decisions"`

	// Memory is a running job's measured peak and estimated GPU memory
	// (mempeak.go).
	Memory *JobMemory `json:"memory,omitempty"`
}

// HistoryEntry is a finished job, like sacct's line.
type HistoryEntry struct {
	Job    JobRecord `json:"job"`
	JCTS   float64   `json:"jct_s"`   // submission to end
	QueueS float64   `json:"queue_s"` // time it waited between submission and its end (every wait, not only the first)
	// User submitted the job ("" when not recorded); Attempts are its
	// launches, like sacct's lines (accounting.go); GPUHours their sum.
	User     string    `json:"user,omitempty"`
	Attempts []Attempt `json:"attempts"`
	GPUHours float64   `json:"gpu_hours"`
}

// Status is GET /v1/status.
type Status struct {
	Version   string     `json:"version"`
	Policy    string     `json:"policy"`
	Servers   int        `json:"servers"`
	GPUs      int        `json:"gpus"`
	FreeGPUs  int        `json:"free_gpus"`
	Jobs      int        `json:"jobs"`
	LastRound RoundStats `json:"last_round"`
	// Now is the daemon's clock when it answered (the demo's runs
	// faster than real time): clients count down from the data's as_of.
	// UnusableGPUs are on drained or unreachable servers (not free).
	Now          time.Time `json:"now"`
	UnusableGPUs int       `json:"unusable_gpus"`
	// Role is "leader" or "follower"; Leader the leader's address,
	// Members every daemon's (the leader first) and Epoch the leader's
	// epoch (its election revision on etcd; ha.go). A single daemon is
	// the leader, its only member.
	Role    string   `json:"role"`
	Leader  string   `json:"leader"`
	Members []string `json:"members"`
	Epoch   uint64   `json:"epoch"`
	// Election says why there is no leader, or why the view is
	// incomplete (etcd unreachable, no quorum); empty when all is well.
	Election string `json:"election,omitempty"`
}

// API serves the daemon over HTTP/JSON.
type API struct {
	D       *Daemon
	Version string
	// Token, when set, is required as "Authorization: Bearer TOKEN" on
	// every request (the TCP listener; the unix socket is protected by its
	// mode 0600).
	Token string
	// Access is who may do what (auth.go) and the tenants' CPU and memory
	// quotas admission checks; nil: single-user, GPU quotas only.
	Access *Access
	// Self is this daemon's address in Status (its --advertise, --listen
	// or socket); HA, when set, tells the leader, members and epoch of a
	// highly available control plane (ha.go).
	Self string
	HA   HAReporter
	reg  *prometheus.Registry
}

// Handler returns the API's routes.
func (a *API) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/status", a.status)
	mux.HandleFunc("POST /v1/jobs", a.submit)
	mux.HandleFunc("GET /v1/jobs", a.jobs)
	mux.HandleFunc("GET /v1/jobs/{id}", a.job)
	mux.HandleFunc("GET /v1/jobs/{id}/logs", a.logs)
	mux.HandleFunc("GET /v1/jobs/{id}/curve", func(w http.ResponseWriter, r *http.Request) {
		n := 64
		if s := r.URL.Query().Get("gpus"); s != "" {
			v, err := strconv.Atoi(s)
			if err != nil || v < 1 {
				writeErr(w, http.StatusBadRequest, fmt.Errorf("gpus: want a positive integer, got %q", s))
				return
			}
			n = v
		}
		pts, err := a.D.Curve(r.Context(), r.PathValue("id"), n)
		if err != nil {
			writeErr(w, statusOf(err), err)
			return
		}
		writeJSON(w, http.StatusOK, pts)
	})
	mux.HandleFunc("POST /v1/jobs/{id}/{op}", a.jobOp)
	mux.HandleFunc("GET /v1/queue", a.queue)
	mux.HandleFunc("GET /v1/models", a.models)              // models.go
	mux.HandleFunc("POST /v1/models/import", a.importModel) // models.go
	mux.HandleFunc("POST /v1/profile", a.profile)           // models.go
	mux.HandleFunc("GET /v1/nodes", a.nodes)
	mux.HandleFunc("POST /v1/nodes/{name}/{op}", a.nodeOp)
	mux.HandleFunc("POST /v1/nodes/{name}/gpus/{gpu}/uncordon", a.uncordon) // health.go
	mux.HandleFunc("GET /v1/history", a.history)
	mux.HandleFunc("GET /v1/usage", a.usage)
	mux.HandleFunc("GET /v1/running", func(w http.ResponseWriter, r *http.Request) {
		run := slices.Clone(a.D.Running()) // the view's own: not changed
		if run == nil {
			run = []RunningJob{}
		}
		for i := range run {
			run[i].Job.Spec = a.D.enc.redact.spec(run[i].Job.ID, run[i].Job.Spec)
			hideRecordLogs(&run[i].Job)
		}
		writeJSON(w, http.StatusOK, run)
	})
	mux.HandleFunc("GET /v1/links", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, http.StatusOK, a.D.Links()) })
	mux.HandleFunc("GET /v1/events", a.events)
	a.reg = prometheus.NewRegistry()
	a.reg.MustRegister(&collector{d: a.D})
	mux.Handle("GET /metrics", promhttp.HandlerFor(a.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /v1/whoami", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, a.Access.whoami(callerOf(r.Context())))
	})
	return a.authorize(mux)
}

// MetricsHandler serves /metrics alone, without authentication (the
// --metrics-listen listener): the metrics carry no secrets.
func (a *API) MetricsHandler() http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(&collector{d: a.D})
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	return mux
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

func writeErr(w http.ResponseWriter, code int, err error) {
	writeJSON(w, code, APIError{Error: err.Error()})
}

func statusOf(err error) int {
	var fb *Forbidden
	switch {
	case errors.As(err, &fb):
		return http.StatusForbidden
	case errors.Is(err, ErrUnauthenticated):
		return http.StatusUnauthorized
	case errors.Is(err, ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, ErrBadRequest):
		return http.StatusBadRequest
	case errors.Is(err, ErrBadState), errors.Is(err, ErrConflict):
		return http.StatusConflict
	case errors.Is(err, ErrStore):
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

func (a *API) status(w http.ResponseWriter, r *http.Request) {
	st := Status{Version: a.Version, Policy: a.D.cfg.Policy.Name(), LastRound: a.D.LastRound()}
	for _, n := range a.D.Nodes() {
		st.Servers++
		st.GPUs += n.GPUs
		if n.Drained || !n.Reachable {
			st.UnusableGPUs += n.FreeGPUs // drained GPUs are not free
			continue
		}
		st.FreeGPUs += n.FreeGPUs
	}
	st.Now = a.D.now()
	st.Jobs = len(a.D.jobsSnapshot())
	a.fillRole(r.Context(), &st) // ha.go
	writeJSON(w, http.StatusOK, st)
}

func (a *API) submit(w http.ResponseWriter, r *http.Request) {
	var req SubmitRequest
	dec := json.NewDecoder(io.LimitReader(r.Body, MaxSpecBytes+4096))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		writeErr(w, http.StatusBadRequest, fmt.Errorf("request body: want {\"file\": ..., \"spec\": ...}: %v", err))
		return
	}
	if len(req.Spec) > MaxSpecBytes {
		writeErr(w, http.StatusRequestEntityTooLarge, fmt.Errorf("spec: larger than %d bytes", MaxSpecBytes))
		return
	}
	if req.File == "" {
		req.File = "job.yaml"
	}
	key := r.Header.Get("Idempotency-Key")
	if why := validIdempotencyKey(key); why != "" {
		writeErr(w, http.StatusBadRequest, fmt.Errorf("header Idempotency-Key: %s", why))
		return
	}
	if key != "" {
		key = callerOf(r.Context()).User + "/" + key // a key is the caller's own
	}
	if rec, ok, err := a.replay(r.Context(), key, req.Spec); err != nil || ok {
		a.replayed(w, rec, err)
		return
	}
	// Authorization first: the spec's tenant is read as soon as the YAML
	// is decoded, and a caller who may not submit under it is refused
	// before the spec is validated.
	caller := callerOf(r.Context())
	spec, err := jobspec.ParseAuthorized(req.File, []byte(req.Spec), perf.NewCatalog(), func(tenant string) error {
		return a.Access.canSubmit(caller, tenant)
	})
	if forbidden := (*Forbidden)(nil); errors.As(err, &forbidden) {
		writeErr(w, http.StatusForbidden, err)
		return
	}
	if err == nil {
		if err := a.Access.canSubmit(caller, spec.Tenant); err != nil {
			writeErr(w, http.StatusForbidden, err)
			return
		}
		err = a.D.Admit(r.Context(), spec, a.Access)
	}
	if err == nil && spec.Framework == jobspec.Megatron {
		// A Megatron job's args that contradict its model type (or give
		// flags replan renders) are refused at submit, naming the flag.
		if aerr := launch.CheckMegatronArgs(spec.Arch, spec.Args); aerr != nil {
			writeErr(w, http.StatusBadRequest, fmt.Errorf("%s: %w", req.File, aerr))
			return
		}
	}
	if err != nil {
		writeBadSpec(w, err)
		return
	}
	ctx := r.Context()
	if key != "" {
		ctx = withIdempotencyKey(ctx, key, req.Spec, a.D.idemExpired())
	}
	rec, err := a.D.Submit(ctx, spec)
	if err != nil && key != "" && errors.Is(err, ErrExists) {
		// A concurrent submission with the same key won: its job.
		rec, ok, err := a.replay(r.Context(), key, req.Spec)
		if err == nil && !ok {
			err = errors.New("idempotency key stored without its job")
		}
		a.replayed(w, rec, err)
		return
	}
	if err != nil {
		writeErr(w, statusOf(err), err)
		return
	}
	a.D.Kick()
	writeJSON(w, http.StatusCreated, rec)
}

// writeBadSpec answers 400 with every problem of a refused spec (a parse
// error or an admission refusal), each with file, line and field.
func writeBadSpec(w http.ResponseWriter, err error) {
	body := APIError{Error: err.Error()}
	var probs []error
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		probs = j.Unwrap()
	}
	for _, p := range probs {
		var pj ProblemJSON
		b, _ := json.Marshal(p)
		json.Unmarshal(b, &pj)
		if pj.Msg == "" {
			pj.Msg = p.Error()
		}
		body.Problems = append(body.Problems, pj)
	}
	writeJSON(w, http.StatusBadRequest, body)
}

// replayed answers a retried submission: the job the first one created
// (200, Idempotent-Replayed: true), or why not.
func (a *API) replayed(w http.ResponseWriter, rec JobRecord, err error) {
	switch {
	case errors.Is(err, ErrIdempotencyReuse):
		writeErr(w, http.StatusUnprocessableEntity, err)
	case err != nil:
		writeErr(w, statusOf(err), err)
	default:
		w.Header().Set("Idempotent-Replayed", "true")
		writeJSON(w, http.StatusOK, rec)
	}
}

func (a *API) jobs(w http.ResponseWriter, r *http.Request) {
	rf, err := parseReadFilter(r.URL.Query())
	if err != nil {
		writeErr(w, http.StatusBadRequest, err)
		return
	}
	f := JobFilter{States: rf.States}
	if len(rf.Tenants) == 1 {
		f.Tenant = rf.Tenants[0]
	}
	if viewJobFilter(f) && len(rf.Users) == 0 && len(rf.Tenants) <= 1 {
		// Live states only: the published view's encoding (readcache.go).
		body, at, err := a.D.jobsJSON(f)
		writeEncoded(w, body, at, err)
		return
	}
	jobs, err := listJobs(r.Context(), a.D.cfg.Store, rf, &a.D.enc.redact, a.D)
	if err != nil {
		writeErr(w, statusOf(err), err)
		return
	}
	writeJSON(w, http.StatusOK, jobs)
}

// storeReads is what the API's reads of stored records use: the daemon's
// Store, or a follower's view of it (followview.go), which answers the
// same reads with the same code.
type storeReads interface {
	GetJob(ctx context.Context, id string) (JobRecord, error)
	ListJobs(ctx context.Context, f JobFilter) ([]JobRecord, error)
	History(ctx context.Context, jobID string) ([]Transition, error)
	Decisions(ctx context.Context, jobID string, limit int) ([]DecisionRecord, error)
	Events(ctx context.Context, after int64, limit int) ([]Event, error)
}

// listJobs is GET /v1/jobs read from st: the records rf selects, env
// values hidden (a list carries env keys only: redact.go). live, when set
// (the leader's daemon), gives running jobs their progress as last
// observed; without it (a follower's view) they carry it as last stored.
func listJobs(ctx context.Context, st storeReads, rf ReadFilter, red *redactor, live *Daemon) ([]JobRecord, error) {
	f := JobFilter{States: rf.States}
	if len(rf.Tenants) == 1 {
		f.Tenant = rf.Tenants[0]
	}
	jobs, err := st.ListJobs(ctx, f)
	if err != nil {
		return nil, err
	}
	if len(rf.Users) > 0 || len(rf.Tenants) > 1 {
		if jobs, err = filterJobs(ctx, st, jobs, rf); err != nil {
			return nil, err
		}
	}
	jobs = red.records(jobs) // a copy
	for i := range jobs {
		if live == nil {
			break
		}
		if it, ck, ok := live.liveProgress(jobs[i].ID); ok && jobs[i].State == StateRunning {
			jobs[i].Iterations, jobs[i].Checkpoint = max(it, jobs[i].Iterations), max(ck, jobs[i].Checkpoint)
		}
	}
	if jobs == nil {
		jobs = []JobRecord{}
	}
	return jobs, nil
}

func (a *API) job(w http.ResponseWriter, r *http.Request) {
	jd, err := jobDetail(r.Context(), a.D.cfg.Store, a.Access, a.D, r.PathValue("id"))
	if err != nil {
		writeErr(w, statusOf(err), err)
		return
	}
	writeJSON(w, http.StatusOK, jd)
}

// jobDetail is GET /v1/jobs/{id} read from st: the job as stored (env
// values hidden unless the caller may see them: its owner, its tenant's
// admins, the admins), its history and its decisions. live, when set (the
// leader's daemon), adds what only its memory holds: a running job's
// throughput, its checkpointing and its progress as last observed; a
// follower's view (live nil) leaves them zero.
func jobDetail(ctx context.Context, st storeReads, acc *Access, live *Daemon, id string) (JobDetail, error) {
	j, err := st.GetJob(ctx, id)
	if err != nil {
		return JobDetail{}, err
	}
	mine := jobRuleIn(ctx, acc, st, "see the env values of", j) == nil
	if !mine {
		// Not its owner, its tenant's admin or an admin (or the owner
		// could not be read): the env's keys only, no log lines.
		j.Spec = redactSpec(j.Spec)
		hideRecordLogs(&j)
	}
	var jd JobDetail
	if live != nil {
		if it, ck, ok := live.liveProgress(id); ok && j.State == StateRunning {
			j.Iterations, j.Checkpoint = max(it, j.Iterations), max(ck, j.Checkpoint)
		}
		jd.Throughput = live.JobThroughput(id)
		if c, ok := live.JobCheckpointing(id); ok {
			jd.Checkpointing = &c
		}
		if m, ok := live.JobMemory(id); ok && j.State == StateRunning {
			jd.Memory = &m
		}
	}
	jd.Job = j
	jd.History, _ = st.History(ctx, id)
	for i := range jd.History {
		if !mine {
			jd.History[i].Reason = hideLogLines(jd.History[i].Reason)
		}
	}
	jd.Decisions, _ = st.Decisions(ctx, id, 100)
	return jd, nil
}

func (a *API) jobOp(w http.ResponseWriter, r *http.Request) {
	id, op := r.PathValue("id"), r.PathValue("op")
	var rec JobRecord
	var err error
	if op == "cancel" || op == "hold" || op == "release" {
		if err := a.checkJobOp(r.Context(), op, id); err != nil {
			writeErr(w, statusOf(err), err)
			return
		}
	}
	switch op {
	case "cancel":
		rec, err = a.D.Cancel(r.Context(), id)
	case "hold":
		rec, err = a.D.Hold(r.Context(), id)
	case "release":
		rec, err = a.D.Release(r.Context(), id)
	default:
		writeErr(w, http.StatusNotFound, fmt.Errorf("unknown operation %q (want cancel, hold or release)", op))
		return
	}
	if err != nil {
		writeErr(w, statusOf(err), err)
		return
	}
	a.D.Kick()
	writeJSON(w, http.StatusOK, rec)
}

func (a *API) queue(w http.ResponseWriter, r *http.Request) {
	if len(r.URL.Query()) > 0 {
		a.filteredQueue(w, r) // accounting.go
		return
	}
	body, at, err := a.D.queueJSON()
	writeEncoded(w, body, at, err)
}

// AsOfHeader is the response header of an encoded read (GET /v1/queue,
// GET /v1/jobs of live states): the daemon's clock when the view it was
// encoded from was taken (RFC 3339).
const AsOfHeader = "X-Replan-As-Of"

// writeEncoded answers with a body encoded ahead (readcache.go).
func writeEncoded(w http.ResponseWriter, body []byte, at time.Time, err error) {
	if err != nil {
		writeErr(w, http.StatusInternalServerError, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.Header().Set(AsOfHeader, at.UTC().Format(time.RFC3339Nano))
	w.WriteHeader(http.StatusOK)
	w.Write(body)
}

func (a *API) nodes(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, a.D.Nodes())
}

func (a *API) nodeOp(w http.ResponseWriter, r *http.Request) {
	name, op := r.PathValue("name"), r.PathValue("op")
	if err := a.Access.canAdmin(callerOf(r.Context()), op+" "+name); err != nil {
		writeErr(w, http.StatusForbidden, err)
		return
	}
	switch op {
	case "drain":
		req, err := drainRequest(r) // drain.go
		if err != nil {
			writeErr(w, http.StatusBadRequest, err)
			return
		}
		moved, err := a.D.DrainWith(r.Context(), name, req)
		if err != nil && moved == nil {
			writeErr(w, statusOf(err), err)
			return
		}
		if moved == nil {
			moved = []string{}
		}
		a.D.Kick()
		writeJSON(w, http.StatusOK, map[string]any{"server": name, "moved": moved})
	case "undrain":
		if err := a.D.Undrain(r.Context(), name); err != nil {
			writeErr(w, statusOf(err), err)
			return
		}
		a.D.Kick()
		writeJSON(w, http.StatusOK, map[string]any{"server": name})
	default:
		writeErr(w, http.StatusNotFound, fmt.Errorf("unknown operation %q (want drain or undrain)", op))
	}
}

func (a *API) history(w http.ResponseWriter, r *http.Request) {
	f, err := parseReadFilter(r.URL.Query())
	if err != nil {
		writeErr(w, http.StatusBadRequest, err)
		return
	}
	out, err := a.D.History(r.Context(), f)
	if err != nil {
		writeErr(w, statusOf(err), err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// events returns events after ?after=N; with ?wait=DURATION it waits up to
// that long for the first one (long polling: the event stream of the TUI
// and `replan events -f`).
func (a *API) events(w http.ResponseWriter, r *http.Request) {
	after, _ := strconv.ParseInt(r.URL.Query().Get("after"), 10, 64)
	wait, _ := time.ParseDuration(r.URL.Query().Get("wait"))
	wait = min(wait, 60*time.Second)
	f, err := parseReadFilter(r.URL.Query())
	if err != nil {
		writeErr(w, http.StatusBadRequest, err)
		return
	}
	deadline := time.Now().Add(wait)
	for {
		evs, scanned, err := a.D.filteredEvents(r.Context(), after, 1000, f) // accounting.go
		after = scanned
		if err != nil {
			writeErr(w, statusOf(err), err)
			return
		}
		evs = eventsFor(r.Context(), a.Access, a.D.cfg.Store, evs) // redact.go
		if len(evs) > 0 || time.Now().After(deadline) {
			if evs == nil {
				evs = []Event{}
			}
			writeJSON(w, http.StatusOK, evs)
			return
		}
		select {
		case <-r.Context().Done():
			return
		case <-a.D.changed():
		case <-time.After(time.Until(deadline)):
		}
	}
}

// ListenUnix listens on a unix socket readable and writable by the owner
// only; a stale socket from a dead daemon is replaced.
func ListenUnix(path string) (net.Listener, error) { return listenUnix(path, 0o600) }

// ListenUnixShared is ListenUnix for a multi-user daemon: the socket is
// open to every local user (mode 0666; its directory must let them reach
// it), and the API authorizes each request by the caller's peer
// credentials.
func ListenUnixShared(path string) (net.Listener, error) { return listenUnix(path, 0o666) }

func listenUnix(path string, mode os.FileMode) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	if err := RefuseNonSocket(path); err != nil {
		return nil, err
	}
	if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
		c.Close()
		return nil, fmt.Errorf("listen %s: a daemon is already answering there", path)
	}
	os.Remove(path)
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(path, mode); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}
