package cluster

import (
	"go.yaml.in/yaml/v3"

	"github.com/replan/replan/internal/labels"
	"github.com/replan/replan/internal/yamlcheck"
)

// labelsField reads a labels field (defaults, a rack or a server): a list
// of names (node features, e.g. [ib-hdr, a800-80g]: each a label with no
// value) or a mapping of names to values ({maintenance-window: sunday}).
// Names and values follow internal/labels' syntax; a name listed twice is
// an error. A job's constraint.labels requires them by name or
// name=value.
func (p *parser) labelsField(v *yaml.Node, f string) map[string]string {
	if v.Kind == yaml.SequenceNode {
		out := map[string]string{}
		lines := map[string]int{}
		p.List(v, f, func(i int, path string, item *yaml.Node) {
			name, ok := p.Str(item, path)
			if !ok {
				return
			}
			if err := labels.CheckName(name); err != nil {
				p.Errf(item, path, "%v", err)
				return
			}
			if l, dup := lines[name]; dup {
				p.Errf(item, path, "label %q listed twice (first on line %d)", name, l)
				return
			}
			lines[name] = item.Line
			out[name] = ""
		})
		return out
	}
	if v.Kind != yaml.MappingNode {
		p.Errf(v, f, "want a list of label names or a mapping of names to values, got %s", yamlcheck.KindName(v))
		return nil
	}
	out := p.Labels(v, f)
	for i := 0; i+1 < len(v.Content); i += 2 {
		k, val := p.Resolve(v.Content[i]), p.Resolve(v.Content[i+1])
		if k == nil || val == nil || k.Kind != yaml.ScalarNode {
			continue
		}
		if _, kept := out[k.Value]; !kept {
			continue
		}
		if err := labels.CheckName(k.Value); err != nil {
			p.Errf(k, f+"."+k.Value, "%v", err)
			delete(out, k.Value)
		} else if err := labels.CheckValue(out[k.Value]); err != nil {
			p.Errf(val, f+"."+k.Value, "%v", err)
			delete(out, k.Value)
		}
	}
	return out
}

// mergeLabels is the labels of a server: the defaults', then its rack's,
// then its own, a later value winning (nil when none has any).
func mergeLabels(layers ...map[string]string) map[string]string {
	var out map[string]string
	for _, l := range layers {
		for k, v := range l {
			if out == nil {
				out = map[string]string{}
			}
			out[k] = v
		}
	}
	return out
}
