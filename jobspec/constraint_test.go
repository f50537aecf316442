package jobspec

import (
	"os"
	"slices"
	"strings"
	"testing"
)

// Node features: constraint.labels lists the labels every server of the
// job must carry; the spec JSON keeps them.
func TestConstraintParse(t *testing.T) {
	base, err := os.ReadFile("testdata/gpt2.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s, err := Parse("j.yaml", append(base, "constraint: {labels: [ib-hdr, gpu=a800-80g]}\n"...), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.RequiredLabels(); !slices.Equal(got, []string{"ib-hdr", "gpu=a800-80g"}) {
		t.Errorf("labels %v", got)
	}
	if s.Line("constraint.labels") != 22 {
		t.Errorf("line of constraint.labels: %d", s.Line("constraint.labels"))
	}
	plain, err := Parse("j.yaml", base, nil)
	if err != nil {
		t.Fatal(err)
	}
	if plain.RequiredLabels() != nil || plain.Constraint != nil {
		t.Errorf("no constraint block: %+v", plain.Constraint)
	}
}

// Every bad constraint is refused with file, line and field.
func TestConstraintErrors(t *testing.T) {
	base, err := os.ReadFile("testdata/gpt2.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ block, want string }{
		{"constraint: {nodes: [a]}", `j.yaml:22: constraint.nodes: unknown field`},
		{"constraint: {labels: ib-hdr}", "j.yaml:22: constraint.labels: want a list"},
		{"constraint: {labels: []}", "j.yaml:22: constraint.labels: an empty list requires nothing"},
		{"constraint: {labels: [ib-hdr, ib-hdr]}", `j.yaml:22: constraint.labels[1]: label "ib-hdr" listed twice`},
		{"constraint: {labels: [\"ib hdr\"]}", `j.yaml:22: constraint.labels[0]: label name "ib hdr"`},
		{"constraint: {labels: [-x]}", `j.yaml:22: constraint.labels[0]: label name "-x"`},
		{"constraint: {labels: [\"gpu=\"]}", `j.yaml:22: constraint.labels[0]: requirement "gpu="`},
		{"constraint: {labels: [[a]]}", "j.yaml:22: constraint.labels[0]: want a string"},
		{"constraint: [ib-hdr]", "j.yaml:22: constraint: want a mapping"},
		{"constraint:\n  labels:\n    - ok\n    - \"" + strings.Repeat("x", 64) + "\"", "j.yaml:25: constraint.labels[1]: label name"},
	} {
		_, err := Parse("j.yaml", append(base, c.block+"\n"...), nil)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v (want %q)", c.block, err, c.want)
		}
	}
}
