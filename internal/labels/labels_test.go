package labels

import (
	"slices"
	"testing"
)

func TestMatch(t *testing.T) {
	have := map[string]string{"ib-hdr": "", "gpu": "a800-80g"}
	for _, c := range []struct {
		want []string
		ok   bool
	}{
		{nil, true},
		{[]string{"ib-hdr"}, true},
		{[]string{"gpu"}, true},
		{[]string{"gpu=a800-80g", "ib-hdr"}, true},
		{[]string{"gpu=h100"}, false},
		{[]string{"ib-hdr=x"}, false},
		{[]string{"ib-hdr", "roce"}, false},
	} {
		if got := Match(have, c.want); got != c.ok {
			t.Errorf("Match(%v) = %v", c.want, got)
		}
	}
	if m := Missing(have, []string{"roce", "ib-hdr", "gpu=h100"}); !slices.Equal(m, []string{"roce", "gpu=h100"}) {
		t.Errorf("Missing %v", m)
	}
	if f := Format(have); f != "gpu=a800-80g,ib-hdr" {
		t.Errorf("Format %q", f)
	}
}

func TestCheckRequirement(t *testing.T) {
	for _, ok := range []string{"a", "ib-hdr", "nvidia.com/gpu", "gpu=a800-80g", "A_1"} {
		if err := CheckRequirement(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "-a", "a-", "a b", "a=", "=a", "a=b c", "a=b=c", "é", string(make([]byte, 64))} {
		if CheckRequirement(bad) == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
