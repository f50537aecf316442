package control

import (
	"testing"

	"github.com/replan/replan/launch"
)

// TestPlacementWords: events and reasons name servers and GPU indices,
// never the compact "88".
func TestPlacementWords(t *testing.T) {
	one := []launch.Server{{Name: "a800-03", GPUs: []int{0, 1, 2, 3}}}
	if got := placementWords(one); got != "a800-03 [0-3]" {
		t.Errorf("one server: %q", got)
	}
	two := []launch.Server{{Name: "a800-01", GPUs: []int{0, 1, 2, 3, 4, 5, 6, 7}}, {Name: "a800-02", GPUs: []int{0, 1, 2, 3, 4, 5, 6, 7}}}
	if got := placementWords(two); got != "2 servers × 8 GPUs: a800-01 [0-7], a800-02 [0-7]" {
		t.Errorf("two servers: %q", got)
	}
}

// TestIterationsCount: "finished after 1 iteration", not "1 iterations"
// (the Morphling traces hold jobs of one step).
func TestIterationsCount(t *testing.T) {
	for n, want := range map[int]string{0: "0 iterations", 1: "1 iteration", 2: "2 iterations", 1867: "1867 iterations"} {
		if got := iterations(n); got != want {
			t.Errorf("iterations(%d) = %q, want %q", n, got, want)
		}
	}
}
