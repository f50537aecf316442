package sched

// AntMan's preemption (NewAntMan): a guaranteed job within its tenant's
// quota that does not fit takes GPUs from best-effort jobs, and only from
// those whose GPUs it actually needs. AntMan (OSDI'20) keeps
// opportunistic jobs running until a guaranteed job needs their
// resources; a best-effort job stopped on the way to a placement that
// ended up elsewhere is given its GPUs back the same round, so it is not
// restarted for nothing.

// victim is a best-effort job preempted for a guaranteed one, with what
// it held before.
type victim struct {
	job     int
	alloc   []Alloc
	touched bool
}

// preemptFor stops running best-effort jobs (beRunning, in preemption
// order) one at a time until guaranteed job i fits; it returns whether
// it does, why not, and the jobs it stopped.
func (f *FIFO) preemptFor(st *state, i int, beRunning []int, why string) (bool, string, []victim) {
	var victims []victim
	stop := func(v int) bool {
		vs := &st.jobs[v]
		if vs.total == 0 || !st.onAllowed(v, i) {
			return false
		}
		victims = append(victims, victim{job: v, alloc: append([]Alloc(nil), vs.alloc...), touched: vs.touched})
		for len(vs.alloc) > 0 {
			a := vs.alloc[0]
			st.move(v, a.Server, -a.GPUs)
		}
		vs.touched = true
		st.circleChanged(v)
		vs.preemptWhy = "preempted for guaranteed job " + st.jobs[i].job.ID + ", which needs its GPUs"
		return true
	}
	// A job that fits on one server: stop the fewest GPUs' worth of
	// best-effort jobs on the one server that frees enough.
	if s := cheapestServer(st, i, beRunning); s >= 0 {
		for _, v := range beRunning {
			if st.free[s] >= st.jobs[i].job.ReqGPUs {
				break
			}
			if holds(st, v, s) {
				stop(v)
			}
		}
		if ok, _ := f.place(st, i); ok {
			return true, "", victims
		}
	}
	for _, v := range beRunning {
		if !stop(v) {
			continue
		}
		ok, w := f.place(st, i)
		if ok {
			return true, "", victims
		}
		why = w
	}
	return false, why, victims
}

// holds reports whether job v holds GPUs on server s.
func holds(st *state, v, s int) bool {
	for _, a := range st.jobs[v].alloc {
		if a.Server == s && a.GPUs > 0 {
			return true
		}
	}
	return false
}

// cheapestServer is the server where guaranteed job i, which fits on one
// server, would have the fewest best-effort GPUs stopped (taken in
// beRunning's order, whole jobs), or -1.
func cheapestServer(st *state, i int, beRunning []int) int {
	need := st.jobs[i].job.ReqGPUs
	if need <= 0 || need > st.maxPer {
		return -1
	}
	allow := st.jobs[i].allow
	best, bestCost := -1, 0
	for s := range st.free {
		if allow != nil && !allow[s] {
			continue
		}
		free, cost := st.free[s], 0
		for _, v := range beRunning {
			if free >= need {
				break
			}
			for _, a := range st.jobs[v].alloc {
				if a.Server == s && a.GPUs > 0 {
					free += a.GPUs
					cost += st.jobs[v].total
				}
			}
		}
		if free >= need && (best < 0 || cost < bestCost) {
			best, bestCost = s, cost
		}
	}
	return best
}

// restoreUnneeded gives every victim whose GPUs (and cores) are all still
// free after the placement its allocation back, latest victim first.
func restoreUnneeded(st *state, victims []victim) {
	for k := len(victims) - 1; k >= 0; k-- {
		v := victims[k]
		// Only an allocation move can rebuild exactly (its cores are a
		// multiple of its GPUs) comes back; any other stays preempted.
		fits := true
		cpg := st.jobs[v.job].cpg
		for _, a := range v.alloc {
			if a.CPUs != a.GPUs*cpg || st.free[a.Server] < a.GPUs || st.freeCPU[a.Server] < a.CPUs {
				fits = false
				break
			}
		}
		if !fits {
			continue
		}
		for _, a := range v.alloc {
			st.move(v.job, a.Server, a.GPUs)
		}
		sortAlloc(st.jobs[v.job].alloc)
		st.jobs[v.job].touched = v.touched
		st.circleChanged(v.job)
		st.jobs[v.job].preemptWhy = ""
	}
}
