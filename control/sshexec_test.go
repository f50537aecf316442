package control

import "testing"

func TestParseCheckpointMarker(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int
		bad  bool
	}{
		{"", 0, false}, {"120\n", 120, false}, {"global_step120", 120, false}, {" global_step7 \n", 7, false},
		{"iter_0000500", 500, false}, {"latest-tag", 0, true},
	} {
		got, err := ParseCheckpointMarker(c.in)
		if (err != nil) != c.bad || got != c.want {
			t.Errorf("ParseCheckpointMarker(%q) = %d, %v; want %d (error %v)", c.in, got, err, c.want, c.bad)
		}
	}
}

func TestProcessIDs(t *testing.T) {
	id := ProcessID("j-000042", 3, 1)
	if id != "j-000042-a3-r1" {
		t.Fatalf("ProcessID = %s", id)
	}
	if a, r, ok := parseProcessID("j-000042", id); !ok || a != 3 || r != 1 {
		t.Errorf("parseProcessID(%s) = %d %d %v", id, a, r, ok)
	}
	for _, other := range []string{"j-0000421-a3-r1", "j-000042-a3", "j-000042-ax-r1", "train-1"} {
		if _, _, ok := parseProcessID("j-000042", other); ok {
			t.Errorf("parseProcessID accepted %s", other)
		}
	}
	for id, want := range map[string]bool{"j-000001-a0-r0": true, "my-job-a12-r3": true, "train-1": false, "j-1-a0": false} {
		if got := isJobProcessID(id); got != want {
			t.Errorf("isJobProcessID(%s) = %v", id, got)
		}
	}
}
