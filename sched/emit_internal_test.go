package sched

import "testing"

// TestGainIndexNamesOnlyWhatIsCertain: allocations count GPUs per
// server, so a job that gained GPUs where another gave some up did not
// necessarily take them: they may have been free. The index names the
// other job only when the free GPUs (and the other jobs' give-ups) could
// not have covered the gain.
func TestGainIndexNamesOnlyWhatIsCertain(t *testing.T) {
	jobs := []Job{
		{ID: "a", Alloc: []Alloc{{Server: 0, GPUs: 4}}}, // gives up 2 on server 0
		{ID: "w"}, // starts with 2 on server 0
		{ID: "x"}, // starts with 4 on server 1
		{ID: "b", Alloc: []Alloc{{Server: 1, GPUs: 8}}}, // gives up 4 on server 1
	}
	for _, c := range []struct {
		name  string
		free  []int // per server, after the round
		wFrom string
		aFor  string
		xFrom string
		bFor  string
	}{
		// server 0: 2 free before the round (and after: a gave up 2, w
		// took 2), so w's 2 could be the free ones; server 1: nothing
		// free before, so x took b's
		{name: "free covers w", free: []int{2, 0}, wFrom: "", aFor: "", xFrom: "b", bFor: "x"},
		// server 0: nothing free before (a gave up 2, w took 2, 0 after)
		{name: "w took a's", free: []int{0, 0}, wFrom: "a", aFor: "w", xFrom: "b", bFor: "x"},
	} {
		st := &state{free: c.free, jobs: make([]jstate, len(jobs))}
		after := [][]Alloc{{{Server: 0, GPUs: 2}}, {{Server: 0, GPUs: 2}}, {{Server: 1, GPUs: 4}}, {{Server: 1, GPUs: 4}}}
		for i := range jobs {
			st.jobs[i] = jstate{job: &jobs[i], alloc: after[i], total: after[i][0].GPUs}
			for _, a := range jobs[i].Alloc {
				st.jobs[i].orig += a.GPUs
			}
		}
		var g gainIndex
		for _, x := range []struct {
			got, want, what string
		}{
			{g.from(st, 1), c.wFrom, "w from"},
			{g.of(st, 0), c.aFor, "a for"},
			{g.from(st, 2), c.xFrom, "x from"},
			{g.of(st, 3), c.bFor, "b for"},
		} {
			if x.got != x.want {
				t.Errorf("%s: %s = %q, want %q", c.name, x.what, x.got, x.want)
			}
		}
	}
}
