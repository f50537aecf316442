// Package jobspec reads job specs: the YAML a user submits to describe a
// training job (what to run, with which framework, its global batch and
// length, the resources and plan it asks for). Decoding is strict and every
// problem is reported with file, line and field; a spec with problems is
// never returned. See docs/jobspec.md for the reference.
package jobspec

import (
	"errors"
	"fmt"
	"os"
	"path"
	"regexp"
	"strings"
	"unicode"

	"go.yaml.in/yaml/v3"

	"github.com/replan/replan/internal/yamlcheck"
	"github.com/replan/replan/perf"
)

// Version is the job spec format this replan reads.
const Version = 1

// Class is how a job is treated when the cluster is short: guaranteed jobs
// count against their tenant's quota and never fall below the throughput
// of what they asked for; best-effort jobs use what is left and may be
// preempted.
type Class string

// Job classes.
const (
	Guaranteed Class = "guaranteed"
	BestEffort Class = "best-effort"
)

// Framework is the training launcher a job uses.
type Framework string

// Frameworks replan can launch.
const (
	DeepSpeed Framework = "deepspeed"
	Megatron  Framework = "megatron"
)

// Request is what a job asks for: the resources and plan a guaranteed job
// is promised the throughput of.
type Request struct {
	GPUs     int       `json:"gpus"`
	CPUs     int       `json:"cpus"`
	MemoryGB int       `json:"memory_gb"`
	Plan     perf.Plan `json:"plan"`
	HasPlan  bool      `json:"has_plan"`
}

// Profile is a spec's profile block: whether the model type is profiled
// on arrival when it has no fitted model, and the phase's bounds (0: the
// daemon's).
type Profile struct {
	Enabled      *bool   `json:"enabled,omitempty"`
	MaxConfigs   int     `json:"max_configs,omitempty"`
	Iterations   int     `json:"iterations,omitempty"`
	RunSeconds   float64 `json:"run_seconds,omitempty"`
	PhaseSeconds float64 `json:"phase_seconds,omitempty"`
}

// Pin restricts what the scheduler may change.
type Pin struct {
	Plan  bool        `json:"plan"`  // never change the plan (resources may still change)
	Tiers []perf.Tier `json:"tiers"` // allowed placement tiers; empty: any
}

// Spec is a validated job spec.
type Spec struct {
	Name          string            `json:"name"`
	Tenant        string            `json:"tenant"`
	Class         Class             `json:"class"`
	Model         string            `json:"model"`
	Arch          perf.Arch         `json:"arch"` // resolved; GlobalBatch is the job's
	Framework     Framework         `json:"framework"`
	WorkDir       string            `json:"workdir"`
	Entrypoint    string            `json:"entrypoint"`
	Args          []string          `json:"args"`
	Env           map[string]string `json:"env"`
	GlobalBatch   int               `json:"global_batch"`
	Iterations    int               `json:"iterations"`
	CheckpointDir string            `json:"checkpoint_dir"`
	Request       Request           `json:"request"`
	Pin           Pin               `json:"pin"`
	// Profile overrides the daemon's profiling bounds for the job's
	// model type (nil: the daemon's).
	Profile *Profile `json:"profile,omitempty"`

	// File is the name the spec was parsed under and Lines the line of
	// each field ("tenant", "request.gpus", "pin.tiers", ...), so checks
	// made after parsing (the daemon's admission) name file, line and
	// field like the parser does. Neither is stored.
	File  string         `json:"-"`
	Lines map[string]int `json:"-"`
}

// Line is the line of field in the spec's file (0 when unknown: a spec
// that was not parsed from YAML).
func (s *Spec) Line(field string) int {
	if n, ok := s.Lines[field]; ok {
		return n
	}
	if i := strings.LastIndex(field, "."); i > 0 {
		return s.Line(field[:i])
	}
	return s.Lines[""]
}

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)
var envRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// Load reads and validates a job spec file.
func Load(file string, cat perf.Catalog) (*Spec, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("read job spec: %w", err)
	}
	return Parse(file, data, cat)
}

