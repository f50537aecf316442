package jobspec

import (
	"slices"

	"go.yaml.in/yaml/v3"

	"github.com/replan/replan/internal/labels"
	"github.com/replan/replan/internal/yamlcheck"
)

// parseConstraint reads the constraint block: a mapping whose only key is
// labels, a non-empty list of label requirements ("name" or
// "name=value"), each valid and listed once. It returns nil when the
// block has problems (reported to w) or requires nothing.
func parseConstraint(w *yamlcheck.Walker, v *yaml.Node, f string, line func(string, *yaml.Node)) *Constraint {
	line(f, v)
	c := &Constraint{}
	ok := true
	w.Mapping(v, f, map[string]func(string, *yaml.Node){
		"labels": func(f string, v *yaml.Node) {
			line(f, v)
			c.Labels = []string{}
			w.List(v, f, func(i int, p string, item *yaml.Node) {
				r, isStr := w.Str(item, p)
				switch {
				case !isStr:
					ok = false
				case labels.CheckRequirement(r) != nil:
					w.Errf(item, p, "%v", labels.CheckRequirement(r))
					ok = false
				case slices.Contains(c.Labels, r):
					w.Errf(item, p, "label %q listed twice", r)
					ok = false
				default:
					c.Labels = append(c.Labels, r)
				}
			})
			if v.Kind == yaml.SequenceNode && len(v.Content) == 0 {
				w.Errf(v, f, "an empty list requires nothing: list the labels the job's servers must carry, or leave constraint out")
				ok = false
			}
		},
	})
	if !ok || len(c.Labels) == 0 {
		return nil
	}
	return c
}

// RequiredLabels is the labels every server of the job must carry (nil:
// none).
func (s *Spec) RequiredLabels() []string {
	if s == nil || s.Constraint == nil {
		return nil
	}
	return s.Constraint.Labels
}
