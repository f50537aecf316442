// Package layers holds the test that keeps replan's package layers honest:
// it runs `go list -deps` and fails when a package imports what DESIGN.md
// says it must not.
package layers

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/replan/replan"

// forbidden maps a package (relative to the module) to import-path prefixes
// that must not appear anywhere in its dependency closure.
var forbidden = map[string][]string{
	// The agent runs on every server: it must stay small.
	"agent": {"charm.land/", "github.com/charmbracelet/", "gonum.org/", "modernc.org/sqlite", "go.etcd.io/", "google.golang.org/grpc", module + "/tui", module + "/sched", module + "/control", module + "/perf"},
	// The agent's binary neither: etcd (the control plane's HA) stays out.
	"cmd/replan-agent": {"charm.land/", "gonum.org/", "modernc.org/sqlite", "go.etcd.io/", "google.golang.org/grpc", module + "/control", module + "/tui", module + "/sched"},
	// Pure layers: no terminal, no store, no network code.
	"perf":    {"charm.land/", "modernc.org/sqlite", module + "/ssh", module + "/agent", module + "/control", module + "/tui", module + "/sched", "net/http"},
	"sched":   {"charm.land/", "modernc.org/sqlite", module + "/ssh", module + "/agent", module + "/control", module + "/tui", "net/http"},
	"launch":  {"charm.land/", "modernc.org/sqlite", module + "/ssh", module + "/agent", module + "/control", module + "/tui"},
	"cluster": {"charm.land/", "modernc.org/sqlite", module + "/ssh", module + "/agent", module + "/control", module + "/tui", module + "/sched"},
	"sim":     {"charm.land/", "modernc.org/sqlite", module + "/ssh", module + "/agent", module + "/tui"},
	"ssh":     {"charm.land/", "gonum.org/", "modernc.org/sqlite", module + "/sched", module + "/perf", module + "/control", module + "/tui"},
	// The TUI reads the control API; it never talks to servers or the store.
	"tui": {module + "/ssh", "modernc.org/sqlite", module + "/control", module + "/sched"},
	// Job specs are plain data.
	"jobspec": {"charm.land/", "modernc.org/sqlite", module + "/ssh", module + "/agent", module + "/control", module + "/tui", module + "/sched", "net/http"},
	// The control plane owns policy calls, not policy code paths into the UI.
	"control": {"charm.land/", module + "/tui", module + "/demo"},
	// Fleet operations know servers and agents, not schedules or the UI.
	"fleet": {"charm.land/", "gonum.org/", "modernc.org/sqlite", module + "/sched", module + "/perf", module + "/control", module + "/tui"},
}

// TestOnlyMainImportsCLI keeps cli/ at the top: it knows every package, and
// no package but main (the module root) may import it.
func TestOnlyMainImportsCLI(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("go tool not on PATH")
	}
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", module+"/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list %s/...: %v\n%s", module, err, out)
	}
	sawCLI := false
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		pkg := f[0]
		if pkg == module+"/cli" {
			sawCLI = true
		}
		if pkg == module || pkg == module+"/cli" {
			continue
		}
		for _, imp := range f[1:] {
			if imp == module+"/cli" {
				t.Errorf("%s imports %s: only main may", pkg, imp)
			}
		}
	}
	if !sawCLI {
		t.Errorf("go list found no %s/cli package", module)
	}
}

func TestLayers(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("go tool not on PATH")
	}
	for pkg, bad := range forbidden {
		path := module + "/" + pkg
		out, err := exec.Command("go", "list", "-deps", path).CombinedOutput()
		if err != nil {
			if strings.Contains(string(out), "no Go files") || strings.Contains(string(out), "cannot find package") || strings.Contains(string(out), "no required module provides") {
				t.Logf("%s: not built yet, skipped", pkg)
				continue
			}
			t.Fatalf("go list -deps %s: %v\n%s", path, err, out)
		}
		for _, dep := range strings.Fields(string(out)) {
			for _, b := range bad {
				if dep == b || strings.HasPrefix(dep, b) {
					t.Errorf("%s must not depend on %s (found %s)", pkg, b, dep)
				}
			}
		}
	}
}
