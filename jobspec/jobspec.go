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
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"

	"github.com/replan/replan/internal/termtext"
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
	HasPlan  bool      `json:"-"` // the spec names a plan; in JSON, a plan with DP ≥ 1
}

// Supports is what the job's entrypoint can run (spec field supports):
// every policy chooses only plans inside it, as inside the framework's
// space. A nil Supports (the field absent) is the framework's defaults.
type Supports struct {
	TP      bool  `json:"tp"`      // tensor parallelism
	PP      bool  `json:"pp"`      // pipeline parallelism
	Offload bool  `json:"offload"` // ZeRO-Offload of the optimizer
	ZeRO    []int `json:"zero"`    // the ZeRO stages it runs
}

// Space is the plans s allows, as a perf.Space (nil: every plan).
func (s *Supports) Space() perf.Space {
	if s == nil {
		return perf.Space{}
	}
	sp := perf.Space{NoTP: !s.TP, NoPP: !s.PP, NoOffload: !s.Offload}
	for _, z := range s.ZeRO {
		sp.ZeROStages |= 1 << z
	}
	return sp
}

// Constraint restricts where a job may run (spec field constraint).
// Labels are the server labels (node features, the inventory's labels)
// every server of the job must carry: "name" (whatever its value) or
// "name=value".
type Constraint struct {
	Labels []string `json:"labels,omitempty"`
}

// Hang is a job's bound on silence (spec field hang): the daemon
// restarts the job from its checkpoint when it logged no new iteration for
// max(Factor × its predicted iteration time, FloorS seconds). A zero
// field takes the daemon's value.
type Hang struct {
	Factor float64 `json:"factor,omitempty"`
	FloorS float64 `json:"floor_s,omitempty"`
}

// Slow is a job's fail-slow bounds (spec field slow): the daemon looks
// for a slow server when the job's measured throughput stays below
// Fraction of its prediction for Observations observations in a row. A
// zero field takes the daemon's value.
type Slow struct {
	Fraction     float64 `json:"fraction,omitempty"`
	Observations int     `json:"observations,omitempty"`
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
	Supports      *Supports         `json:"supports,omitempty"`
	// Constraint is where the job may run (nil: on any server).
	Constraint *Constraint `json:"constraint,omitempty"`
	// TimeLimit is how long the job may run (hold GPUs) in all; 0: no
	// limit of its own (the daemon applies its tenant's default). After
	// lists the jobs it waits for (limits.go).
	TimeLimit Duration `json:"time_limit,omitempty"`
	After     []Dep    `json:"after,omitempty"`
	// Hang overrides the daemon's bound on how long the job may log no
	// new iteration before it is restarted (nil: the daemon's).
	Hang *Hang `json:"hang,omitempty"`
	// Slow overrides the daemon's fail-slow bounds (nil: the daemon's).
	Slow *Slow `json:"slow,omitempty"`
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
	return ParseAuthorized(name, data, cat, nil)
}

