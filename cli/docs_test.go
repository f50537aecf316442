package cli

import (
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// docCommand finds the command a documented invocation names ("replan sim
// bench --x" → sim bench) and the words after its path.
func docCommand(root *cobra.Command, words []string) (*cobra.Command, []string) {
	c := root
	for len(words) > 0 {
		next, _, err := c.Find([]string{words[0]})
		if err != nil || next == c || strings.HasPrefix(words[0], "-") {
			break
		}
		c, words = next, words[1:]
	}
	return c, words
}

var (
	invocation = regexp.MustCompile(`(?:^|[\x60\s(])(?:replan|go run \.)\s+([a-z][^\x60\n|]*)`)
	flagWord   = regexp.MustCompile(`^--([a-z][a-z0-9-]*)`)
)

// Every flag the docs and the README show on a replan command exists on
// that command: the docs do not advertise flags the code lacks (or lost).
func TestDocsNameRealFlags(t *testing.T) {
	root := newRootCmd(io.Discard, io.Discard)
	files, _ := filepath.Glob(filepath.Join("..", "docs", "*.md"))
	files = append(files, filepath.Join("..", "README.md"))
	checked := 0
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for n, line := range strings.Split(string(data), "\n") {
			for _, m := range invocation.FindAllStringSubmatch(line, -1) {
				inv := m[1]
				// one invocation: up to the next command, comment or
				// alternative on the same line
				for _, stop := range []string{";", "#", "&&", " or ", ","} {
					if k := strings.Index(inv, stop); k >= 0 {
						inv = inv[:k]
					}
				}
				words := strings.Fields(inv)
				c, rest := docCommand(root, words)
				if c == root {
					continue // prose ("replan chooses ..."), not an invocation
				}
				for _, w := range rest {
					fm := flagWord.FindStringSubmatch(w)
					if fm == nil {
						continue
					}
					checked++
					if c.Flags().Lookup(fm[1]) == nil && c.InheritedFlags().Lookup(fm[1]) == nil {
						t.Errorf("%s:%d: %q: %s has no flag --%s", f, n+1, strings.TrimSpace(m[0]), c.CommandPath(), fm[1])
					}
				}
			}
		}
	}
	if checked < 50 {
		t.Fatalf("only %d documented flags found: the pattern no longer matches the docs", checked)
	}
}

// The docs' tables of a command's flags list every flag the command has,
// with the default the code has: docs/control.md's of the daemon,
// docs/agent.md's of deploy.
func TestDocsFlagTables(t *testing.T) {
	for _, c := range []struct {
		file  string
		table int // which "| flag | default | meaning |" table of the file
		cmd   []string
	}{
		{"control.md", 0, []string{"daemon"}},
		{"agent.md", 1, []string{"deploy"}},
	} {
		checkFlagTable(t, c.file, c.table, c.cmd)
	}
}

func checkFlagTable(t *testing.T, file string, table int, path []string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "docs", file))
	if err != nil {
		t.Fatal(err)
	}
	root := newRootCmd(io.Discard, io.Discard)
	d, _, err := root.Find(path)
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("^\\| `--([a-z-]+)[^`]*`(?:, `(?:--([a-z-]+)|-[a-z])[^`]*`)? \\| ([^|]*) \\|")
	documented := map[string]string{}
	n := -1
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "| flag | default | meaning |") {
			n++
		}
		if n != table {
			continue
		}
		if m := row.FindStringSubmatch(line); m != nil {
			documented[m[1]] = strings.TrimSpace(m[3])
			if m[2] != "" {
				documented[m[2]] = strings.TrimSpace(m[3])
			}
		}
	}
	if len(documented) == 0 {
		t.Fatalf("docs/%s: no flag table %d", file, table)
	}
	d.Flags().VisitAll(func(f *pflag.Flag) {
		if f.Name == "help" {
			return
		}
		doc, ok := documented[f.Name]
		if !ok {
			t.Errorf("docs/%s: %s's --%s is not in the flag table", file, d.CommandPath(), f.Name)
			return
		}
		lit := strings.Trim(doc, "`")
		if strings.ContainsAny(lit, " `$") || f.DefValue == "" || f.DefValue == "false" || f.DefValue == "[]" {
			return // prose ("generated", "$REPLAN_DATA or ..."), off, empty
		}
		want := f.DefValue
		if dv, err := time.ParseDuration(want); err == nil {
			if dl, err := time.ParseDuration(lit); err == nil && dl == dv {
				return
			}
		}
		if lit != want {
			t.Errorf("docs/%s: %s --%s default %q, the code's is %q", file, d.CommandPath(), f.Name, lit, want)
		}
	})
	for name := range documented {
		if d.Flags().Lookup(name) == nil {
			t.Errorf("docs/%s: the flag table lists --%s, which %s does not have", file, name, d.CommandPath())
		}
	}
}