// Parse validates data (named name in problems) against the model
// catalog cat (nil: the built-in models).
func Parse(name string, data []byte, cat perf.Catalog) (*Spec, error) {
	if cat == nil {
		cat = perf.NewCatalog()
	}
	w := &yamlcheck.Walker{File: name}
	root := w.Document(data, "a job spec", `a mapping starting with "version: 1"`)
	if root == nil {
		return nil, w.Err()
	}
	s := &Spec{Class: BestEffort, File: name, Lines: map[string]int{"": root.Line}}
	line := func(f string, v *yaml.Node) {
		if v != nil {
			s.Lines[f] = v.Line
		}
	}
	var (
		modelNode, planNode, gpusNode *yaml.Node
		archBlock                     *perf.Arch
		planSpec                      string
	)
	seen := w.Mapping(root, "", map[string]func(string, *yaml.Node){
		"version": func(f string, v *yaml.Node) {
			if i, ok := w.Int(v, f); ok && i != Version {
				w.Errf(v, f, "unsupported version %d (this replan reads version %d)", i, Version)
			}
		},
		"name": func(f string, v *yaml.Node) {
			if n, ok := w.Str(v, f); ok {
				if !nameRE.MatchString(n) {
					w.Errf(v, f, "want lower-case letters, digits, '.', '_' or '-' (at most 63, starting with a letter or digit), got %q", n)
				}
				s.Name = n
			}
		},
		"tenant": func(f string, v *yaml.Node) {
			if n, ok := w.Str(v, f); ok {
				noControl(w, v, f, n)
				s.Tenant = n
			}
		},
		"class": func(f string, v *yaml.Node) {
			if c, ok := w.Str(v, f); ok {
				switch Class(c) {
				case Guaranteed, BestEffort:
					s.Class = Class(c)
				default:
					w.Errf(v, f, "want guaranteed or best-effort, got %q", c)
				}
			}
		},
		"model": func(f string, v *yaml.Node) {
			modelNode = v
			if v.Kind == yaml.MappingNode {
				a := perf.Arch{}
				w.Mapping(v, f, map[string]func(string, *yaml.Node){
					"name": func(f string, v *yaml.Node) {
						if n, ok := w.Str(v, f); ok {
							noControl(w, v, f, n)
							a.Name = n
						}
					},
					"params":  func(f string, v *yaml.Node) { a.Params, _ = w.Positive(v, f) },
					"layers":  func(f string, v *yaml.Node) { a.Layers, _ = w.Count(v, f) },
					"hidden":  func(f string, v *yaml.Node) { a.Hidden, _ = w.Count(v, f) },
					"heads":   func(f string, v *yaml.Node) { a.Heads, _ = w.Count(v, f) },
					"seq_len": func(f string, v *yaml.Node) { a.SeqLen, _ = w.Count(v, f) },
					"vocab":   func(f string, v *yaml.Node) { a.Vocab, _ = w.NonNegative(v, f) },
				})
				archBlock = &a
				return
			}
			if n, ok := w.Str(v, f); ok {
				noControl(w, v, f, n)
				s.Model = n
			}
		},
		"framework": func(f string, v *yaml.Node) {
			if fw, ok := w.Str(v, f); ok {
				switch Framework(fw) {
				case DeepSpeed, Megatron:
					s.Framework = Framework(fw)
				default:
					w.Errf(v, f, "want deepspeed or megatron, got %q", fw)
				}
			}
		},
		"workdir": func(f string, v *yaml.Node) { s.WorkDir = absPath(w, v, f) },
		"entrypoint": func(f string, v *yaml.Node) {
			if e, ok := w.Str(v, f); ok {
				noControl(w, v, f, e)
				s.Entrypoint = e
			}
		},
		"args": func(f string, v *yaml.Node) {
			s.Args = []string{}
			w.List(v, f, func(i int, p string, item *yaml.Node) {
				if w.Scalar(item, p, "a string") {
					noControl(w, item, p, item.Value)
					s.Args = append(s.Args, item.Value)
				}
			})
		},
		"env": func(f string, v *yaml.Node) {
			s.Env = w.Labels(v, f)
			for k := range s.Env {
				if !envRE.MatchString(k) {
					w.Errf(yamlcheck.FieldNode(v, k), f+"."+k, "not a valid environment variable name")
				} else {
					noControl(w, yamlcheck.FieldNode(v, k), f+"."+k, s.Env[k])
				}
			}
		},
		"global_batch": func(f string, v *yaml.Node) { s.GlobalBatch, _ = w.Count(v, f) },
		"iterations":   func(f string, v *yaml.Node) { s.Iterations, _ = w.Count(v, f) },
		"checkpoint_dir": func(f string, v *yaml.Node) {
			s.CheckpointDir = absPath(w, v, f)
			if strings.Contains(s.CheckpointDir, "\\") {
				// Every file replan writes there is named by this path in
				// shell commands and checksums: a backslash breaks both.
				w.Errf(v, f, "a backslash is not allowed in the checkpoint directory, got %q", s.CheckpointDir)
			}
		},
		"request": func(f string, v *yaml.Node) {
			w.Mapping(v, f, map[string]func(string, *yaml.Node){
				"gpus":      func(f string, v *yaml.Node) { gpusNode = v; line(f, v); s.Request.GPUs, _ = w.Count(v, f) },
				"cpus":      func(f string, v *yaml.Node) { line(f, v); s.Request.CPUs, _ = w.NonNegative(v, f) },
				"memory_gb": func(f string, v *yaml.Node) { line(f, v); s.Request.MemoryGB, _ = w.NonNegative(v, f) },
				"plan": func(f string, v *yaml.Node) {
					line(f, v)
					if p, ok := w.Str(v, f); ok {
						planNode, planSpec = v, p
					}
				},
			})
		},
		"profile": func(f string, v *yaml.Node) {
			p := &Profile{}
			w.Mapping(v, f, map[string]func(string, *yaml.Node){
				"enabled": func(f string, v *yaml.Node) {
					line(f, v)
					if b, ok := w.Bool(v, f); ok {
						p.Enabled = &b
					}
				},
				"max_configs": func(f string, v *yaml.Node) {
					line(f, v)
					if n, ok := w.Count(v, f); ok {
						if n > perf.MaxProfileConfigs {
							w.Errf(v, f, "at most %d, got %d", perf.MaxProfileConfigs, n)
						}
						p.MaxConfigs = n
					}
				},
				"iterations":    func(f string, v *yaml.Node) { line(f, v); p.Iterations, _ = w.Count(v, f) },
				"run_seconds":   func(f string, v *yaml.Node) { line(f, v); p.RunSeconds, _ = w.Positive(v, f) },
				"phase_seconds": func(f string, v *yaml.Node) { line(f, v); p.PhaseSeconds, _ = w.Positive(v, f) },
			})
			s.Profile = p
		},
		"pin": func(f string, v *yaml.Node) {
			w.Mapping(v, f, map[string]func(string, *yaml.Node){
				"plan": func(f string, v *yaml.Node) { line(f, v); s.Pin.Plan, _ = w.Bool(v, f) },
				"tiers": func(f string, v *yaml.Node) {
					line(f, v)
					w.List(v, f, func(i int, p string, item *yaml.Node) {
						if t, ok := w.Str(item, p); ok {
							switch t {
							case "server":
								s.Pin.Tiers = append(s.Pin.Tiers, perf.TierServer)
							case "rack":
								s.Pin.Tiers = append(s.Pin.Tiers, perf.TierRack)
							case "cross-rack":
								s.Pin.Tiers = append(s.Pin.Tiers, perf.TierCrossRack)
							default:
								w.Errf(item, p, "want server, rack or cross-rack, got %q", t)
							}
						}
					})
				},
			})
		},
	})
	for k, v := range seen {
		line(k, v)
	}
	for _, req := range []string{"version", "name", "tenant", "class", "model", "framework", "workdir", "entrypoint", "global_batch", "iterations", "checkpoint_dir", "request"} {
		if seen[req] == nil {
			w.Errf(root, req, "missing required field")
		}
	}
	if req := seen["request"]; req != nil && gpusNode == nil {
		w.Errf(req, "request.gpus", "missing required field")
	}

	// The model: a known type, or an architecture block.
	if archBlock != nil {
		archBlock.GlobalBatch = max(s.GlobalBatch, 1)
		if archBlock.Name == "" {
			archBlock.Name = s.Name
		}
		if err := archBlock.Validate(); err != nil && len(w.Errs) == 0 {
			for _, e := range unjoin(err) {
				w.Errf(modelNode, "model", "%v", e)
			}
		}
		s.Arch, s.Model = *archBlock, archBlock.Name
	} else if s.Model != "" {
		a, err := cat.Lookup(s.Model)
		if err != nil {
			w.Errf(modelNode, "model", "%v", err)
		} else {
			a.GlobalBatch = s.GlobalBatch
			s.Arch = a
		}
	}

	// The plan a guaranteed job is promised; checked against the model.
	if planNode != nil {
		p, err := perf.ParsePlanSpec(planSpec)
		if err != nil {
			w.Errf(planNode, "request.plan", "%v", strings.TrimPrefix(err.Error(), fmt.Sprintf("plan spec %q: ", planSpec)))
		} else {
			s.Request.Plan, s.Request.HasPlan = p, true
			if s.Request.GPUs > 0 && s.Arch.Name != "" && s.GlobalBatch > 0 {
				if err := perf.Check(s.Arch, p, perf.Placement{s.Request.GPUs}); err != nil {
					w.Errf(planNode, "request.plan", "%v", err)
				}
			}
		}
	} else if s.Class == Guaranteed && seen["request"] != nil {
		w.Errf(seen["request"], "request.plan", "a guaranteed job must say which plan it is promised the throughput of")
	}
	if s.Request.CPUs == 0 && s.Request.GPUs > 0 {
		s.Request.CPUs = 8 * s.Request.GPUs
	}
	if s.Request.Plan.Offload && s.Request.CPUs < s.Request.GPUs {
		w.Errf(planNode, "request.cpus", "optimizer offload needs at least one CPU per GPU, asked for %d CPUs for %d GPUs", s.Request.CPUs, s.Request.GPUs)
	}
	if s.Framework == Megatron && s.Request.HasPlan && (s.Request.Plan.ZeRO > 1 || s.Request.Plan.Offload) {
		w.Errf(planNode, "request.plan", "megatron runs ZeRO-0 or ZeRO-1 (distributed optimizer) without offload; use framework: deepspeed for ZeRO-%d%s", s.Request.Plan.ZeRO, map[bool]string{true: " with offload"}[s.Request.Plan.Offload])
	}
	if len(w.Errs) > 0 {
		return nil, w.Err()
	}
	if s.Env == nil {
		s.Env = map[string]string{}
	}
	return s, nil
}

// absPath reads a string field that must be an absolute path.
func absPath(w *yamlcheck.Walker, v *yaml.Node, f string) string {
	d, ok := w.Str(v, f)
	if ok && !path.IsAbs(d) {
		w.Errf(v, f, "want an absolute path, got %q", d)
	}
	if ok {
		noControl(w, v, f, d)
	}
	return d
}

// noControl refuses control characters (newlines, escapes, DEL, C1
// codes) in a name, path or argument: they break the shell commands and
// files replan renders from it, and they rewrite the terminal of whoever
// lists the job.
func noControl(w *yamlcheck.Walker, v *yaml.Node, f, s string) {
	if i := strings.IndexFunc(s, unicode.IsControl); i >= 0 {
		w.Errf(v, f, "control character %q at byte %d is not allowed", string([]rune(s[i:])[0]), i)
	}
}

func unjoin(err error) []error {
	var j interface{ Unwrap() []error }
	if errors.As(err, &j) {
		return j.Unwrap()
	}
	return []error{err}
}
