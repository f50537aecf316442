package cli

import (
	"strings"
	"testing"
)

// replan sim --order: applied to replan, refused with a list that has no
// replan, and an unknown order names the choices.
func TestSimPoliciesOrder(t *testing.T) {
	if _, err := simPolicies("replan,morphling", "submission", "", 260); err != nil {
		t.Errorf("replan,morphling in submission order: %v", err)
	}
	for _, c := range []struct{ list, order, want string }{
		{"morphling", "submission", "only replan takes an order"},
		{"replan", "fifo", "want one of shortest, submission"},
	} {
		if _, err := simPolicies(c.list, c.order, "", 260); err == nil || !strings.Contains(err.Error(), c.want) {
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

// replan sim --hold: applied to replan, refused with a list that has no
// replan, and an unknown hold names the choices; replan daemon --hold is
// refused for another policy before anything is opened.
func TestSimAndDaemonHold(t *testing.T) {
	if _, err := simPolicies("replan,morphling", "", "unpriced", 260); err != nil {
		t.Errorf("replan,morphling with the hold unpriced: %v", err)
	}
	for _, c := range []struct{ list, hold, want string }{
		{"morphling", "off", "only replan has an uplink hold"},
		{"replan", "strict", "want one of priced, unpriced, off"},
	} {
		if _, err := simPolicies(c.list, "", c.hold, 260); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("--policy %s --hold %s: %v, want %q", c.list, c.hold, err, c.want)
		}
	}
	o := daemonOptions{policy: "dally", hold: "priced"}
	if _, err := o.newPolicy(); err == nil || !strings.Contains(err.Error(), "--hold") {
		t.Errorf("dally --hold priced: %v, want a --hold error", err)
	}
	o = daemonOptions{policy: "replan", hold: "off"}
	if _, err := o.newPolicy(); err != nil {
		t.Errorf("replan --hold off: %v", err)
	}
}
