package sched

import (
	"math"
	"sort"

	"github.com/replan/replan/perf"
)

// state is the working copy of the cluster one round mutates: free GPUs
// and cores per server, every job's tentative allocation, and a journal so
// a tentative change (with the shrinks it caused) can be undone.
type state struct {
	snap     *Snapshot
	free     []int
	freeCPU  []int
	freeMem  []float64
	idx      freeIndex
	jobs     []jstate
	on       [][]int // jobs holding GPUs on each server
	journal  []op
	maxPer   int
	freeGPUs int
	// touchedBuf is rollback's scratch list of jobs to re-sort.
	touchedBuf []int
	// dirty lists the jobs whose GPU count changed this round; vlist is
	// the round's victim list of the others (Morphling).
	dirty   []int
	isDirty []bool
	vlist   []vcand
	// rackAware makes takeFree spread a job inside one rack when a rack
	// has room (network-aware policies); rackOf and racks index the racks.
	rackAware bool
	rackOf    []int
	racks     [][]int
	// packedGrow's scratch: room per server (free GPUs plus those of jobs
	// above their minRes; valid where roomOK, which every move of a job
	// clears on its servers) and, per cores per GPU, the smallest target
	// that found no servers this round.
	roomAt []int
	roomOK []bool
	// roomMin is roomAt bounded by the server's cores at roomCPG cores per
	// GPU (valid where roomOK too): packedGrow scans every server, and
	// reading each one's cores from the snapshot was most of its time.
	roomMin  []int
	roomCPG  []int
	packFail map[int]int
	// mustFail: per cores per GPU, the smallest minRes that found too few
	// GPUs even by shrinking (privileged pass).
	mustFail map[int]int
	rackCap  int
	// circles memoises tentativeCircle (compat.go) for the round
	// (circleAt[k] − 1 indexes job k's entry); seenAt[k] == seenGen marks
	// job k as counted by rackCircles.
	circles  []roundCircle
	circleAt []int32
	seenAt   []int
	seenGen  int
	// The rack-circle memo (circlememo.go): allocVer[j] counts the moves
	// and rollbacks of job j's allocation, rackMemo[r] is rack r's
	// circles. Nil until the first rackCircles.
	circleMode  circleMode
	circleStats *circleStats // the policy's, or nil
	spines      *spineMemo   // the policy's, nil with the memo off
	memoKs      []int        // rackCircles' scratch
	memoTcs     []tentCircle
	allocVer    []uint32
	rackMemo    []rackMemo
	// gHeld, when set (trackQuota), is the GPUs each tenant's guaranteed
	// jobs hold, kept by move and rollback: the quota bounds it.
	gHeld map[string]int
	// scope, while a constrained job is being placed, is its server mask;
	// hideOff and hideGot undo the hiding of the others (labels.go).
	scope            []bool
	hideOff, hideGot []int
}

// trackQuota starts keeping gHeld from the jobs' allocations.
func (st *state) trackQuota() {
	st.gHeld = map[string]int{}
	for i := range st.jobs {
		if js := &st.jobs[i]; js.job.Class == Guaranteed {
			st.gHeld[js.job.Tenant] += js.total
		}
	}
}

// op is one journal entry: job took (gpus > 0) or gave back GPUs and cores
// on a server.
type op struct {
	job, server, gpus, cpus int
}

// jstate is a job's working state in a round.
type jstate struct {
	job   *Job
	alloc []Alloc // tentative; memory is filled when the round ends
	total int
	orig  int
	cpg   int // cores per GPU
	// Filled by the policies that use curves.
	cv        *curve
	fam       family
	ref       float64 // reference (promised, for guaranteed) throughput
	w         float64 // normalisation: GPUs per unit of ref throughput
	minG      int     // minRes GPUs (0 for best-effort)
	minCPUs   int
	minPlan   perf.Plan
	fallback  bool // minRes fell back to the request
	remaining float64
	origThr   float64
	touched   bool // allocation or plan changes this round
	newPlan   perf.Plan
	newThr    float64
	planSet   bool
	// cpuSet: the CPU pass changed the job's cores this round.
	cpuSet bool
	reason string
	slope  float64
	// preemptWhy, when set, explains a preemption in its decision.
	preemptWhy string
	// allow is the servers the job may use (nil: all; its labels) and
	// allowGPUs their GPUs (labels.go).
	allow     []bool
	allowGPUs int
}

