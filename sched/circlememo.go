package sched

import (
	"fmt"
	"slices"

	"github.com/replan/replan/perf"
)

// The rack-circle memo (issue 29). replan's uplink hold (uplinkInflation),
// its compatibility tie-break (preferCompatible) and its uplink-aware
// placement (placeOnUplinks) ask for the circles of the cross-rack jobs
// on a rack's spine uplink (rackCircles) at every growth step of every
// waiting job placed across racks, and for every candidate rack: each ask
// walked the rack's servers and the jobs on each, and looked each job's
// circle up (tentativeCircle: a map and an allocation compare). Between
// two asks little changes: the job being placed, and the jobs the round
// shrank for it.
//
// The memo lives in the round's state and dies with it. rackMemo[r] holds
// rack r's answer for every job (the jobs on the rack in rackCircles'
// order, the circles of those that cross racks, their IDs), built from
// the state as it was. A job's circle depends on its allocation, its plan
// and whether it keeps running unchanged (tentativeCircle); a rack's
// answer on its jobs' circles and the jobs on its servers. So:
//
//   - a move or a rollback of job j on server s (allocChanging) marks the
//     racks of j's allocation and s's rack changed by j;
//   - whatever sets a job's touched, planSet or newPlan (finish, shrink,
//     the plan pass, the FIFO policies' preemptions and migrations) marks
//     the racks of its allocation changed by it (circleChanged);
//   - a rack changed only by job i still answers for i (its answer leaves
//     i out, and i's changes move no other job's circle nor the order of
//     the others); changed by any other job, it is built again.
//
// Cores given or taken without a move (the CPU branch, the reserve pass)
// do not mark anything: tentativeCircle's own memo never compared cores
// either, and both run before the first or after the last ask of a round.
//
// tentativeCircle's memo knows an entry is current when no move or
// rollback touched the job since (allocVer) without comparing the
// allocation. What it computes (spineCircle: a prediction) comes from the
// policy's spineMemo when the job asked for the same circle in this round
// or the last one: the same model, plan, spine bandwidth, servers, GPUs
// and cores.
//
// circleMemoOff (tests, benchmarks: the path before the memo) walks the
// rack on every ask, compares every allocation and predicts every circle
// afresh each round, calls Rotate then LinkLoad for the hold (not
// rotateLoad) and keeps every running job in the shift computation, as
// before (Rotate itself is shared: TestRotateMatchesReference holds it to
// the former code); circleMemoVerify answers from the memo and panics
// where the walk or a fresh prediction answers otherwise.
// TestCircleMemoSameDecisions replays traces all three ways and compares
// every round's decisions.

// circleMode selects the rack-circle memo of a policy's rounds.
type circleMode uint8

const (
	circleMemoOn circleMode = iota
	circleMemoOff
	circleMemoVerify
)

// circleStats counts what a policy's rack-circle memo did over its rounds:
// Asks of rackCircles, how many of them the memo answered without
// building the rack's circles again (Hits), and how many answers held
// other jobs' circles (Shared: an uplink that others already use).
type circleStats struct {
	Asks, Hits, Shared int
}

// spineMemo is a policy's memo of spineCircle across rounds, by job ID:
// the circle of a job's model running a plan on an allocation that spans
// racks (the same servers, GPUs and cores) at a spine bandwidth. Entries
// asked for in a round are kept for the next; the others are dropped.
type spineMemo struct {
	cur, prev map[string]spineEntry
}

type spineEntry struct {
	model *perf.Model
	plan  perf.Plan
	spine float64
	alloc []Alloc
	c     Circle
	ok    bool
}

// round starts a round: the last round's entries become the previous.
func (m *spineMemo) round() {
	m.prev, m.cur = m.cur, make(map[string]spineEntry, len(m.cur))
}

// circle is spineCircle(s, j, plan, alloc) for an allocation that spans
// racks (whether it does is all spineCircle reads of the servers). The
// circle's arcs are shared: the caller must not modify them.
func (m *spineMemo) circle(s *Snapshot, j *Job, plan perf.Plan, alloc []Alloc) (Circle, bool) {
	e, ok := m.cur[j.ID]
	if !ok {
		e, ok = m.prev[j.ID]
	}
	if ok && e.model == j.Model && e.plan == plan && e.spine == s.SpineGBps && sameAlloc(e.alloc, alloc) && sameCores(e.alloc, alloc) {
		m.cur[j.ID] = e
		return e.c, e.ok
	}
	c, cok := spineCircle(s, j, plan, alloc)
	m.cur[j.ID] = spineEntry{model: j.Model, plan: plan, spine: s.SpineGBps, alloc: slices.Clone(alloc), c: c, ok: cok}
	return c, cok
}

// rackMemo is one rack's circles for rackCircles. by is 0 while the memo
// is not built or some job other than one changed the rack since, 1 while
// nothing changed the rack since it was built, k+2 while only job k did.
type rackMemo struct {
	by   int
	ks   []int // the jobs whose circles these are
	tcs  []tentCircle
	ids  []string
	jobs []int // scratch: the rack's jobs
}

// changedBy records that job k changed rack r's circles.
func (m *rackMemo) changedBy(k int) {
	switch m.by {
	case 0, k + 2:
	case 1:
		m.by = k + 2
	default:
		m.by = 0
	}
}

