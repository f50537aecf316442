package cluster

import (
	"os"
	"strings"
	"testing"
)

// FuzzParseInventory checks that Parse never panics, and that it returns
// exactly one of an inventory or problems that each name the file.
func FuzzParseInventory(f *testing.F) {
	if data, err := os.ReadFile("../inventory.yaml"); err == nil {
		f.Add(data)
	}
	f.Add([]byte(good))
	f.Add([]byte(labelled))
	f.Add([]byte("version: 1\nservers: [\n"))
	f.Add([]byte("version: 1\nracks: {}\nservers: [1]\ntenants: 3\nssh: []\n"))
	f.Add([]byte("version: 1\na: &a [x, x]\nb: &b [*a, *a]\nservers: [*b]\n"))
	f.Add([]byte("version: 1\nservers:\n  - &s {name: x, address: y, rack: r}\n  - *s\nracks: [{name: r, spine_gbps: .5e1}]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		inv, err := Parse("f.yaml", data, testOpts)
		if (inv == nil) == (err == nil) {
			t.Fatalf("inv=%v err=%v: want exactly one", inv != nil, err)
		}
		for _, p := range Problems(err) {
			if !strings.HasPrefix(p.Error(), "f.yaml") {
				t.Fatalf("problem without file: %q", p.Error())
			}
		}
		if inv != nil {
			topo := NewTopology(inv)
			for _, s := range inv.Servers {
				if s.GPUs <= 0 || s.Port <= 0 || s.Name == "" {
					t.Fatalf("invalid server accepted: %+v", s)
				}
				if _, err := topo.TierBetween(s.Name, inv.Servers[0].Name); err != nil {
					t.Fatal(err)
				}
			}
		}
	})
}