// ParseAuthorized is Parse that asks authorize about the spec's tenant as
// soon as the YAML is decoded, before any check: when authorize refuses,
// its error is returned as it is and the spec is not validated, so a
// caller who may not submit under the tenant costs no more than the
// decoding. A spec whose tenant cannot be read (missing, not a string) is
// validated without asking: it fails validation. nil authorize: Parse.
func ParseAuthorized(name string, data []byte, cat perf.Catalog, authorize func(tenant string) error) (*Spec, error) {
	if cat == nil {
		cat = perf.NewCatalog()
	}
	w := &yamlcheck.Walker{File: name}
	root := w.Document(data, "a job spec", `a mapping starting with "version: 1"`)
	if root == nil {
		return nil, w.Err()
	}
	if authorize != nil {
		if tenant, ok := topString(root, "tenant"); ok {
			if err := authorize(tenant); err != nil {
				return nil, err
			}
		}
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
			checkEnv(w, v, f, s.Env)
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
		"supports": func(f string, v *yaml.Node) {
			line(f, v)
			sup := &Supports{TP: true, PP: true, Offload: true, ZeRO: []int{0, 1, 2, 3}}
			w.Mapping(v, f, map[string]func(string, *yaml.Node){
				"tp":      func(f string, v *yaml.Node) { sup.TP, _ = w.Bool(v, f) },
				"pp":      func(f string, v *yaml.Node) { sup.PP, _ = w.Bool(v, f) },
				"offload": func(f string, v *yaml.Node) { sup.Offload, _ = w.Bool(v, f) },
				"zero": func(f string, v *yaml.Node) {
					line(f, v)
					sup.ZeRO = []int{}
					w.List(v, f, func(i int, p string, item *yaml.Node) {
						z, ok := w.Int(item, p)
						switch {
						case !ok:
						case z < 0 || z > 3:
							w.Errf(item, p, "want a ZeRO stage 0, 1, 2 or 3, got %d", z)
						case slices.Contains(sup.ZeRO, z):
							w.Errf(item, p, "ZeRO stage %d listed twice", z)
						default:
							sup.ZeRO = append(sup.ZeRO, z)
						}
					})
					if len(sup.ZeRO) == 0 && v.Kind == yaml.SequenceNode && len(v.Content) == 0 {
						w.Errf(v, f, "an empty list allows no plan: list the ZeRO stages the entrypoint runs (0 when it has no ZeRO)")
					}
					slices.Sort(sup.ZeRO)
				},
			})
			s.Supports = sup
		},
		"constraint": func(f string, v *yaml.Node) { s.Constraint = parseConstraint(w, v, f, line) },
		"time_limit": func(f string, v *yaml.Node) { s.TimeLimit = parseTimeLimit(w, v, f) },
		"after":      func(f string, v *yaml.Node) { s.After = parseAfter(w, v, f, line) },
		"hang": func(f string, v *yaml.Node) {
			line(f, v)
			h := &Hang{}
			w.Mapping(v, f, map[string]func(string, *yaml.Node){
				"factor": func(f string, v *yaml.Node) { line(f, v); h.Factor, _ = w.Positive(v, f) },
				"floor": func(f string, v *yaml.Node) {
					line(f, v)
					if d, ok := w.Duration(v, f); ok {
						h.FloorS = d.Seconds()
					}
				},
			})
			s.Hang = h
		},
		"slow": func(f string, v *yaml.Node) {
			line(f, v)
			sl := &Slow{}
			w.Mapping(v, f, map[string]func(string, *yaml.Node){
				"fraction": func(f string, v *yaml.Node) {
					line(f, v)
					if x, ok := w.Positive(v, f); ok {
						if x >= 1 {
							w.Errf(v, f, "want a fraction of the predicted throughput below 1, got %g", x)
						}
						sl.Fraction = x
					}
				},
				"observations": func(f string, v *yaml.Node) {
					line(f, v)
					if n, ok := w.Count(v, f); ok {
						sl.Observations = n
					}
				},
			})
			s.Slow = sl
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
	if s.Supports != nil && s.Request.HasPlan {
		if err := s.Supports.Space().Check(s.Request.Plan, perf.Placement{max(s.Request.GPUs, 1)}); err != nil {
			w.Errf(planNode, "request.plan", "%v", strings.TrimPrefix(err.Error(), "framework: "))
		}
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

// checkEnv checks each variable of env (read by Labels from mapping v) once,
// in the file's order, at its key's line. It is linear in the number of
// variables: a 1 MiB spec holds tens of thousands, and looking each key's
// node up again (FieldNode) made it quadratic.
func checkEnv(w *yamlcheck.Walker, v *yaml.Node, f string, env map[string]string) {
	if v.Kind != yaml.MappingNode {
		return
	}
	done := make(map[string]bool, len(env))
	for i := 0; i+1 < len(v.Content); i += 2 {
		kn := unalias(v.Content[i])
		if kn == nil {
			continue
		}
		k := kn.Value
		val, ok := env[k]
		if !ok || done[k] {
			continue
		}
		done[k] = true
		if !envRE.MatchString(k) {
			w.Errf(kn, f+"."+k, "not a valid environment variable name")
		} else {
			noControl(w, kn, f+"."+k, val)
		}
	}
}

// topString is the string value of key in mapping root, read without
// walking the document (false when the key is absent, repeated or not a
// string, read as Walker.Str reads it).
func topString(root *yaml.Node, key string) (string, bool) {
	val, found := "", false
	for i := 0; i+1 < len(root.Content); i += 2 {
		if k := unalias(root.Content[i]); k == nil || k.Kind != yaml.ScalarNode || k.Value != key {
			continue
		}
		if found {
			return "", false
		}
		v := unalias(root.Content[i+1])
		if v == nil || v.Kind != yaml.ScalarNode || v.Tag == "!!null" || v.Value == "" {
			return "", false
		}
		val, found = v.Value, true
	}
	return val, found
}

// unalias follows aliases (nil past 100: the walker has refused the
// document already).
func unalias(n *yaml.Node) *yaml.Node {
	for depth := 0; n != nil && n.Kind == yaml.AliasNode; depth++ {
		if depth > 100 {
			return nil
		}
		n = n.Alias
	}
	return n
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
// lists the job. It refuses invisible format characters too
// (termtext.IsFormat: a right-to-left override U+202E, a zero-width space
// U+200B, any of category Cf): they make a name or an argument read other
// than it is.
func noControl(w *yamlcheck.Walker, v *yaml.Node, f, s string) {
	if i := strings.IndexFunc(s, unicode.IsControl); i >= 0 {
		w.Errf(v, f, "control character %q at byte %d is not allowed", string([]rune(s[i:])[0]), i)
	}
	if i := strings.IndexFunc(s, termtext.IsFormat); i >= 0 {
		r, _ := utf8.DecodeRuneInString(s[i:])
		w.Errf(v, f, "invisible format character U+%04X at byte %d is not allowed", r, i)
	}
}

func unjoin(err error) []error {
	var j interface{ Unwrap() []error }
	if errors.As(err, &j) {
		return j.Unwrap()
	}
	return []error{err}
}
