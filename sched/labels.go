package sched

// Label constraints (node features) are, like pins, a constraint every
// policy offers within, never a veto after the fact. A job with
// Job.Labels may hold GPUs only on servers that carry every one of them
// (Server.Labels; internal/labels matches them). Here is all of it:
//
//   - newState gives each constrained job its server mask (jstate.allow);
//   - state.only(i) opens a scope in which the servers job i may not use
//     look full: their free GPUs are taken out of the free-GPU index, the
//     rack histograms and the free count, so every placement routine
//     (takeFree, takeRack, fillFullest, FIFO's place and blocks,
//     singleServer, packedGrow, the compatibility tie-break) offers only
//     allowed servers without knowing about labels. GPUs that victims give
//     back on a hidden server stay hidden until the scope closes. The
//     policies open it around every step that gives a job GPUs;
//   - victims of a constrained job are only jobs holding GPUs on servers
//     it may use (onAllowed), and they give back GPUs there first;
//   - round-wide memos that assume every job sees the same servers
//     (mustFail, packFail, Morphling's cutoff) are neither read nor
//     written inside a scope;
//   - labelReasons makes a constrained job's wait reason say how many
//     servers carry its labels and how many of them are busy.

import (
	"fmt"
	"strings"

	"github.com/replan/replan/internal/labels"
)

// hideDepth is how far below zero a hidden server's free GPUs sit inside
// a scope: deeper than any job can give back, so they never look free.
const hideDepth = 1 << 30

// initMasks fills each constrained job's server mask and the GPUs of its
// allowed servers; jobs with the same labels share one (read-only) mask.
func (st *state) initMasks() {
	type mask struct {
		allow []bool
		gpus  int
	}
	var memo map[string]mask
	for i := range st.jobs {
		js := &st.jobs[i]
		if len(js.job.Labels) == 0 {
			continue
		}
		key := labelKey(js.job.Labels)
		m, ok := memo[key]
		if !ok {
			m.allow = make([]bool, len(st.snap.Servers))
			for s := range st.snap.Servers {
				if labels.Match(st.snap.Servers[s].Labels, js.job.Labels) {
					m.allow[s] = true
					m.gpus += st.snap.Servers[s].GPUs
				}
			}
			if memo == nil {
				memo = map[string]mask{}
			}
			memo[key] = m
		}
		js.allow, js.allowGPUs = m.allow, m.gpus
	}
}

// labelKey is one string for a job's label requirements.
func labelKey(req []string) string { return strings.Join(req, "\x00") }

// only opens job i's scope (see above) and returns the function that
// closes it; a job without labels, or a scope already open, opens none.
func (st *state) only(i int) func() {
	allow := st.jobs[i].allow
	if allow == nil || st.scope != nil {
		return func() {}
	}
	if st.hideOff == nil {
		st.hideOff = make([]int, len(st.free))
		st.hideGot = make([]int, len(st.free))
	}
	st.scope = allow
	for s, ok := range allow {
		if ok {
			continue
		}
		st.hideOff[s] = st.free[s] + hideDepth
		st.hideGot[s] = max(st.free[s], 0)
		st.free[s] -= st.hideOff[s]
		st.freeGPUs -= st.hideGot[s]
		st.idx.set(s, st.free[s])
		if st.roomOK != nil {
			st.roomOK[s] = false
		}
	}
	return func() {
		for s, ok := range allow {
			if ok {
				continue
			}
			st.free[s] += st.hideOff[s]
			st.freeGPUs += st.hideGot[s]
			st.idx.set(s, st.free[s])
			if st.roomOK != nil {
				st.roomOK[s] = false
			}
		}
		st.scope = nil
	}
}

// hidden reports whether server s is out of the open scope's reach.
func (st *state) hidden(s int) bool { return st.scope != nil && !st.scope[s] }

// onAllowed reports whether job v holds GPUs on a server job i may use
// (always, when i has no labels): only such a victim can make room for i.
func (st *state) onAllowed(v, i int) bool {
	allow := st.jobs[i].allow
	if allow == nil {
		return true
	}
	for _, a := range st.jobs[v].alloc {
		if a.GPUs > 0 && allow[a.Server] {
			return true
		}
	}
	return false
}

// gpuLimit is the most GPUs job i can hold: its allowed servers' (limit
// when it has no labels).
func (st *state) gpuLimit(i, limit int) int {
	if js := &st.jobs[i]; js.allow != nil {
		return min(limit, js.allowGPUs)
	}
	return limit
}

// labelWhy describes job j's constraint on the servers of st after the
// round: how many carry its labels, their GPUs and free GPUs, and how many
// of those servers have no free GPU.
func labelWhy(st *state, j *Job, allow []bool) string {
	n, gpus, free, busy := 0, 0, 0, 0
	for s, sv := range st.snap.Servers {
		if !allow[s] {
			continue
		}
		n++
		gpus += sv.GPUs
		free += max(st.free[s], 0)
		if st.free[s] <= 0 {
			busy++
		}
	}
	what := "servers labelled " + strings.Join(j.Labels, ", ")
	if n == 0 {
		return "needs " + what + ": no server carries them"
	}
	return fmt.Sprintf("needs %s: %d such server%s (%d GPUs, %d free), %d of them busy", what, n, plural(n), gpus, free, busy)
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// labelReasons makes the wait reason of every constrained job say what its
// labels leave it after the round (once per distinct labels).
func labelReasons(st *state, d *Decisions) {
	s := st.snap
	var memo map[string]string
	for k := range d.Waiting {
		w := &d.Waiting[k]
		if w.Index < 0 || w.Index >= len(s.Jobs) {
			continue
		}
		j := &s.Jobs[w.Index]
		if j.ID != w.Job || len(j.Labels) == 0 || st.jobs[w.Index].allow == nil {
			continue
		}
		key := labelKey(j.Labels)
		why, ok := memo[key]
		if !ok {
			why = labelWhy(st, j, st.jobs[w.Index].allow)
			if memo == nil {
				memo = map[string]string{}
			}
			memo[key] = why
		}
		w.Reason = why + ": " + w.Reason
	}
}

// checkLabels is CheckInvariants' label rule: a start or reconfigure puts
// a job only on servers that carry its labels.
func checkLabels(s Snapshot, j *Job, a *Decision) error {
	if len(j.Labels) == 0 {
		return nil
	}
	for _, al := range a.Alloc {
		sv := &s.Servers[al.Server]
		if miss := labels.Missing(sv.Labels, j.Labels); al.GPUs > 0 && len(miss) > 0 {
			return fmt.Errorf("job %s: %s on server %s, which lacks its required label%s %s", a.Job, a.Kind, sv.ID, plural(len(miss)), strings.Join(miss, ", "))
		}
	}
	return nil
}
