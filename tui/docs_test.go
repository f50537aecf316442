package tui

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// Issue 28: the README and docs/tui.md showed 7 tabs, the program has 8.
// Every tab bar and key footer they show names every screen.
func TestDocsShowEveryTab(t *testing.T) {
	footer := regexp.MustCompile(`tab/1-(\d+)`)
	want := fmt.Sprintf("tab/1-%d", numScreens)
	for _, f := range []string{filepath.Join("..", "README.md"), filepath.Join("..", "docs", "tui.md")} {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		bars, footers := 0, 0
		for n, line := range strings.Split(string(data), "\n") {
			for _, m := range footer.FindAllString(line, -1) {
				footers++
				if m != want {
					t.Errorf("%s:%d: %q, the program has %s", f, n+1, m, want)
				}
			}
			if !strings.HasPrefix(line, " 1 overview  ") {
				continue
			}
			bars++
			for i := 2; i <= int(numScreens); i++ {
				if !regexp.MustCompile(fmt.Sprintf(`\s%d(\s|$)`, i)).MatchString(line) {
					t.Errorf("%s:%d: the tab bar lacks tab %d: %q", f, n+1, i, line)
				}
			}
		}
		if bars == 0 || footers == 0 {
			t.Errorf("%s: %d tab bars, %d key footers: the pattern no longer matches", f, bars, footers)
		}
	}
}

// docs/tui.md's Keys table and the help page agree on where each screen
// key works: for the keys a screen lists (enter, v, l, c, d, u, h, H, /,
// o), the table's row names that screen, and every screen the row names
// lists the key. (Events opened a job's detail with enter, the help page
// did not say so; the table left out history's enter.)
func TestDocsKeysTableMatchesHelp(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "docs", "tui.md"))
	if err != nil {
		t.Fatal(err)
	}
	checked := map[string]bool{"enter": true, "v": true, "l": true, "c": true, "d": true, "u": true, "h": true, "H": true, "/": true, "o": true}
	row := regexp.MustCompile("^\\| (`[^|]*) \\| ([^|]*) \\|")
	keyTok := regexp.MustCompile("`([^`]+)`")
	where := map[string]string{} // key → the row's where column
	for _, line := range strings.Split(string(data), "\n") {
		m := row.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		for _, k := range keyTok.FindAllStringSubmatch(m[1], -1) {
			if checked[k[1]] {
				where[k[1]] = m[2]
			}
		}
	}
	if len(where) != len(checked) {
		t.Fatalf("docs/tui.md's Keys table: found rows for %v only", where)
	}
	m := newModel(t.Context(), nil, Options{})
	for s := screen(0); s < numScreens; s++ {
		listed := map[string]bool{}
		for _, b := range m.screens[s].Help() {
			for _, k := range b.Keys() {
				listed[k] = true
			}
		}
		name := screenNames[s]
		for k, w := range where {
			named := regexp.MustCompile(`\b` + name + `\b`).MatchString(w)
			if listed[k] && !named {
				t.Errorf("the %s screen lists %q on its help page; docs/tui.md's row for it names only %q", name, k, w)
			}
			if named && !listed[k] {
				t.Errorf("docs/tui.md says %q works on %s (%q); its help page does not list it", k, name, w)
			}
		}
	}
}
