package sched_test

import (
	"testing"

	"github.com/replan/replan/sched"
)

// TestPackedGrowCountsOnlyWhatAJobCanGive is issue 29's packed-placement
// defect: a waiting guaranteed job's packed placement (Algorithm 1's
// node-by-node search, packedGrow) counted every GPU of a job above its
// minRes as room on its server, though such a job gives back only what
// it holds above its minRes. A guaranteed job that asked for 2 GPUs and
// grew to 8 on server 0 made that server look as roomy as the servers
// of best-effort jobs; it was picked first (lowest index), gave 6, and
// the packed search failed although three servers of best-effort jobs
// could give 8 each. (On the mt trace, llama30-85, 40 GPUs, waited
// behind bert-82 this way.)
func TestPackedGrowCountsOnlyWhatAJobCanGive(t *testing.T) {
	for _, name := range []string{"bert", "t5", "gpt2"} {
		m := model(t, name)
		bert := model(t, "bert")
		a := running(t, waiting(t, "a", bert, 2, 0), 0, 8) // guaranteed, minRes ≤ 2, holds 8
		a.Class, a.Tenant = sched.Guaranteed, "A"
		b := running(t, waiting(t, "b", bert, 8, 1), 1, 8)
		c := running(t, waiting(t, "c", bert, 8, 2), 2, 8)
		e := running(t, waiting(t, "e", bert, 8, 3), 3, 8)
		g := waiting(t, "g", m, 24, 5)
		g.Class, g.Tenant = sched.Guaranteed, "A"
		for _, p := range []sched.Policy{sched.NewResourcesOnly(cheap()), sched.NewMorphling(cheap()), sched.NewReplan(cheap(), sched.DefaultNetOptions())} {
			s := snapshot(servers(4, 8), a, b, c, e, g)
			s.Tenants = []sched.Tenant{{Name: "A", QuotaGPUs: 32}, {Name: "B"}}
			min := p.(*sched.Morphling).MinRes(&s.Jobs[4], 8)
			d := p.Schedule(s)
			st, ok := find(d, "g")
			if !ok || st.Kind != sched.Start {
				t.Errorf("%s/%s: guaranteed job (minRes %d) not started on a cluster whose servers 1-3 hold only best-effort jobs: %q", name, p.Name(), min.GPUs, reason(d, "g"))
				continue
			}
			if err := sched.CheckInvariants(s, d); err != nil {
				t.Error(err)
			}
			checkCapacity(t, s, d)
			if want := (min.GPUs + 7) / 8; len(st.Alloc) != want {
				t.Errorf("%s/%s: started on %v (%s), want %d GPUs packed on %d servers", name, p.Name(), st.Alloc, st.Placement, min.GPUs, want)
			}
			for _, al := range st.Alloc {
				if al.Server == 0 {
					t.Errorf("%s/%s: took GPUs on server 0 from guaranteed job a: %v", name, p.Name(), st.Alloc)
				}
			}
		}
	}
}
