package cluster

import "testing"

func TestPlacementText(t *testing.T) {
	for _, c := range []struct {
		in   []int
		want string
	}{
		{[]int{8, 8}, "2 servers × 8 GPUs"},
		{[]int{4}, "1 server × 4 GPUs"},
		{[]int{1}, "1 server × 1 GPU"},
		{[]int{1, 2, 2, 1}, "4 servers (2+2+1+1 GPUs)"},
		{[]int{16, 16}, "2 servers × 16 GPUs"},
		{nil, "no GPUs"},
	} {
		if got := PlacementText(c.in); got != c.want {
			t.Errorf("PlacementText(%v) = %q, want %q", c.in, got, c.want)
		}
	}
	if got := ServerGPUs("a800-03", []int{3, 1, 0, 2}); got != "a800-03 [0-3]" {
		t.Errorf("ServerGPUs = %q", got)
	}
	if got := ServerGPUs("a800-01", []int{0, 1, 2, 3, 6}); got != "a800-01 [0-3,6]" {
		t.Errorf("ServerGPUs = %q", got)
	}
}
