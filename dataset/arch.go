package dataset

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/replan/replan/perf"
)

// Shape assumptions for a model type known only by its profile
// (ArchFromProfile): a transformer's parameters are about
// 12·layers·hidden², hidden grows with depth at about hiddenPerLayer
// (GPT-3's family runs 43-128, BERT-large 43, LLaMA-7B 128), and heads are
// 64 wide.
const (
	hiddenPerLayer = 64
	headDim        = 64
)

// ArchFromProfile is the architecture of a model type that is neither
// built in nor given (perf validate --arch-file), from what its profile says:
// the parameter count (parameter_size) and sequence × hidden × layers
// (seq_hid). Hidden and layers are split by the shape assumptions above;
// within them the model's compute, data-parallel traffic and
// tensor-parallel traffic (both ∝ parameters or seq_hid) are what the
// profile gives, and only pipeline traffic and memory depend on the split.
// The global batch is batch when > 0 (a "_bszN" table), else the largest
// data-parallel width × accumulation among the profile and rows, the
// smallest batch every row can run (a wrong batch scales the fitted
// per-sample forward inversely, so data-parallel rows are priced alike).
// The note says what was assumed.
func ArchFromProfile(name string, p Profile, rows []PlacementRow, batch int) (perf.Arch, string, error) {
	params := p.ParamCount()
	if params <= 0 || len(p.Rows) == 0 || p.Rows[0].SeqHid <= 0 {
		return perf.Arch{}, "", fmt.Errorf("model %q is not built in and its profile gives no parameter_size and seq_hid to derive an architecture from (give one with --arch-file FILE)", name)
	}
	hidden := math.Cbrt(hiddenPerLayer * params / 12)
	h := max(headDim, int(math.Round(hidden/headDim))*headDim)
	layers := max(1, int(math.Round(params/(12*float64(h)*float64(h)))))
	seq := max(1, int(math.Round(p.Rows[0].SeqHid/float64(h*layers))))
	from := "given by its _bsz suffix"
	if batch <= 0 {
		batch = derivedBatch(p, rows)
		from = "the largest DP × GA of its profile and rows"
	}
	a := perf.Arch{Name: strings.ToLower(name), Params: params, Layers: layers, Hidden: h, Heads: h / headDim, SeqLen: seq, GlobalBatch: batch}
	note := fmt.Sprintf("architecture not built in, derived from its profile: %.3g parameters (parameter_size), sequence × hidden × layers %.4g (seq_hid) split as %d × %d × %d assuming %d hidden per layer, %d heads, global batch %d (%s)",
		params, p.Rows[0].SeqHid, seq, h, layers, hiddenPerLayer, a.Heads, batch, from)
	return a, note, nil
}

// derivedBatch is the smallest global batch every profile row and
// placements row can run.
func derivedBatch(p Profile, rows []PlacementRow) int {
	batch := 1
	for _, r := range p.Rows {
		batch = max(batch, r.GPUs)
	}
	for _, r := range rows {
		batch = max(batch, rowBatch(r))
	}
	return batch
}

// rowBatch is the smallest global batch a placements row's plan can run:
// its data-parallel width times its accumulation steps (0 for a code
// PlanFromCode refuses, which derivedBatch's floor of 1 absorbs).
func rowBatch(r PlacementRow) int {
	code, g := r.ExecPlan, r.Placement.GPUs()
	if len(code) == 3 && strings.Trim(code, "0123456789") == "" {
		return int(code[2] - '0')
	}
	dp, ga := g, 1
	for _, part := range strings.Split(code, "+") {
		switch part {
		case "ga":
			ga = NamedGASteps
		case "tp":
			dp = 1
		}
	}
	return dp * ga
}

// ArchFor is the architecture of model type name, for fitting it from dir:
// cat's (a catalog of user model types; nil: none), the built-in one, or
// one derived from dir's profile of the type (ArchFromProfile, with its
// placements table when it has one). note says what was derived ("" when
// nothing was).
func ArchFor(ctx context.Context, dir, name string, cat perf.Catalog) (perf.Arch, string, error) {
	if a, ok := cat[name]; ok {
		return a, "", nil
	}
	if a, ok := cat[perf.CanonicalName(name)]; ok {
		return a, "", nil
	}
	if a, ok := perf.Builtin(name); ok {
		return a, "", nil
	}
	unknown := fmt.Errorf("model type %q is not built in and has no architecture (give it with --arch-file FILE, or its profile under %s)", name, filepath.Join(dir, "profile", perf.CanonicalName(name)))
	if dir == "" {
		return perf.Arch{}, "", unknown
	}
	profiles, tables, err := ListDir(dir)
	if err != nil {
		return perf.Arch{}, "", err
	}
	prof, _, _ := resolveModel(name, profiles, nil)
	if prof == "" {
		return perf.Arch{}, "", unknown
	}
	a, _, note, err := deriveArch(ctx, dir, prof, prof, tables)
	return a, note, err
}

// deriveArch is ArchFromProfile for placements table (a model type, or
// one at another batch: "_bszN") served from profile prof, loading what
// it needs from dir (tables: its placements tables). profBatch is the
// global batch the profile ran at: the architecture's, or for a "_bszN"
// table the one the profile and the plain table can run. The note ends by
// saying how to give the real architecture.
func deriveArch(ctx context.Context, dir, table, prof string, tables []string) (a perf.Arch, profBatch int, note string, err error) {
	p, err := LoadProfile(ctx, dir, prof)
	if err != nil {
		return perf.Arch{}, 0, "", err
	}
	load := func(t string) ([]PlacementRow, error) {
		if !slices.Contains(tables, t) {
			return nil, nil
		}
		return LoadPlacement(ctx, dir, t)
	}
	base, batch := table, 0
	if m := bszSuffix.FindStringSubmatch(table); m != nil {
		base = m[1]
		batch, _ = strconv.Atoi(m[2])
	}
	rows, err := load(table)
	if err != nil {
		return perf.Arch{}, 0, "", err
	}
	if a, note, err = ArchFromProfile(base, p, rows, batch); err != nil {
		return perf.Arch{}, 0, "", err
	}
	profBatch = a.GlobalBatch
	if batch > 0 {
		plain, err := load(base)
		if err != nil {
			return perf.Arch{}, 0, "", err
		}
		profBatch = derivedBatch(p, plain)
		note += fmt.Sprintf("; its profile is fitted as runs at batch %d (the largest DP × GA of the profile and of the %s table)", profBatch, base)
	}
	return a, profBatch, note + "; give the real one with --arch-file FILE", nil
}
