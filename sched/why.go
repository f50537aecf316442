package sched

import "fmt"

// whyMemo keeps, across rounds, the "cluster full" wait reason of each
// waiting job (by ID) with what it was formatted from: in a backlog
// thousands of jobs wait, each round, with the same figures, and the
// formatting was 4-5 % of a replay's CPU. A job's entry lasts while it
// is asked for every round.
type whyMemo struct{ prev, next map[string]whyEntry }

type whyEntry struct {
	f, req int
	sl     float64
	s      string
}

// round starts a round: the entries of the last one become the ones to
// reuse, and the others are dropped.
func (w *whyMemo) round() {
	if w.next == nil {
		w.prev, w.next = map[string]whyEntry{}, map[string]whyEntry{}
		return
	}
	w.prev, w.next = w.next, w.prev
	clear(w.next)
}

// clusterFull is the wait reason of job id, waiting for f GPUs of req at
// slope sl on a full cluster (the same text as before the memo).
func (w *whyMemo) clusterFull(id string, f, req int, sl float64) string {
	if e, ok := w.prev[id]; ok && e.f == f && e.req == req && (e.sl == sl || e.sl != e.sl && sl != sl) {
		w.next[id] = e
		return e.s
	}
	e := whyEntry{f: f, req: req, sl: sl, s: fmt.Sprintf("cluster full: needs %s and no running job above its minRes has a lower slope than its %.2f to shrink", needsGPUs(max(f, 1), req), sl)}
	w.next[id] = e
	return e.s
}
