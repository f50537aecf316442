package sched

// Pins are constraints every policy offers within, never a veto after the
// fact. A job's spec may pin its plan (Job.PinPlan: it always runs ReqPlan
// on ReqGPUs GPUs) and the placement tiers it allows (Job.Tiers: the
// widest one bounds how far its GPUs may spread). Here is all of it:
//
//   - pinnedFamily gives a plan-pinned job Morphling's pinned family (its
//     curve has one point, the request); FIFO's plan-only keeps ReqPlan;
//   - pinnedTake is takeFree for a job pinned below cross-rack: GPUs only
//     on its own server, or inside one rack;
//   - placeInRack is FIFO's placement inside one rack;
//   - pinReasons makes a pinned job's wait reason name its pins.

import (
	"fmt"
	"sort"
	"strings"

	"github.com/replan/replan/perf"
)

// widest is the widest tier job j may span (across racks when unpinned).
func (j *Job) widest() perf.Tier {
	if len(j.Tiers) == 0 {
		return perf.TierCrossRack
	}
	w := perf.TierServer
	for _, t := range j.Tiers {
		w = max(w, t)
	}
	return w
}

// pinned reports whether j has any pin.
func (j *Job) pinned() bool { return j.PinPlan || j.widest() < perf.TierCrossRack }

// pinnedFamily is the plan family a policy may choose from for j: fam, or
// only the request's plan on the request's GPUs when the plan is pinned.
func pinnedFamily(j *Job, fam family) family {
	if j.PinPlan && j.ReqPlan.GPUs() > 0 {
		return family{fixed: true, pinned: true, plan: j.ReqPlan}
	}
	return fam
}

// pinnedTake gives job j up to need free GPUs within tier lim (server or
// rack): on the server it holds (TierServer) or in the rack it holds
// (TierRack); a job that holds nothing yet gets the best-fitting server, or
// the rack takeRack would choose, or else as much as the roomiest server
// (rack) has. It returns how many it got.
func (st *state) pinnedTake(j, need int, lim perf.Tier) int {
	js := &st.jobs[j]
	cpg := max(js.cpg, 1)
	room := func(s int) int { return max(min(st.free[s], st.freeCPU[s]/cpg), 0) }
	byRoom := func(l []int) []int {
		l = append([]int(nil), l...)
		sort.SliceStable(l, func(a, b int) bool { return room(l[a]) > room(l[b]) })
		return l
	}
	var cands []int
	switch {
	case len(js.alloc) > 0 && lim == perf.TierServer:
		cands = []int{js.alloc[0].Server}
	case len(js.alloc) > 0:
		own := map[int]bool{}
		for _, a := range js.alloc {
			own[a.Server] = true
			cands = append(cands, a.Server)
		}
		for _, s := range byRoom(st.racks[st.rackOf[js.alloc[0].Server]]) {
			if !own[s] {
				cands = append(cands, s)
			}
		}
	default:
		best, most := -1, -1
		for s := range st.free {
			if room(s) >= need && (best < 0 || room(s) < room(best)) {
				best = s
			}
			if most < 0 || room(s) > room(most) {
				most = s
			}
		}
		switch {
		case best >= 0:
			cands = []int{best}
		case lim == perf.TierServer:
			if most >= 0 {
				cands = []int{most}
			}
		default:
			if got := st.takeRack(j, need); got > 0 {
				sortAlloc(js.alloc)
				return got
			}
			bestRack, bestRoom := -1, -1
			for r, l := range st.racks {
				n := 0
				for _, s := range l {
					n += room(s)
				}
				if n > bestRoom {
					bestRack, bestRoom = r, n
				}
			}
			if bestRack >= 0 {
				cands = byRoom(st.racks[bestRack])
			}
		}
	}
	got := 0
	for _, s := range cands {
		if got == need {
			break
		}
		if n := min(room(s), need-got); n > 0 {
			st.move(j, s, n)
			got += n
		}
	}
	sortAlloc(js.alloc)
	return got
}

// placeInRack is FIFO's placement of job i's need GPUs (more than one
// server has) inside one rack, in blocks of a multiple of TP per server:
// the rack needing the fewest servers first.
func (f *FIFO) placeInRack(st *state, i, need, tp int) (bool, string) {
	js := &st.jobs[i]
	cpg := max(js.cpg, 1)
	block := func(s int) int {
		n := min(st.free[s], st.freeCPU[s]/cpg)
		return max(n-n%tp, 0)
	}
	type pick struct{ rack, servers int }
	var picks []pick
	most := 0
	for r, l := range st.racks {
		l = append([]int(nil), l...)
		sort.SliceStable(l, func(a, b int) bool { return block(l[a]) > block(l[b]) })
		got, n := 0, 0
		for _, s := range l {
			if got >= need {
				break
			}
			if b := block(s); b > 0 {
				got += min(b, need-got)
				n++
			}
		}
		most = max(most, got)
		if got >= need {
			picks = append(picks, pick{r, n})
		}
	}
	if len(picks) == 0 {
		return false, fmt.Sprintf("needs %d GPUs inside one rack in blocks of a multiple of TP %d; the roomiest rack has %d", need, tp, most)
	}
	sort.SliceStable(picks, func(a, b int) bool { return picks[a].servers < picks[b].servers })
	st.fillRack(i, picks[0].rack, need, block)
	sortAlloc(js.alloc)
	return true, ""
}

// pinWhy describes j's pins.
func pinWhy(j *Job) string {
	var parts []string
	if j.PinPlan {
		parts = append(parts, fmt.Sprintf("plan %s on %d GPUs", j.ReqPlan, j.ReqPlan.GPUs()))
	}
	if w := j.widest(); w < perf.TierCrossRack {
		where := "one server"
		if w == perf.TierRack {
			where = "one rack"
		}
		parts = append(parts, where)
	}
	return "pinned to " + strings.Join(parts, " in ")
}

// pinReasons makes the wait reason of every pinned job name its pins, so
// a user sees what the job waits for.
func pinReasons(s *Snapshot, d *Decisions) {
	for k := range d.Waiting {
		w := &d.Waiting[k]
		if w.Index < 0 || w.Index >= len(s.Jobs) {
			continue
		}
		if j := &s.Jobs[w.Index]; j.ID == w.Job && j.pinned() {
			w.Reason = pinWhy(j) + ": " + w.Reason
		}
	}
}
