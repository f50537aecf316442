package sim

import (
	"testing"
)

// TestCassiniShiftsOneShiftChain: on 4 racks three 32-GPU jobs run at
// once, the uplinks they share in a chain (r1–r2, r2–r3, ...), so a job
// started between two running ones has two uplinks to fit with one shift.
// The affinity graph's pass fitted it to the first and dropped the other
// (every job there running): on seed 5's first 20 jobs (Poisson, 4:1) the
// shifts removed 4 % of what sharing adds, trajectory held. With the one
// shift chosen against all its uplinks (sched's refineShifts) they remove
// more than a third.
func TestCassiniShiftsOneShiftChain(t *testing.T) {
	if CassiniRacks(5) != 4 {
		t.Fatalf("seed 5 runs on %d racks, want 4 (a chain of shared uplinks)", CassiniRacks(5))
	}
	r := cassiniSharing(t, CassiniWorkload(5, false))
	x := r.CommShared / r.CommSharedUnshifted
	t.Logf("sharing %.2f h with the shifts, %.2f h unshifted (%.2f×)", r.CommShared/3600, r.CommSharedUnshifted/3600, x)
	if x > 2.0/3 {
		t.Fatalf("sharing adds %.2f h with the shifts, %.2f h unshifted (%.2f×): want under 2/3", r.CommShared/3600, r.CommSharedUnshifted/3600, x)
	}
}
