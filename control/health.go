package control

// GPU health: each GPU is ok or cordoned with a cause. A GPU is cordoned
// when its agent reports an Xid that means reset or replace (cordonXids),
// a double-bit ECC error, pages retired or rows remapped that wait for a
// reset, a failed row remapping, or GPUReadFailures failed reads in a row.
// A cordoned GPU gets no new work (the scheduler's snapshot and the
// device picker leave it out; the server's other GPUs still serve), and
// the jobs on it are checkpointed, stopped and requeued without counting
// against their restart budgets. A cordon is stored (table gpu_health)
// and lasts until an admin's `replan uncordon SERVER:GPU`.

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/replan/replan/agent"
)

// cordonXids are the Xid codes that cordon a GPU: those NVIDIA's Xid
// catalogue resolves with a GPU reset, a node reboot or a replacement
// (not the application errors such as 13, 31, 43 or 45, which a job's
// restart clears), with what each means.
var cordonXids = map[uint64]string{
	48:  "double-bit ECC error",                                  // DBE: the memory holds corrupt data; reset
	62:  "internal micro-controller halt",                        // the GPU's firmware stopped; reset
	64:  "ECC page retirement or row remapper recording failure", // the fault could not be recorded; replace
	74:  "NVLink error",                                          // a link is down or degraded; reset, check the link
	79:  "GPU has fallen off the bus",                            // the GPU no longer answers on PCIe; reset or reboot
	92:  "high single-bit ECC error rate",                        // memory degrading; reset, then watch
	94:  "contained ECC error",                                   // a job hit corrupt memory; reset to remap it
	95:  "uncontained ECC error",                                 // corrupt memory reached other work; reset
	119: "GSP RPC timeout",                                       // the GPU System Processor stopped answering; reset
	120: "GSP error",                                             // the GPU System Processor failed; reset
	140: "unrecovered ECC error",                                 // memory error not corrected; reset
}

// DefaultGPUReadFailures is how many observations in a row a GPU's reads
// may fail before it is cordoned.
const DefaultGPUReadFailures = 3

// GPUHealthRecord is a GPU's stored health.
type GPUHealthRecord struct {
	Server   string    `json:"server"`
	GPU      int       `json:"gpu"`
	Cordoned bool      `json:"cordoned"`
	Cause    string    `json:"cause"` // xid-79, ecc-dbe, retired-pages, row-remap-pending, row-remap-failed, read-errors
	Why      string    `json:"why"`
	At       time.Time `json:"at"`
	// Seen is the newest critical event (Xid, ECC) acted on: older ones
	// the agent still reports cordon no more (after an uncordon, after a
	// restart of the daemon).
	Seen time.Time `json:"seen"`
}

// GPUCordon is a cordoned GPU in a node's view.
type GPUCordon struct {
	GPU   int       `json:"gpu"`
	Cause string    `json:"cause"`
	Why   string    `json:"why"`
	At    time.Time `json:"at"`
}

// gpuHealth is a GPU's health in memory.
type gpuHealth struct {
	rec       GPUHealthRecord
	readFails int // observations in a row whose reads of it failed
	// exitJob exited non-zero on this GPU at exitAt, charged: a cordon
	// within CordonRefundWindow gives the failure back (the GPU, not the
	// job, failed; the agent may report the Xid an observation after the
	// exit).
	exitJob string
	exitAt  time.Time
}

// CordonRefundWindow is how long after a job's non-zero exit on a GPU a
// cordon of that GPU still gives the failure back.
const CordonRefundWindow = 2 * time.Minute

// noteExit remembers that js exited non-zero on its GPUs now (its
// failure charged); the caller holds d.mu and calls it before the
// requeue frees the devices.
func (d *Daemon) noteExit(js *jobState) {
	for _, s := range js.servers {
		i, ok := d.srvIdx[s.Name]
		if !ok {
			continue
		}
		for _, g := range s.GPUs {
			if g >= 0 && g < len(d.owner[i].gpu) {
				h := d.healthOf(i, g)
				h.exitJob, h.exitAt = js.rec.ID, d.now()
			}
		}
	}
}

// healthOf is GPU g of server i's health (created ok); the caller holds
// d.mu.
func (d *Daemon) healthOf(i, g int) *gpuHealth {
	if d.gpuHealth == nil {
		d.gpuHealth = map[int]map[int]*gpuHealth{}
	}
	m := d.gpuHealth[i]
	if m == nil {
		m = map[int]*gpuHealth{}
		d.gpuHealth[i] = m
	}
	h := m[g]
	if h == nil {
		h = &gpuHealth{rec: GPUHealthRecord{Server: d.cfg.Servers[i].Name, GPU: g}}
		m[g] = h
	}
	return h
}

