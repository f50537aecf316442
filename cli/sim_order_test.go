package cli

import (
	"strings"
	"testing"
)

// replan sim --order: applied to replan, refused with a list that has no
// replan, and an unknown order names the choices.
func TestSimPoliciesOrder(t *testing.T) {
	if _, err := simPolicies("replan,morphling", "submission", 260); err != nil {
		t.Errorf("replan,morphling in submission order: %v", err)
	}
	for _, c := range []struct{ list, order, want string }{
		{"morphling", "submission", "only replan takes an order"},
		{"replan", "fifo", "want one of shortest, submission"},
	} {
		if _, err := simPolicies(c.list, c.order, 260); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("--policy %s --order %s: %v, want %q", c.list, c.order, err, c.want)
		}
	}
}

// replan daemon --order: refused before anything is opened when the
// policy is not replan.
func TestDaemonOrderRefusedForOtherPolicies(t *testing.T) {
	o := daemonOptions{policy: "morphling", order: "shortest"}
	if _, err := o.newPolicy(); err == nil || !strings.Contains(err.Error(), "--order") {
		t.Errorf("morphling --order shortest: %v, want an --order error", err)
	}
	o = daemonOptions{policy: "replan", order: "submission"}
	if _, err := o.newPolicy(); err != nil {
		t.Errorf("replan --order submission: %v", err)
	}
}
