package perf

import (
	"bytes"
	"errors"
	"fmt"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Arch describes a model type: enough of its architecture to count memory,
// communication volumes and to scale a profiled forward time.
type Arch struct {
	Name        string  `yaml:"name" json:"name"`
	Params      float64 `yaml:"params" json:"params"`             // parameter count
	Layers      int     `yaml:"layers" json:"layers"`             // transformer layers
	Hidden      int     `yaml:"hidden" json:"hidden"`             // hidden size
	Heads       int     `yaml:"heads" json:"heads"`               // attention heads
	SeqLen      int     `yaml:"seq_len" json:"seq_len"`           // sequence length (tokens, patches)
	Vocab       int     `yaml:"vocab" json:"vocab"`               // vocabulary size (0 for vision models)
	GlobalBatch int     `yaml:"global_batch" json:"global_batch"` // samples per iteration, fixed for a job
	// ActScale is the type's activation factor measured on its GPUs
	// (FitActScale): the activations its implementation keeps against
	// Korthikanti's count. 0 means 1 (not measured). Never read from a
	// spec or an architecture file: only measurements set it.
	ActScale float64 `yaml:"-" json:"act_scale,omitempty"`
}

// Validate reports every field that makes the architecture unusable.
func (a Arch) Validate() error {
	var errs []error
	if a.Name == "" {
		errs = append(errs, errors.New("name: required"))
	}
	if a.Params <= 0 {
		errs = append(errs, fmt.Errorf("params: must be > 0, got %g", a.Params))
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"layers", a.Layers}, {"hidden", a.Hidden}, {"heads", a.Heads}, {"seq_len", a.SeqLen}, {"global_batch", a.GlobalBatch}} {
		if f.v <= 0 {
			errs = append(errs, fmt.Errorf("%s: must be > 0, got %d", f.name, f.v))
		}
	}
	if a.Vocab < 0 {
		errs = append(errs, fmt.Errorf("vocab: must be >= 0, got %d", a.Vocab))
	}
	if a.Heads > 0 && a.Hidden > 0 && a.Hidden%a.Heads != 0 {
		errs = append(errs, fmt.Errorf("heads: hidden %d is not divisible by %d heads", a.Hidden, a.Heads))
	}
	return errors.Join(errs...)
}

// builtins are the seven models of the Morphling A800 data with their public
// architecture figures and the global batch sizes the data was measured at.
var builtins = []Arch{
	{Name: "vit", Params: 86e6, Layers: 12, Hidden: 768, Heads: 12, SeqLen: 197, Vocab: 0, GlobalBatch: 64},
	{Name: "roberta", Params: 355e6, Layers: 24, Hidden: 1024, Heads: 16, SeqLen: 512, Vocab: 50265, GlobalBatch: 64},
	{Name: "bert", Params: 336e6, Layers: 24, Hidden: 1024, Heads: 16, SeqLen: 512, Vocab: 30522, GlobalBatch: 32},
	{Name: "t5", Params: 1.24e9, Layers: 48, Hidden: 1024, Heads: 16, SeqLen: 512, Vocab: 32128, GlobalBatch: 16},
	{Name: "gpt2", Params: 1.558e9, Layers: 48, Hidden: 1600, Heads: 25, SeqLen: 1024, Vocab: 50257, GlobalBatch: 16},
	{Name: "llama7b", Params: 6.74e9, Layers: 32, Hidden: 4096, Heads: 32, SeqLen: 4096, Vocab: 32000, GlobalBatch: 8},
	{Name: "llama30b", Params: 32.5e9, Layers: 60, Hidden: 6656, Heads: 52, SeqLen: 2048, Vocab: 32000, GlobalBatch: 4},
}

// aliases maps the names the traces use to the built-in model types.
var aliases = map[string]string{
	"llama7": "llama7b", "llama30": "llama30b", "llama-7b": "llama7b", "llama-30b": "llama30b",
	"llama7B": "llama7b", "llama30B": "llama30b", "gpt-2": "gpt2",
}