// cordoned reports whether GPU g of server i is cordoned; the caller
// holds d.mu.
func (d *Daemon) cordoned(i, g int) bool {
	h := d.gpuHealth[i][g]
	return h != nil && h.rec.Cordoned
}

// cordonedFree counts server i's cordoned GPUs no job holds: the
// scheduler's view of the server leaves them out. The caller holds d.mu.
func (d *Daemon) cordonedFree(i int) int {
	n := 0
	for g, h := range d.gpuHealth[i] {
		if h.rec.Cordoned && g < len(d.owner[i].gpu) && d.owner[i].gpu[g] == "" {
			n++
		}
	}
	return n
}

// healthyServers is the inventory's servers, each with its GPUs less
// its cordoned ones (what admission counts in service); the caller holds
// d.mu.
func (d *Daemon) healthyServers() []ServerInfo {
	out := append([]ServerInfo(nil), d.cfg.Servers...)
	for i := range out {
		for _, h := range d.gpuHealth[i] {
			if h.rec.Cordoned {
				out[i].GPUs = max(out[i].GPUs-1, 0)
			}
		}
	}
	return out
}

// cordonedCount is how many GPUs are cordoned; the caller holds d.mu.
func (d *Daemon) cordonedCount() int {
	n := 0
	for _, m := range d.gpuHealth {
		for _, h := range m {
			if h.rec.Cordoned {
				n++
			}
		}
	}
	return n
}

// cordonsOf lists server i's cordoned GPUs by index; the caller holds
// d.mu.
func (d *Daemon) cordonsOf(i int) []GPUCordon {
	var out []GPUCordon
	for g, h := range d.gpuHealth[i] {
		if h.rec.Cordoned {
			out = append(out, GPUCordon{GPU: g, Cause: h.rec.Cause, Why: h.rec.Why, At: h.rec.At})
		}
	}
	sort.Slice(out, func(a, b int) bool { return out[a].GPU < out[b].GPU })
	return out
}

// recoverHealth loads the stored cordons; the caller is New.
func (d *Daemon) recoverHealth(ctx context.Context) error {
	recs, err := d.cfg.Store.GPUHealth(ctx)
	if err != nil {
		return fmt.Errorf("recover GPU health: %w", err)
	}
	for _, r := range recs {
		if i, ok := d.srvIdx[r.Server]; ok {
			d.healthOf(i, r.GPU).rec = r
		}
	}
	return nil
}

// gpuFault is why a GPU of an observation is to be cordoned.
type gpuFault struct {
	gpu          int
	cause, why   string
	seen         time.Time // newest critical event, when one caused it
	hasCriticals bool
}

// criticalEvent says whether an agent's health event cordons a GPU, with
// its cause and words.
func criticalEvent(h agent.HealthEvent) (cause, why string, ok bool) {
	switch h.Kind {
	case agent.HealthECCDBE:
		return "ecc-dbe", "double-bit ECC error", true
	case agent.HealthXid:
		if what, bad := cordonXids[h.Xid]; bad {
			return fmt.Sprintf("xid-%d", h.Xid), fmt.Sprintf("Xid %d (%s)", h.Xid, what), true
		}
	}
	return "", "", false
}

// assessGPUs finds server i's GPUs to cordon from an observation's GPU
// figures and updates each GPU's read failures and newest critical event
// seen; the caller holds d.mu.
func (d *Daemon) assessGPUs(i int, gpus []GPUStat) []gpuFault {
	var out []gpuFault
	for _, st := range gpus {
		if st.Index < 0 || st.Index >= len(d.owner[i].gpu) {
			continue
		}
		h := d.healthOf(i, st.Index)
		if st.ReadError != "" {
			h.readFails++
		} else {
			h.readFails = 0
		}
		var f *gpuFault
		newest := h.rec.Seen
		for _, ev := range st.critical {
			if !ev.Time.After(h.rec.Seen) {
				continue // acted on, or older than an uncordon
			}
			if ev.Time.After(newest) {
				newest = ev.Time
			}
			if cause, why, ok := criticalEvent(ev); ok && f == nil {
				f = &gpuFault{gpu: st.Index, cause: cause, why: why}
			}
		}
		if f == nil {
			switch {
			case st.RowRemapFailed:
				f = &gpuFault{gpu: st.Index, cause: "row-remap-failed", why: "row remapping failed (replace the GPU)"}
			case st.RowRemapPending:
				f = &gpuFault{gpu: st.Index, cause: "row-remap-pending", why: "row remapping pending (reset the GPU)"}
			case st.RetiredPagesPending:
				f = &gpuFault{gpu: st.Index, cause: "retired-pages", why: "retired pages pending (reset the GPU)"}
			case h.readFails >= d.cfg.GPUReadFailures:
				f = &gpuFault{gpu: st.Index, cause: "read-errors", why: fmt.Sprintf("%d reads in a row failed: %s", h.readFails, st.ReadError)}
			}
		}
		if newest.After(h.rec.Seen) {
			if f != nil {
				f.seen, f.hasCriticals = newest, true
			}
			if h.rec.Cordoned || f == nil {
				h.rec.Seen = newest // nothing to store: stored with the next cordon or uncordon
			}
		}
		if f != nil && !h.rec.Cordoned {
			out = append(out, *f)
		}
	}
	return out
}

