package perf

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Plan is an execution plan: how a job's global batch is split over GPUs and
// which memory-saving strategies it uses. GA is the number of micro-batches
// each data-parallel replica processes per iteration (gradient accumulation
// steps, and the pipeline's micro-batch count when PP > 1).
type Plan struct {
	DP         int  `json:"dp"`
	TP         int  `json:"tp"`
	PP         int  `json:"pp"`
	MicroBatch int  `json:"micro_batch"`
	GA         int  `json:"ga"`
	ZeRO       int  `json:"zero"`
	Offload    bool `json:"offload"`
	Ckpt       bool `json:"ckpt"`
}

// GPUs is DP·TP·PP.
func (p Plan) GPUs() int { return p.DP * p.TP * p.PP }

// GlobalBatch is micro-batch · GA · DP.
func (p Plan) GlobalBatch() int { return p.MicroBatch * p.GA * p.DP }

// String is the compact form shown in tables and the TUI, e.g.
// "DP2·TP4·PP1 mb2 ga4 ZeRO-1 ckpt".
func (p Plan) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "DP%d·TP%d·PP%d mb%d ga%d ZeRO-%d", p.DP, p.TP, p.PP, p.MicroBatch, p.GA, p.ZeRO)
	if p.Offload {
		b.WriteString(" offload")
	}
	if p.Ckpt {
		b.WriteString(" ckpt")
	}
	return b.String()
}

// Spec is the machine form accepted by ParsePlanSpec, e.g.
// "dp=2,tp=4,pp=1,mb=2,ga=4,zero=1,ckpt".
func (p Plan) Spec() string {
	s := fmt.Sprintf("dp=%d,tp=%d,pp=%d,mb=%d,ga=%d,zero=%d", p.DP, p.TP, p.PP, p.MicroBatch, p.GA, p.ZeRO)
	if p.Offload {
		s += ",offload"
	}
	if p.Ckpt {
		s += ",ckpt"
	}
	return s
}

// Family names the plan's kind the way the Morphling data does: "3d" for
// any TP/PP plan, otherwise "zero-offload", "zero-dp", "gc", "ga" or "dp".
func (p Plan) Family() string {
	switch {
	case p.TP > 1 || p.PP > 1:
		return "3d"
	case p.Offload:
		return "zero-offload"
	case p.ZeRO > 0:
		return "zero-dp"
	case p.Ckpt:
		return "gc"
	case p.GA > 1:
		return "ga"
	default:
		return "dp"
	}
}

// ParsePlanSpec parses "dp=2,tp=4,pp=1,mb=2,ga=4,zero=1[,offload][,ckpt]".
// Omitted sizes default to 1, zero to 0.
func ParsePlanSpec(s string) (Plan, error) {
	p := Plan{DP: 1, TP: 1, PP: 1, MicroBatch: 1, GA: 1}
	if strings.TrimSpace(s) == "" {
		return Plan{}, errors.New("plan spec: empty")
	}
	seen := map[string]bool{}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		key, val, hasVal := strings.Cut(part, "=")
		key = strings.ToLower(strings.TrimSpace(key))
		if seen[key] {
			return Plan{}, fmt.Errorf("plan spec %q: %s given twice", s, key)
		}
		seen[key] = true
		switch key {
		case "offload", "ckpt":
			on := true
			if hasVal {
				b, err := strconv.ParseBool(strings.TrimSpace(val))
				if err != nil {
					return Plan{}, fmt.Errorf("plan spec %q: %s: want true/false, got %q", s, key, val)
				}
				on = b
			}
			if key == "offload" {
				p.Offload = on
			} else {
				p.Ckpt = on
			}
			continue
		}
		if !hasVal {
			return Plan{}, fmt.Errorf("plan spec %q: %q: want key=value", s, part)
		}
		n, err := strconv.Atoi(strings.TrimSpace(val))
		if err != nil {
			return Plan{}, fmt.Errorf("plan spec %q: %s: want an integer, got %q", s, key, val)
		}
		switch key {
		case "dp":
			p.DP = n
		case "tp":
			p.TP = n
		case "pp":
			p.PP = n
		case "mb":
			p.MicroBatch = n
		case "ga":
			p.GA = n
		case "zero":
			p.ZeRO = n
		default:
			return Plan{}, fmt.Errorf("plan spec %q: unknown key %q (want dp, tp, pp, mb, ga, zero, offload, ckpt)", s, key)
		}
	}
	if err := p.checkShape(); err != nil {
		return Plan{}, fmt.Errorf("plan spec %q: %w", s, err)
	}
	return p, nil
}