// CanonicalName maps trace and user spellings (llama7, llama-30b) to the
// built-in model type name; unknown names are returned unchanged.
func CanonicalName(name string) string {
	if c, ok := aliases[name]; ok {
		return c
	}
	if c, ok := aliases[strings.ToLower(name)]; ok {
		return c
	}
	return strings.ToLower(name)
}

// Builtin returns the built-in architecture called name (aliases accepted).
func Builtin(name string) (Arch, bool) {
	c := CanonicalName(name)
	for _, a := range builtins {
		if a.Name == c {
			return a, true
		}
	}
	return Arch{}, false
}

// Builtins lists the built-in architectures in a stable order.
func Builtins() []Arch { return append([]Arch(nil), builtins...) }

// Catalog is a set of architectures by name: the built-ins plus user ones.
type Catalog map[string]Arch

// NewCatalog returns the built-ins, overridden and extended by extra.
func NewCatalog(extra ...Arch) Catalog {
	c := Catalog{}
	for _, a := range builtins {
		c[a.Name] = a
	}
	for _, a := range extra {
		c[a.Name] = a
	}
	return c
}

// Lookup finds name, accepting aliases.
func (c Catalog) Lookup(name string) (Arch, error) {
	if a, ok := c[name]; ok {
		return a, nil
	}
	if a, ok := c[CanonicalName(name)]; ok {
		return a, nil
	}
	names := make([]string, 0, len(c))
	for n := range c {
		names = append(names, n)
	}
	sort.Strings(names)
	return Arch{}, fmt.Errorf("unknown model type %q (known: %s)", name, strings.Join(names, ", "))
}

// archFile is the YAML layout of user-defined model types:
//
//	version: 1
//	models:
//	  - name: mymodel
//	    params: 1.3e9
//	    ...
type archFile struct {
	Version int    `yaml:"version"`
	Models  []Arch `yaml:"models"`
}

// ParseArchs decodes user-defined architectures strictly. name is the file
// name used in errors, which name file, line and field. Every problem is
// reported; on error nothing is returned.
func ParseArchs(name string, data []byte) ([]Arch, error) {
	var root yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&root); err != nil {
		return nil, fmt.Errorf("%s: %w", name, yamlErr(err))
	}
	var f archFile
	dec = yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("%s: %w", name, yamlErr(err))
	}
	var errs []error
	if f.Version != 1 {
		errs = append(errs, fmt.Errorf("%s:%d: version: must be 1, got %d", name, lineOf(&root, "version"), f.Version))
	}
	models := findKey(&root, "models")
	seen := map[string]bool{}
	for i, a := range f.Models {
		line := 0
		if models != nil && i < len(models.Content) {
			line = models.Content[i].Line
		}
		if err := a.Validate(); err != nil {
			for _, e := range unjoin(err) {
				errs = append(errs, fmt.Errorf("%s:%d: models[%d].%v", name, line, i, e))
			}
		}
		if seen[a.Name] {
			errs = append(errs, fmt.Errorf("%s:%d: models[%d].name: duplicate model %q", name, line, i, a.Name))
		}
		seen[a.Name] = true
	}
	if len(f.Models) == 0 && f.Version == 1 {
		errs = append(errs, fmt.Errorf("%s:%d: models: at least one model required", name, lineOf(&root, "models")))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return f.Models, nil
}

// yamlErr turns yaml's "line N: field x not found in type perf.Arch" into a
// friendlier message while keeping the line.
func yamlErr(err error) error {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	msg = strings.ReplaceAll(msg, "unmarshal errors:\n  ", "")
	msg = strings.ReplaceAll(msg, " in type perf.Arch", "")
	msg = strings.ReplaceAll(msg, " in type perf.archFile", "")
	return errors.New(msg)
}

func findKey(root *yaml.Node, key string) *yaml.Node {
	n := root
	if n.Kind == yaml.DocumentNode && len(n.Content) > 0 {
		n = n.Content[0]
	}
	if n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

func lineOf(root *yaml.Node, key string) int {
	if n := findKey(root, key); n != nil {
		return n.Line
	}
	return 1
}

func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}
