// Package yamlcheck walks YAML documents node by node so that replan's
// configuration files (inventory, job specs) report every problem at once,
// each with file, line and field, instead of stopping at the first one.
// Unknown and duplicate fields are errors; aliases are followed with a bound
// on the work ("billion laughs" fail instead of exhausting memory).
package yamlcheck

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Problem is one thing wrong with a file. Its Error is
// "file:line: field: message" (field is omitted when the problem concerns
// the whole document, e.g. a YAML syntax error).
type Problem struct {
	File  string `json:"file"`
	Line  int    `json:"line"`
	Field string `json:"field,omitempty"`
	Msg   string `json:"message"`
}

func (p *Problem) Error() string {
	var b strings.Builder
	b.WriteString(p.File)
	if p.Line > 0 {
		b.WriteString(":" + strconv.Itoa(p.Line))
	}
	b.WriteString(": ")
	if p.Field != "" {
		b.WriteString(p.Field + ": ")
	}
	b.WriteString(p.Msg)
	return b.String()
}

// Problems returns every *Problem joined into err (by errors.Join or
// wrapping), in order. Errors that are not Problems are returned as a
// Problem with only Msg set.
func Problems(err error) []*Problem {
	if err == nil {
		return nil
	}
	var out []*Problem
	var walk func(error)
	walk = func(e error) {
		if p, ok := e.(*Problem); ok {
			out = append(out, p)
			return
		}
		if j, ok := e.(interface{ Unwrap() []error }); ok {
			for _, e := range j.Unwrap() {
				walk(e)
			}
			return
		}
		var p *Problem
		if errors.As(e, &p) {
			out = append(out, p)
			return
		}
		out = append(out, &Problem{Msg: e.Error()})
	}
	walk(err)
	return out
}

// maxNodes bounds the work of walking a document, so that alias bombs
// ("billion laughs") fail instead of exhausting memory.
const maxNodes = 100000

// Walker collects the problems of one file while a parser walks its nodes.
type Walker struct {
	File  string
	Errs  []error
	nodes int
	over  bool
}

// Errf records a problem at node n (line 0 when n is nil) for field.
func (p *Walker) Errf(n *yaml.Node, field, format string, args ...any) {
	line := 0
	if n != nil {
		line = n.Line
	}
	p.Errs = append(p.Errs, &Problem{File: p.File, Line: line, Field: field, Msg: fmt.Sprintf(format, args...)})
}

// Err returns every problem joined, or nil.
func (p *Walker) Err() error { return errors.Join(p.Errs...) }

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// resolve follows aliases and counts nodes against maxNodes.
func (p *Walker) Resolve(n *yaml.Node) *yaml.Node {
	for depth := 0; n != nil && n.Kind == yaml.AliasNode; depth++ {
		if depth > 100 {
			return nil
		}
		n = n.Alias
	}
	p.nodes++
	if p.nodes > maxNodes {
		if !p.over {
			p.over = true
			p.Errf(n, "", "document too large or too many aliases (more than %d nodes)", maxNodes)
		}
		return nil
	}
	return n
}

func KindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return "null"
		}
		return fmt.Sprintf("%q", n.Value)
	case yaml.DocumentNode:
		return "a document"
	}
	return "an alias"
}

// mapping walks a mapping node: it reports wrong kinds, duplicate keys and
// unknown fields, calls fields[key] for each known key, and returns the key
// nodes seen (for ordering and line numbers).
func (p *Walker) Mapping(n *yaml.Node, path string, fields map[string]func(string, *yaml.Node)) map[string]*yaml.Node {
	seen := map[string]*yaml.Node{}
	if n.Kind != yaml.MappingNode {
		p.Errf(n, path, "want a mapping, got %s", KindName(n))
		return seen
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := p.Resolve(n.Content[i])
		v := p.Resolve(n.Content[i+1])
		if k == nil || v == nil {
			return seen
		}
		if k.Kind != yaml.ScalarNode {
			p.Errf(k, path, "field names must be plain strings, got %s", KindName(k))
			continue
		}
		field := JoinPath(path, k.Value)
		if prev, dup := seen[k.Value]; dup {
			p.Errf(k, field, "duplicate field (first set on line %d)", prev.Line)
			continue
		}
		seen[k.Value] = k
		fn, ok := fields[k.Value]
		if !ok {
			p.Errf(k, field, "unknown field")
			continue
		}
		fn(field, v)
	}
	return seen
}

func JoinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func (p *Walker) Scalar(n *yaml.Node, field, want string) bool {
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		p.Errf(n, field, "want %s, got %s", want, KindName(n))
		return false
	}
	return true
}

func (p *Walker) Str(n *yaml.Node, field string) (string, bool) {
	if !p.Scalar(n, field, "a string") {
		return "", false
	}
	if n.Value == "" {
		p.Errf(n, field, "must not be empty")
		return "", false
	}
	return n.Value, true
}

func (p *Walker) Int(n *yaml.Node, field string) (int, bool) {
	if !p.Scalar(n, field, "an integer") {
		return 0, false
	}
	var v int
	if n.Tag != "!!int" || n.Decode(&v) != nil {
		p.Errf(n, field, "want an integer, got %q", n.Value)
		return 0, false
	}
	return v, true
}

// count decodes an integer that must be > 0.
func (p *Walker) Count(n *yaml.Node, field string) (int, bool) {
	v, ok := p.Int(n, field)
	if ok && v <= 0 {
		p.Errf(n, field, "must be positive, got %d", v)
		return 0, false
	}
	return v, ok
}

