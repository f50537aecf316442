package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
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

// docSchema is the JSON schema docs/cli.md gives for the command whose
// row or paragraph starts with prefix: every field name in it, quoted
// ("model") or bare inside braces ({dp,tp}).
func docSchema(t *testing.T, prefix string) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "docs", "cli.md"))
	if err != nil {
		t.Fatal(err)
	}
	span := regexp.MustCompile("`([\\[{][^`]*)`")
	lines := strings.Split(string(data), "\n")
	for i, line := range lines {
		var text string
		switch {
		case strings.HasPrefix(line, "| `"+prefix):
			if cells := strings.SplitN(line, " | ", 3); len(cells) > 1 {
				text = cells[1] // the row's second cell
			}
		case strings.HasPrefix(line, "`"+prefix) && i+1 < len(lines):
			text = lines[i+1] // "`replan sim ...`:" then the schema
		default:
			continue
		}
		m := span.FindStringSubmatch(text)
		if m == nil {
			t.Fatalf("docs/cli.md: no JSON schema for %q", prefix)
		}
		var names []string
		// "[job ids]": a description of the elements, not field names
		m[1] = regexp.MustCompile(`\[[^\]\[{]* [^\]\[{]*\]`).ReplaceAllString(m[1], "[]")
		quoted := regexp.MustCompile(`"([a-z_0-9-]+)"`)
		for _, q := range quoted.FindAllStringSubmatch(m[1], -1) {
			names = append(names, q[1])
		}
		names = append(names, regexp.MustCompile(`\b[a-z_][a-z_0-9]*\b`).FindAllString(quoted.ReplaceAllString(m[1], ""), -1)...)
		return names
	}
	t.Fatalf("docs/cli.md: no row for %q", prefix)
	return nil
}

// jsonKeys collects every object key in a decoded JSON document.
func jsonKeys(v any, into map[string]bool) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			into[k] = true
			jsonKeys(e, into)
		}
	case []any:
		for _, e := range x {
			jsonKeys(e, into)
		}
	}
}

// The --json documents of the performance-model and simulator commands
// carry every field docs/cli.md names for them (fields are only added).
func TestDocsJSONSchemas(t *testing.T) {
	dir := sharedDir(t)
	trace := filepath.Join(t.TempDir(), "t.csv")
	gen, err := runCLI(t, "sim", "gen", "--jobs", "30", "--servers", "8", "--seed", "3")
	if err != nil {
		t.Fatalf("sim gen: %v\n%s", err, gen)
	}
	if err := os.WriteFile(trace, []byte(gen), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		prefix string
		args   []string
	}{
		{"replan plan ", []string{"plan", "--model", "gpt2", "--gpus", "16", "--data", dir}},
		{"replan perf validate ", []string{"perf", "validate", "--data", dir}},
		{"replan perf curve ", []string{"perf", "curve", "--model", "bert", "--gpus", "8", "--data", dir}},
		{"replan sim --trace", []string{"sim", "--trace", trace, "--data", dir, "--policy", "replan,morphling"}},
	} {
		out, err := runCLI(t, append(c.args, "--json")...)
		if err != nil {
			t.Errorf("%v: %v\n%s", c.args, err, out)
			continue
		}
		var doc any
		if err := json.Unmarshal([]byte(out), &doc); err != nil {
			t.Errorf("%v: %v", c.args, err)
			continue
		}
		have := map[string]bool{}
		jsonKeys(doc, have)
		names := docSchema(t, c.prefix)
		if len(names) < 3 {
			t.Fatalf("%s: only %v parsed from docs/cli.md", c.prefix, names)
		}
		for _, n := range names {
			if !have[n] {
				t.Errorf("docs/cli.md documents %q for %s, the output has no such field", n, strings.TrimSpace(c.prefix))
			}
		}
	}
}

