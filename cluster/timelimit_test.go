package cluster

import (
	"strings"
	"testing"
	"time"
)

func TestParseTenantTimeLimits(t *testing.T) {
	src := good + "  - {name: u, time_limit_default: 12h, time_limit_max: 2d}\n"
	inv, err := Parse("x.yaml", []byte(src), testOpts)
	if err != nil {
		t.Fatal(err)
	}
	u := inv.Tenants[1]
	if u.TimeLimitDefault != 12*time.Hour || u.TimeLimitMax != 48*time.Hour || inv.Tenants[0].TimeLimitMax != 0 {
		t.Errorf("tenants %+v", inv.Tenants)
	}
	for add, want := range map[string]string{
		"  - {name: u, time_limit_default: 3d, time_limit_max: 2d}\n": `x.yaml:20: tenants[1].time_limit_default: the default 3d is above the tenant's time_limit_max 2d`,
		"  - {name: u, time_limit_max: 12}\n":                         `x.yaml:20: tenants[1].time_limit_max: want a duration like 12h, 90m, 1h30m or 2d, got "12"`,
		"  - {name: u, time_limit_default: 0s}\n":                     `x.yaml:20: tenants[1].time_limit_default: a time limit must be at least 1s`,
	} {
		_, err := Parse("x.yaml", []byte(good+add), testOpts)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", add, err, want)
		}
	}
}