func newState(s *Snapshot) *state {
	st := &state{snap: s}
	n := len(s.Servers)
	st.free = make([]int, n)
	st.freeCPU = make([]int, n)
	st.freeMem = make([]float64, n)
	st.on = make([][]int, n)
	for i, sv := range s.Servers {
		st.free[i], st.freeCPU[i], st.freeMem[i] = sv.FreeGPUs, sv.FreeCPUs, sv.FreeMemGB
		st.maxPer = max(st.maxPer, sv.GPUs)
		st.freeGPUs += max(sv.FreeGPUs, 0)
	}
	st.idx.init(st.free, st.maxPer)
	st.rackOf = make([]int, n)
	rk := map[string]int{}
	prev, prevR := "", -1
	for i, sv := range s.Servers {
		r := prevR
		if prevR < 0 || sv.Rack != prev {
			// servers of a rack are usually listed together: the map only
			// at a change of rack
			var ok bool
			if r, ok = rk[sv.Rack]; !ok {
				r = len(st.racks)
				rk[sv.Rack] = r
				st.racks = append(st.racks, nil)
			}
			prev, prevR = sv.Rack, r
		}
		st.rackOf[i] = r
		st.racks[r] = append(st.racks[r], i)
	}
	st.idx.initRacks(st.rackOf, len(st.racks))
	st.jobs = make([]jstate, len(s.Jobs))
	st.isDirty = make([]bool, len(s.Jobs))
	// One backing array for every job's working copy of its allocation
	// (full slice expressions: a job that grows reallocates its own).
	nalloc := 0
	for i := range s.Jobs {
		nalloc += len(s.Jobs[i].Alloc)
	}
	slab := make([]Alloc, 0, nalloc)
	for i := range s.Jobs {
		j := &s.Jobs[i]
		js := &st.jobs[i]
		js.job = j
		if len(j.Alloc) > 0 {
			k := len(slab)
			slab = append(slab, j.Alloc...)
			js.alloc = slab[k:len(slab):len(slab)]
		}
		js.total = j.GPUs()
		js.orig = js.total
		js.cpg = 1
		if j.ReqGPUs > 0 && j.ReqCPUs > 0 {
			js.cpg = max(1, j.ReqCPUs/j.ReqGPUs)
		}
		if js.total > 0 {
			js.cpg = max(1, j.CPUs()/js.total)
		}
		for _, a := range j.Alloc {
			if a.GPUs > 0 {
				st.on[a.Server] = append(st.on[a.Server], i)
			}
		}
	}
	st.initMasks() // labels.go
	return st
}

// rackGPUs is the GPU capacity of the largest rack; 0 with one rack.
func (st *state) rackGPUs() int {
	if len(st.racks) < 2 {
		return 0
	}
	if st.rackCap > 0 {
		return st.rackCap
	}
	best := 0
	for _, r := range st.racks {
		n := 0
		for _, sv := range r {
			n += st.snap.Servers[sv].GPUs
		}
		best = max(best, n)
	}
	st.rackCap = best
	return best
}

// placement is the job's tentative placement, fullest server first.
func (st *state) placement(j int) perf.Placement { return placementOf(st.jobs[j].alloc) }

func (st *state) cross(j int) bool {
	a := st.jobs[j].alloc
	return len(a) > 1 && crossRack(st.snap.Servers, a)
}

// move gives job j delta GPUs (negative: takes them back) on server s,
// with cpg cores per GPU, and records it in the journal.
func (st *state) move(j, s, delta int) {
	js := &st.jobs[j]
	st.allocChanging(j, s)
	st.unroom(j, s)
	cpus := delta * js.cpg
	k := -1
	for i := range js.alloc {
		if js.alloc[i].Server == s {
			k = i
			break
		}
	}
	if k < 0 {
		js.alloc = append(js.alloc, Alloc{Server: s})
		k = len(js.alloc) - 1
		st.on[s] = append(st.on[s], j)
	}
	if !st.isDirty[j] {
		st.isDirty[j] = true
		st.dirty = append(st.dirty, j)
	}
	a := &js.alloc[k]
	if delta < 0 && a.GPUs+delta == 0 {
		cpus = -a.CPUs // give back every core, top-ups included
	}
	a.GPUs += delta
	a.CPUs += cpus
	js.total += delta
	if st.gHeld != nil && js.job.Class == Guaranteed {
		st.gHeld[js.job.Tenant] += delta
	}
	st.free[s] -= delta
	st.freeCPU[s] -= cpus
	st.freeGPUs -= delta
	st.idx.set(s, st.free[s])
	if a.GPUs == 0 {
		js.alloc = append(js.alloc[:k], js.alloc[k+1:]...)
		st.removeOn(s, j)
	}
	st.journal = append(st.journal, op{job: j, server: s, gpus: delta, cpus: cpus})
}

