package fleet_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDeps keeps fleet an operations layer over cluster, ssh and agent:
// no TUI, scheduling, performance model, control plane or store.
func TestDeps(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("go tool not on PATH")
	}
	const module = "github.com/replan/replan"
	out, err := exec.Command("go", "list", "-deps", module+"/fleet").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	bad := []string{module + "/tui", module + "/sched", module + "/perf", module + "/control", module + "/sim",
		"charm.land/", "github.com/charmbracelet/", "gonum.org/", "modernc.org/sqlite"}
	for _, dep := range strings.Fields(string(out)) {
		for _, b := range bad {
			if dep == b || strings.HasPrefix(dep, b+"/") || (strings.HasSuffix(b, "/") && strings.HasPrefix(dep, b)) {
				t.Errorf("fleet must not depend on %s (found %s)", b, dep)
			}
		}
	}
}
