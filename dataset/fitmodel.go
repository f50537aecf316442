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
	m, samples, err := modelSamples(ctx, dir, name, env, withPlacements)
	if err != nil || len(samples) == 0 {
		return m, perf.FitStats{}, err
	}
	params, st, err := perf.Fit(m, samples, perf.FitOptions{})
	if err != nil {
		return perf.Model{}, st, err
	}
	m.Params = params
	return m, st, nil
}

// modelSamples is FitModel's unfitted model (forward profile set) and the
// samples it fits on.
func modelSamples(ctx context.Context, dir, name string, env perf.Env, withPlacements bool) (perf.Model, []perf.Sample, error) {
	profiles, tables, err := ListDir(dir)
	if err != nil {
		return perf.Model{}, nil, err
	}
	profName, arch, ok := profileFor(name, profiles)
	if !ok {
		return perf.Model{}, nil, fmt.Errorf("model %q: no profile under %s/profile (have %v)", name, dir, profiles)
	}
	prof, err := LoadProfile(ctx, dir, profName)
	if err != nil {
		return perf.Model{}, nil, err
	}
	samples := prof.Samples(profileArch(arch))
	fwd, err := perf.FitForward(profileArch(arch), samples)
	if err != nil {
		return perf.Model{}, nil, err
	}
	if ratio := arch.Params / prof.ParamCount(); math.Abs(ratio-1) > 0.25 {
		fwd.Alpha *= ratio
		fwd.Beta *= ratio
		samples = nil
	}
	m := perf.Model{Arch: arch, Forward: fwd, Params: perf.DefaultParams, Env: env}
	if withPlacements {
		base := samples
		for _, t := range tables {
			p, tarch, ok := profileFor(t, profiles)
			if !ok || p != profName || (t != name && perf.CanonicalName(t) != arch.Name) {
				continue
			}
			rows, err := LoadPlacement(ctx, dir, t)
			if err != nil {
				return perf.Model{}, nil, err
			}
			// Each table's rows are the plans it ran at its own global
			// batch (llama7's batch 8 beside llama7b_bsz16's 16), read
			// the way they fit (chooseMicroBatching).
			_, held, err := chooseMicroBatching(m, base, rows, tarch, allRows)
			if err != nil {
				return perf.Model{}, nil, err
			}
			for _, h := range held {
				samples = append(samples, h.sample)
			}
		}
	}
	return m, samples, nil
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