// unroom marks the room of server s and of every server job j holds
// stale (j's GPU count changes: whether it is above its minRes may too).
func (st *state) unroom(j, s int) {
	if st.roomOK == nil {
		return
	}
	st.roomOK[s] = false
	for _, a := range st.jobs[j].alloc {
		st.roomOK[a.Server] = false
	}
}

func (st *state) removeOn(s, j int) {
	l := st.on[s]
	for i, x := range l {
		if x == j {
			st.on[s] = append(l[:i], l[i+1:]...)
			return
		}
	}
}

// rollback undoes the journal back to mark.
func (st *state) rollback(mark int) {
	touched := st.touchedBuf[:0]
	for len(st.journal) > mark {
		o := st.journal[len(st.journal)-1]
		st.journal = st.journal[:len(st.journal)-1]
		js := &st.jobs[o.job]
		st.allocChanging(o.job, o.server)
		st.unroom(o.job, o.server)
		if len(touched) == 0 || touched[len(touched)-1] != o.job {
			touched = append(touched, o.job)
		}
		k := -1
		for i := range js.alloc {
			if js.alloc[i].Server == o.server {
				k = i
				break
			}
		}
		if k < 0 {
			js.alloc = append(js.alloc, Alloc{Server: o.server})
			k = len(js.alloc) - 1
			st.on[o.server] = append(st.on[o.server], o.job)
		}
		a := &js.alloc[k]
		a.GPUs -= o.gpus
		a.CPUs -= o.cpus
		js.total -= o.gpus
		if st.gHeld != nil && js.job.Class == Guaranteed {
			st.gHeld[js.job.Tenant] -= o.gpus
		}
		st.free[o.server] += o.gpus
		st.freeCPU[o.server] += o.cpus
		st.freeGPUs += o.gpus
		st.idx.set(o.server, st.free[o.server])
		if a.GPUs == 0 {
			js.alloc = append(js.alloc[:k], js.alloc[k+1:]...)
			st.removeOn(o.server, o.job)
		}
	}
	for _, i := range touched {
		sortAlloc(st.jobs[i].alloc)
	}
	st.touchedBuf = touched
}

func sortAlloc(a []Alloc) {
	if len(a) == 2 {
		if a[0].Server > a[1].Server {
			a[0], a[1] = a[1], a[0]
		}
		return
	}
	for i := 1; i < len(a); i++ {
		for k := i; k > 0 && a[k].Server < a[k-1].Server; k-- {
			a[k], a[k-1] = a[k-1], a[k]
		}
	}
}

// takeFree gives job j up to need free GPUs: first on servers it already
// uses, then the best-fitting single server, then the servers with the most
// free GPUs (so a job spreads over as few servers as it can). It returns
// how many it got.
func (st *state) takeFree(j, need int) int {
	if lim := st.jobs[j].job.widest(); lim < perf.TierCrossRack {
		return st.pinnedTake(j, need, lim) // pin.go
	}
	got := 0
	js := &st.jobs[j]
	cpg := js.cpg
	fit := func(s, want int) int {
		n := min(want, st.free[s])
		if cpg > 0 {
			n = min(n, st.freeCPU[s]/cpg)
		}
		return max(n, 0)
	}
	for i := 0; i < len(js.alloc) && got < need; i++ {
		s := js.alloc[i].Server
		if n := fit(s, need-got); n > 0 {
			st.move(j, s, n)
			got += n
		}
	}
	if got < need && need-got <= st.maxPer {
		for k := need - got; k <= st.maxPer; k++ {
			if s, ok := st.idx.any(k); ok {
				if n := fit(s, need-got); n > 0 {
					st.move(j, s, n)
					got += n
				}
				break
			}
		}
	}
	if got < need && st.rackAware && len(st.racks) > 1 {
		got += st.takeRack(j, need-got)
		if got < need {
			got += st.takeAcrossRacks(j, need-got)
		}
	}
	got += st.fillFullest(j, need-got)
	sortAlloc(js.alloc)
	return got
}

// fillFullest gives job j up to need free GPUs from the servers with the
// most free GPUs, wherever they are (takeFree's last resort). It returns
// how many it got.
func (st *state) fillFullest(j, need int) int {
	cpg := st.jobs[j].cpg
	got := 0
	for k := st.maxPer; k >= 1 && got < need; k-- {
		for got < need {
			s, ok := st.idx.any(k)
			if !ok {
				break
			}
			n := min(need-got, st.free[s])
			if cpg > 0 {
				n = min(n, st.freeCPU[s]/cpg)
			}
			if n <= 0 {
				// cores exhausted: park the server in a lower bucket by
				// skipping it this pass
				if !st.idx.skip(k, s) {
					break
				}
				continue
			}
			st.move(j, s, n)
			got += n
		}
		st.idx.unskip()
	}
	return got
}

