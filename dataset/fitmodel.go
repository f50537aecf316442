package dataset

import (
	"context"
	"fmt"
	"math"
	"sync"

	"github.com/replan/replan/perf"
)

// FitModel fits a model type from dir: the forward profile and the seven
// parameters from its profile samples and, when withPlacements is set, every
// measured placements row of the model too (what a scheduler does once the
// rows exist; Validate holds most of them out instead). name is a model type
// or a placements table name (llama7, llama7b_bsz16).
func FitModel(ctx context.Context, dir, name string, env perf.Env, withPlacements bool) (perf.Model, perf.FitStats, error) {
	profiles, tables, err := ListDir(dir)
	if err != nil {
		return perf.Model{}, perf.FitStats{}, err
	}
	profName, arch, ok := profileFor(name, profiles)
	if !ok {
		return perf.Model{}, perf.FitStats{}, fmt.Errorf("model %q: no profile under %s/profile (have %v)", name, dir, profiles)
	}
	prof, err := LoadProfile(ctx, dir, profName)
	if err != nil {
		return perf.Model{}, perf.FitStats{}, err
	}
	samples := prof.Samples(arch)
	fwd, err := perf.FitForward(arch, samples)
	if err != nil {
		return perf.Model{}, perf.FitStats{}, err
	}
	if ratio := arch.Params / prof.ParamCount(); math.Abs(ratio-1) > 0.25 {
		fwd.Alpha *= ratio
		fwd.Beta *= ratio
		samples = nil
	}
	if withPlacements {
		for _, t := range tables {
			if p, _, ok := profileFor(t, profiles); !ok || p != profName || (t != name && perf.CanonicalName(t) != arch.Name) {
				continue
			}
			rows, err := LoadPlacement(ctx, dir, t)
			if err != nil {
				return perf.Model{}, perf.FitStats{}, err
			}
			for _, h := range heldRows(rows, arch) {
				samples = append(samples, h.sample)
			}
		}
	}
	m := perf.Model{Arch: arch, Forward: fwd, Params: perf.DefaultParams, Env: env}
	if len(samples) == 0 {
		return m, perf.FitStats{}, nil
	}
	params, st, err := perf.Fit(m, samples, perf.FitOptions{})
	if err != nil {
		return perf.Model{}, st, err
	}
	m.Params = params
	return m, st, nil
}

// ModelSource returns a function giving each model type's performance
// model: fitted once from dir (profile and every measured row) and cached,
// or the unfitted defaults when dir is empty or has nothing for the type.
// Safe for concurrent use.
func ModelSource(ctx context.Context, dir string, env perf.Env) func(perf.Arch) perf.Model {
	var mu sync.Mutex
	cache := map[string]perf.Model{}
	return func(a perf.Arch) perf.Model {
		mu.Lock()
		defer mu.Unlock()
		key := fmt.Sprintf("%s/%d", a.Name, a.GlobalBatch)
		if m, ok := cache[key]; ok {
			return m
		}
		m := perf.DefaultModel(a, env)
		if dir != "" {
			if fm, _, err := FitModel(ctx, dir, a.Name, env, true); err == nil {
				fm.Arch = a
				m = fm
			}
		}
		cache[key] = m
		return m
	}
}
