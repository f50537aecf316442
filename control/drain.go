package control

// Drain modes (issue 28), like Slurm's:
//
//   - drain SERVER (mode "now"): no new work goes there and its jobs are
//     checkpointed, stopped and requeued now (ops.go's Drain);
//   - drain SERVER --after-jobs (mode "after-jobs"): no new work goes
//     there, its running jobs are left to finish. The server shows
//     "draining" while a job holds one of its GPUs, "drained" once the
//     last has ended.
//
// Either way the reason, who drained it (the caller) and when are
// stored (table node_drains, migration 6) with the drain, survive a
// restart and are shown by `replan nodes`; undrain clears them.

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// Drain modes.
const (
	DrainNow       = "now"
	DrainAfterJobs = "after-jobs"
)

// MaxDrainReason bounds a drain's reason (bytes).
const MaxDrainReason = 1024

// NodeDrain is a server's drain record; Mode "" clears it.
type NodeDrain struct {
	Name   string    `json:"name"`
	Reason string    `json:"reason,omitempty"`
	By     string    `json:"by,omitempty"`
	Mode   string    `json:"mode"`
	At     time.Time `json:"at"`
}

// putDrain stores (or, with Mode "", deletes) a drain record in tx.
func putDrain(ctx context.Context, tx execer, dr NodeDrain) error {
	var err error
	if dr.Mode == "" {
		_, err = tx.ExecContext(ctx, `DELETE FROM node_drains WHERE name = ?`, dr.Name)
	} else {
		_, err = tx.ExecContext(ctx, `INSERT INTO node_drains(name, reason, by_user, mode, at) VALUES (?,?,?,?,?)
			ON CONFLICT(name) DO UPDATE SET reason=excluded.reason, by_user=excluded.by_user, mode=excluded.mode, at=excluded.at`,
			dr.Name, dr.Reason, dr.By, dr.Mode, ns(dr.At))
	}
	if err != nil {
		return fmt.Errorf("commit: drain of %s: %w", dr.Name, err)
	}
	return nil
}

// drainStore reads the stored drain records.
type drainStore interface {
	NodeDrains(ctx context.Context) ([]NodeDrain, error)
}

// NodeDrains is every stored drain record, by server name.
func (s *SQLite) NodeDrains(ctx context.Context) ([]NodeDrain, error) {
	rows, err := s.rd.QueryContext(ctx, `SELECT name, reason, by_user, mode, at FROM node_drains ORDER BY name`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []NodeDrain
	for rows.Next() {
		var dr NodeDrain
		var at int64
		if err := rows.Scan(&dr.Name, &dr.Reason, &dr.By, &dr.Mode, &at); err != nil {
			return nil, err
		}
		dr.At = fromNS(at)
		out = append(out, dr)
	}
	return out, rows.Err()
}

// recoverDrains restores the drain records of the drained servers.
func (d *Daemon) recoverDrains(ctx context.Context) error {
	ds, ok := d.cfg.Store.(drainStore)
	if !ok {
		return nil
	}
	drs, err := ds.NodeDrains(ctx)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("recover drains: %w", err)
	}
	for _, dr := range drs {
		if i, ok := d.srvIdx[dr.Name]; ok && d.nodes[i].drained {
			d.nodes[i].drain = dr
		}
	}
	return nil
}

// drainRecord is the record of draining server as req says, by the
// caller in ctx, now.
func (d *Daemon) drainRecord(ctx context.Context, server string, req DrainRequest) NodeDrain {
	mode := DrainNow
	if req.AfterJobs {
		mode = DrainAfterJobs
	}
	return NodeDrain{Name: server, Reason: req.Reason, By: callerOf(ctx).User, Mode: mode, At: d.now()}
}

// drainAfterJobs stores the drain of server i that lets its jobs finish
// and takes it out of placement. The caller holds d.mu.
func (d *Daemon) drainAfterJobs(ctx context.Context, i int, node NodeRecord, dr NodeDrain, jobs []*jobState) error {
	server := d.cfg.Servers[i].Name
	ids := make([]string, len(jobs))
	for k, js := range jobs {
		ids[k] = js.rec.ID
	}
	msg := server + " drained: no jobs there"
	if len(ids) > 0 {
		msg = fmt.Sprintf("%s draining: no new work goes there; %s left to finish", server, strings.Join(ids, ", "))
	}
	b := Batch{Nodes: []NodeRecord{node}, Drains: []NodeDrain{dr}, Events: []Event{d.ev("drain", "", server, msg+reasonSuffix(dr.Reason), drainData{Jobs: []string{}})}}
	err := d.write(ctx, nil, b, func() {
		d.nodes[i].drained = true
		d.nodes[i].drain = dr
		d.nodes[i].drainSettled = len(ids) == 0 // the event said it is drained
	})
	d.clientOp()
	d.publish()
	if err != nil {
		return fmt.Errorf("drain %s: %w", server, err)
	}
	return nil
}

// reasonSuffix is a drain event's reason, if any.
func reasonSuffix(reason string) string {
	if reason == "" {
		return ""
	}
	return " (reason: " + reason + ")"
}

// setDrain puts a drain record in the view (nothing when there is none).
func (v *NodeView) setDrain(dr NodeDrain) {
	if !v.Drained || dr.Mode == "" {
		return
	}
	at := dr.At
	v.DrainReason, v.DrainedBy, v.DrainedAt, v.DrainMode = dr.Reason, dr.By, &at, dr.Mode
}

// holdsAny reports whether a job holds one of the GPUs.
func holdsAny(owners []string) bool {
	for _, o := range owners {
		if o != "" {
			return true
		}
	}
	return false
}

// drainRequest reads the optional body of POST /v1/nodes/{name}/drain.
func drainRequest(r *http.Request) (DrainRequest, error) {
	var req DrainRequest
	b, err := io.ReadAll(io.LimitReader(r.Body, 64<<10))
	if err != nil {
		return req, err
	}
	if len(strings.TrimSpace(string(b))) == 0 {
		return req, nil
	}
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return req, fmt.Errorf("drain request: %w", err)
	}
	if len(req.Reason) > MaxDrainReason {
		return req, fmt.Errorf("reason: longer than %d bytes", MaxDrainReason)
	}
	if strings.ContainsAny(req.Reason, "\n\r") {
		return req, errors.New("reason: one line, please (no newlines)")
	}
	return req, nil
}

// settleDrains writes, once per daemon run, a "drained" event for each
// server drained --after-jobs whose last job has ended (the view shows
// it drained from that moment on).
func (d *Daemon) settleDrains(ctx context.Context) {
	d.mu.Lock()
	defer d.mu.Unlock()
	var evs []Event
	var done []int
	for i := range d.nodes {
		n := &d.nodes[i]
		if !n.drained || n.drain.Mode != DrainAfterJobs || n.drainSettled || holdsAny(d.owner[i].gpu) {
			continue
		}
		name := d.cfg.Servers[i].Name
		ev := d.ev("drained", "", name, name+" drained: its last job has ended"+reasonSuffix(n.drain.Reason), nil)
		ev.User = n.drain.By
		evs = append(evs, ev)
		done = append(done, i)
	}
	if len(evs) == 0 {
		return
	}
	if err := d.write(ctx, nil, Batch{Events: evs}, func() {
		for _, i := range done {
			d.nodes[i].drainSettled = true
		}
	}); err != nil {
		d.log.Warn("drained event", "err", err)
		return
	}
	d.publish()
}