// checkShape checks the rules that need no model or placement.
func (p Plan) checkShape() error {
	for _, f := range []struct {
		n string
		v int
	}{{"dp", p.DP}, {"tp", p.TP}, {"pp", p.PP}, {"mb", p.MicroBatch}, {"ga", p.GA}} {
		if f.v < 1 {
			return &RuleError{Rule: RuleSizes, Msg: fmt.Sprintf("%s must be >= 1, got %d", f.n, f.v)}
		}
	}
	if p.ZeRO < 0 || p.ZeRO > 3 {
		return &RuleError{Rule: RuleZeROStage, Msg: fmt.Sprintf("zero stage must be 0-3, got %d", p.ZeRO)}
	}
	return nil
}

// Placement is the number of GPUs a job uses on each server it spans, e.g.
// [4 4] for two servers with four GPUs each.
type Placement []int

// GPUs is the total GPU count.
func (pl Placement) GPUs() int {
	n := 0
	for _, g := range pl {
		n += g
	}
	return n
}

// Servers is the number of servers with at least one GPU of the job.
func (pl Placement) Servers() int {
	n := 0
	for _, g := range pl {
		if g > 0 {
			n++
		}
	}
	return n
}

// MinPerServer is the smallest non-zero GPU count on a server.
func (pl Placement) MinPerServer() int {
	m := 0
	for _, g := range pl {
		if g > 0 && (m == 0 || g < m) {
			m = g
		}
	}
	return m
}

// String writes the placement the way the Morphling data does ("44") when
// every count is a single digit, else with dots ("16.16").
func (pl Placement) String() string {
	parts := make([]string, len(pl))
	wide := false
	for i, g := range pl {
		parts[i] = strconv.Itoa(g)
		if g > 9 {
			wide = true
		}
	}
	if wide {
		return strings.Join(parts, ".")
	}
	return strings.Join(parts, "")
}

// EvenPlacement spreads gpus over servers as evenly as possible, fuller
// servers first.
func EvenPlacement(gpus, servers int) Placement {
	if servers < 1 {
		servers = 1
	}
	pl := make(Placement, servers)
	for i := range pl {
		pl[i] = gpus / servers
		if i < gpus%servers {
			pl[i]++
		}
	}
	return pl
}

// PackedPlacement fills servers of perServer GPUs one after another.
func PackedPlacement(gpus, perServer int) Placement {
	var pl Placement
	for gpus > 0 {
		n := min(gpus, perServer)
		pl = append(pl, n)
		gpus -= n
	}
	return pl
}

// Rule names a plan validity rule, so callers and people can see which one
// rejected a plan.
type Rule string

// The validity rules. Each rejected plan names exactly one.
const (
	RuleSizes       Rule = "sizes"        // DP, TP, PP, micro-batch and GA are >= 1
	RuleGPUCount    Rule = "gpu-count"    // DP·TP·PP = GPUs of the placement
	RuleHeads       Rule = "heads"        // heads % TP = 0
	RuleLayers      Rule = "layers"       // layers % PP = 0
	RuleBatch       Rule = "global-batch" // micro-batch · GA · DP = global batch
	RuleTPInServer  Rule = "tp-in-server" // a TP group never spans servers
	RuleZeROStage   Rule = "zero-stage"   // stage 0-3
	RuleZeROWithPP  Rule = "zero-with-pp" // ZeRO >= 2 not with PP > 1 (DeepSpeed rejects it)
	RuleOffloadZeRO Rule = "offload-zero" // offload needs ZeRO >= 1
	RuleMemoryGPU   Rule = "gpu-memory"   // the estimate must fit the GPU
	RuleMemoryHost  Rule = "host-memory"  // offloaded states must fit the server
	RuleCPUs        Rule = "cpus"         // offload needs at least one CPU per GPU
	RuleFramework   Rule = "framework"    // the job's framework runs the plan on the placement (Space)
)

// RuleError is a plan rejected by one rule.
type RuleError struct {
	Rule Rule
	Msg  string
}

func (e *RuleError) Error() string { return fmt.Sprintf("%s: %s", e.Rule, e.Msg) }

