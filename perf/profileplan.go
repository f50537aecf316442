package perf

import (
	"fmt"
	"slices"
)

// MaxProfileConfigs is the most configurations a profiling phase runs.
const MaxProfileConfigs = 7

// ProfileConfig is one run of a profiling phase: a plan on a placement
// and what it pins down of the model.
type ProfileConfig struct {
	Plan      Plan      `json:"plan"`
	Placement Placement `json:"placement"`
	// Label says it as people do: "DP2 on 1 server", "1 GPU mb 4".
	Label string `json:"label"`
	// Pins names the parameters the run identifies (ParamNames entries,
	// or "forward" for the compute itself).
	Pins []string `json:"pins"`
}

// ProfileConfigs chooses at most limit configurations (0 or more than
// MaxProfileConfigs: MaxProfileConfigs) whose measured iteration times
// best pin down m's parameters, on the free GPUs of the usable servers
// (free, one entry per server, any order). In order of what they
// identify:
//
//  1. 1 GPU at the largest micro-batch that fits: the compute (k_bwd,
//     k_const);
//  2. DP inside one server (as many GPUs as one server has free, at most
//     its GPUsPerServer, a DP size dividing the global batch): the
//     intra-server gradient sync (k_sync);
//  3. DP across two servers, the same count on each: the network sync;
//  4. 1 GPU at a smaller micro-batch (more accumulation steps): the
//     per-micro-batch overhead (k_launch);
//  5. 1 GPU at a third micro-batch (1, else one between the two): whether
//     the launches add to the compute or hide behind it (k_lo);
//  6. TP 2 inside one server where the heads split: k_tp, k_mp;
//  7. ZeRO-Offload on 1 GPU where the framework runs it: k_opt_off,
//     k_host, k_swap;
//  8. PP 2 inside one server where the layers split: k_stage (left out
//     when the seven before it all run: MaxProfileConfigs).
//
// Each plan uses the largest micro-batch whose memory estimate fits, then
// activation checkpointing, then ZeRO-Offload: a configuration that fits
// no way is left out. Configurations the framework's Space does not run
// are left out. It is pure: the same inputs give the same configurations.
func ProfileConfigs(m Model, free []int, limit int) []ProfileConfig {
	if limit <= 0 || limit > MaxProfileConfigs {
		limit = MaxProfileConfigs
	}
	a := m.Arch
	if a.GlobalBatch < 1 {
		return nil
	}
	fr := slices.Clone(free)
	slices.SortFunc(fr, func(x, y int) int { return y - x })
	for len(fr) > 0 && fr[len(fr)-1] <= 0 {
		fr = fr[:len(fr)-1]
	}
	if len(fr) == 0 {
		return nil
	}
	perServer := m.Env.GPUsPerServer
	if perServer <= 0 {
		perServer = fr[0]
	}
	var out []ProfileConfig
	seen := map[string]bool{}
	add := func(c ProfileConfig, ok bool) {
		if !ok || len(out) >= limit {
			return
		}
		k := c.Plan.Spec() + "@" + c.Placement.String()
		if seen[k] {
			return
		}
		seen[k] = true
		out = append(out, c)
	}
	// largest DP size ≤ n that divides the global batch (and is > 1)
	dpUpTo := func(n int) int {
		for d := n; d >= 2; d-- {
			if a.GlobalBatch%d == 0 {
				return d
			}
		}
		return 0
	}
	// 1. one GPU, the largest micro-batch that fits
	one := Placement{1}
	first, ok := m.profilePlan(Plan{DP: 1, TP: 1, PP: 1}, one, false)
	add(ProfileConfig{Plan: first, Placement: one, Label: fmt.Sprintf("1 GPU mb %d", first.MicroBatch), Pins: []string{"forward", "k_bwd", "k_const"}}, ok)
	// 2. DP inside one server
	if d := dpUpTo(min(fr[0], perServer)); d > 1 {
		pl := Placement{d}
		p, ok := m.profilePlan(Plan{DP: d, TP: 1, PP: 1}, pl, false)
		add(ProfileConfig{Plan: p, Placement: pl, Label: fmt.Sprintf("DP%d on 1 server", d), Pins: []string{"k_sync"}}, ok)
	}
	// 3. DP across two servers
	if len(fr) >= 2 {
		g := min(fr[1], perServer)
		for ; g >= 1; g-- {
			if a.GlobalBatch%(2*g) == 0 {
				break
			}
		}
		if g >= 1 {
			pl := Placement{g, g}
			p, ok := m.profilePlan(Plan{DP: 2 * g, TP: 1, PP: 1}, pl, false)
			pins := []string{"k_sync"}
			if m.Env.Stray(pl) {
				pins = append(pins, "k_uneven")
			}
			add(ProfileConfig{Plan: p, Placement: pl, Label: fmt.Sprintf("DP%d on 2 servers", 2*g), Pins: pins}, ok)
		}
	}
	// 4. one GPU at a smaller micro-batch
	if ok && first.MicroBatch > 1 {
		p := first
		p.MicroBatch = smallerDivisor(a.GlobalBatch, first.MicroBatch)
		p.GA = a.GlobalBatch / p.MicroBatch
		add(ProfileConfig{Plan: p, Placement: one, Label: fmt.Sprintf("1 GPU mb %d", p.MicroBatch), Pins: []string{"k_launch", "forward"}}, m.fits(p, one))
		// 5. one GPU at a third micro-batch: whether the launches add to
		// the compute or hide behind it (k_lo)
		if mb := thirdMicroBatch(a.GlobalBatch, first.MicroBatch, p.MicroBatch); mb > 0 {
			q := first
			q.MicroBatch, q.GA = mb, a.GlobalBatch/mb
			add(ProfileConfig{Plan: q, Placement: one, Label: fmt.Sprintf("1 GPU mb %d", mb), Pins: []string{"k_lo", "k_launch"}}, m.fits(q, one))
		}
	}
	// 6. TP 2 inside one server
	if fr[0] >= 2 && a.Heads%2 == 0 {
		pl := Placement{2}
		p, ok := m.profilePlan(Plan{DP: 1, TP: 2, PP: 1}, pl, false)
		add(ProfileConfig{Plan: p, Placement: pl, Label: "TP2 on 1 server", Pins: []string{"k_tp", "k_mp"}}, ok)
	}
	// 7. ZeRO-Offload on one GPU
	if p, ok := m.profilePlan(Plan{DP: 1, TP: 1, PP: 1, ZeRO: 1, Offload: true}, one, true); ok {
		add(ProfileConfig{Plan: p, Placement: one, Label: "ZeRO-Offload on 1 GPU", Pins: []string{"k_opt_off", "k_host", "k_swap"}}, true)
	}
	// 8. PP 2 inside one server
	if fr[0] >= 2 && a.Layers%2 == 0 {
		pl := Placement{2}
		p, ok := m.profilePlan(Plan{DP: 1, TP: 1, PP: 2}, pl, false)
		add(ProfileConfig{Plan: p, Placement: pl, Label: "PP2 on 1 server", Pins: []string{"k_stage"}}, ok)
	}
	return out
}