// takeAcrossRacks gives job j need free GPUs across racks (no one rack
// has them): over the fewest racks (takeFewestRacks) when that spans
// fewer racks than the fullest servers would, on no more servers and with
// no fewer GPUs on its smallest server (its NIC path no slower), else
// nothing (fillFullest then takes them). It returns how many it got.
func (st *state) takeAcrossRacks(j, need int) int {
	mark := len(st.journal)
	if st.takeFewestRacks(j, need) == 0 {
		return 0
	}
	few := st.spanOf(j)
	st.rollback(mark)
	got := st.fillFullest(j, need)
	full := st.spanOf(j)
	st.rollback(mark)
	if got == need && !(few.racks < full.racks && few.servers <= full.servers && few.minPer >= full.minPer) {
		return 0
	}
	return st.takeFewestRacks(j, need)
}

// span is how widely an allocation spreads.
type span struct{ racks, servers, minPer int }

func (st *state) spanOf(j int) span {
	sp := span{minPer: math.MaxInt}
	seen := map[int]bool{}
	for _, a := range st.jobs[j].alloc {
		if a.GPUs <= 0 {
			continue
		}
		sp.servers++
		sp.minPer = min(sp.minPer, a.GPUs)
		if r := st.rackOf[a.Server]; !seen[r] {
			seen[r] = true
			sp.racks++
		}
	}
	return sp
}

// freeIndex buckets servers by free GPU count so best-fit and
// largest-first lookups cost O(1).
type freeIndex struct {
	b       [][]int
	pos     []int
	at      []int
	skipped []struct{ k, s int }
	// Per rack: how many servers have each free count, and the rack's
	// free GPUs (takeRack ranks racks by them without sorting).
	rack  []int
	rcnt  [][]int
	rfree []int
}

func (f *freeIndex) initRacks(rackOf []int, n int) {
	f.rack = rackOf
	f.rcnt = make([][]int, n)
	f.rfree = make([]int, n)
	for r := range f.rcnt {
		f.rcnt[r] = make([]int, len(f.b))
	}
	for s, k := range f.at {
		f.rcnt[rackOf[s]][k]++
		f.rfree[rackOf[s]] += k
	}
}

// moved keeps the rack histograms when server s goes from bucket a to b.
func (f *freeIndex) moved(s, a, b int) {
	if f.rack == nil {
		return
	}
	r := f.rack[s]
	f.rcnt[r][a]--
	f.rcnt[r][b]++
	f.rfree[r] += b - a
}

func (f *freeIndex) init(free []int, maxPer int) {
	f.b = make([][]int, maxPer+1)
	f.pos = make([]int, len(free))
	f.at = make([]int, len(free))
	for s, n := range free {
		n = min(max(n, 0), maxPer)
		f.at[s] = n
		f.pos[s] = len(f.b[n])
		f.b[n] = append(f.b[n], s)
	}
}

func (f *freeIndex) del(s int) {
	k := f.at[s]
	l := f.b[k]
	i := f.pos[s]
	last := l[len(l)-1]
	l[i] = last
	f.pos[last] = i
	f.b[k] = l[:len(l)-1]
}

func (f *freeIndex) set(s, n int) {
	n = min(max(n, 0), len(f.b)-1)
	if f.at[s] == n {
		return
	}
	f.moved(s, f.at[s], n)
	f.del(s)
	f.at[s] = n
	f.pos[s] = len(f.b[n])
	f.b[n] = append(f.b[n], s)
}

// any returns a server with exactly k free GPUs (the most recently
// bucketed one: deterministic for a given sequence of moves).
func (f *freeIndex) any(k int) (int, bool) {
	if k <= 0 || k >= len(f.b) || len(f.b[k]) == 0 {
		return 0, false
	}
	l := f.b[k]
	return l[len(l)-1], true
}

// skip takes s out of bucket k until unskip (used when a server has GPUs
// but no cores left).
func (f *freeIndex) skip(k, s int) bool {
	if f.at[s] != k {
		return false
	}
	f.moved(s, k, 0)
	f.del(s)
	f.at[s] = 0
	f.pos[s] = len(f.b[0])
	f.b[0] = append(f.b[0], s)
	f.skipped = append(f.skipped, struct{ k, s int }{k, s})
	return true
}

