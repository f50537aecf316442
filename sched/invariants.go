package sched

import (
	"fmt"
	"math"

	"github.com/replan/replan/perf"
)

// CheckInvariants reports the first way applying d to s would break the
// cluster's rules, or nil when it would not. It is pure and cheap
// (O(jobs + servers + decisions)), so a simulator runs it after every
// round and a daemon can run it before it applies a round:
//
//   - every decision names a job of s by its index and ID, at most once;
//     a start names a waiting job, a reconfigure or preempt a running one;
//   - a start or reconfigure has GPUs on known servers, no server twice,
//     no negative counts, and a plan of exactly its GPUs when the plan is
//     set;
//   - the Placement of a start or reconfigure, when set, is its
//     allocation's (GPUs per server, fullest first);
//   - a plan's tensor-parallel groups stay inside a server: every server
//     of the allocation holds a multiple of TP;
//   - a job with labels holds GPUs only on servers that carry them;
//   - a plan keeps the job's global batch (its running plan's, else its
//     requested plan's, else its model type's);
//   - when the snapshot has tenants, the guaranteed jobs of each hold at
//     most its quota after the round (a tenant not listed has none), or
//     no more than they held before it (a quota lowered under them);
//   - after the round no server has more GPUs, cores or host memory in
//     use than it has (what the snapshot says is held outside its jobs
//     counts as in use).
func CheckInvariants(s Snapshot, d Decisions) error {
	seen := make(map[int]bool, len(d.Actions))
	changed := make(map[int]*Decision, len(d.Actions))
	for n := range d.Actions {
		a := &d.Actions[n]
		if a.Index < 0 || a.Index >= len(s.Jobs) || s.Jobs[a.Index].ID != a.Job {
			return fmt.Errorf("decision %d (%s %s): index %d does not name that job of the snapshot", n, a.Kind, a.Job, a.Index)
		}
		if seen[a.Index] {
			return fmt.Errorf("job %s: two decisions in one round", a.Job)
		}
		seen[a.Index] = true
		j := &s.Jobs[a.Index]
		switch a.Kind {
		case Start:
			if j.Running() {
				return fmt.Errorf("job %s: start of a running job", a.Job)
			}
		case Reconfigure, Preempt:
			if !j.Running() {
				return fmt.Errorf("job %s: %s of a job that is not running", a.Job, a.Kind)
			}
		default:
			return fmt.Errorf("job %s: unknown decision kind %d", a.Job, a.Kind)
		}
		if a.Kind == Preempt {
			changed[a.Index] = a
			continue
		}
		if len(a.Alloc) == 0 {
			return fmt.Errorf("job %s: %s with no allocation", a.Job, a.Kind)
		}
		gpus := 0
		on := make(map[int]bool, len(a.Alloc))
		for _, al := range a.Alloc {
			if al.Server < 0 || al.Server >= len(s.Servers) {
				return fmt.Errorf("job %s: %s on unknown server %d", a.Job, a.Kind, al.Server)
			}
			if on[al.Server] {
				return fmt.Errorf("job %s: server %s twice in one allocation", a.Job, s.Servers[al.Server].ID)
			}
			on[al.Server] = true
			if al.GPUs < 0 || al.CPUs < 0 || al.MemGB < 0 || math.IsNaN(al.MemGB) {
				return fmt.Errorf("job %s: negative share of server %s (%d GPUs, %d cores, %.1f GiB)", a.Job, s.Servers[al.Server].ID, al.GPUs, al.CPUs, al.MemGB)
			}
			gpus += al.GPUs
		}
		if gpus == 0 {
			return fmt.Errorf("job %s: %s with no GPUs", a.Job, a.Kind)
		}
		if a.Plan.DP > 0 && a.Plan.GPUs() != gpus {
			return fmt.Errorf("job %s: plan %s for %d GPUs on %d", a.Job, a.Plan, a.Plan.GPUs(), gpus)
		}
		if pl := placementOf(a.Alloc); len(a.Placement) > 0 && !samePlacement(pl, a.Placement) {
			return fmt.Errorf("job %s: placement %s, its allocation is %s", a.Job, a.Placement, pl)
		}
		if tp := a.Plan.TP; tp > 1 {
			for _, al := range a.Alloc {
				if al.GPUs%tp != 0 {
					return fmt.Errorf("job %s: plan %s puts a TP group across servers: %d GPUs on server %s", a.Job, a.Plan, al.GPUs, s.Servers[al.Server].ID)
				}
			}
		}
		if err := checkLabels(s, j, a); err != nil {
			return err
		}
		if want := globalBatch(j); want > 0 && a.Plan.DP > 0 && a.Plan.MicroBatch > 0 && a.Plan.GlobalBatch() != want {
			return fmt.Errorf("job %s: plan %s changes the global batch from %d to %d", a.Job, a.Plan, want, a.Plan.GlobalBatch())
		}
		changed[a.Index] = a
	}
	n := len(s.Servers)
	gpu := make([]int, n)
	cpu := make([]int, n)
	mem := make([]float64, n)
	// What the snapshot holds outside its jobs: capacity - free - jobs.
	for i, sv := range s.Servers {
		gpu[i] = sv.GPUs - sv.FreeGPUs
		cpu[i] = sv.CPUs - sv.FreeCPUs
		mem[i] = sv.MemGB - sv.FreeMemGB
	}
	for k := range s.Jobs {
		for _, al := range s.Jobs[k].Alloc {
			if al.Server < 0 || al.Server >= n {
				return fmt.Errorf("snapshot: job %s on unknown server %d", s.Jobs[k].ID, al.Server)
			}
			gpu[al.Server] -= al.GPUs
			cpu[al.Server] -= al.CPUs
			mem[al.Server] -= al.MemGB
		}
	}
	for i := range s.Servers {
		gpu[i], cpu[i], mem[i] = max(gpu[i], 0), max(cpu[i], 0), math.Max(mem[i], 0)
	}
	for k := range s.Jobs {
		al := s.Jobs[k].Alloc
		if a := changed[k]; a != nil {
			al = a.Alloc // nil for a preemption
		}
		for _, x := range al {
			gpu[x.Server] += x.GPUs
			cpu[x.Server] += x.CPUs
			mem[x.Server] += x.MemGB
		}
	}
	if err := checkQuotas(s, changed); err != nil {
		return err
	}
	for i, sv := range s.Servers {
		switch {
		case gpu[i] > sv.GPUs:
			return fmt.Errorf("server %s over-committed: %d of %d GPUs in use", sv.ID, gpu[i], sv.GPUs)
		case cpu[i] > sv.CPUs:
			return fmt.Errorf("server %s over-committed: %d of %d cores in use", sv.ID, cpu[i], sv.CPUs)
		case mem[i] > sv.MemGB*(1+1e-9)+1e-6:
			return fmt.Errorf("server %s over-committed: %.1f of %.1f GiB of host memory in use", sv.ID, mem[i], sv.MemGB)
		}
	}
	return nil
}