// profilePlan completes shape (DP, TP, PP, and ZeRO/Offload when fixed)
// on pl: the largest micro-batch that fits, else with checkpointing,
// else (unless fixed) ZeRO-Offload. ok is false when nothing fits or the
// framework does not run it.
func (m Model) profilePlan(shape Plan, pl Placement, fixed bool) (Plan, bool) {
	a := m.Arch
	if shape.DP < 1 || a.GlobalBatch%shape.DP != 0 {
		return Plan{}, false
	}
	per := a.GlobalBatch / shape.DP
	type variant struct {
		zero    int
		off, ck bool
	}
	vs := []variant{{shape.ZeRO, shape.Offload, false}, {shape.ZeRO, shape.Offload, true}}
	if !fixed && shape.PP == 1 {
		vs = append(vs, variant{1, true, false}, variant{1, true, true})
	}
	for _, v := range vs {
		for mb := per; mb >= 1; mb-- {
			if per%mb != 0 {
				continue
			}
			p := shape
			p.MicroBatch, p.GA, p.ZeRO, p.Offload, p.Ckpt = mb, per/mb, v.zero, v.off, v.ck
			if m.fits(p, pl) {
				return p, true
			}
		}
	}
	return Plan{}, false
}

// fits reports whether p is valid on pl, allowed by m's Space, and fits
// memory.
func (m Model) fits(p Plan, pl Placement) bool {
	if !valid(m.Arch, p, pl) || !m.Space.allows(p, pl) {
		return false
	}
	env := m.Env
	if env.GPUMemGB <= 0 {
		return true
	}
	return EstimateMemory(m.Arch, p, pl).Fits(env) == nil
}

// thirdMicroBatch is the micro-batch of the profile's third one-GPU run,
// given the other two (large, small; both divide n): 1, the
// launch-bound end, when small is above it, else a divisor of n between
// the two; 0 when there is none (large ≤ 2).
func thirdMicroBatch(n, large, small int) int {
	if small > 1 {
		return 1
	}
	for c := large - 1; c > 1; c-- {
		if n%c == 0 {
			return c
		}
	}
	return 0
}

// smallerDivisor is the largest divisor of n below d (at least 1): a
// quarter of d when that divides n, else the next smaller divisor.
func smallerDivisor(n, d int) int {
	for c := max(d/4, 1); c >= 1; c-- {
		if n%c == 0 && c < d {
			return c
		}
	}
	return 1
}

// EstimateForward estimates a model type's forward profile from measured
// iterations when no profiler timed the forward pass: on the
// data-parallel runs without offload, model parallelism or a measured
// forward, the forward is taken as the iteration over 1 + k_bwd (the
// default backward ratio: gradient sync, optimizer step and overheads
// are small beside the compute of a run on few GPUs), then fitted like a
// profile (FitForward: Alpha + Beta per sample on a GPU). Runs that carry
// a measured forward keep it.
func EstimateForward(a Arch, samples []Sample) (Forward, error) {
	var est []Sample
	for _, s := range samples {
		p := s.Plan
		if p.TP != 1 || p.PP != 1 || p.Offload || s.IterS <= 0 {
			continue
		}
		if s.FwdS <= 0 {
			f := s.IterS / (1 + DefaultParams.KBwd)
			if p.Ckpt {
				f = s.IterS / (2 + DefaultParams.KBwd) // the recomputed forward
			}
			s.FwdS = f
		}
		est = append(est, s)
	}
	return FitForward(a, est)
}