func (f *freeIndex) unskip() {
	for _, x := range f.skipped {
		if f.at[x.s] == 0 {
			f.set(x.s, x.k)
		}
	}
	f.skipped = f.skipped[:0]
}

// takeFewestRacks gives job j need free GPUs over as few racks as it can,
// when no one rack has them: each step takes the rack that alone holds
// what is still needed with the least room to spare, else the rack with
// the most free GPUs, its servers fullest first. Every rack a job spans
// puts its communication on that rack's spine uplink, where other jobs
// spanning racks share it; the generic fill (the servers with the most
// free GPUs, wherever they are) can spread a 32-GPU job over four racks
// of 24 GPUs where two do. It returns how many it got (0 or need).
func (st *state) takeFewestRacks(j, need int) int { return st.takeFewestRacksExcept(j, need, -1) }

// takeFewestRacksExcept is takeFewestRacks without rack except (-1: none).
func (st *state) takeFewestRacksExcept(j, need, except int) int {
	js := &st.jobs[j]
	cpg := max(js.cpg, 1)
	room := func(s int) int { return max(min(st.free[s], st.freeCPU[s]/cpg), 0) }
	h := &st.idx
	mark := len(st.journal)
	used := make([]bool, len(st.racks))
	if except >= 0 && except < len(used) {
		used[except] = true
	}
	got := 0
	for got < need {
		rest := need - got
		fit, big := -1, -1
		for r := range st.racks {
			if used[r] || h.rfree[r] == 0 {
				continue
			}
			if f := h.rfree[r]; f >= rest && (fit < 0 || f < h.rfree[fit]) {
				fit = r
			}
			if big < 0 || h.rfree[r] > h.rfree[big] {
				big = r
			}
		}
		r := fit
		if r < 0 {
			r = big
		}
		if r < 0 {
			break
		}
		used[r] = true
		got += st.fillRack(j, r, need-got, room)
	}
	if got < need {
		// cores, not GPUs, ran short: leave it to the generic fill
		st.rollback(mark)
		return 0
	}
	return got
}

// fillRack gives job j up to need GPUs of rack r, its servers with the
// most room first (room: what a server can give the job). It returns how
// many it got.
func (st *state) fillRack(j, r, need int, room func(s int) int) int {
	servers := append([]int(nil), st.racks[r]...)
	sort.SliceStable(servers, func(a, b int) bool { return room(servers[a]) > room(servers[b]) })
	got := 0
	for _, s := range servers {
		if got == need {
			break
		}
		if n := min(room(s), need-got); n > 0 {
			st.move(j, s, n)
			got += n
		}
	}
	return got
}

// takeRack gives job j need free GPUs inside one rack, when a rack has
// them: the rack it already uses first, else the rack where it needs the
// fewest servers (then the one with the least room); its servers with the
// most free GPUs first. Racks are ranked by their free-GPU histograms
// (O(racks × GPUs per server), no sorting); only the chosen rack's
// servers are sorted. It returns how many it got (0 or need).
func (st *state) takeRack(j, need int) int {
	js := &st.jobs[j]
	cpg := max(js.cpg, 1)
	room := func(s int) int { return max(min(st.free[s], st.freeCPU[s]/cpg), 0) }
	h := &st.idx
	// The servers rack r needs for need GPUs, fullest first.
	serversFor := func(r int) (int, bool) {
		if h.rfree[r] < need {
			return 0, false
		}
		n, got := 0, 0
		for k := len(h.b) - 1; k >= 1 && got < need; k-- {
			if c := h.rcnt[r][k]; c > 0 {
				m := min(c, (need-got+k-1)/k)
				n += m
				got += m * k
			}
		}
		return n, got >= need
	}
	best, bestN, bestFree := -1, 0, 0
	consider := func(r int) {
		n, ok := serversFor(r)
		if !ok {
			return
		}
		if best < 0 || n < bestN || n == bestN && h.rfree[r] < bestFree {
			best, bestN, bestFree = r, n, h.rfree[r]
		}
	}
	if len(js.alloc) > 0 {
		consider(st.rackOf[js.alloc[0].Server])
	}
	if best < 0 {
		for r := range st.racks {
			consider(r)
		}
	}
	if best < 0 {
		return 0
	}
	mark := len(st.journal)
	got := st.fillRack(j, best, need, room)
	if got < need {
		// cores, not GPUs, ran short there: take nothing here
		st.rollback(mark)
		return 0
	}
	return got
}