// The daemon commands' --json documents carry every field docs/cli.md
// names for them, except the ones it documents as conditional (optional).
func TestDocsDaemonJSONSchemas(t *testing.T) {
	sock, d := serveControl(t)
	ctx := context.Background()
	dir := t.TempDir()
	run := func(args ...string) string {
		t.Helper()
		var out, errb bytes.Buffer
		if st := Run(ctx, append(args, "--socket", sock, "--json"), &out, &errb); st != 0 {
			t.Fatalf("%v: exit %d: %s", args, st, errb.String())
		}
		return out.String()
	}
	for k, gpus := range []string{"{gpus: 16}", "{gpus: 8}"} {
		file := filepath.Join(dir, fmt.Sprintf("j%d.yaml", k))
		spec := strings.NewReplacer("TENANT", "research", "MODEL", "gpt2", "REQUEST", gpus, "name: x", fmt.Sprintf("name: x%d", k)).Replace(cliSpec)
		if err := os.WriteFile(file, []byte(spec), 0o644); err != nil {
			t.Fatal(err)
		}
		run("submit", file)
	}
	// before any round both wait: the queue has entries to show
	queue := run("queue")
	if _, err := d.Round(ctx); err != nil {
		t.Fatal(err)
	}
	var jobs []struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal([]byte(run("jobs")), &jobs); err != nil || len(jobs) != 2 {
		t.Fatalf("jobs: %v %v", jobs, err)
	}
	for _, c := range []struct {
		prefix   string
		args     []string
		optional string // fields docs/cli.md documents as present only sometimes
	}{
		{"replan whoami", []string{"whoami"}, ""},
		{"replan queue", []string{"queue"}, "timers job gpus server_timer_s rack_timer_s starved_s accept_tier why nw_sens loss_rack loss_cross eta_reason"},
		{"replan job ID", []string{"job", jobs[0].ID}, ""},
		{"replan drain/undrain", []string{"drain", "b"}, ""},
		{"replan events", []string{"events"}, ""},
		{"replan nodes", []string{"nodes"}, "labels suspect suspect_why down_why drain_reason drained_by drained_at drain_mode idle_held_gpus index util_pct mem_used_gb mem_total_gb temp_c power_w ecc_errors xid_errors " +
			"retired_pages_pending row_remap_pending row_remap_failed read_error cordoned cordon_why processes pid cordoned_gpus gpu cause why at " +
			"clock_events sm_clock_mhz sm_clock_max_mhz power_limit_w power_default_limit_w pcie_gen pcie_gen_max pcie_width pcie_width_max nvlinks_down"},
		{"replan history", []string{"history"}, ""},
		{"replan usage", []string{"usage"}, "since"},
	} {
		if c.args[0] == "history" {
			run("cancel", jobs[1].ID) // an ended job with an attempt
		}
		out := queue
		if c.args[0] != "queue" {
			out = run(c.args...)
		}
		have := map[string]bool{}
		dec := json.NewDecoder(strings.NewReader(out)) // events: one object per line
		for dec.More() {
			var doc any
			if err := dec.Decode(&doc); err != nil {
				t.Fatalf("%v: %v", c.args, err)
			}
			jsonKeys(doc, have)
		}
		names := docSchema(t, c.prefix)
		if len(names) < 2 {
			t.Fatalf("%s: only %v parsed from docs/cli.md", c.prefix, names)
		}
		for _, n := range names {
			if !have[n] && !slices.Contains(strings.Fields(c.optional), n) {
				t.Errorf("docs/cli.md documents %q for %s, the output has no such field", n, c.prefix)
			}
		}
	}
}

// readmeCommand is one `go run . ...` invocation of a README sh block.
type readmeCommand struct {
	line  int
	text  string
	words []string // after "go run ."
}

