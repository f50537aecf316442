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