// allocChanging records, before a move or a rollback of job j on server
// s, that j's racks and s's rack may see j's circle change.
func (st *state) allocChanging(j, s int) {
	if st.allocVer != nil {
		st.allocVer[j]++
	}
	if st.rackMemo == nil {
		return
	}
	st.rackMemo[st.rackOf[s]].changedBy(j)
	for _, a := range st.jobs[j].alloc {
		st.rackMemo[st.rackOf[a.Server]].changedBy(j)
	}
}

// circleChanged records that job k's plan or its being unchanged this
// round (touched, planSet, newPlan) may have changed: its circle on its
// racks.
func (st *state) circleChanged(k int) {
	if st.rackMemo == nil {
		return
	}
	for _, a := range st.jobs[k].alloc {
		st.rackMemo[st.rackOf[a.Server]].changedBy(k)
	}
}

// circleOf is tentativeCircle's memo entry of job k, nil when none.
func (st *state) circleOf(k int) *roundCircle {
	if st.circleAt == nil || st.circleAt[k] == 0 {
		return nil
	}
	return &st.circles[st.circleAt[k]-1]
}

// setCircle stores job k's memo entry.
func (st *state) setCircle(k int, m roundCircle) {
	if st.circleAt == nil {
		st.circleAt = make([]int32, len(st.jobs))
	}
	if n := st.circleAt[k]; n > 0 {
		st.circles[n-1] = m
		return
	}
	st.circles = append(st.circles, m)
	st.circleAt[k] = int32(len(st.circles))
}

// rackCircles are the circles, as the round leaves them, of the jobs
// other than i that hold GPUs in rack r and run across racks (so use its
// spine uplink), each job once, in the order of the rack's servers and
// of the jobs on each, with their IDs. The caller must not modify them.
func (st *state) rackCircles(r, i int) ([]tentCircle, []string) {
	if st.circleMode == circleMemoOff {
		tcs, ids := st.rackCirclesScan(r, i)
		st.countCircles(false, tcs)
		return tcs, ids
	}
	if st.rackMemo == nil {
		st.rackMemo = make([]rackMemo, len(st.racks))
		st.allocVer = make([]uint32, len(st.jobs))
	}
	m := &st.rackMemo[r]
	hit := m.by == 1 || m.by == i+2
	if !hit {
		// Built again in new arrays: answers handed out stay as they were.
		m.jobs = st.rackJobList(r, m.jobs[:0])
		ks, tcs := st.memoKs[:0], st.memoTcs[:0]
		for _, k := range m.jobs {
			if o := st.tentativeCircle(k); o.ok {
				ks, tcs = append(ks, k), append(tcs, o)
			}
		}
		st.memoKs, st.memoTcs = ks, tcs
		m.ks, m.tcs, m.ids = slices.Clone(ks), slices.Clone(tcs), make([]string, len(ks))
		for n, k := range ks {
			m.ids[n] = st.jobs[k].job.ID
		}
		m.by = 1
	}
	tcs, ids := m.tcs, m.ids
	for n, k := range m.ks {
		if k == i {
			tcs = append(append(make([]tentCircle, 0, len(tcs)-1), tcs[:n]...), tcs[n+1:]...)
			ids = append(append(make([]string, 0, len(ids)-1), ids[:n]...), ids[n+1:]...)
			break
		}
	}
	if st.circleMode == circleMemoVerify {
		wt, wi := st.rackCirclesScan(r, i)
		if err := sameRackCircles(tcs, ids, wt, wi); err != nil {
			panic(fmt.Sprintf("sched: rack-circle memo of rack %d for job %d: %v", r, i, err))
		}
	}
	st.countCircles(hit, tcs)
	return tcs, ids
}

// countCircles counts an ask of rackCircles in the policy's circleStats.
func (st *state) countCircles(hit bool, tcs []tentCircle) {
	if c := st.circleStats; c != nil {
		c.Asks++
		if hit {
			c.Hits++
		}
		if len(tcs) > 0 {
			c.Shared++
		}
	}
}

// rackJobList appends the jobs holding GPUs on rack r's servers to out,
// each once, in the order of the servers and of the jobs on each.
func (st *state) rackJobList(r int, out []int) []int {
	if len(st.seenAt) < len(st.jobs) {
		st.seenAt = make([]int, len(st.jobs))
	}
	st.seenGen++
	for _, sv := range st.racks[r] {
		for _, k := range st.on[sv] {
			if st.seenAt[k] == st.seenGen {
				continue
			}
			st.seenAt[k] = st.seenGen
			out = append(out, k)
		}
	}
	return out
}

// sameRackCircles is nil when two answers of rackCircles are the same to
// the bit, else what differs.
func sameRackCircles(tcs []tentCircle, ids []string, want []tentCircle, wantIDs []string) error {
	if len(tcs) != len(want) || len(ids) != len(wantIDs) {
		return fmt.Errorf("%d circles (%v), want %d (%v)", len(tcs), ids, len(want), wantIDs)
	}
	for n := range tcs {
		a, b := tcs[n], want[n]
		same := ids[n] == wantIDs[n] && a.ok == b.ok && a.fixed == b.fixed && a.off == b.off &&
			a.c.Period == b.c.Period && len(a.c.Arcs) == len(b.c.Arcs)
		for k := 0; same && k < len(a.c.Arcs); k++ {
			same = a.c.Arcs[k] == b.c.Arcs[k]
		}
		if !same {
			return fmt.Errorf("circle %d: job %s %+v, want job %s %+v", n, ids[n], a, wantIDs[n], b)
		}
	}
	return nil
}