// Check applies every structural rule to plan p for architecture a on
// placement pl and returns the first that fails (rules are checked in a
// fixed order so the reason is stable).
func Check(a Arch, p Plan, pl Placement) error {
	if err := p.checkShape(); err != nil {
		return err
	}
	if g := pl.GPUs(); p.GPUs() != g {
		return &RuleError{RuleGPUCount, fmt.Sprintf("DP·TP·PP = %d·%d·%d = %d, placement %s has %d GPUs", p.DP, p.TP, p.PP, p.GPUs(), pl, g)}
	}
	if a.Heads%p.TP != 0 {
		return &RuleError{RuleHeads, fmt.Sprintf("%d attention heads are not divisible by TP %d", a.Heads, p.TP)}
	}
	if a.Layers%p.PP != 0 {
		return &RuleError{RuleLayers, fmt.Sprintf("%d layers are not divisible by PP %d", a.Layers, p.PP)}
	}
	if p.GlobalBatch() != a.GlobalBatch {
		return &RuleError{RuleBatch, fmt.Sprintf("micro-batch·GA·DP = %d·%d·%d = %d, global batch is %d", p.MicroBatch, p.GA, p.DP, p.GlobalBatch(), a.GlobalBatch)}
	}
	for i, g := range pl {
		if g > 0 && g%p.TP != 0 {
			return &RuleError{RuleTPInServer, fmt.Sprintf("TP %d does not divide the %d GPUs on server %d: a TP group would span servers", p.TP, g, i)}
		}
	}
	if p.ZeRO >= 2 && p.PP > 1 {
		return &RuleError{RuleZeROWithPP, fmt.Sprintf("ZeRO-%d with PP %d: DeepSpeed supports only ZeRO-0/1 with pipeline parallelism", p.ZeRO, p.PP)}
	}
	if p.Offload && p.ZeRO < 1 {
		return &RuleError{RuleOffloadZeRO, "optimizer offload needs ZeRO stage >= 1"}
	}
	return nil
}

// Space narrows the plans a job's framework can run; the zero Space is
// every plan (DeepSpeed runs them all). Megatron-LM, launched by torchrun,
// runs ZeRO-0/1 without offload (its distributed optimizer) and needs the
// same GPU count on every server (torchrun's --nproc-per-node): launch
// refuses anything else, so the scheduler must not choose it.
type Space struct {
	// ZeRO01 allows only ZeRO stages 0 and 1, without offload.
	ZeRO01 bool `json:"zero01,omitempty"`
	// EvenServers allows only placements whose servers hold the same
	// GPU count.
	EvenServers bool `json:"even_servers,omitempty"`
	// What the job's own entrypoint runs (its spec's supports): NoTP and
	// NoPP forbid tensor and pipeline parallelism, NoOffload optimizer
	// offload, and ZeROStages, when not 0, is the set of ZeRO stages it
	// runs (bit s: stage s).
	NoTP       bool  `json:"no_tp,omitempty"`
	NoPP       bool  `json:"no_pp,omitempty"`
	NoOffload  bool  `json:"no_offload,omitempty"`
	ZeROStages uint8 `json:"zero_stages,omitempty"`
}

// Narrow is s with the limits of o added (the plans both allow).
func (s Space) Narrow(o Space) Space {
	s.ZeRO01 = s.ZeRO01 || o.ZeRO01
	s.EvenServers = s.EvenServers || o.EvenServers
	s.NoTP = s.NoTP || o.NoTP
	s.NoPP = s.NoPP || o.NoPP
	s.NoOffload = s.NoOffload || o.NoOffload
	switch {
	case s.ZeROStages == 0:
		s.ZeROStages = o.ZeROStages
	case o.ZeROStages != 0:
		s.ZeROStages &= o.ZeROStages
		if s.ZeROStages == 0 {
			s.ZeROStages = 1 << 7 // nothing in common: no stage (0..3) is allowed
		}
	}
	return s
}

// entrypoint is the rule of the job's own limits p breaks ("" if none).
func (s Space) entrypoint(p Plan) string {
	switch {
	case s.NoTP && p.TP > 1:
		return fmt.Sprintf("the job's entrypoint does not run tensor parallelism (supports.tp: false), plan is %s", p)
	case s.NoPP && p.PP > 1:
		return fmt.Sprintf("the job's entrypoint does not run pipeline parallelism (supports.pp: false), plan is %s", p)
	case s.NoOffload && p.Offload:
		return fmt.Sprintf("the job's entrypoint does not run optimizer offload (supports.offload: false), plan is %s", p)
	case s.ZeROStages != 0 && (p.ZeRO < 0 || p.ZeRO > 7 || s.ZeROStages&(1<<p.ZeRO) == 0):
		return fmt.Sprintf("the job's entrypoint does not run ZeRO-%d (supports.zero), plan is %s", p.ZeRO, p)
	}
	return ""
}

// MegatronSpace is the Space of a Megatron-LM job.
var MegatronSpace = Space{ZeRO01: true, EvenServers: true}

// Check returns the rule the framework breaks with plan p on pl, or nil.
func (s Space) Check(p Plan, pl Placement) error {
	if s.ZeRO01 && (p.ZeRO > 1 || p.Offload) {
		return &RuleError{RuleFramework, fmt.Sprintf("the framework runs ZeRO-0/1 without offload, plan is %s", p)}
	}
	if why := s.entrypoint(p); why != "" {
		return &RuleError{RuleFramework, why}
	}
	if s.EvenServers {
		for _, g := range pl {
			if g != pl[0] {
				return &RuleError{RuleFramework, fmt.Sprintf("the framework needs the same GPU count on every server, placement is %s", pl)}
			}
		}
	}
	return nil
}

