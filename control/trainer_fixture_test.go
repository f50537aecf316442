package control_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestTrainerFixtureShadowsNoStandardModule: no file of the trainer
// fixture is named like a module of Python's standard library. The
// fixture's directory is first on sys.path when torchrun runs train.py, so
// a profile.py there replaced the standard profile module, which torch 2.x
// imports through cProfile (`module 'profile' has no attribute 'run'`).
func TestTrainerFixtureShadowsNoStandardModule(t *testing.T) {
	out, err := exec.Command(torchPython, "-c", "import sys; print('\\n'.join(sorted(sys.stdlib_module_names)))").Output()
	if err != nil {
		t.Fatalf("%s: the standard library's module names: %v", torchPython, err)
	}
	std := map[string]bool{}
	for _, n := range strings.Fields(string(out)) {
		std[n] = true
	}
	if !std["profile"] || !std["os"] {
		t.Fatalf("%s lists %d standard modules, without profile or os", torchPython, len(std))
	}
	ents, err := os.ReadDir(filepath.Join("testdata", "torchtrainer"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		mod, ok := strings.CutSuffix(e.Name(), ".py")
		if !ok {
			continue
		}
		n++
		if std[mod] {
			t.Errorf("testdata/torchtrainer/%s shadows Python's standard module %q (the trainer's directory is first on sys.path)", e.Name(), mod)
		}
	}
	if n == 0 {
		t.Fatal("testdata/torchtrainer holds no .py file")
	}
}
