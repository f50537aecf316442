package tui

import (
	"os/exec"
	"strings"
	"testing"
)

// The TUI reads the control API only: neither it nor its screens may reach
// ssh/ or the SQLite store, even indirectly. tui/controlbackend imports
// control for its Client, and control's package also holds the store and
// the SSH executor, so for the adapter only its own imports are checked
// (until control's client and API types live in a package of their own).
func TestLayering(t *testing.T) {
	if testing.Short() {
		t.Skip("go list")
	}
	check := func(pkgs string, banned ...string) {
		t.Helper()
		out, err := exec.Command("go", append([]string{"list", "-deps"}, strings.Fields(pkgs)...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("go list: %v\n%s", err, out)
		}
		for _, dep := range strings.Fields(string(out)) {
			for _, b := range banned {
				if dep == b || strings.HasPrefix(dep, b+"/") {
					t.Errorf("%s depends on %s", pkgs, dep)
				}
			}
		}
	}
	check("github.com/replan/replan/tui github.com/replan/replan/tui/cluster github.com/replan/replan/tui/queue github.com/replan/replan/tui/jobs github.com/replan/replan/tui/jobdetail github.com/replan/replan/tui/events github.com/replan/replan/tui/common github.com/replan/replan/tui/data",
		"github.com/replan/replan/ssh", "modernc.org/sqlite", "github.com/replan/replan/control", "github.com/replan/replan/sched")
	out, err := exec.Command("go", "list", "-f", `{{join .Imports "\n"}}`, "github.com/replan/replan/tui/controlbackend").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, imp := range strings.Fields(string(out)) {
		if strings.HasSuffix(imp, "/ssh") || strings.Contains(imp, "sqlite") {
			t.Errorf("tui/controlbackend imports %s", imp)
		}
	}
}
