package yamlcheck

import (
	"errors"
	"testing"
)

// Issue 28: a YAML syntax error gave go-yaml's line, one too early for an
// unclosed flow sequence (its parser errors count lines from 0). Each case
// names the line a person would point at: where the unclosed bracket
// opened, or where the parser gave up; scanner errors were right already.
func TestSyntaxErrorLines(t *testing.T) {
	for _, c := range []struct {
		name, doc string
		line      int
	}{
		{"unclosed flow sequence", "a: 1\nb: [1, 2\nc: 3\n", 2},
		{"unclosed flow sequence at the end", "a: 1\nb: [1, 2\n", 2},
		{"unclosed flow mapping", "a: 1\nb: {x: 1, y\n", 2},
		{"flow sequence from line 1, broken on line 4", "a: [1,\n  2,\n  3\nd: 4\n", 4},
		{"sequence entry where a key goes", "a: 1\nb: 2\n- c\n", 3},
		{"bad indentation of a key", "a: 1\nb:\n  c: 1\n d: 2\n", 4},
		{"scalar after a sequence", "a: 1\nb:\n  - 1\n  x: 2\n", 3},
		{"unclosed quote (scanner)", "a: 1\nb: \"abc\nc: 3\n", 2},
		{"mapping value in a scalar (scanner)", "a: 1\n  b: 2\n", 2},
		{"sequence at line 1 broken on line 2", "- a\nb: 1\n", 2},
		{"unclosed flow sequence ending the file", "version: 1\nservers: [\n", 2},
		{"unclosed after blank lines", "a: 1\n\n\nb: [1,\n", 4},
	} {
		w := &Walker{File: "job.yaml"}
		if n := w.Document([]byte(c.doc), "a job spec", "a mapping"); n != nil || len(w.Errs) != 1 {
			t.Errorf("%s: %v %v", c.name, n, w.Errs)
			continue
		}
		var p *Problem
		if !errors.As(w.Errs[0], &p) || p.Line != c.line || p.File != "job.yaml" {
			t.Errorf("%s: %v, want line %d", c.name, w.Errs[0], c.line)
		}
	}
}
