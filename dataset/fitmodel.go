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
	return fitModel(ctx, dir, name, env, withPlacements, nil)
}

// FitModelFor is FitModel for architecture a: a built-in model type as
// FitModel fits it (then at a's global batch), or one that is not built in
// (a job spec's architecture block, plan --arch-file) from the profile
// under dir/profile/<a.Name>, taken as runs at a's global batch, and its
// placements tables when withPlacements is set. Without a profile there is
// nothing to fit and it says so.
func FitModelFor(ctx context.Context, dir string, a perf.Arch, env perf.Env, withPlacements bool) (perf.Model, perf.FitStats, error) {
	var cat perf.Catalog
	if _, builtin := perf.Builtin(a.Name); !builtin {
		cat = perf.Catalog{a.Name: a}
	}
	m, st, err := fitModel(ctx, dir, a.Name, env, withPlacements, cat)
	if err == nil {
		m.Arch = a
	}
	return m, st, err
}

func fitModel(ctx context.Context, dir, name string, env perf.Env, withPlacements bool, cat perf.Catalog) (perf.Model, perf.FitStats, error) {
	m, samples, choices, err := modelSamplesChoices(ctx, dir, name, env, withPlacements, cat)
	if err != nil || len(samples) == 0 {
		return m, perf.FitStats{}, err
	}
	// With one placements table whose reading was chosen by comparing
	// fits, the fit of its chosen reading is this fit.
	var c MicroBatchChoice
	if len(choices) == 1 {
		c = choices[0]
	}
	params, st, err := fitChosen(m, samples, c)
	if err != nil {
		return perf.Model{}, st, err
	}
	m.Params = params
	return m, st, nil
}

// modelSamples is FitModel's unfitted model (forward profile set) and the
// samples it fits on; cat holds model types beyond the built-ins.
func modelSamples(ctx context.Context, dir, name string, env perf.Env, withPlacements bool, cat perf.Catalog) (perf.Model, []perf.Sample, error) {
	m, samples, _, err := modelSamplesChoices(ctx, dir, name, env, withPlacements, cat)
	return m, samples, err
}

// modelSamplesChoices is modelSamples with the reading chosen for each
// placements table it read.
func modelSamplesChoices(ctx context.Context, dir, name string, env perf.Env, withPlacements bool, cat perf.Catalog) (perf.Model, []perf.Sample, []MicroBatchChoice, error) {
	profiles, tables, err := ListDir(dir)
	if err != nil {
		return perf.Model{}, nil, nil, err
	}
	profName, arch, known := resolveModel(name, profiles, cat)
	if profName == "" || !known {
		return perf.Model{}, nil, nil, fmt.Errorf("model %q: no profile under %s/profile (have %v)", name, dir, profiles)
	}
	prof, err := LoadProfile(ctx, dir, profName)
	if err != nil {
		return perf.Model{}, nil, nil, err
	}
	samples := prof.Samples(profileArch(arch))
	fwd, err := perf.FitForward(profileArch(arch), samples)
	if err != nil {
		return perf.Model{}, nil, nil, err
	}
	if ratio := arch.Params / prof.ParamCount(); math.Abs(ratio-1) > 0.25 {
		fwd.Alpha *= ratio
		fwd.Beta *= ratio
		samples = nil
	}
	m := perf.Model{Arch: arch, Forward: fwd, Params: perf.DefaultParams, Env: env}
	var choices []MicroBatchChoice
	if withPlacements {
		base := samples
		for _, t := range tables {
			p, tarch, known := resolveModel(t, profiles, cat)
			if !known || p != profName || (t != name && perf.CanonicalName(t) != arch.Name) {
				continue
			}
			rows, err := LoadPlacement(ctx, dir, t)
			if err != nil {
				return perf.Model{}, nil, nil, err
			}
			// Each table's rows are the plans it ran at its own global
			// batch (llama7's batch 8 beside llama7b_bsz16's 16), read
			// the way they fit (chooseMicroBatching).
			c, held, err := chooseMicroBatching(m, base, rows, tarch, allRows)
			if err != nil {
				return perf.Model{}, nil, nil, err
			}
			for _, h := range held {
				samples = append(samples, h.sample)
			}
			choices = append(choices, c)
		}
	}
	return m, samples, choices, nil
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
			if fm, _, err := FitModelFor(ctx, dir, a, env, true); err == nil {
				m = fm
			}
		}
		cache[key] = m
		return m
	}
}