// quota decodes an integer that must be >= 0.
func (p *Walker) NonNegative(n *yaml.Node, field string) (int, bool) {
	v, ok := p.Int(n, field)
	if ok && v < 0 {
		p.Errf(n, field, "must not be negative, got %d", v)
		return 0, false
	}
	return v, ok
}

// rate decodes a number that must be > 0 and finite.
func (p *Walker) Positive(n *yaml.Node, field string) (float64, bool) {
	if !p.Scalar(n, field, "a number") {
		return 0, false
	}
	var v float64
	if (n.Tag != "!!int" && n.Tag != "!!float") || n.Decode(&v) != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		p.Errf(n, field, "want a number, got %q", n.Value)
		return 0, false
	}
	if v <= 0 {
		p.Errf(n, field, "must be positive, got %s", n.Value)
		return 0, false
	}
	return v, true
}

func (p *Walker) Bool(n *yaml.Node, field string) (bool, bool) {
	if !p.Scalar(n, field, "true or false") {
		return false, false
	}
	var v bool
	if n.Tag != "!!bool" || n.Decode(&v) != nil {
		p.Errf(n, field, "want true or false, got %q", n.Value)
		return false, false
	}
	return v, true
}

func (p *Walker) Duration(n *yaml.Node, field string) (time.Duration, bool) {
	if !p.Scalar(n, field, `a duration like "10s"`) {
		return 0, false
	}
	d, err := time.ParseDuration(n.Value)
	if err != nil {
		p.Errf(n, field, `want a duration like "10s", got %q`, n.Value)
		return 0, false
	}
	if d <= 0 {
		p.Errf(n, field, "must be positive, got %s", n.Value)
		return 0, false
	}
	return d, true
}

func (p *Walker) Labels(n *yaml.Node, field string) map[string]string {
	if n.Kind != yaml.MappingNode {
		p.Errf(n, field, "want a mapping of strings, got %s", KindName(n))
		return nil
	}
	out := map[string]string{}
	lines := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := p.Resolve(n.Content[i])
		v := p.Resolve(n.Content[i+1])
		if k == nil || v == nil {
			return out
		}
		if k.Kind != yaml.ScalarNode || k.Value == "" {
			p.Errf(k, field, "label names must be non-empty strings, got %s", KindName(k))
			continue
		}
		lf := field + "." + k.Value
		if l, dup := lines[k.Value]; dup {
			p.Errf(k, lf, "duplicate label (first set on line %d)", l)
			continue
		}
		lines[k.Value] = k.Line
		if v.Kind != yaml.ScalarNode || v.Tag == "!!null" {
			p.Errf(v, lf, "want a string, got %s", KindName(v))
			continue
		}
		out[k.Value] = v.Value
	}
	return out
}

func (p *Walker) List(n *yaml.Node, field string, each func(i int, path string, item *yaml.Node)) {
	if n.Kind != yaml.SequenceNode {
		p.Errf(n, field, "want a list, got %s", KindName(n))
		return
	}
	for i, item := range n.Content {
		item = p.Resolve(item)
		if item == nil {
			return
		}
		each(i, fmt.Sprintf("%s[%d]", field, i), item)
	}
}

// parserProblems are the messages of go-yaml's parser errors (parserc.go),
// whose line is one too early; its scanner errors' lines are right.
var parserProblems = []string{
	"did not find expected ',' or ']'",
	"did not find expected ',' or '}'",
	"did not find expected '-' indicator",
	"did not find expected <document start>",
	"did not find expected key",
	"did not find expected node content",
	"found duplicate %TAG directive",
	"found duplicate %YAML directive",
	"found incompatible YAML document",
	"found undefined tag handle",
}

func parserProblem(msg string) bool {
	for _, p := range parserProblems {
		if msg == p {
			return true
		}
	}
	return false
}

// FieldNode returns the key node of field in mapping n, or n.
func FieldNode(n *yaml.Node, field string) *yaml.Node {
	if n.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == field {
				return n.Content[i]
			}
		}
	}
	return n
}

// Document decodes data as exactly one YAML document whose root is a
// mapping and returns that mapping, or nil after recording the problem.
// what names the file's kind ("an inventory"), want the expected root.
func (p *Walker) Document(data []byte, what, want string) *yaml.Node {
	var doc yaml.Node
	syntax := func(err error) {
		msg := err.Error()
		line := 0
		if m := yamlLine.FindStringSubmatch(msg); m != nil {
			line, _ = strconv.Atoi(m[1])
			msg = m[2]
		} else {
			msg = strings.TrimPrefix(msg, "yaml: ")
		}
		if parserProblem(msg) {
			// go-yaml prints a parser error's mark as it keeps it,
			// counted from 0 (a scanner error's from 1), and leaves
			// line 0 out: an unclosed [ on line 2 said "line 1".
			line++
		}
		if last := bytes.Count(bytes.TrimRight(data, "\n"), []byte("\n")) + 1; line > last {
			line = last // the end of the stream is on the last line
		}
		p.Errs = append(p.Errs, &Problem{File: p.File, Line: line, Msg: msg})
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil && err != io.EOF {
		syntax(err)
		return nil
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		p.Errf(&extra, "", "more than one YAML document: %s is one document", what)
		return nil
	} else if err != io.EOF {
		syntax(err)
		return nil
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		p.Errf(nil, "", "empty %s: want %s", strings.TrimPrefix(strings.TrimPrefix(what, "an "), "a "), want)
		return nil
	}
	root := p.Resolve(doc.Content[0])
	if root == nil {
		return nil
	}
	if root.Kind != yaml.MappingNode {
		p.Errf(root, "", "want %s, got %s", want, KindName(root))
		return nil
	}
	return root
}