// cordonGPUs cordons the faulty GPUs of server i found in an observation
// and requeues the jobs on them (not counted against their restart
// budgets), stored in one transaction with an event per GPU. It returns
// the jobs to checkpoint and stop (their devices stay held until then).
// The caller holds d.mu.
func (d *Daemon) cordonGPUs(ctx context.Context, i int, gpus []GPUStat) ([]*jobState, error) {
	if len(gpus) == 0 {
		return nil, nil
	}
	faults := d.assessGPUs(i, gpus)
	if len(faults) == 0 {
		return nil, nil
	}
	name := d.cfg.Servers[i].Name
	now := d.now()
	var b Batch
	var cordonEvs []Event // first, one per GPU; then the requeues
	var ups []jobUpdate
	var moved []*jobState
	var finals []bool
	taken := map[string]bool{}
	// Failures charged for exits on these GPUs just before: given back.
	refund := map[string]int{}
	var refunded []*gpuHealth
	for _, f := range faults {
		h := d.healthOf(i, f.gpu)
		if h.exitJob != "" && now.Sub(h.exitAt) <= CordonRefundWindow {
			if js := d.jobs[h.exitJob]; js != nil && js.rec.Failures > 0 {
				refund[h.exitJob] = 1 // one exit, however many of its GPUs fail
			}
			refunded = append(refunded, h)
		}
	}
	recs := make([]GPUHealthRecord, len(faults))
	for k, f := range faults {
		h := d.healthOf(i, f.gpu)
		r := h.rec
		r.Cordoned, r.Cause, r.Why, r.At = true, f.cause, f.why, now
		if f.hasCriticals {
			r.Seen = f.seen
		}
		recs[k] = r
		ids := []string{}
		if id := d.owner[i].gpu[f.gpu]; id != "" {
			if js := d.jobs[id]; js != nil && !taken[id] {
				taken[id] = true
				ids = append(ids, id)
				if js.rec.State == StateRunning && !js.stopping {
					ck := max(js.rec.Checkpoint, js.ckpt)
					up, e, final := d.requeueChange(js, fmt.Sprintf("GPU %d of %s cordoned (%s); back to the queue from checkpoint %d", f.gpu, name, f.why, ck), false)
					up.rec.Failures = max(up.rec.Failures-refund[id], 0)
					delete(refund, id)
					ups = append(ups, up)
					b.Events = append(b.Events, e)
					moved = append(moved, js)
					finals = append(finals, final)
				}
			}
		}
		msg := fmt.Sprintf("%s GPU %d cordoned: %s", name, f.gpu, f.why)
		if len(ids) > 0 {
			msg += fmt.Sprintf("; moving %s (checkpoint, stop, requeue)", strings.Join(ids, ", "))
		}
		cordonEvs = append(cordonEvs, d.ev("cordon", "", name, msg, cordonData{GPU: f.gpu, Cause: f.cause, Jobs: ids}))
	}
	b.Events = append(cordonEvs, b.Events...)
	ids := make([]string, 0, len(refund))
	for id := range refund {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		js := d.jobs[id]
		rec := js.rec
		rec.Failures--
		ups = append(ups, jobUpdate{js, rec, fmt.Sprintf("failure given back: its GPU on %s was cordoned", name)})
		b.Events = append(b.Events, d.ev("refund", id, name, fmt.Sprintf("%s: the failure of its last exit is given back: it ran on a GPU of %s that was cordoned since", js.spec.Name, name), nil))
	}
	b.GPUHealth = recs
	err := d.write(ctx, ups, b, func() {
		for _, r := range recs {
			d.healthOf(i, r.GPU).rec = r
		}
		for _, h := range refunded {
			h.exitJob, h.exitAt = "", time.Time{}
		}
		for k, js := range moved {
			d.afterRequeue(js, finals[k], true)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("cordon GPUs of %s: %w", name, err)
	}
	return moved, nil
}

// cordonData is a cordon event's data.
type cordonData struct {
	GPU   int      `json:"gpu"`
	Cause string   `json:"cause"`
	Jobs  []string `json:"jobs"`
}

// ErrNotCordoned is returned by Uncordon for a GPU that is not cordoned.
var ErrNotCordoned = fmt.Errorf("not cordoned: %w", ErrBadState)

// Uncordon returns a cordoned GPU to service (stored, with an event).
// Critical events the agent reported before it no longer cordon the GPU;
// a condition that persists (a pending row remapping, failing reads)
// cordons it again at the next observation.
func (d *Daemon) Uncordon(ctx context.Context, server string, gpu int) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	defer d.publish()
	d.clientOp()
	i, ok := d.srvIdx[server]
	if !ok {
		return fmt.Errorf("uncordon: unknown server %q: %w", server, ErrNotFound)
	}
	if gpu < 0 || gpu >= len(d.owner[i].gpu) {
		return fmt.Errorf("uncordon: %s has GPUs 0..%d, not %d: %w", server, len(d.owner[i].gpu)-1, gpu, ErrNotFound)
	}
	if !d.cordoned(i, gpu) {
		return fmt.Errorf("uncordon %s:%d: %w", server, gpu, ErrNotCordoned)
	}
	h := d.healthOf(i, gpu)
	r := h.rec
	was := r.Why
	r.Cordoned, r.Cause, r.Why, r.At = false, "", "", d.now()
	b := Batch{GPUHealth: []GPUHealthRecord{r},
		Events: []Event{d.ev("uncordon", "", server, fmt.Sprintf("%s GPU %d back in service (was cordoned: %s)", server, gpu, was), cordonData{GPU: gpu, Cause: h.rec.Cause, Jobs: []string{}})}}
	if err := d.write(ctx, nil, b, func() {
		h.rec = r
		h.readFails = 0
	}); err != nil {
		return fmt.Errorf("uncordon %s:%d: %w", server, gpu, err)
	}
	return nil
}

// putGPUHealth stores GPUs' health in a batch's transaction.
func putGPUHealth(ctx context.Context, tx execer, recs []GPUHealthRecord) error {
	for _, r := range recs {
		if _, err := tx.ExecContext(ctx, `INSERT INTO gpu_health(server, gpu, cordoned, cause, why, at, seen) VALUES (?,?,?,?,?,?,?)
		ON CONFLICT(server, gpu) DO UPDATE SET cordoned=excluded.cordoned, cause=excluded.cause, why=excluded.why, at=excluded.at, seen=excluded.seen`,
			r.Server, r.GPU, r.Cordoned, r.Cause, r.Why, ns(r.At), ns(r.Seen)); err != nil {
			return fmt.Errorf("commit: health of %s GPU %d: %w", r.Server, r.GPU, err)
		}
	}
	return nil
}

// GPUHealth implements Store.
func (s *SQLite) GPUHealth(ctx context.Context) ([]GPUHealthRecord, error) {
	rows, err := s.rd.QueryContext(ctx, `SELECT server, gpu, cordoned, cause, why, at, seen FROM gpu_health ORDER BY server, gpu`)
	if err != nil {
		return nil, fmt.Errorf("GPU health: %w", err)
	}
	defer rows.Close()
	var out []GPUHealthRecord
	for rows.Next() {
		var r GPUHealthRecord
		var at, seen sql.NullInt64
		if err := rows.Scan(&r.Server, &r.GPU, &r.Cordoned, &r.Cause, &r.Why, &at, &seen); err != nil {
			return nil, fmt.Errorf("GPU health: %w", err)
		}
		r.At, r.Seen = fromNS(at.Int64), fromNS(seen.Int64)
		out = append(out, r)
	}
	return out, rows.Err()
}

// uncordon is POST /v1/nodes/{name}/gpus/{gpu}/uncordon (admins).
func (a *API) uncordon(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if err := a.Access.canAdmin(callerOf(r.Context()), "uncordon a GPU of "+name); err != nil {
		writeErr(w, http.StatusForbidden, err)
		return
	}
	gpu, err := strconv.Atoi(r.PathValue("gpu"))
	if err != nil {
		writeErr(w, http.StatusBadRequest, fmt.Errorf("uncordon: GPU index: want an integer, got %q", r.PathValue("gpu")))
		return
	}
	if err := a.D.Uncordon(r.Context(), name, gpu); err != nil {
		writeErr(w, statusOf(err), err)
		return
	}
	a.D.Kick()
	writeJSON(w, http.StatusOK, map[string]any{"server": name, "gpu": gpu})
}

// Uncordon returns a cordoned GPU of a server to service (admins).
func (c *Client) Uncordon(ctx context.Context, server string, gpu int) error {
	return c.do(ctx, "POST", "/v1/nodes/"+url.PathEscape(server)+"/gpus/"+strconv.Itoa(gpu)+"/uncordon", nil, nil)
}
