package dataset

// Profiles in and out of the Morphling layout (`replan models export` /
// `import`): <dir>/profile/<name>/{config,data}.csv, the columns of the
// shared data plus the exact plan, placement, cores per GPU and model type
// of each run, and arch.yaml with the architecture.

import (
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/replan/replan/perf"
)

// ProfileSet is one model type's measured runs.
type ProfileSet struct {
	// Name is the directory under profile/.
	Name string
	// Type is the model type ("name/global_batch/framework") when the
	// files say it (the model_type column); "" for the shared data.
	Type    string
	Arch    perf.Arch
	Samples []perf.Sample
}

// WriteProfile writes set under dir/profile/<set.Name>/: config.csv and
// data.csv in the Morphling layout (times in ms) with the columns plan,
// placement, cpus_per_gpu and model_type added, and arch.yaml.
func WriteProfile(ctx context.Context, dir string, set ProfileSet) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if set.Name == "" || strings.ContainsAny(set.Name, `/\`) || set.Name == "." || set.Name == ".." {
		return fmt.Errorf("export: profile name %q: want a plain directory name", set.Name)
	}
	base := filepath.Join(dir, "profile", set.Name)
	if err := os.MkdirAll(base, 0o755); err != nil {
		return fmt.Errorf("export %s: %w", set.Name, err)
	}
	a := set.Arch
	var cfg, data strings.Builder
	cw, dw := csv.NewWriter(&cfg), csv.NewWriter(&data)
	cw.Write([]string{"nodes", "gpus", "parameter_size", "batch_size", "seq_hid", "num_cpu_threads", "zero_type", "is_tp", "is_pp", "plan", "placement", "cpus_per_gpu", "model_type"})
	dw.Write([]string{"forward_time", "Tcc", "Topt", "iter_time", "strategy"})
	f := func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
	b := func(v bool) string {
		if v {
			return "1"
		}
		return "0"
	}
	for _, s := range set.Samples {
		p := s.Plan
		zero, strategy := 0, "1100"
		switch {
		case p.Offload:
			zero, strategy = 1, "1111"
		case p.ZeRO > 0:
			zero, strategy = 2, "1102"
		}
		if p.Ckpt {
			strategy = "2" + strategy[1:]
		}
		cw.Write([]string{strconv.Itoa(len(s.Resources.Placement)), strconv.Itoa(s.Resources.Placement.GPUs()), f(a.Params / (1 << 20)), strconv.Itoa(p.MicroBatch),
			f(float64(a.SeqLen) * float64(a.Hidden) * float64(a.Layers)), strconv.Itoa(max(int(math.Round(s.Resources.CPUsPerGPU)), 1)), strconv.Itoa(zero), b(p.TP > 1), b(p.PP > 1),
			p.Spec(), s.Resources.Placement.String(), f(s.Resources.CPUsPerGPU), set.Type})
		dw.Write([]string{f(1000 * s.FwdS), "0", f(1000 * s.OptS), f(1000 * s.IterS), strategy})
	}
	cw.Flush()
	dw.Flush()
	arch, err := yaml.Marshal(struct {
		Version int         `yaml:"version"`
		Models  []perf.Arch `yaml:"models"`
	}{1, []perf.Arch{a}})
	if err != nil {
		return fmt.Errorf("export %s: %w", set.Name, err)
	}
	for name, body := range map[string]string{"config.csv": cfg.String(), "data.csv": data.String(), "arch.yaml": string(arch)} {
		if err := os.WriteFile(filepath.Join(base, name), []byte(body), 0o644); err != nil {
			return fmt.Errorf("export %s: %w", set.Name, err)
		}
	}
	return nil
}

// ReadProfiles reads every dir/profile/<name>/: its runs, and its
// architecture from arch.yaml, else the built-in model of that name (at
// its built-in global batch: the shared data's). A profile whose
// architecture is unknown is an error naming it; every problem is
// reported.
func ReadProfiles(ctx context.Context, dir string) ([]ProfileSet, error) {
	names, err := readSubdirs(filepath.Join(dir, "profile"))
	if err != nil {
		return nil, fmt.Errorf("import %s: %w", dir, err)
	}
	var out []ProfileSet
	var errs []error
	for _, name := range names {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if _, err := os.Stat(filepath.Join(dir, "profile", name, "config.csv")); err != nil {
			continue // not a profile (history.csv's neighbours)
		}
		prof, err := LoadProfile(ctx, dir, name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		set := ProfileSet{Name: name}
		archFile := filepath.Join(dir, "profile", name, "arch.yaml")
		if raw, err := os.ReadFile(archFile); err == nil {
			as, err := perf.ParseArchs(archFile, raw)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			set.Arch = as[0]
		} else if a, ok := perf.Builtin(perf.CanonicalName(name)); ok {
			set.Arch = a
		} else {
			errs = append(errs, fmt.Errorf("%s: %s is not a built-in model and has no arch.yaml", filepath.Join(dir, "profile", name), name))
			continue
		}
		for _, r := range prof.Rows {
			if r.ModelType != "" {
				set.Type = r.ModelType
			}
		}
		set.Samples = prof.Samples(set.Arch)
		var kept []perf.Sample
		for i, s := range set.Samples {
			if s.IterS <= 0 {
				errs = append(errs, fmt.Errorf("%s:%d: iter_time: must be > 0 (a run that did not fit is not exported)", filepath.Join(dir, "profile", name, "data.csv"), prof.Rows[i].Line))
				continue
			}
			kept = append(kept, s)
		}
		set.Samples = kept
		out = append(out, set)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("import %s: no profile under %s", dir, filepath.Join(dir, "profile"))
	}
	return out, nil
}

// readSubdirs lists the directories in dir (links to directories too).
func readSubdirs(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		if st, err := os.Stat(filepath.Join(dir, e.Name())); err == nil && st.IsDir() {
			out = append(out, e.Name())
		}
	}
	return out, nil
}