// samePlacement reports whether two placements are equal.
func samePlacement(a, b perf.Placement) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// globalBatch is the job's fixed global batch: its running plan's, else
// its requested plan's, else its model type's (0: unknown).
func globalBatch(j *Job) int {
	for _, p := range []perf.Plan{j.Plan, j.ReqPlan} {
		if p.DP > 0 && p.MicroBatch > 0 && p.GA > 0 {
			return p.GlobalBatch()
		}
	}
	if j.Model != nil {
		return j.Model.Arch.GlobalBatch
	}
	return 0
}

// checkQuotas is CheckInvariants' quota rule: the GPUs each tenant's
// guaranteed jobs hold after the round (changed: the round's decisions by
// job index) stay within its quota, or do not grow.
func checkQuotas(s Snapshot, changed map[int]*Decision) error {
	if len(s.Tenants) == 0 {
		return nil
	}
	quota := make(map[string]int, len(s.Tenants))
	for _, t := range s.Tenants {
		quota[t.Name] = t.QuotaGPUs
	}
	before, after := map[string]int{}, map[string]int{}
	for k := range s.Jobs {
		j := &s.Jobs[k]
		if j.Class != Guaranteed {
			continue
		}
		g := j.GPUs()
		before[j.Tenant] += g
		if a := changed[k]; a != nil {
			g = 0
			for _, al := range a.Alloc {
				g += al.GPUs
			}
		}
		after[j.Tenant] += g
	}
	for t, n := range after {
		if q := quota[t]; n > q && n > before[t] {
			return fmt.Errorf("tenant %s: its guaranteed jobs would hold %d GPUs, its quota is %d", t, n, q)
		}
	}
	return nil
}