// allows is Check without the reason.
func (s Space) allows(p Plan, pl Placement) bool {
	if s.ZeRO01 && (p.ZeRO > 1 || p.Offload) {
		return false
	}
	if (s.NoTP && p.TP > 1) || (s.NoPP && p.PP > 1) || (s.NoOffload && p.Offload) {
		return false
	}
	if s.ZeROStages != 0 && (p.ZeRO < 0 || p.ZeRO > 7 || s.ZeROStages&(1<<p.ZeRO) == 0) {
		return false
	}
	if s.EvenServers {
		for _, g := range pl {
			if g != pl[0] {
				return false
			}
		}
	}
	return true
}

// Rejection is a plan that failed a rule, with the reason.
type Rejection struct {
	Plan   Plan   `json:"plan"`
	Rule   Rule   `json:"rule"`
	Reason string `json:"reason"`
}

// Candidates lists every plan shape for gpus GPUs: every factorisation
// DP·TP·PP = gpus, every micro-batch dividing the per-replica batch, every
// ZeRO stage with and without offload and checkpointing. It does no
// validity checking; Enumerate does.
func Candidates(a Arch, gpus int) []Plan {
	n := 0
	forEachCandidate(a, gpus, func(Plan) { n++ })
	out := make([]Plan, 0, n)
	forEachCandidate(a, gpus, func(p Plan) { out = append(out, p) })
	return out
}

// ForEachCandidate calls fn with every candidate of Candidates, in the
// same order, without building the slice (a policy's plan search runs it
// for every placement it prices).
func ForEachCandidate(a Arch, gpus int, fn func(Plan)) { forEachCandidate(a, gpus, fn) }

// forEachCandidate calls fn with every candidate of Candidates without
// building the slice (the curve's hot path).
func forEachCandidate(a Arch, gpus int, fn func(Plan)) {
	if gpus < 1 || a.GlobalBatch < 1 {
		return
	}
	for tp := 1; tp <= gpus; tp++ {
		if gpus%tp != 0 {
			continue
		}
		for pp := 1; pp <= gpus/tp; pp++ {
			if (gpus/tp)%pp != 0 {
				continue
			}
			dp := gpus / tp / pp
			if a.GlobalBatch%dp != 0 {
				// micro-batch·GA·DP cannot equal the batch: one candidate
				// documents why.
				fn(Plan{DP: dp, TP: tp, PP: pp, MicroBatch: 1, GA: 1})
				continue
			}
			per := a.GlobalBatch / dp
			for mb := 1; mb <= per; mb++ {
				if per%mb != 0 {
					continue
				}
				for zero := 0; zero <= 3; zero++ {
					for _, off := range [2]bool{false, true} {
						for _, ck := range [2]bool{false, true} {
							fn(Plan{DP: dp, TP: tp, PP: pp, MicroBatch: mb, GA: per / mb, ZeRO: zero, Offload: off, Ckpt: ck})
						}
					}
				}
			}
		}
	}
}

// Enumerate returns every plan for architecture a that is valid on placement
// pl, and every rejected candidate with the rule that rejected it. Memory is
// not checked here: see Estimate and Model.Rank.
func Enumerate(a Arch, pl Placement) (valid []Plan, rejected []Rejection, err error) {
	if err := a.Validate(); err != nil {
		return nil, nil, fmt.Errorf("model %s: %w", a.Name, err)
	}
	if pl.GPUs() < 1 {
		return nil, nil, fmt.Errorf("placement %v: no GPUs", []int(pl))
	}
	for _, g := range pl {
		if g < 0 {
			return nil, nil, fmt.Errorf("placement %v: negative GPU count", []int(pl))
		}
	}
	for _, p := range Candidates(a, pl.GPUs()) {
		if err := Check(a, p, pl); err != nil {
			var re *RuleError
			if errors.As(err, &re) {
				rejected = append(rejected, Rejection{Plan: p, Rule: re.Rule, Reason: re.Msg})
				continue
			}
			return nil, nil, err
		}
		valid = append(valid, p)
	}
	sort.SliceStable(valid, func(i, j int) bool { return planLess(valid[i], valid[j]) })
	return valid, rejected, nil
}

func planLess(a, b Plan) bool {
	ka := [...]int{a.TP, a.PP, a.DP, a.MicroBatch, a.ZeRO, b2i(a.Offload), b2i(a.Ckpt)}
	kb := [...]int{b.TP, b.PP, b.DP, b.MicroBatch, b.ZeRO, b2i(b.Offload), b2i(b.Ckpt)}
	for i := range ka {
		if ka[i] != kb[i] {
			return ka[i] < kb[i]
		}
	}
	return false
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