// readmeCommands lists the README's invocations in order: comments cut,
// continued lines joined, one per ;-separated command.
func readmeCommands(t *testing.T) []readmeCommand {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var out []readmeCommand
	inBlock := false
	cont := ""
	for n, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "```") {
			inBlock = !inBlock && strings.TrimPrefix(line, "```") == "sh"
			continue
		}
		if !inBlock {
			continue
		}
		if k := strings.Index(line, "#"); k >= 0 {
			line = line[:k]
		}
		if strings.HasSuffix(strings.TrimSpace(line), `\`) {
			cont += strings.TrimSuffix(strings.TrimSpace(line), `\`) + " "
			continue
		}
		cont, line = "", cont+line
		for _, inv := range strings.Split(line, ";") {
			words := strings.Fields(inv)
			if len(words) < 3 || words[0] != "go" || words[1] != "run" || words[2] != "." {
				continue
			}
			out = append(out, readmeCommand{line: n + 1, text: strings.TrimSpace(inv), words: words[3:]})
		}
	}
	return out
}

// Issue 28: the README's commands named job.yaml, runs.csv and the
// placeholders T and D, none of which a checkout has. Every file a README
// command reads exists in the repository, or an earlier README command
// writes it (`> FILE`, `--out FILE`); ../ paths are the optional external
// data the README describes.
func TestReadmeCommandsNameFilesThatExist(t *testing.T) {
	fileFlags := map[string]bool{"--job": true, "--samples": true, "--trace": true, "--data": true, "--inventory": true, "--arch-file": true, "--model-file": true}
	fileLike := regexp.MustCompile(`/|\.(ya?ml|csv|json)$`)
	written := map[string]bool{}
	checked := 0
	for _, c := range readmeCommands(t) {
		for i, w := range c.words {
			w = strings.Trim(w, `"'`)
			prev := ""
			if i > 0 {
				prev = c.words[i-1]
			}
			switch {
			case prev == ">" || prev == "--out":
				written[w] = true
				continue
			case strings.HasPrefix(w, "-") || w == ">" || strings.HasPrefix(w, "["):
				continue
			case !fileFlags[prev] && !fileLike.MatchString(w):
				continue
			case strings.HasPrefix(w, "../"):
				continue // the external data set, optional
			}
			checked++
			if written[w] {
				continue
			}
			if _, err := os.Stat(filepath.Join("..", w)); err != nil {
				t.Errorf("README.md:%d: %q names %s, which a checkout does not have", c.line, c.text, w)
			}
		}
	}
	if checked < 5 {
		t.Fatalf("only %d file arguments found in README commands: the pattern no longer matches", checked)
	}
}

// The README's commands that need neither a daemon, servers nor the
// external data run as written (files of the checkout, outputs in a
// temporary directory) and exit 0.
func TestReadmeOfflineCommandsRun(t *testing.T) {
	offline := []string{"launch render", "perf fit", "inventory check", "plan --model", "sim gen"}
	dir := t.TempDir()
	ran := 0
	for _, c := range readmeCommands(t) {
		joined := strings.Join(c.words, " ")
		if !slices.ContainsFunc(offline, func(p string) bool { return strings.HasPrefix(joined, p) }) {
			continue
		}
		var args []string
		for i := 0; i < len(c.words); i++ {
			w := strings.Trim(c.words[i], `"'`)
			if w == ">" {
				break // the output goes to the buffer
			}
			if i > 0 && c.words[i-1] == "--out" {
				w = filepath.Join(dir, filepath.Base(w))
			} else if _, err := os.Stat(filepath.Join("..", w)); err == nil && !strings.HasPrefix(w, "-") && strings.ContainsAny(w, "./") {
				w = filepath.Join("..", w)
			}
			args = append(args, w)
		}
		ran++
		if out, err := runCLI(t, args...); err != nil {
			t.Errorf("README.md:%d: %q: %v\n%s", c.line, c.text, err, out)
		}
	}
	if ran < len(offline) {
		t.Fatalf("ran %d README commands, want at least %d", ran, len(offline))
	}
}

// Issue 28: docs/cli.md matches the program. Every flag of every command
// is named in docs/cli.md (as `--name`), except the daemon's and deploy's,
// whose full tables are in docs/control.md and docs/agent.md
// (TestDocsFlagTables); with TestDocsNameRealFlags the two agree both
// ways.
func TestDocsNameEveryFlag(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "docs", "cli.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(data)
	elsewhere := map[string]bool{"replan daemon": true, "replan deploy": true}
	named := regexp.MustCompile(`--([a-z][a-z0-9-]*)`)
	inDoc := map[string]bool{}
	for _, m := range named.FindAllStringSubmatch(doc, -1) {
		inDoc[m[1]] = true
	}
	checked := 0
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Hidden || c.Name() == "help" || c.Name() == "completion" {
			return
		}
		if !elsewhere[c.CommandPath()] {
			c.LocalFlags().VisitAll(func(f *pflag.Flag) {
				if f.Name == "help" || f.Name == "version" || f.Hidden {
					return
				}
				checked++
				if !inDoc[f.Name] {
					t.Errorf("docs/cli.md does not name %s's --%s (%s)", c.CommandPath(), f.Name, f.Usage)
				}
			})
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newRootCmd(io.Discard, io.Discard))
	if checked < 100 {
		t.Fatalf("only %d flags checked: the walk no longer finds the commands", checked)
	}
}
