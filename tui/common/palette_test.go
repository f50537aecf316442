package common

import (
	"fmt"
	"testing"
)

// TestLettersNeverRepeat: with more live jobs than letters, no letter
// names two jobs (the ones past the letters share Overflow).
func TestLettersNeverRepeat(t *testing.T) {
	p := NewPalette()
	var live []string
	for i := range 80 {
		live = append(live, fmt.Sprintf("j-%06d", i))
	}
	p.Retain(live)
	seen := map[string]string{}
	over := 0
	for _, id := range live {
		l := p.Letter(id)
		if l == Overflow {
			over++
			continue
		}
		if other, ok := seen[l]; ok {
			t.Fatalf("letter %q names both %s and %s", l, other, id)
		}
		seen[l] = id
	}
	if len(seen) != len(letters) || over != 80-len(letters) {
		t.Errorf("%d letters used, %d overflow", len(seen), over)
	}
}
